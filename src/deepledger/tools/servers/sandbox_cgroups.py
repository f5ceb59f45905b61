"""One cgroup per sandbox: memory and process count limited across all of its processes.

Per-process limits (RLIMIT_AS) do not add up: four processes under a 512 MB RLIMIT_AS held
1.9 GB of the host between them. A cgroup charges every process of the sandbox, and the
pages of RAM-backed files they write (tmpfs, ``/dev/shm``), to one account:

- **memory**: ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1) is the sandbox's total;
  past it the kernel reclaims what it can and then kills a process *of the sandbox* (the
  largest), never one of the host. Swap is closed (``memory.swap.max`` 0, or v1's
  ``memory.memsw.limit_in_bytes`` equal to the limit) where the files exist, so the limit
  is RAM plus nothing.
- **pids**: ``pids.max`` counts the sandbox's processes and threads together; past it
  ``fork``/``clone`` fail with EAGAIN.

Where the groups live: each controller's hierarchy is found in ``/proc/self/mountinfo`` (a
cgroup2 mount whose ``cgroup.controllers`` offers it, else a cgroup v1 mount of it; a hybrid
host mixes the two). Under each hierarchy's root, a group ``deepledger-sandboxes`` holds one
leaf per sandbox, named ``<server pid>-<random>``. On v2 the parent holds no process itself,
so it may enable ``memory`` and ``pids`` for its leaves (the "no internal processes" rule),
and the root, exempt from that rule, enables them for it. A server that was killed leaves
its leaves behind: every server kills what is left in the leaves of servers no longer
alive, and removes them, when it starts.

The worker joins its group before anything of it runs: the server starts it through
``/bin/sh``, which writes its own pid into each group's ``cgroup.procs`` and then ``exec``s
bubblewrap, so everything the code starts is born inside. Creating groups needs write access
to the hierarchy (root, usually); where that fails, ``probe_cgroups`` says why and the
sandbox falls back to per-process limits (RLIMIT_AS and RLIMIT_NPROC), and its tool
descriptions say which one is in force.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PARENT_NAME = "deepledger-sandboxes"
CONTROLLERS = ("memory", "pids")
_MOUNTINFO = Path("/proc/self/mountinfo")
_REMOVE_ATTEMPTS = 50  # x 20 ms: a killed sandbox's last processes leave its group quickly


class CgroupsUnavailableError(RuntimeError):
    """No writable cgroup hierarchy offers memory and pids here; the message says why."""


@dataclass(frozen=True)
class Hierarchy:
    """Where one controller's groups are made: a mount point and its cgroup version."""

    root: Path
    version: int  # 1 or 2

    @property
    def parent(self) -> Path:
        return self.root / PARENT_NAME


def find_hierarchies(mountinfo: str) -> dict[str, Hierarchy]:
    """The hierarchy of each of ``CONTROLLERS`` mounted here (v2 first), by controller."""
    found: dict[str, Hierarchy] = {}
    v1: dict[str, Hierarchy] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        mount_point = Path(fields[4].replace("\\040", " "))
        fstype, _source, options = line.split(" - ", 1)[1].split()[:3]
        if fstype == "cgroup2":
            try:
                offered = (mount_point / "cgroup.controllers").read_text().split()
            except OSError:
                continue
            for controller in CONTROLLERS:
                if controller in offered:
                    found.setdefault(controller, Hierarchy(mount_point, 2))
        elif fstype == "cgroup":
            for controller in set(options.split(",")) & set(CONTROLLERS):
                v1.setdefault(controller, Hierarchy(mount_point, 1))
    for controller, hierarchy in v1.items():
        found.setdefault(controller, hierarchy)
    return found


@dataclass(frozen=True)
class CgroupLimits:
    memory_bytes: int
    max_processes: int


@dataclass(frozen=True)
class Cgroups:
    """The hierarchies this server makes its sandboxes' groups in."""

    memory: Hierarchy
    pids: Hierarchy

    @property
    def description(self) -> str:
        versions = {self.memory.version, self.pids.version}
        return "cgroup v2" if versions == {2} else "cgroup v1" if versions == {1} else "cgroups"

    def create(self, limits: CgroupLimits) -> SandboxCgroup:
        """A new group with ``limits`` for one sandbox; CgroupsUnavailableError if refused."""
        name = f"{os.getpid()}-{secrets.token_hex(4)}"
        group = SandboxCgroup(self, name)
        try:
            for hierarchy in {self.memory, self.pids}:
                _prepare_parent(hierarchy)
                (hierarchy.parent / name).mkdir()
            group.set_limits(limits)
        except OSError as exc:
            group.remove()
            raise CgroupsUnavailableError(f"cannot create a {self.description}: {exc}") from exc
        return group

    def remove_stale(self) -> None:
        """Remove the groups of servers that are no longer alive (killed ones), killing
        what still runs in them: a killed server's sandbox processes are orphans."""
        names: set[str] = set()
        for hierarchy in {self.memory, self.pids}:
            try:
                leaves = list(hierarchy.parent.iterdir())
            except OSError:
                continue
            for leaf in leaves:
                owner = leaf.name.split("-", 1)[0]
                if leaf.is_dir() and owner.isdigit() and not owner_alive(int(owner)):
                    names.add(leaf.name)
        for name in names:
            SandboxCgroup(self, name).remove()


