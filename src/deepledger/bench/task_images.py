"""A question's embedded image (HLE's ``image`` field) as a file the task attaches.

The image is written once into a folder beside the task file, ``<file stem>_images/``
(inside ``benchmark.data.data_dir``, so the checks on attached files apply to it as to
any other), named after the task id. From there it travels as an attached file does:
a model that accepts images gets it as an image part of the first message
(agent/task.py ``attached_images``), the others read its note, and the task's input
digest covers its bytes (bench/inputs.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

# Media types of data: URIs we write, and their extensions.
EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/jpg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
}
# Attached files that are images (benchmark.data.text_only leaves their tasks out).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".svg")
# The first bytes of each, for an image given as bytes rather than as a data: URI.
MAGIC = ((b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpg"), (b"GIF8", "gif"))
DATA_URI = re.compile(r"data:(?P<type>[\w/+.-]+)(?:;[\w=.-]+)*?;base64,(?P<data>.*)", re.S)
UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def image_file(image: Any, task_id: str, task_file: Path) -> tuple[str | None, str]:
    """(the path of the written image, "") or (None, why the image cannot be used)."""
    data, extension, problem = _decoded(image)
    if problem:
        return None, problem
    folder = task_file.parent / f"{task_file.stem}_images"
    # The id, made safe as a file name, plus a hash of it: two ids that differ only in
    # unsafe characters still get two files.
    stem = UNSAFE.sub("_", task_id)[:80] + "-" + hashlib.sha256(task_id.encode()).hexdigest()[:8]
    path = folder / f"{stem}.{extension}"
    try:
        if not (path.is_file() and path.read_bytes() == data):
            folder.mkdir(exist_ok=True)
            _write_atomically(path, data)
    except OSError as exc:
        return None, f"its image cannot be written to {folder} ({exc})"
    return str(path), ""


def _decoded(image: Any) -> tuple[bytes, str, str]:
    """(the image's bytes, its extension, "") or (b"", "", why not)."""
    if isinstance(image, dict):  # a parquet image column: {"bytes": ..., "path": ...}
        image = image.get("bytes")
    if isinstance(image, bytes):
        for magic, extension in MAGIC:
            if image.startswith(magic):
                return image, extension, ""
        if image[:4] == b"RIFF" and image[8:12] == b"WEBP":
            return image, "webp", ""
        return b"", "", "its image is in no format we read (png, jpeg, gif, webp)"
    match = DATA_URI.fullmatch(image.strip()) if isinstance(image, str) else None
    if match is None:
        return b"", "", "its image is not a base64 data: URI (data:image/...;base64,...)"
    media = match["type"].lower()
    if media not in EXTENSIONS:
        return b"", "", f"its image has the media type {media!r}, not an image we read"
    try:
        return base64.b64decode(match["data"], validate=True), EXTENSIONS[media], ""
    except (binascii.Error, ValueError) as exc:
        return b"", "", f"its image's base64 cannot be decoded ({exc})"


def _write_atomically(path: Path, data: bytes) -> None:
    """Write then rename: a run reading the image never sees half of it."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
