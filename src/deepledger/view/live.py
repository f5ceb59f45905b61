"""Reading a run while it is written: a journal's new whole lines, and whether anything
in a run folder changed since a reader last looked.

The run writes as it always does (one append per line, ``store/files.py``); nothing here
writes, so watching a bench costs it nothing. A line half written when it is read — the
journal of a live run, torn at its end — is left for the next read, once its newline is
there.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from deepledger.messages import JSONObject
from deepledger.store.layout import RunLayout


def whole_lines(path: Path, offset: int = 0) -> tuple[list[JSONObject], int]:
    """The JSON objects of the whole lines of ``path`` from byte ``offset`` (a line's
    start), and the offset after the last of them: where the next read starts. A last
    line without its newline yet is not read; a line that holds no JSON object is
    skipped; a file not there yet reads as nothing."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n")
    if end < 0:
        return [], offset
    return json_objects(chunk[:end]), offset + end + 1


def json_objects(chunk: bytes) -> list[JSONObject]:
    """The JSON objects of the lines of ``chunk``; a line that holds none (cut by a
    read's window, torn by a writer, not an object) is skipped."""
    lines = []
    for raw in chunk.split(b"\n"):
        try:
            line = json.loads(raw.decode("utf-8", errors="replace"))
        except ValueError:
            continue
        if isinstance(line, dict):
            lines.append(line)
    return lines


def signature(root: Path) -> str:
    """A short digest of the sizes and times of a run's files that change as it runs
    (its results and every journal): equal digests, nothing new to show."""
    layout = RunLayout(root)
    paths = [layout.manifest, layout.summary, layout.run_journal]
    if layout.tasks.is_dir():
        paths += layout.jsonl_files()
    else:
        paths.append(layout.results)
    digest = hashlib.sha1()
    for path in sorted(set(paths)):
        try:
            stat = os.stat(path)
        except OSError:
            continue
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]
