"""The append-only event journal of one agent run (one attempt, or one sub-agent call).

One JSON object per line: ``{"ts": UTC ISO time, "event": name, ...data}``. Lines are
flushed as they are written, so a run killed at any point leaves a readable journal up
to its last event. Dataclasses (messages, usage) are written as plain dicts; images as
their type, source, size and sha256, never their data.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

from deepledger.messages import ImagePart


def to_jsonable(value: Any) -> Any:
    if isinstance(value, ImagePart):
        return image_record(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def image_record(image: ImagePart) -> dict[str, Any]:
    """An image as the journal keeps it: what it was and a digest, not its base64 (one
    screenshot is megabytes, and journals are read line by line). The digest tells two
    images apart and matches the file the image came from."""
    try:
        digest = hashlib.sha256(base64.b64decode(image.data, validate=True)).hexdigest()
    except (binascii.Error, ValueError):  # not valid base64: digest the text as it came
        digest = hashlib.sha256(image.data.encode("utf-8", "surrogatepass")).hexdigest()
    return {
        "mime_type": image.mime_type,
        "source": image.source,
        "size_bytes": image.size_bytes,
        "sha256": digest,
    }


class Journal:
    """Writes events to ``path``; ``Journal(None)`` keeps them in memory only (tests)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.events: list[dict[str, Any]] = []
        self._file: TextIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            # A model can emit lone surrogates; write them as \\udXXX escapes, not a crash.
            self._file = path.open("a", encoding="utf-8", errors="backslashreplace")

    def write(self, event: str, **data: Any) -> None:
        record = {"ts": datetime.now(UTC).isoformat(timespec="milliseconds"), "event": event}
        record |= to_jsonable(data)
        self.events.append(record)
        if self._file is not None:
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
            self._file.flush()

    def child(self, name: str) -> Journal:
        """A journal for a sub-agent run, in a folder beside this one."""
        if self.path is None:
            return Journal(None)
        return Journal(self.path.parent / f"{self.path.stem}.subagents" / f"{name}.jsonl")

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
