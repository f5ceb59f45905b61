"""The one encoder and decoder of journal lines, and the reader of journal files.

A journal file (schema 2) starts with a ``journal_opened`` line naming its schema
version; a file without one is of schema 1 (every release before typed records), whose
lines read the same way. Lines an old release wrote keep reading: a field added since
has a default, an event name no longer written keeps its class, and an event name this
release does not know reads as :class:`UnknownEvent`.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import orjson

from deepledger.messages import JSONObject
from deepledger.records.events import EVENT_CLASSES, Event, JournalOpened, UnknownEvent
from deepledger.records.parts import PLAIN, to_jsonable

E = TypeVar("E", bound=Event)


def encode(event: Event) -> JSONObject:
    """``event`` as its journal line's JSON object: ``ts``, ``event``, then the fields the
    writer gave (a field left to its default is not written), in the class's order.

    The fields are taken as they are, not re-validated: they were checked when the
    event was built, and this runs on every turn: most fields are plain values (a turn
    number, a flag), taken as they are without a call."""
    given = event.model_fields_set
    record: JSONObject = {"ts": event.ts, "event": event.event}
    for key, value in event.__dict__.items():
        if key in given and key not in ("ts", "event"):
            record[key] = value if type(value) in PLAIN else to_jsonable(value)
    if event.__pydantic_extra__:  # read from a newer release's line: written back as read
        record |= to_jsonable(event.__pydantic_extra__)
    return record


def encode_line(event: Event) -> bytes:
    """One journal line. A model can emit lone surrogates: they are written as
    ``\\udXXX`` escapes, not a crash.

    orjson first: three or four lines are written every turn of every task, and the
    standard library's encoder was the largest single cost of a turn's bookkeeping.
    What orjson refuses (a lone surrogate, an integer beyond 64 bits) goes the standard
    library's way; readers see the same JSON either way (orjson leaves out the spaces)."""
    record = encode(event)
    try:
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        return line.encode("utf-8", errors="backslashreplace")


def event_name(kind: type[Event]) -> str:
    """The ``event`` value of the lines of ``kind``."""
    return str(kind.model_fields["event"].default)


def decode(data: object) -> Event:
    """One line's JSON object as its event class; raises ``ValueError`` (a pydantic
    ``ValidationError`` included) when it is not an event or its fields do not fit."""
    if not isinstance(data, dict) or not isinstance(data.get("event"), str):
        raise ValueError("a journal line is a JSON object with an event name")
    cls = EVENT_CLASSES.get(data["event"], UnknownEvent)
    return cls.model_validate(data, extra="allow")


_OPENED = event_name(JournalOpened)


@dataclass
class RecordedJournal:
    """A journal file read back: its events decoded and the JSON object of each line.
    The header line that names the schema version is in neither: both schemas' lines
    read the same way, so no reader asks which one a file is. A line is its event's
    encoding: a reader that passes events on as JSON (the report page) takes the lines
    as they are instead of encoding the events again; ``sizes`` holds each line's length
    in characters as read (a reader that clips long texts skips the lines too short to
    hold one)."""

    path: Path
    events: list[Event] = field(default_factory=list)
    lines: list[JSONObject] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]


def read_journal_file(
    path: Path, kinds: Collection[type[Event]] | None = None, start: int = 0
) -> RecordedJournal:
    """Every complete line of the journal at ``path``, decoded (``kinds``: only the
    lines of these classes; the others are in ``lines`` alone, which saves decoding the
    messages of a journal whose reader only passes them on). A line cut short by a
    crash (the last one, or one a reader met mid-append) is skipped, as is a line that
    holds no event object; a missing file reads as empty. ``start``: the byte offset of
    a line to read from (what one writer appended to a file that had lines before)."""
    journal = RecordedJournal(path)
    names = None if kinds is None else {event_name(kind) for kind in kinds}
    if not path.exists():
        return journal
    # errors="replace": a read that lands mid-append may cut a character in two; that
    # last line is no JSON anyway.
    with path.open(encoding="utf-8", errors="replace") as lines:
        lines.seek(start)  # a line's start: the decoder starts afresh there
        for line in lines:
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(data, dict) or not isinstance(data.get("event"), str):
                continue
            if data["event"] == _OPENED:  # the header: no event of the run
                continue
            journal.lines.append(data)
            journal.sizes.append(len(line))
            if names is None or data["event"] in names:
                journal.events.append(decode(data))
    return journal


def read_journal(path: Path, start: int = 0) -> list[Event]:
    """The events of the journal at ``path`` (see :func:`read_journal_file`)."""
    return read_journal_file(path, start=start).events
