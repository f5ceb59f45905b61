"""Which processes one test's subprocess started, so a leftover check ignores the
processes of other tests and runs going on beside it on the same machine.

Tool servers and sandbox workers start their own sessions (and get a minimal
environment), so neither a process group nor an environment marker finds them; their
parent chain does, while the parent is alive. ``Descendants`` therefore walks /proc
for the whole life of the root process and remembers every process it saw below it;
one that outlives the root is an orphan that the ancestry no longer shows.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

PROC = Path("/proc")


def takes_ctrl_c() -> None:
    """For ``Popen(preexec_fn=...)`` in the Ctrl-C tests: the child takes SIGINT the default
    way even when the test run itself was started with it ignored (a shell without job
    control starts its background commands so, and children inherit it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# Each process is (pid, start time in clock ticks): a reused pid is another process.
Identity = tuple[int, int]


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of a live process, None once it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name in (...) may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def _children_by_parent() -> dict[int, list[Identity]]:
    children: dict[int, list[Identity]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            children.setdefault(stat[1], []).append((int(entry.name), stat[2]))
    return children


def is_running(process: Identity) -> bool:
    """Alive and the same process (a zombie has already exited)."""
    stat = _stat(process[0])
    return stat is not None and stat[2] == process[1] and stat[0] not in ("Z", "X")


class Descendants:
    """Record every descendant of ``root_pid`` in a background thread until ``stop()``."""

    def __init__(self, root_pid: int, every_seconds: float = 0.02) -> None:
        self.root_pid, self.every_seconds = root_pid, every_seconds
        self.seen: set[Identity] = set()
        # Each one's command line as last seen alive (a fresh fork shows its parent's
        # until it execs, so it is read again on every look).
        self.commands: dict[Identity, str] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while True:
            self._look()
            if self._stopping.wait(self.every_seconds):
                return

    def _look(self) -> None:
        children, below = _children_by_parent(), [self.root_pid]
        while below:
            for child in children.get(below.pop(), []):
                self.seen.add(child)
                if (command := command_line(child)) != "(gone)":
                    self.commands[child] = command
                below.append(child[0])

    def ran(self, text: str) -> bool:
        """Whether a descendant's command line held ``text``."""
        return any(text in command for command in list(self.commands.values()))

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()

    def still_running(
        self, grace_seconds: float = 10.0, besides: frozenset[Identity] = frozenset()
    ) -> list[Identity]:
        """Descendants still alive after ``grace_seconds`` (time to finish exiting);
        ``besides``: ones alive before the watch began (another test's, in the same
        process), left out."""
        deadline = time.monotonic() + grace_seconds
        while (
            alive := [p for p in self.seen if p not in besides and is_running(p)]
        ) and time.monotonic() < deadline:
            time.sleep(0.1)
        return alive


def descendants_now(root_pid: int) -> frozenset[Identity]:
    """The descendants of ``root_pid`` alive at this moment."""
    children, below, found = _children_by_parent(), [root_pid], set()
    while below:
        for child in children.get(below.pop(), []):
            found.add(child)
            below.append(child[0])
    return frozenset(found)


def command_line(process: Identity) -> str:
    try:
        raw = (PROC / str(process[0]) / "cmdline").read_bytes()
    except OSError:
        return "(gone)"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()
