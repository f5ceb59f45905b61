"""Pure checks of one sandbox's resources: sizes, leftovers, leaks, what a call is blamed for."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from types import ModuleType

import pytest

from deepledger.tools.servers import python_sandbox, sandbox_isolation, tool_python
from deepledger.tools.servers.python_sandbox import SandboxLimits, SandboxUnavailableError
from deepledger.tools.servers.sandbox_disk import disk_parent
from deepledger.tools.servers.sandbox_isolation import Budget, Isolation, SandboxResources


def _bwrap(budget: Budget, *, privileged: bool = False) -> Isolation:
    return Isolation("bwrap", "", bwrap="/usr/bin/bwrap", privileged=privileged, budget=budget)


def _sizes(argv: list[str]) -> dict[str, int]:
    """The --size of each tmpfs in a bwrap argv, by mount point."""
    sizes = {}
    for at, arg in enumerate(argv):
        if arg == "--tmpfs" and argv[at - 2] == "--size":
            sizes[argv[at + 1]] = int(argv[at - 1])
    return sizes


def test_without_a_quota_disk_tmp_and_shm_share_the_disk_budget(tmp_path: Path) -> None:
    confinement = _bwrap(Budget(disk_mb=1024)).confine(tmp_path, "/home/user")
    try:
        argv, _env, _cwd = confinement.command(["true"])
    finally:
        confinement.close()
    sizes = _sizes(argv)
    assert set(sizes) == {"/tmp", "/dev/shm"}
    assert sum(sizes.values()) == 1024 * 2**20


def test_the_description_gives_both_ram_backed_sizes() -> None:
    isolation = _bwrap(Budget(disk_mb=1001))
    summary = sandbox_isolation.resources_summary(isolation, "no cgroups", "no quota disk")
    assert "/tmp holds at most 501 MB and /dev/shm 500 MB" in summary
    assert "1001 MB together" in summary


def test_the_disk_image_goes_to_var_tmp_where_the_temp_folder_is_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    on_disk = "overlay / overlay rw 0 0\ntmpfs /dev/shm tmpfs rw 0 0\n"
    assert disk_parent(on_disk) == Path("/tmp")
    for kind in ("tmpfs", "ramfs"):
        assert disk_parent(f"{on_disk}{kind} /tmp {kind} rw,nosuid 0 0\n") == Path("/var/tmp")


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_folders_of_dead_servers_are_swept_and_live_ones_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead, alive = _dead_pid(), os.getpid()
    names = ("deepledger-sandbox-etc-", "deepledger-work-", "deepledger-probe-")
    for prefix in names:
        for pid in (dead, alive):
            (tmp_path / f"{prefix}{pid}-abcd1234" / "inner").mkdir(parents=True)
    (tmp_path / "deepledger-work-notapid").mkdir()
    sandbox_isolation.remove_stale_folders()
    left = sorted(folder.name for folder in tmp_path.iterdir())
    assert left == sorted(
        [*(f"{prefix}{alive}-abcd1234" for prefix in names), "deepledger-work-notapid"]
    )


def test_a_sandboxs_own_folders_are_named_with_the_server_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    confinement = _bwrap(Budget()).confine(None, "/home/user")
    try:
        names = sorted(folder.name for folder in tmp_path.iterdir())
        assert [name.rsplit("-", 1)[0] for name in names] == [
            f"deepledger-sandbox-etc-{os.getpid()}",
            f"deepledger-work-{os.getpid()}",
        ]
    finally:
        confinement.close()
    assert not list(tmp_path.iterdir())


def _fail(*_args: object) -> None:
    raise OSError("refused")


@pytest.mark.parametrize("step", ["_hand_over", "_write_accounts"])
def test_a_failure_after_the_places_are_made_leaves_nothing(
    step: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    if step == "_hand_over":
        monkeypatch.setattr(sandbox_isolation, "_hand_over", _fail)
    else:
        monkeypatch.setattr(sandbox_isolation.SandboxResources, "_write_accounts", _fail)
    with pytest.raises(OSError, match="refused"):
        _bwrap(Budget(), privileged=True).confine(None, "/home/user")
    assert not list(tmp_path.iterdir())


class _Disk:
    def __init__(self, full: bool) -> None:
        self.is_full = full

    def full(self) -> bool:
        return self.is_full


class _Cgroup:
    """Counters as the kernel keeps them: totals; new_events gives what came since."""

    def __init__(self) -> None:
        self.oom_kills = self.seen = 0

    def new_events(self) -> tuple[int, int]:
        new, self.seen = self.oom_kills - self.seen, self.oom_kills
        return new, 0


def _with(tmp_path: Path, disk: _Disk, cgroup: _Cgroup) -> SandboxResources:
    resources = Isolation("none", "").confine(tmp_path)
    resources.disk = disk  # type: ignore[assignment]
    resources.cgroup = cgroup  # type: ignore[assignment]
    return resources


def test_a_disk_already_full_is_not_blamed_on_the_next_call(tmp_path: Path) -> None:
    disk, cgroup = _Disk(full=True), _Cgroup()
    resources = _with(tmp_path, disk, cgroup)
    full_before = resources.limit_marks()
    assert resources.limit_report(full_before, "[value]\n42") is None
    report = resources.limit_report(full_before, "OSError: [Errno 28] No space left on device")
    assert report is not None and "disk is full" in report
    disk.is_full = False
    full_before = resources.limit_marks()
    disk.is_full = True  # this call filled it
    report = resources.limit_report(full_before, "")
    assert report is not None and "disk is full" in report


def test_an_oom_kill_between_calls_is_not_blamed_on_the_next_call(tmp_path: Path) -> None:
    cgroup = _Cgroup()
    resources = _with(tmp_path, _Disk(full=False), cgroup)
    cgroup.oom_kills = 1  # a background process, after the last call ended
    marks = resources.limit_marks()
    assert resources.limit_report(marks, "") is None
    marks = resources.limit_marks()
    cgroup.oom_kills = 3  # during this call
    report = resources.limit_report(marks, "")
    assert report is not None and "the kernel killed 2 of them" in report


class _Stop(Exception):
    pass


@pytest.mark.parametrize("module", [python_sandbox, tool_python])
def test_the_sigterm_handler_is_set_before_the_probe_mounts_a_disk(
    module: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[object] = []

    def probe(*_args: object, **_kwargs: object) -> None:
        seen.append(signal.getsignal(signal.SIGTERM))
        raise _Stop

    monkeypatch.setattr(module, "isolation_from", probe)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(_Stop):
            module.main([])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen and seen[0] not in (previous, signal.SIG_DFL)


class _Recorder:
    """Stands for a sandbox's resources: records the thread that closes it."""

    def __init__(self) -> None:
        self.closed_in: list[threading.Thread] = []
        self.isolation = Isolation("none", "")

    def close(self) -> None:
        self.closed_in.append(threading.current_thread())


