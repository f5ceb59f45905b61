"""How the run directory's files are read and written so that a crash never tears one.

Every file is appended to in whole lines (one write each, cut back if the disk refuses
part of it) or replaced whole (temp file + rename): a run killed at any moment leaves
readable files, and a line cut short by a crash is skipped when reading. A disk that is
full or went read-only raises :class:`RunDirectoryError` (``disk_trouble``), which stops
the run with one message: every later write would fail the same way.

A file held open for writing for a long time (a journal) can be held exclusively
(``hold_exclusively``): an ``flock`` that goes with the process that took it, so that a
process still writing a file another has come to continue is told apart.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from deepledger.errors import RunDirectoryError
from deepledger.messages import JSONObject

# What a write says when the disk is full or over quota.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# What flock says on a file system that keeps no locks: NFS mounted with ``nolock`` or
# without a lock manager (ENOLCK), Lustre without ``-o flock`` (ENOSYS), FUSE (EOPNOTSUPP).
_NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)
# Where Linux lists the locks held: the holder of a busy file is named from it.
_PROC_LOCKS = Path("/proc/locks")
# How far back a torn last line is looked for at a time.
_TAIL_CHUNK = 64 * 1024

log = logging.getLogger(__name__)
_warned_no_locks = False  # said once a process: every journal is on the same disk


def read_jsonl(path: Path) -> list[JSONObject]:
    """Every complete JSON line of ``path`` (a line cut short by a crash is skipped), as
    read: the records/ classes decode them."""
    if not path.exists():
        return []
    records = []
    # errors="replace": a read that lands mid-append may cut a character in two; that
    # last line is no JSON anyway.
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def latest_records(records: list[JSONObject]) -> dict[str, JSONObject]:
    """The last record of each task id, in first-seen order."""
    latest: dict[str, JSONObject] = {}
    for record in records:
        if "task_id" in record:
            latest[record["task_id"]] = record
    return latest


def write_json_atomic(path: Path, data: object) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_text_atomic(
    path: Path, text: str, mode: int | None = None, *, sync: bool = False
) -> None:
    """Replace ``path`` whole (:func:`replace_whole`); a full disk leaves the old file as
    it was and raises :class:`RunDirectoryError`."""
    try:
        replace_whole(path, text, mode, sync=sync)
    except OSError as exc:
        if (trouble := disk_trouble(path, exc)) is not None:
            raise trouble from exc
        raise


def replace_whole(path: Path, text: str, mode: int | None = None, *, sync: bool = False) -> None:
    """Replace ``path`` whole: readers see the old file or the new one, never a part.
    The file is private to its owner unless ``mode`` says otherwise. ``sync``: the new
    file and the rename are flushed to disk before this returns (a file that loses lines
    a resume relies on, which a power cut must not bring back half-way). Any failure is
    the ``OSError`` as raised, for a writer that has something better to do than stop
    the run (the archive cuts a result it cannot keep)."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", errors="backslashreplace") as out:
            out.write(text)
            if sync:
                out.flush()
                os.fsync(out.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    if sync:
        _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """``fsync`` a folder, so that a rename in it outlives a power cut."""
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def encode_lines(records: Sequence[JSONObject]) -> bytes:
    """These records as JSON lines, for :func:`append_encoded`: the Python part of an
    append, done apart so that a worker thread is left only the system calls (each of
    which takes the interpreter's lock back from a busy event loop)."""
    text = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    return text.encode("utf-8", errors="backslashreplace")


def append_encoded(path: Path, data: bytes, *, sync: bool = True, ends_whole: bool = False) -> None:
    """Append the lines ``data`` holds (:func:`encode_lines`) in a single write, all or
    none, flushed to disk (``sync``; without it the lines are the kernel's to write,
    which a killed process does not lose, a power cut may): what several writers
    waiting on one file give at once costs one ``fsync``, not one each. If a crash left
    the last line unfinished, the new ones start on a line of their own; ``ends_whole``:
    the caller wrote the file's last line itself, so it is not read back to see. A write
    the disk refuses is undone (the file cut back to where it was: that frees space, so
    it works on a full disk) and raises :class:`RunDirectoryError`; without ``sync``, an
    error the disk reports only when the kernel writes the lines later (a network
    filesystem's quota) is not seen here."""
    try:
        if not ends_whole and _ends_mid_line(path):
            data = b"\n" + data
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            append_whole(handle, data, sync=sync)
        finally:
            os.close(handle)
    except OSError as exc:
        if (trouble := disk_trouble(path, exc)) is not None:
            raise trouble from exc
        raise


def flush_to_disk(path: Path) -> None:
    """``fsync`` the file at ``path`` (what was appended to it without): nothing to do
    when there is no file."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.fsync(handle)
    except OSError as exc:
        if (trouble := disk_trouble(path, exc)) is not None:
            raise trouble from exc
        raise
    finally:
        os.close(handle)


def _ends_mid_line(path: Path) -> bool:
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open("rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


def append_whole(handle: int, data: bytes, *, sync: bool) -> None:
    """Append ``data`` to the file open as ``handle`` (``O_APPEND``) whole or not at all:
    a write the disk refuses part way is cut back, which frees the space it took, and
    the error raised. ``sync``: fsync it too (records a resume relies on).

    Where to cut back to is read only when a write fails (the file's end less what this
    call wrote): each file has one writer (the run's lock; a journal's own, journal.py),
    so that is where the file ended before. Reading it before every write was a system
    call on every journal line: 77,824 of them in benchmarks/perf/throughput.py's
    2,048-task run."""
    written = 0
    try:
        while written < len(data):  # a short write is not an error: go on from there
            written += os.write(handle, data[written:])
        if sync:
            os.fsync(handle)
    except OSError:
        if written:
            os.ftruncate(handle, os.fstat(handle).st_size - written)
        raise


def hold_exclusively(handle: int, path: Path) -> bool:
    """Take an exclusive ``flock`` on the file open as ``handle``, without waiting; it
    lasts until the handle is closed or its process ends (a SIGKILL included). False
    when another open file holds it: another process is writing the file (or this one,
    through another handle). On a file system that keeps no locks the file is held
    without one, as it was before locks (said once in the log): True."""
    global _warned_no_locks
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_LOCKS:
            raise
        if not _warned_no_locks:
            _warned_no_locks = True
            log.warning(
                "%s: the file system keeps no locks (%s): a process still writing a journal "
                "cannot be told apart from a resume continuing it",
                path,
                exc.strerror,
            )
    return True


def lock_holder(handle: int) -> int | None:
    """The id of the process on this machine that holds an ``flock`` on the file open as
    ``handle``, as ``/proc/locks`` says (None: not Linux, or held from another machine)."""
    stat = os.fstat(handle)
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        lines = _PROC_LOCKS.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 4424 fe:00:2147196 0 EOF"; waiters have a "->".
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
            return int(fields[4]) if fields[4].isdigit() else None
    return None


def cut_torn_tail(handle: int) -> int:
    """Cut off the end of the file open as ``handle`` after its last newline (a line a
    crash cut short), so that the next line appended starts on a line of its own; the
    file's size after. Only the end is read, a chunk at a time."""
    size = end = os.fstat(handle).st_size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        newline = os.pread(handle, end - start, start).rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end < size:
        os.ftruncate(handle, end)
    return end


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