def owner_alive(pid: int) -> bool:
    """Whether the server that made a group (or a disk) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _prepare_parent(hierarchy: Hierarchy) -> None:
    """Make ``deepledger-sandboxes`` and, on v2, let its leaves use memory and pids."""
    if hierarchy.version == 2:
        _enable_controllers(hierarchy.root)
    hierarchy.parent.mkdir(exist_ok=True)
    if hierarchy.version == 2:
        _enable_controllers(hierarchy.parent)


def _enable_controllers(group: Path) -> None:
    enabled = (group / "cgroup.subtree_control").read_text().split()
    missing = [name for name in CONTROLLERS if name not in enabled]
    if missing:
        (group / "cgroup.subtree_control").write_text(" ".join(f"+{n}" for n in missing))


def probe_cgroups(limits: CgroupLimits) -> tuple[Cgroups | None, str]:
    """The cgroups to use here, proven by creating (and removing) one group; else why not."""
    try:
        hierarchies = find_hierarchies(_MOUNTINFO.read_text())
    except OSError as exc:
        return None, f"cannot read {_MOUNTINFO}: {exc}"
    missing = [name for name in CONTROLLERS if name not in hierarchies]
    if missing:
        return None, f"no cgroup hierarchy offers {' and '.join(missing)}"
    cgroups = Cgroups(hierarchies["memory"], hierarchies["pids"])
    cgroups.remove_stale()
    try:
        cgroups.create(limits).remove()
    except CgroupsUnavailableError as exc:
        return None, str(exc)
    return cgroups, ""


class SandboxCgroup:
    """One sandbox's group (a directory per hierarchy): its limits, its counters, its end."""

    def __init__(self, cgroups: Cgroups, name: str) -> None:
        self.cgroups = cgroups
        self.memory_dir = cgroups.memory.parent / name
        self.pids_dir = cgroups.pids.parent / name
        self._oom_kills_seen = 0
        self._fork_failures_seen = 0

    @property
    def _dirs(self) -> list[Path]:
        return list(dict.fromkeys((self.memory_dir, self.pids_dir)))

    def set_limits(self, limits: CgroupLimits) -> None:
        memory = str(limits.memory_bytes)
        if self.cgroups.memory.version == 2:
            (self.memory_dir / "memory.max").write_text(memory)
            _write_if_present(self.memory_dir / "memory.swap.max", "0")
        else:
            (self.memory_dir / "memory.limit_in_bytes").write_text(memory)
            # Equal to the limit: not one byte of swap on top (v1's memory+swap account).
            _write_if_present(self.memory_dir / "memory.memsw.limit_in_bytes", memory)
        (self.pids_dir / "pids.max").write_text(str(limits.max_processes))

    def join_command(self) -> list[str]:
        """A prefix for argv: the process joins this group, then execs the rest."""
        joins = "; ".join(
            f"echo $$ > {shlex.quote(str(folder / 'cgroup.procs'))} || exit 125"
            for folder in self._dirs
        )
        return ["/bin/sh", "-c", f'{joins}; exec "$@"', "sandbox-join"]

    def peak_memory_bytes(self) -> int | None:
        """The most memory the group has held at once, where the kernel tells (None if not)."""
        name = "memory.peak" if self.cgroups.memory.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.memory_dir / name).read_text())
        except (OSError, ValueError):
            return None

    def new_events(self) -> tuple[int, int]:
        """(processes the kernel killed for memory, forks refused) since the last call."""
        if self.cgroups.memory.version == 2:
            oom_kills = _counter(self.memory_dir / "memory.events", "oom_kill")
        else:
            oom_kills = _counter(self.memory_dir / "memory.oom_control", "oom_kill")
        fork_failures = _counter(self.pids_dir / "pids.events", "max")
        new = (oom_kills - self._oom_kills_seen, fork_failures - self._fork_failures_seen)
        self._oom_kills_seen, self._fork_failures_seen = oom_kills, fork_failures
        return new

    def kill_all(self) -> None:
        """SIGKILL every process left in the group (synchronous: safe in a signal handler)."""
        kill_file = self.memory_dir / "cgroup.kill"
        if self.cgroups.memory.version == 2 and kill_file.exists():
            try:
                kill_file.write_text("1")
                return
            except OSError:
                pass  # fall through to killing them one by one
        for folder in self._dirs:
            for pid in _members(folder):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    continue

    def remove(self) -> None:
        """Kill what is left and delete the group; a group still busy after a second is left
        for the next server's ``remove_stale``."""
        for folder in self._dirs:
            for _ in range(_REMOVE_ATTEMPTS):
                if not folder.exists():
                    break
                self.kill_all()
                try:
                    folder.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)  # its last processes are still exiting


def _write_if_present(path: Path, value: str) -> None:
    if path.exists():
        path.write_text(value)


def _members(folder: Path) -> list[int]:
    try:
        return [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _counter(path: Path, key: str) -> int:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0
