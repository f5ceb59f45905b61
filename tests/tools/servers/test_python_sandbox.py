"""The python sandbox server, driven over real stdio by the MCP client, as the runtime uses it."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

MODULE = "deepledger.tools.servers.python_sandbox"


@asynccontextmanager
async def sandbox(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=["-m", MODULE, *args], env=env)
    async with Client(params) as client:
        yield client


async def run(client: Client, code: str) -> tuple[str, bool]:
    result = await client.call_tool("run_python", {"code": code})
    [content] = result.content
    return content.text, bool(result.is_error)


def value_of(text: str) -> str:
    """The body of the [value] section."""
    match = re.search(r"\[value\]\n(.*?)(?:\n\n\[|\Z)", text, re.DOTALL)
    assert match, text
    return match.group(1)


async def description_of_run_python(client: Client) -> str:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"run_python", "reset"}
    return tools["run_python"].description or ""


async def test_variables_persist_between_calls_and_the_last_expression_is_shown():
    async with sandbox() as client:
        assert await run(client, "x = 41") == ("(no output)", False)
        text, failed = await run(client, "x + 1")
        assert not failed
        assert value_of(text) == "42"
        text, _ = await run(client, "def double(n):\n    return 2 * n\ndouble(x)")
        assert value_of(text) == "82"
        text, _ = await run(client, "print(x)")  # None is not echoed
        assert text == "[stdout]\n41"


async def test_stdout_and_stderr_are_captured_including_child_processes_and_truncated():
    code = (
        "import sys, subprocess\n"
        "print('to stdout')\n"
        "print('to stderr', file=sys.stderr)\n"
        "subprocess.run(['echo', 'from a child process'])\n"
        "None"
    )
    async with sandbox("--max-output-chars", "1000") as client:
        text, failed = await run(client, code)
        assert not failed
        assert text == "[stdout]\nto stdout\nfrom a child process\n\n[stderr]\nto stderr"

        text, failed = await run(client, "print('a' * 5000 + 'END')")
    assert not failed
    assert "\n...[truncated 4004 chars]...\n" in text
    assert text.startswith("[stdout]\naaaa")
    assert text.endswith("aaaaEND")  # the tail is kept: it is where errors end up
    assert len(text) < 1100


def _processes_with_argument(argument: str) -> list[int]:
    """Host pids whose command line holds ``argument`` (pids printed inside a PID namespace
    mean nothing out here, so a unique argument identifies the process instead)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            arguments = cmdline.read_bytes().split(b"\0")
            status = (cmdline.parent / "status").read_text()
        except OSError:  # it ended while we looked
            continue
        if argument.encode() in arguments and "State:\tZ" not in status:
            found.append(int(cmdline.parent.name))
    return found


async def test_a_runaway_call_is_stopped_at_the_time_limit_and_the_next_call_gets_a_fresh_session():
    argument = f"{60 + os.getpid() % 1000 / 1000:.3f}"  # a sleep no other test starts
    runaway = (
        "import subprocess\n"
        f"child = subprocess.Popen(['sleep', '{argument}'])\n"
        "print('started', flush=True)\n"
        "while True:\n"
        "    pass"
    )
    async with sandbox("--timeout", "2") as client:
        await run(client, "x = 1")
        started = time.monotonic()
        text, failed = await run(client, runaway)
        elapsed = time.monotonic() - started
        assert failed
        # At least the timeout; the upper bound only says it was cut long before the
        # child's own end (a loaded machine may take seconds to kill and restart).
        assert 2 <= elapsed < 60
        assert "Timed out" in text
        assert "variables, imports and definitions from earlier calls are lost" in text
        assert text.startswith("[stdout]\nstarted")  # output printed before the timeout is kept
        # Everything the call started was killed, the child too (its sleep lasts 60 s).
        deadline = time.monotonic() + 30
        while _processes_with_argument(argument) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        assert _processes_with_argument(argument) == []

        text, failed = await run(client, "x")
        assert failed
        assert "NameError: name 'x' is not defined" in text
        text, failed = await run(client, "6 * 7")
        assert (value_of(text), failed) == ("42", False)


async def test_a_memory_bomb_is_stopped_by_the_memory_limit_and_the_server_survives():
    async with sandbox("--memory-mb", "256") as client:
        text, failed = await run(client, "big = bytearray(512 * 1024 * 1024)")
        assert failed
        assert text.rstrip().endswith("MemoryError")

        text, failed = await run(
            client, "chunks = []\nwhile True:\n    chunks.append(b'x' * 10**7)"
        )
        assert failed
        assert "MemoryError" in text

        text, failed = await run(client, "del chunks\n6 * 7")
        assert (value_of(text), failed) == ("42", False)


def _machine_allows_network_namespaces() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    commands = [[unshare, "--net", "true"], [unshare, "--user", "--map-root-user", "--net", "true"]]
    return any(subprocess.run(command, capture_output=True).returncode == 0 for command in commands)


def _loopback_listener() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    socket.create_connection(listener.getsockname(), timeout=2).close()  # reachable from here
    return listener


_CONNECT = "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)"


