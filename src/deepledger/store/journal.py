"""The append-only event journal of one agent run (one attempt, or one sub-agent call).

One JSON object per line: ``{"ts": UTC ISO time, "event": name, ...data}``. Each line
goes to the file in one write as it happens, so a run killed at any point leaves a
readable journal up to its last event; a line the disk cannot take whole is cut back
out, never left torn. Dataclasses (messages, usage) are written as plain dicts; images as
their type, source, size and sha256, never their data.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import errno
import hashlib
import json
import os
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

from deepledger.errors import RunDirectoryError
from deepledger.messages import ImagePart

# What a write says when the disk is full or over quota.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


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
        self._handle: int | None = None
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                self._handle = os.open(path, flags, 0o644)
            except OSError as exc:
                _stop_on_disk_trouble(path, exc)
                raise

    def write(self, event: str, **data: Any) -> None:
        record = {"ts": datetime.now(UTC).isoformat(timespec="milliseconds"), "event": event}
        record |= to_jsonable(data)
        self.events.append(record)
        if self._handle is not None:
            line = json.dumps(record, ensure_ascii=False) + "\n"
            # A model can emit lone surrogates; write them as \\udXXX escapes, not a crash.
            self._append(line.encode("utf-8", errors="backslashreplace"))

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
        return Journal(self.path.parent / f"{self.path.stem}.subagents" / f"{name}.jsonl")

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def close(self) -> None:
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None

    def __del__(self) -> None:  # as a file object would: a journal left open is closed
        self.close()


def _stop_on_disk_trouble(path: Path, exc: OSError) -> None:
    """A full or read-only disk raised as the run directory reports it (the run stops
    with one message, exit 2); any other failure is left to the caller to re-raise."""
    if (trouble := disk_trouble(path, exc)) is not None:
        raise trouble from exc


def append_whole(handle: int, data: bytes, *, sync: bool) -> None:
    """Append ``data`` to the file open as ``handle`` (``O_APPEND``) whole or not at all:
    a write the disk refuses part way is cut back, which frees the space it took, and
    the error raised. ``sync``: fsync it too (records a resume relies on)."""
    size = os.fstat(handle).st_size
    try:
        written = 0
        while written < len(data):  # a short write is not an error: go on from there
            written += os.write(handle, data[written:])
        if sync:
            os.fsync(handle)
    except OSError:
        os.ftruncate(handle, size)
        raise


def disk_trouble(path: Path, exc: OSError) -> RunDirectoryError | None:
    """The error that stops a run when ``exc`` says its disk is full or went read-only
    (None for other failures): every later write would fail the same way."""
    if exc.errno in DISK_FULL:
        what = f"the disk is full ({exc.strerror})"
    elif exc.errno == errno.EROFS:
        what = f"the filesystem is read-only ({exc.strerror})"
    else:
        return None
    return RunDirectoryError(
        f"Could not write {path}: {what}. What was recorded before stays valid: free some "
        "space (or make it writable) and run the same command again: a benchmark resumes "
        "where it stopped."
    )
