"""``manifest.json``: what was run in a run directory, one entry per run (a resume adds
one), as a typed record.

The configurations in it stay JSON: they are the config as recorded
(``config.as_record``, secrets redacted), and one written by another release has keys
this one does not know; a reader takes the keys it needs (``bench/replay.py``'s
``RecordedRun``). The manifest carries no ``schema_version``: its layout is the same in
both schemas.
"""

from __future__ import annotations

from typing import Self

from pydantic import ConfigDict, Field

from deepledger.messages import JSONObject
from deepledger.records.base import Record


class RunEntry(Record):
    """One run of the directory: the first, or a resume."""

    # What a newer release added is kept: the manifest is read, changed and written back.
    model_config = ConfigDict(extra="allow")

    started_at: str
    finished_at: str | None = None  # None: still going, or killed
    argv: list[str] = Field(default_factory=list)  # secrets redacted
    config: JSONObject = Field(default_factory=dict)
    config_id: str | None = None  # store/run_config.py; on every line this run wrote
    versions: dict[str, str] = Field(default_factory=dict)  # deepledger's and its libraries'
    git_commit: str | None = None


class Manifest(Record):
    model_config = ConfigDict(extra="allow")  # as RunEntry's

    created_at: str | None = None
    config: JSONObject = Field(default_factory=dict)  # the first run's
    runs: list[RunEntry] = Field(default_factory=list)
    tasks_expected: int | None = None

    @classmethod
    def load(cls, data: JSONObject) -> Self:
        """A manifest as read (raises ``ValueError`` when it is none)."""
        return cls.model_validate(data)

    @property
    def last_config(self) -> JSONObject:
        """The configuration of the newest run (of the first, before any was recorded)."""
        return self.runs[-1].config if self.runs else self.config

    def to_json(self) -> JSONObject:
        """As written: the fields it was read or made with, no more."""
        return self.model_dump(mode="json", exclude_unset=True)
