"""Bombs inside the sandbox take only the sandbox's share of the host, and the model hears why.

A memory bomb spread over four processes, a fork bomb and a disk filler each end the call
with an error result that names the limit; the session goes on (or restarts cleanly), and
the kernel's own account of the sandbox's cgroup shows it never held more than its limit.
Every bomb is bounded, and its limits are set before it runs, so a broken limit costs the
host a few hundred MB for a moment, not the machine.

They need bubblewrap started by root with writable cgroups (memory and pids) and a quota
disk (mkfs.ext4, loop mounts): where that is not so they skip, unless
``DEEPLEDGER_REQUIRE_SANDBOX=1`` (scripts/test.sh), where they fail.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from mcp import Client, StdioServerParameters

from deepledger.tools.servers.sandbox_cgroups import SandboxCgroup, _members, find_hierarchies
from deepledger.tools.servers.sandbox_disk import disk_parent
from deepledger.tools.servers.sandbox_isolation import (
    Budget,
    IsolationUnavailableError,
    detect_isolation,
)
from tests.support.mcp_client import call, hold_open

in_module_loop = pytest.mark.asyncio(loop_scope="module")

MEMORY_MB = 256
MAX_PROCESSES = 24
DISK_MB = 48
MODULE = "deepledger.tools.servers.python_sandbox"
LIMITS = ["--memory-mb", str(MEMORY_MB), "--max-processes", str(MAX_PROCESSES)]
LIMITS += ["--disk-mb", str(DISK_MB), "--timeout", "20"]


def _limits_problem() -> str | None:
    try:
        isolation = detect_isolation("bwrap", Budget(MEMORY_MB, MAX_PROCESSES, DISK_MB))
    except IsolationUnavailableError as exc:
        return str(exc)
    if isolation.cgroups is None or not isolation.quota_disk:
        return f"no sandbox-wide limits here: {isolation.summary}"
    return None


@pytest.fixture(scope="module", autouse=True)
def _limits_work_here() -> None:
    problem = _limits_problem()
    if problem is not None:
        if os.environ.get("DEEPLEDGER_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"DEEPLEDGER_REQUIRE_SANDBOX=1 but the sandbox limits fail: {problem}")
        pytest.skip(problem)


def _params() -> StdioServerParameters:
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    return StdioServerParameters(
        command=sys.executable, args=["-m", MODULE, "--isolation", "bwrap", *LIMITS], env=env
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client() -> AsyncIterator[Client]:
    async for connected in hold_open(_params(), asyncio.Event()):
        yield connected


def _servers() -> list[int]:
    """The sandbox servers this test process started."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):  # it ended while we looked
            continue
        if parent == os.getpid() and MODULE.encode() in cmdline:
            found.append(int(stat.parent.name))
    return found


def _groups_of(pid: int) -> dict[str, list[Path]]:
    hierarchies = find_hierarchies(Path("/proc/self/mountinfo").read_text())
    return {
        name: sorted(hierarchy.parent.glob(f"{pid}-*")) for name, hierarchy in hierarchies.items()
    }


def _memory_group() -> Path:
    (server,) = _servers()
    (group,) = _groups_of(server)["memory"]
    return group


def _peak_bytes(group: Path) -> int:
    for name in ("memory.peak", "memory.max_usage_in_bytes"):
        if (group / name).exists():
            return int((group / name).read_text())
    raise AssertionError(f"{group} reports no peak")


MEMORY_BOMB = f"""
import subprocess, sys
child = '''
import time
chunks = []
try:
    for _ in range({MEMORY_MB // 8}):  # up to the limit in each process, 8 MB at a time
        chunks.append(bytearray(8 * 2**20))
except MemoryError:
    pass
time.sleep(1)
print('child kept', len(chunks) * 8, 'MB')
'''
children = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(4)]
print('exit statuses', [c.wait() for c in children])
"""


@in_module_loop
async def test_a_memory_bomb_over_four_processes_stays_under_the_sandbox_limit(
    client: Client,
) -> None:
    failed, text = await call(client, "run_python", code=MEMORY_BOMB)
    assert failed, text
    assert f"reached the {MEMORY_MB} MB limit and the kernel killed" in text
    assert "-9" in text  # children died of it, the session did not
    assert _peak_bytes(_memory_group()) <= MEMORY_MB * 2**20
    failed, text = await call(client, "run_python", code="6 * 7")
    assert (failed, text) == (False, "[value]\n42")


FORK_BOMB = """
import subprocess
sleepers, refused = [], None
for _ in range(200):
    try:
        sleepers.append(subprocess.Popen(['sleep', '30']))
    except OSError as exc:
        refused = type(exc).__name__
        break
for sleeper in sleepers:
    sleeper.kill()
    sleeper.wait()
print('started', len(sleepers), 'refused', refused)
"""


