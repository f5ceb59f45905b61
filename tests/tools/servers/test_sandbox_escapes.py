"""Code run by the sandbox servers tries to reach the user's secrets and the machine, and fails.

The worst case: the server is started directly with an API-key canary in its environment,
a ``.env`` canary in its working directory and a canary file in its ``HOME`` (deepledger's
ToolManager passes servers only PATH and HOME). Each test is an escape attempt; none may
bring a canary back. They need bubblewrap: where it cannot run they skip, unless
``DEEPLEDGER_REQUIRE_SANDBOX=1`` (scripts/test.sh), where they fail.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import pytest_asyncio
from mcp import Client, StdioServerParameters

from deepledger.tools.servers.sandbox_isolation import IsolationUnavailableError, detect_isolation
from tests.support.mcp_client import call, hold_open

pytestmark = pytest.mark.asyncio(loop_scope="module")

CANARY = f"sk-canary-{secrets.token_hex(12)}"
MAX_PROCESSES = 32
PROJECT = Path(__file__).resolve().parents[3]

# Defined once in the persistent session: every attempt reports what it got, error or data.
HELPERS = """
import glob, os
def attempt(path):
    try:
        with open(path, 'rb') as file:
            return file.read().decode(errors='replace')
    except OSError as exc:
        return f'{type(exc).__name__}: {exc}'
def attempt_all(pattern):
    return {path: attempt(path) for path in glob.glob(pattern)}
