"""The append-only event journal of one agent run (one attempt, or one sub-agent call).

One JSON object per line: ``{"ts": UTC ISO time, "event": name, ...data}``, each a typed
event of ``records/events.py`` written by ``records/codec.py``. A new file's first line
is ``{"ts": ..., "event": "journal_opened", "schema_version": 2}``: a journal without
it was written by a release before typed records (schema 1), and reads the same way
(``records.codec.read_journal``). Each line goes to the file in one write as it
happens, so a run killed at any point leaves a readable journal up to its last event; a
line the disk cannot take whole is cut back out, never left torn. Messages and usage are
written as their dataclass fields; images as their type, source, size and sha256, never
their data.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from time import time_ns
from typing import TypeVar

from deepledger.records.base import SCHEMA_VERSION
from deepledger.records.codec import encode_line, read_journal
from deepledger.records.events import Event, JournalOpened
from deepledger.store.files import append_whole, disk_trouble
from deepledger.store.layout import archive_folder, child_journal, memory_folder

E = TypeVar("E", bound=Event)


class Journal:
    """Writes events to ``path``; ``Journal(None)`` keeps them in memory only (tests)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._events: list[Event] = []  # kept by a journal in memory only
        self._start = 0
        self._handle: int | None = None
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                self._handle = os.open(path, flags, 0o644)
                self._start = os.fstat(self._handle).st_size  # where this writer's lines go
                if self._start == 0:  # a new file says its schema
                    opened = JournalOpened(ts=_now(), schema_version=SCHEMA_VERSION)
                    self._append(encode_line(opened))
            except OSError as exc:
                _stop_on_disk_trouble(path, exc)
                raise

    def write(self, event: Event) -> None:
        """Stamp ``event`` with the time and append it."""
        event.ts = _now()
        if self._handle is not None:
            self._append(encode_line(event))
        else:
            self._events.append(event)

    @property
    def events(self) -> list[Event]:
        """What this journal wrote, in order (no header). A journal on disk keeps none
        in memory and reads them back from its file (its own lines: a file it appended
        to keeps the earlier ones). Nothing but tests reads them, and with 2,048 tasks
        running, every event kept alive lengthened each of the cycle collector's scans
        (benchmarks/perf/throughput.py)."""
        if self.path is None:
            return self._events
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
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None

    def __del__(self) -> None:  # as a file object would: a journal left open is closed
        self.close()


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