class _Sandbox:
    def __init__(self, resources: _Recorder) -> None:
        self.resources = resources

    async def aclose(self) -> None:
        pass


def _pool(isolation: object) -> tool_python.SandboxPool:
    return tool_python.SandboxPool(SandboxLimits(), isolation, object(), None)  # type: ignore[arg-type]


async def test_closing_the_pool_unmounts_off_the_event_loop() -> None:
    resources = _Recorder()
    pool = _pool(object())
    pool._sandboxes["sbx-1"] = _Sandbox(resources)  # type: ignore[assignment]
    await pool.aclose()
    assert resources.closed_in and resources.closed_in[0] is not threading.current_thread()


class _Isolation:
    def __init__(self, resources: _Recorder) -> None:
        self.resources = resources

    def confine(self, *_args: object) -> _Recorder:
        return self.resources


@pytest.mark.parametrize("failure", [SandboxUnavailableError("no bwrap"), RuntimeError("odd")])
async def test_a_sandbox_that_fails_to_start_is_closed_off_the_event_loop(
    failure: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def reset(_self: object) -> None:
        raise failure

    monkeypatch.setattr(python_sandbox.PythonSandbox, "reset", reset)
    resources = _Recorder()
    with pytest.raises((tool_python.ToolFailure, RuntimeError)):
        await _pool(_Isolation(resources)).create()
    assert resources.closed_in and resources.closed_in[0] is not threading.current_thread()