async def test_the_network_is_unreachable_from_the_sandbox():
    with _loopback_listener() as listener:
        port = listener.getsockname()[1]
        async with sandbox() as client:
            description = await description_of_run_python(client)
            text, failed = await run(client, _CONNECT.format(port=port))
    if "Isolation: bubblewrap sandbox" in description:
        assert failed
        assert "ConnectionRefusedError" in text  # its own loopback, where nothing listens
    elif "Network: isolated" in description:
        assert failed
        assert "OSError: [Errno 101] Network is unreachable" in text
    else:
        assert not _machine_allows_network_namespaces()
        assert text.startswith("[notice]\nIsolation: NONE")


async def test_the_unshare_fallback_isolates_only_the_network_and_says_so():
    if not _machine_allows_network_namespaces():
        pytest.skip("`unshare --net` does not work on this machine")
    with _loopback_listener() as listener:
        port = listener.getsockname()[1]
        async with sandbox("--isolation", "unshare") as client:
            description = await description_of_run_python(client)
            first, failed = await run(client, _CONNECT.format(port=port))
            second, _ = await run(client, "2 + 2")
    for text in (description, first):
        assert "Network: isolated" in text
        assert "Filesystem and processes: NOT isolated" in text
        # Limited only where the server can make cgroups (as root, on this machine).
        assert "Process count: NOT limited" in text or "processes/threads together" in text
    assert first.startswith("[notice]\nIsolation: network only")
    assert failed
    assert "Network is unreachable" in first
    assert second == "[value]\n4"  # said once


async def test_without_bwrap_or_unshare_the_server_runs_and_says_nothing_is_isolated(tmp_path):
    async with sandbox(env={"PATH": str(tmp_path)}) as client:  # neither is to be found
        description = await description_of_run_python(client)
        first, first_failed = await run(client, "1 + 1")
        second, _ = await run(client, "2 + 2")
    for text in (description, first):
        assert "Isolation: NONE (bubblewrap not found on PATH; no util-linux `unshare`" in text
        assert "Network: NOT isolated" in text
        assert "Filesystem and processes: NOT isolated" in text
    assert first.startswith("[notice]\nIsolation: NONE")
    assert (value_of(first), first_failed) == ("2", False)
    assert second == "[value]\n4"  # said once


@pytest.mark.parametrize("mode", ["bwrap", "unshare"])
def test_an_isolation_asked_for_but_unavailable_is_a_clear_startup_error(tmp_path, mode):
    server = subprocess.run(
        [sys.executable, "-m", MODULE, "--isolation", mode],
        env={"PATH": str(tmp_path)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert server.returncode == 2
    assert f"python_sandbox: error: --isolation {mode}: " in server.stderr
    assert "not found on PATH" in server.stderr or "no util-linux `unshare`" in server.stderr


async def test_the_working_directory_is_a_private_temporary_one_removed_on_exit():
    code = (
        "import os\n"
        "with open('notes.txt', 'w') as f:\n"
        "    f.write('hello')\n"
        "assert os.environ['HOME'] == os.getcwd()\n"
        "os.getcwd()"
    )
    async with sandbox() as client, sandbox() as other:
        text, failed = await run(client, code)
        assert not failed, text
        workdir = anyio.Path(eval(value_of(text)))
        assert await (workdir / "notes.txt").read_text() == "hello"
        other_text, _ = await run(other, "import os\nos.getcwd()")
        assert anyio.Path(eval(value_of(other_text))) != workdir
    assert not await workdir.exists()


async def test_a_given_workdir_is_used_and_kept(tmp_path):
    workdir = anyio.Path(tmp_path / "work")
    async with sandbox("--workdir", str(workdir)) as client:
        text, failed = await run(client, "open('result.csv', 'w').write('a,b\\n')")
        assert not failed, text
    assert await (workdir / "result.csv").read_text() == "a,b\n"


async def test_reset_clears_variables_but_keeps_files():
    async with sandbox() as client:
        await run(client, "x = 1\nopen('kept.txt', 'w').write('yes')")
        result = await client.call_tool("reset", {})
        assert not result.is_error
        text, failed = await run(client, "x")
        assert failed
        assert "NameError" in text
        text, _ = await run(client, "open('kept.txt').read()")
        assert value_of(text) == "'yes'"


async def test_a_dead_worker_is_reported_and_replaced():
    async with sandbox() as client:
        text, failed = await run(client, "import os\nos._exit(3)")
        assert failed
        assert "worker process died during this call: it exited with status 3" in text
        assert "session was lost" in text
        text, failed = await run(client, "6 * 7")
        assert (value_of(text), failed) == ("42", False)


async def test_a_cancelled_call_restarts_the_session_and_the_next_result_says_so():
    async with sandbox() as client:
        await run(client, "x = 1")
        with pytest.raises(TimeoutError):
            # 3 s: long enough for the call to reach the server on a loaded machine (the
            # notice below needs it to have started), far below the call's 60 s.
            await asyncio.wait_for(run(client, "import time\ntime.sleep(60)"), 3)
        text, failed = await run(client, "x")
    assert failed
    assert text.startswith("[notice]\nThe previous call was cancelled")
    assert "NameError" in text


async def test_the_interpreters_own_packages_import_inside_the_sandbox():
    pytest.importorskip("numpy")  # the server runs in this interpreter: if here, then there
    async with sandbox() as client:
        text, failed = await run(client, "import numpy\nint(numpy.arange(10).sum())")
    assert (value_of(text), failed) == ("45", False)
