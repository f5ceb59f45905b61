"""Typed records: everything deepledger writes to a run directory, as classes.

One class reads and writes each kind of line or file, so a field is added in one place.
``base.py`` holds the shared model settings and the schema version; ``events.py`` every
journal event, one union told apart by ``event``; ``parts.py`` how the messages, calls,
results and images inside them are written and read; ``codec.py`` the one encoder and
decoder of journal lines and the reader of journal files (``read_journal``);
``results.py`` the task, attempt, retry, progress and summary records, with
``economics.py`` the summary's token economics; ``manifest.py`` the run manifest;
``schema.py`` the JSON schema the report page is checked against
(``python -m deepledger.records.schema`` regenerates ``report/assets/records.schema.json``).

What a reader of run directories imports from here: ``Record`` and ``SCHEMA_VERSION``;
``Event`` (the union of journal events), ``read_journal`` and ``RecordedJournal``;
``TaskRecord``, ``AttemptRecord``, ``RetryRecord``, ``SummaryRecord``,
``JudgingSummary``; ``Manifest`` and ``RunEntry``; ``TokenEconomics``; ``records_schema``.
Each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepledger.lazy import lazy_exports

if TYPE_CHECKING:
    from deepledger.records.base import SCHEMA_VERSION, Record
    from deepledger.records.codec import RecordedJournal, read_journal
    from deepledger.records.economics import TokenEconomics
    from deepledger.records.events import Event
    from deepledger.records.manifest import Manifest, RunEntry
    from deepledger.records.results import (
        AttemptRecord,
        JudgingSummary,
        RetryRecord,
        SummaryRecord,
        TaskRecord,
    )
    from deepledger.records.schema import records_schema

__getattr__ = lazy_exports(
    __name__,
    {
        "base": ("Record", "SCHEMA_VERSION"),
        "codec": ("RecordedJournal", "read_journal"),
        "economics": ("TokenEconomics",),
        "events": ("Event",),
        "manifest": ("Manifest", "RunEntry"),
        "results": (
            "AttemptRecord",
            "JudgingSummary",
            "RetryRecord",
            "SummaryRecord",
            "TaskRecord",
        ),
        "schema": ("records_schema",),
    },
)

__all__ = [
    "SCHEMA_VERSION",
    "AttemptRecord",
    "Event",
    "JudgingSummary",
    "Manifest",
    "Record",
    "RecordedJournal",
    "RetryRecord",
    "RunEntry",
    "SummaryRecord",
    "TaskRecord",
    "TokenEconomics",
    "read_journal",
    "records_schema",
]