@in_module_loop
async def test_a_fork_bomb_is_refused_at_the_process_limit(client: Client) -> None:
    failed, text = await call(client, "run_python", code=FORK_BOMB)
    assert failed, text
    assert "refused BlockingIOError" in text
    started = int(text.split("started ", 1)[1].split()[0])
    assert started < MAX_PROCESSES
    assert f"reached its limit of {MAX_PROCESSES} processes/threads" in text
    code = "import subprocess\nsubprocess.run(['true']).returncode"
    failed, text = await call(client, "run_python", code=code)
    assert (failed, text) == (False, "[value]\n0")


DISK_FILLER = """
import os
written = 0
block = b'x' * 2**20
for path in ('filler.bin', '/tmp/filler.bin', '/dev/shm/filler.bin'):
    try:
        with open(path, 'wb') as out:
            for _ in range(200):  # at most 200 MB per place
                out.write(block)
                out.flush()
                written += len(block)
    except OSError as exc:
        print(path, exc.strerror)
print('written MB', written // 2**20)
"""


@in_module_loop
async def test_a_disk_filler_stops_at_the_quota_of_work_folder_and_tmp_together(
    client: Client,
) -> None:
    failed, text = await call(client, "run_python", code=DISK_FILLER)
    assert failed, text
    assert "filler.bin No space left on device" in text
    assert f"disk is full: the work folder, /tmp and /dev/shm share {DISK_MB} MB" in text
    assert int(text.split("written MB ", 1)[1].split()[0]) <= DISK_MB
    code = (
        "for path in ('filler.bin', '/tmp/filler.bin', '/dev/shm/filler.bin'):\n"
        "    if os.path.exists(path): os.remove(path)\n"
        "open('small.txt', 'w').write('fits again')"
    )
    failed, text = await call(client, "run_python", code=code)
    assert (failed, text) == (False, "[value]\n10")


FILL_TO_THE_BRIM = """
import os
with open('filler.bin', 'wb', buffering=0) as out:
    try:
        while True:
            out.write(b'x' * 2**16)
    except OSError as exc:
        print(exc.strerror)
"""


@in_module_loop
async def test_a_disk_left_full_does_not_fail_the_next_calls(client: Client) -> None:
    failed, text = await call(client, "run_python", code=FILL_TO_THE_BRIM)
    assert failed and "No space left on device" in text, text
    failed, text = await call(client, "run_python", code="6 * 7")  # still full, yet fine
    assert (failed, text) == (False, "[value]\n42")
    failed, text = await call(client, "run_python", code="open('more.txt', 'w').write('x' * 2**20)")
    assert failed and f"disk is full: the work folder, /tmp and /dev/shm share {DISK_MB} MB" in text
    failed, text = await call(client, "run_python", code="os.remove('filler.bin')")
    assert not failed, text


def test_a_dead_servers_group_is_emptied_and_removed() -> None:
    isolation = detect_isolation("bwrap", Budget(MEMORY_MB, MAX_PROCESSES, DISK_MB))
    assert isolation.cgroups is not None
    gone = subprocess.Popen(["true"])
    gone.wait()
    group = SandboxCgroup(isolation.cgroups, f"{gone.pid}-0rphan00")
    for folder in {group.memory_dir, group.pids_dir}:
        folder.mkdir()
    orphan = subprocess.Popen([*group.join_command(), "sleep", "60"])
    try:
        _wait_for(lambda: _members(group.pids_dir), "the orphan in its group")
        isolation.cgroups.remove_stale()
        assert orphan.wait(timeout=5) == -9
        assert not group.memory_dir.exists() and not group.pids_dir.exists()
    finally:
        orphan.kill()
        group.remove()


def _start_server() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", MODULE, "--isolation", "bwrap", *LIMITS],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for(condition: object, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _disks_of(pid: int) -> list[Path]:
    return list(disk_parent().glob(f"deepledger-disk-{pid}-*"))


def test_a_killed_servers_group_and_disk_are_removed_by_the_next_server() -> None:
    killed = _start_server()
    _wait_for(lambda: any(_groups_of(killed.pid).values()) and _disks_of(killed.pid), "setup")
    killed.kill()
    killed.wait()
    assert any(_groups_of(killed.pid).values()) and _disks_of(killed.pid)  # left behind
    following = _start_server()
    try:
        _wait_for(lambda: any(_groups_of(following.pid).values()), "the next server")
        assert not any(_groups_of(killed.pid).values())
        assert not _disks_of(killed.pid)
    finally:
        assert following.stdin is not None
        following.stdin.close()  # stdin's end: the server closes its sandbox and exits
        following.wait(timeout=30)
    assert not any(_groups_of(following.pid).values())
    assert not _disks_of(following.pid)


def test_the_limits_are_named_in_the_description() -> None:
    isolation = detect_isolation("bwrap", Budget(MEMORY_MB, MAX_PROCESSES, DISK_MB))
    assert f"at most {MEMORY_MB} MB for all of the sandbox's processes together" in (
        isolation.summary
    )
    assert f"at most {MAX_PROCESSES} processes/threads together" in isolation.summary
    assert f"/tmp and /dev/shm share {DISK_MB} MB" in isolation.summary