"""


def _bwrap_problem() -> str | None:
    try:
        detect_isolation("bwrap")
    except IsolationUnavailableError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    problem = _bwrap_problem()
    if problem is not None:
        if os.environ.get("DEEPLEDGER_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"DEEPLEDGER_REQUIRE_SANDBOX=1 but bubblewrap cannot run: {problem}")
        pytest.skip(f"bubblewrap cannot run here: {problem}")
    base = tmp_path_factory.mktemp("escapes")
    project, home = base / "project", base / "home"
    project.mkdir()
    home.mkdir()
    (project / ".env").write_text(f"OPENAI_API_KEY={CANARY}\n")
    (project / "notes.md").write_text(f"project file {CANARY}\n")
    (home / ".netrc").write_text(f"machine example.com password {CANARY}\n")
    return {"project": project, "home": home}


def _server(places: dict[str, Path], module: str) -> StdioServerParameters:
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(places["home"]),
        "DEEPLEDGER_CANARY_KEY": CANARY,
    }
    args = ["-m", module, "--isolation", "bwrap", "--max-processes", str(MAX_PROCESSES)]
    return StdioServerParameters(
        command=sys.executable, args=args, env=env, cwd=str(places["project"])
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(places: dict[str, Path]) -> AsyncIterator[Client]:
    params = _server(places, "deepledger.tools.servers.python_sandbox")
    async for connected in hold_open(params, asyncio.Event()):
        failed, text = await call(connected, "run_python", code=HELPERS)
        assert not failed, text
        yield connected


async def run(client: Client, code: str) -> tuple[bool, str]:
    failed, text = await call(client, "run_python", code=code)
    assert CANARY not in text, text  # the one assertion every attempt shares
    return failed, text


async def test_the_servers_environment_is_out_of_reach(client: Client):
    failed, text = await run(
        client,
        "print(dict(os.environ))\n"
        "print(attempt(f'/proc/{os.getppid()}/environ'))\n"
        "print(attempt('/proc/1/environ'), attempt('/proc/self/environ'))",
    )
    assert not failed, text
    assert "DEEPLEDGER_CANARY_KEY" not in text


async def test_the_servers_working_directory_and_its_env_file_are_out_of_reach(
    client: Client, places: dict[str, Path]
):
    _, text = await run(
        client,
        "print(attempt(f'/proc/{os.getppid()}/cwd/.env'), attempt('/proc/1/cwd/.env'))\n"
        "print(attempt_all('/proc/*/cwd/.env'))\n"
        f"print(attempt({str(places['project'] / '.env')!r}))",
    )
    assert "FileNotFoundError" in text or "PermissionError" in text


async def test_project_and_home_files_are_not_visible(client: Client, places: dict[str, Path]):
    paths = [
        places["project"] / "notes.md",
        places["home"] / ".netrc",
        PROJECT / "pyproject.toml",
        PROJECT / "README.md",
        Path.home() / ".bashrc",
    ]
    failed, text = await run(
        client,
        f"print([attempt(p) for p in {[str(p) for p in paths]!r}])\n"
        f"print(os.path.exists({str(PROJECT / 'src')!r}), os.path.expanduser('~'))",
    )
    assert not failed, text
    assert text.count("FileNotFoundError") == len(paths)
    assert "False" in text


async def test_etc_shadow_cannot_be_read(client: Client):
    _, text = await run(client, "print(attempt('/etc/shadow'), attempt('/etc/gshadow'))")
    assert "root:" not in text
    assert text.count("Error") >= 2


async def test_another_processs_environment_is_out_of_reach(client: Client):
    sleeper = await asyncio.create_subprocess_exec(
        "sleep", "30", env={"PATH": os.defpath, "OTHER_SECRET": CANARY}
    )
    try:
        _, text = await run(
            client,
            f"print(attempt('/proc/{sleeper.pid}/environ'))\n"
            f"print(attempt('/proc/{sleeper.pid}/cmdline'))",
        )
    finally:
        sleeper.kill()
        await sleeper.wait()
    assert "OTHER_SECRET" not in text


async def test_scanning_every_process_finds_no_secret(client: Client):
    failed, text = await run(
        client,
        "found = {**attempt_all('/proc/*/environ'), **attempt_all('/proc/*/task/*/environ')}\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "print(len(found), pids)",
    )
    assert not failed, text
    visible = eval(text.removeprefix("[stdout]\n").split(" ", 1)[1])
    assert len(visible) < 10  # only the sandbox's own few processes, not the host's


async def test_a_loopback_listener_cannot_be_reached(client: Client):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        failed, text = await run(
            client,
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)",
        )
        with pytest.raises(BlockingIOError):  # nothing ever arrived
            listener.accept()
    assert failed
    assert "ConnectionRefusedError" in text or "Network is unreachable" in text


async def test_nothing_outside_the_work_folder_can_be_written(
    client: Client, places: dict[str, Path]
):
    token = secrets.token_hex(6)
    targets = [
        places["project"] / f"written-{token}",
        places["home"] / f"written-{token}",
        Path("/tmp") / f"written-{token}",  # inside, /tmp is the sandbox's own tmpfs
        PROJECT / f"written-{token}",
        Path(sys.prefix) / f"written-{token}",
        Path("/usr") / f"written-{token}",
        Path("/etc") / f"written-{token}",
    ]
    code = (
        f"for path in {[str(t) for t in targets]!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', path, type(exc).__name__)\n"
        "open('inside.txt', 'w').write('fine')"
    )
    try:
        failed, text = await run(client, code)
        assert not failed, text
        for target in targets:
            assert not await anyio.Path(target).exists(), text
    finally:  # should an escape ever succeed, leave nothing behind on the machine
        for target in targets:
            await anyio.Path(target).unlink(missing_ok=True)


async def test_the_code_runs_as_an_unprivileged_user(client: Client):
    failed, text = await run(
        client,
        "lines = attempt('/proc/self/status').splitlines()\n"
        "status = dict(line.split(':\\t', 1) for line in lines)\n"
        "print(os.getuid(), os.getgid(), os.getgroups(), status['CapEff'].strip())",
    )
    assert not failed, text
    uid, gid, *rest = text.removeprefix("[stdout]\n").split()
    assert int(uid) not in (0, os.getuid())
    assert int(gid) != 0
    assert rest[-1] == "0000000000000000"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the seccomp filter is x86_64's")
async def test_the_code_cannot_make_itself_root_of_a_user_namespace(client: Client):
    failed, text = await run(
        client,
        "import ctypes, subprocess, threading\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('unshare', libc.unshare(0x10000000), ctypes.get_errno())\n"
        "shell = subprocess.run(['unshare', '-Ur', 'id'], capture_output=True, text=True)\n"
        "print('shell', shell.returncode, shell.stdout.strip())\n"
        "worker = threading.Thread(target=lambda: print('thread ran')); worker.start()\n"
        "worker.join(); print('child', subprocess.run(['true']).returncode)",
    )
    assert not failed, text
    assert "unshare -1 1" in text  # EPERM
    assert "shell 0" not in text and "uid=0" not in text
    assert "thread ran" in text and "child 0" in text  # threads and processes still work


async def test_a_fork_bomb_hits_the_process_limit_and_the_session_survives(client: Client):
    code = (
        "import time\n"
        "children = []\n"
        "try:\n"
        "    for _ in range(10 * " + str(MAX_PROCESSES) + "):\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            time.sleep(20)\n"
        "            os._exit(0)\n"
        "        children.append(pid)\n"
        "except OSError as exc:\n"
        "    print('stopped', type(exc).__name__)\n"
        "for pid in children:\n"
        "    os.kill(pid, 9)\n"
        "    os.waitpid(pid, 0)\n"
        "len(children)"
    )
    failed, text = await run(client, code)
    # With cgroups the call fails, saying which limit it met (test_sandbox_limits.py).
    assert not failed or f"limit of {MAX_PROCESSES} processes" in text, text
    assert "stopped BlockingIOError" in text
    forked = int(text.split("[value]\n", 1)[1].split("\n", 1)[0])
    assert forked < MAX_PROCESSES
    failed, text = await run(client, "import subprocess\nsubprocess.run(['true']).returncode")
    assert (failed, text.rsplit("\n", 1)[-1]) == (False, "0")


async def test_a_shell_fork_bomb_is_contained_too(client: Client):
    bomb = (
        "import subprocess\nsubprocess.run(['sh', '-c', 'b() { b | b & }; b; sleep 2'], timeout=8)"
    )
    await run(client, bomb)
    failed, text = await run(client, "6 * 7")
    assert (failed, text) == (False, "[value]\n42")


async def test_detached_processes_do_not_outlive_the_session(client: Client):
    argument = f"{29 + secrets.randbelow(1000) / 1000:.3f}"
    await run(
        client,
        f"import subprocess\nsubprocess.Popen(['sleep', '{argument}'], start_new_session=True)",
    )
    await call(client, "reset")
    assert not _host_processes_with(argument)
    await run(client, HELPERS)


def _host_processes_with(argument: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if argument.encode() in cmdline.read_bytes().split(b"\0"):
                found.append(int(cmdline.parent.name))
        except OSError:  # it ended while we looked
            continue
    return found


async def test_tool_pythons_shell_commands_are_contained_the_same_way(places: dict[str, Path]):
    params = _server(places, "deepledger.tools.servers.tool_python")
    async for client in hold_open(params, asyncio.Event()):
        _, text = await call(client, "create_sandbox")
        sandbox_id = text.rsplit(" ", 1)[-1]
        command = (
            f"env; cat /proc/*/environ /proc/*/cwd/.env {places['home']}/.netrc "
            f"{places['project']}/.env /etc/shadow; id -u; ls /proc"
        )
        _, text = await call(client, "run_command", command=command, sandbox_id=sandbox_id)
        assert CANARY not in text
        assert "No such file or directory" in text
        assert "DEEPLEDGER_CANARY_KEY" not in text
