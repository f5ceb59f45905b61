"""The append-only event journal of one agent run (one attempt, or one sub-agent call).

One JSON object per line: ``{"ts": UTC ISO time, "event": name, ...data}``, each a typed
event of ``records/events.py`` written by ``records/codec.py``. A new file's first line
is ``{"ts": ..., "event": "journal_opened", "schema_version": 2}``: a journal without
it was written by a release before typed records (schema 1), and reads the same way
(``records.codec.read_journal``). Messages and usage are written as their dataclass
fields; images as their type, source, size and sha256, never their data.

Lines go to the file together, in one write, before the run waits on anything outside
the process: ``flush`` before each model request and each round of tool calls (the agent
loop calls it), and, on an event loop, as soon as the task that wrote them lets the loop
go on; at the journal's close; off an event loop each line is written at once. A run
killed at any point leaves a readable journal up to the last line written: what it
loses is at most what its task did since it last waited, which a resume does again. A
write the disk cannot take whole is cut back out, never left torn. One write a step,
not one a line: each was ~23 us of the event loop's time, three a turn
(benchmarks/perf/throughput.py, 2,048 tasks).

One writer at a time: a journal holds an exclusive ``flock`` on its file for as long as
it is open (taken once, when it is opened: no system call a line). A process that
opens a journal another still holds (a Ray worker of a killed driver, writing on for a
moment) gets :class:`JournalBusyError`, so that a resume never continues a file a
late writer still appends to (``Journal.reopen``; the runner then sets the file aside).
The lock goes with the process holding it, however it ends. On NFS, Linux turns
``flock`` into a lock of the whole file (``fcntl``) that the server keeps for every
client, if it runs a lock manager (NFSv4 has one built in; v3 needs ``lockd``, and a
mount with ``nolock`` keeps locks on the client only); a client cut off from the server
loses its locks when its lease expires (NFSv4, ~90 s) and the writer it was guarding
may then still run. A file system that keeps no locks at all gets none (logged once).

``writers_seconds`` reads back from a journal's stamps how long the runs that wrote it
worked on it (a killed run's time, which a task's time limit counts on resume).
"""

from __future__ import annotations

import asyncio
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from time import time_ns
from typing import TypeVar

from deepledger.errors import DeepLedgerError
from deepledger.records.base import SCHEMA_VERSION
from deepledger.records.codec import encode_line, read_journal
from deepledger.records.events import Event, JournalOpened
from deepledger.store.files import (
    append_whole,
    cut_torn_tail,
    disk_trouble,
    hold_exclusively,
    lock_holder,
)
from deepledger.store.layout import archive_folder, child_journal, memory_folder

E = TypeVar("E", bound=Event)


class JournalBusyError(DeepLedgerError):
    """Another process holds the journal's lock: it is still writing it. ``holder``: its
    process id on this machine, when known."""

    def __init__(self, path: Path, holder: int | None) -> None:
        self.path = path
        self.holder = holder
        who = f"process {holder}" if holder is not None else "another process"
        super().__init__(
            f"{path} is still being written by {who} (a worker of a killed run, or a second "
            "run in the same folder): one journal takes one writer. Let that process end, "
            "then run the same command again."
        )

    @property
    def writer(self) -> str:
        """Who holds it, in a few words."""
        return f"process {self.holder}" if self.holder is not None else "another process"


class Journal:
    """Writes events to ``path``; ``Journal(None)`` keeps them in memory only (tests)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._events: list[Event] = []  # kept by a journal in memory only
        self._start = 0
        self._handle: int | None = None
        self._unwritten: list[bytes] = []  # encoded lines the next flush writes
        self._flush_due_on: asyncio.AbstractEventLoop | None = None  # its callback's loop
        # A write that failed: every later write and flush raises it (the lines it took
        # are lost, and a journal with a hole in it must not go on); told: raised once.
        self._failed: Exception | None = None
        self._failure_told = False
        if path is not None:
            try:
                # Read too: a reopened journal's torn last line is found by reading it.
                flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                try:
                    self._handle = os.open(path, flags, 0o644)
                except FileNotFoundError:  # no folder yet (the run store makes them):
                    path.parent.mkdir(parents=True, exist_ok=True)
                    self._handle = os.open(path, flags, 0o644)
                self._hold()
                self._start = os.fstat(self._handle).st_size  # where this writer's lines go
                if self._start == 0:  # a new file says its schema
                    opened = JournalOpened(ts=_now(), schema_version=SCHEMA_VERSION)
                    self._append(encode_line(opened))
            except OSError as exc:
                self.close()
                _stop_on_disk_trouble(path, exc)
                raise

    @classmethod
    def reopen(cls, path: Path) -> Journal:
        """The journal a killed run left at ``path``, held by this process to go on with
        (:class:`JournalBusyError` while another process still writes it). A last line
        the kill cut short is cut off: the lines appended next start on their own."""
        journal = cls(path)
        assert journal._handle is not None
        try:
            journal._start = cut_torn_tail(journal._handle)
        except OSError as exc:
            journal.close()
            _stop_on_disk_trouble(path, exc)
            raise
        return journal

    def _hold(self) -> None:
        """This writer's lock on the file, for as long as it is open."""
        assert self._handle is not None and self.path is not None
        if not hold_exclusively(self._handle, self.path):
            holder = lock_holder(self._handle)
            self.close()
            raise JournalBusyError(self.path, holder)

    def write(self, event: Event) -> None:
        """Stamp ``event`` with the time and append it (see the module's docstring for
        when it reaches the file)."""
        event.ts = _now()
        if self._handle is None:
            self._events.append(event)
            return
        self._raise_failed()
        self._unwritten.append(encode_line(event))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:  # no event loop here to wait for: at once
            self.flush()
        elif self._flush_due_on is not loop:
            self._flush_due_on = loop
            loop.call_soon(self._flush_on_loop)

    def flush(self) -> None:
        """Write the lines not written yet, in one write (a disk that refuses it stops
        the run: ``RunDirectoryError``)."""
        self._raise_failed()
        if not self._unwritten or self._handle is None:
            return
        lines, self._unwritten = self._unwritten, []
        try:
            self._append(b"".join(lines))
        except Exception as exc:
            self._failed, self._failure_told = exc, True
            raise

    def _raise_failed(self) -> None:
        if self._failed is not None:
            self._failure_told = True
            raise self._failed

    def _flush_on_loop(self) -> None:
        """The flush due once the writing task let the loop go on. What it raises is
        kept: the task's next write, flush or close raises it."""
        self._flush_due_on = None
        if self._failed is not None:
            return  # the task is told of it, or will be
        try:
            self.flush()
        except Exception:
            self._failure_told = False  # the task's next write, flush or close tells it

    @property
    def events(self) -> list[Event]:
        """What this journal wrote, in order (no header). A journal on disk keeps none
        in memory and reads them back from its file (its own lines: a file it appended
        to keeps the earlier ones). Nothing but tests reads them, and with 2,048 tasks
        running, every event kept alive lengthened each of the cycle collector's scans
        (benchmarks/perf/throughput.py)."""
        if self.path is None:
            return self._events
        self.flush()
        return read_journal(self.path, start=self._start)

    def _append(self, data: bytes) -> None:
        """``data`` whole or not at all: a write the disk refuses part way is cut back
        (which frees the space it took) and stops the run with a clear message."""
        assert self._handle is not None and self.path is not None
        try:
            append_whole(self._handle, data, sync=False)
        except OSError as exc:
            _stop_on_disk_trouble(self.path, exc)
            raise

    def child(self, name: str) -> Journal:
        """A journal for a sub-agent run, in a folder beside this one."""
        if self.path is None:
            return Journal(None)
        return Journal(child_journal(self.path, name))

    @property
    def memory_folder(self) -> Path | None:
        """Where the memory tool keeps this run's notes (None: a journal in memory only,
        whose notes last as long as the task)."""
        return None if self.path is None else memory_folder(self.path)

    @property
    def archive_folder(self) -> Path | None:
        """Where this run's long tool results are archived (None: nowhere to keep them)."""
        return None if self.path is None else archive_folder(self.path)

    def of(self, kind: type[E]) -> list[E]:
        """The events of one class this journal wrote, in order."""
        return [e for e in self.events if isinstance(e, kind)]

    def close(self) -> None:
        """Write what is not written yet and let go of the file (and its lock)."""
        if self._handle is None:
            return
        try:
            if self._unwritten or (self._failed is not None and not self._failure_told):
                self.flush()
        finally:
            os.close(self._handle)
            self._handle = None

    def __del__(self) -> None:  # as a file object would: a journal left open is closed
        self.close()


# A line's stamp, as every writer of this module starts a line; and a resume's marker.
_STAMP = re.compile(rb'^\{\s*"ts"\s*:\s*"([^"]+)"')
_RESUMED = re.compile(rb'"event"\s*:\s*"resumed"')


def writers_seconds(path: Path) -> float:
    """How long the runs that wrote the journal at ``path`` worked on it, from its lines'
    stamps: each run's first line to its last (a resumed run's first is its ``resumed``
    line). What a kill cut off after a run's last line is not known and not counted.
    Lines are only scanned for their stamps, not decoded: a long journal reads fast."""
    total, first, last = 0.0, None, None
    try:
        data = path.read_bytes()
    except OSError:
        return 0.0
    for line in data.split(b"\n"):
        stamp = _STAMP.match(line)
        if stamp is None:
            continue  # torn, or not of this release
        try:
            moment = datetime.fromisoformat(stamp.group(1).decode())
        except ValueError:
            continue
        if _RESUMED.search(line) and first is not None and last is not None:
            total += (last - first).total_seconds()  # the run before it ended there
            first = None
        first = first or moment
        last = moment
    if first is not None and last is not None:
        total += (last - first).total_seconds()
    return max(0.0, total)


def _now() -> str:
    """The UTC time to the millisecond, as ``datetime.isoformat`` writes it
    (``2026-01-31T12:00:00.123+00:00``). Every journal line is stamped, several a turn
    in every task: the text up to the second is made once a second, which made a stamp
    a third of what building the datetime and its text each time cost."""
    global _second
    seconds, nanoseconds = divmod(time_ns(), 1_000_000_000)
    second = _second  # read once: journals are opened on worker threads too
    if second[0] != seconds:
        second = (seconds, datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
        _second = second
    return f"{second[1]}.{nanoseconds // 1_000_000:03d}+00:00"


# The second _now last stamped, and its text up to the second.
_second: tuple[int, str] = (-1, "")


def _stop_on_disk_trouble(path: Path, exc: OSError) -> None:
    """A full or read-only disk raised as the run directory reports it (the run stops
    with one message, exit 2); any other failure is left to the caller to re-raise."""
    if (trouble := disk_trouble(path, exc)) is not None:
        raise trouble from exc
