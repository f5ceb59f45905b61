"""One process at a time in a run directory: its checks and its lock.

The folder is checked and its lock taken (``claim``) before anything is written into
it, by the Hydra callback in ``bench/hydra_hooks.py`` even before Hydra itself would
write there; the ``RunStore`` opened on it later adopts that lock (``adopt``). A folder
that is a file, read-only, on a full disk or held by a live run is refused with a
:class:`RunDirectoryError` naming it and the key that chose it (``hydra.run.dir``).
The lock is an ``flock`` on ``.lock``: a killed run's lock goes with its process.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from deepledger.errors import RunDirectoryError
from deepledger.store.files import DISK_FULL
from deepledger.store.layout import RunLayout

# Below this much free space a run is refused before it starts: a task's journals and
# results need a few hundred kilobytes, and a disk this full fills up mid-run.
MIN_FREE_BYTES = 1 << 20
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


def _lock_soon(handle: BinaryIO, tries: int = 25, pause: float = 0.02) -> bool:
    """Take the run directory's lock. A few tries: ``run_is_live`` (a report being
    built) holds it for microseconds; a running bench holds it for good."""
    for attempt in range(tries):
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt + 1 < tries:
                time.sleep(pause)
    return False


# Run directories whose lock this process took before Hydra started the job (the
# callback in bench/hydra_hooks.py); RunStore adopts the lock from here.
_claimed: dict[Path, BinaryIO] = {}


@dataclass(frozen=True)
class _Before:
    """What a run directory was before this process claimed it: what a refused command
    puts back (``discard_claimed``)."""

    made: Path | None  # the outermost folder the claim made (root or a parent); None: none
    lock: bool  # the lock file was there
    hydra: bool  # so was .hydra/
    tasks: bool  # and tasks/ (a RunStore makes it on opening)


_before: dict[Path, _Before] = {}


def adopt(root: Path) -> BinaryIO:
    """Claim ``root`` (if this process has not yet) and take over its lock: the caller
    keeps it open until it is done, and closing it releases the folder."""
    claim(root)
    return _claimed.pop(Path(os.path.abspath(root)))


def claim(root: Path, key: str = "hydra.run.dir") -> None:
    """Check that ``root`` can hold a run and take its lock, for this process to keep
    until ``release``; a :class:`RunDirectoryError` naming ``key`` and what to do
    otherwise. A folder refused because a live run holds it is left exactly as it was
    (a new one refused for a full disk may be left holding an empty lock file)."""
    root = Path(os.path.abspath(root))
    if root not in _claimed:
        layout = RunLayout(root)
        before = _Before(
            _outermost_missing(root),
            layout.lock.exists(),
            layout.hydra.exists(),
            layout.tasks.exists(),
        )
        _claimed[root] = _take_lock(root, key)
        _before[root] = before


def _outermost_missing(root: Path) -> Path | None:
    """The outermost of ``root`` and its parents that does not exist (None: root does)."""
    missing = None
    for folder in [root, *root.parents]:
        if folder.exists():
            break
        missing = folder
    return missing


def release(root: Path) -> None:
    """Give back a lock ``claim`` took and no RunStore adopted."""
    root = Path(os.path.abspath(root))
    _before.pop(root, None)
    handle = _claimed.pop(root, None)
    if handle is not None:
        handle.close()  # closing the file releases its lock


def started(root: Path) -> None:
    """``root``'s run starts writing (its manifest, then results and journals): from now
    on a refused command leaves the folder alone (``discard_claimed`` does nothing)."""
    _before.pop(Path(os.path.abspath(root)), None)


def discard_claimed(root: Path) -> None:
    """Give back ``root``'s lock and undo what claiming it did, for a command refused
    before its run started (``started``): a folder the claim made is removed (with the
    parents it made for it), so no new folder is left behind; a folder that was there is
    left as it was (the lock file, ``.hydra/`` and empty ``tasks/`` written since are
    removed). A RunStore may have adopted the lock and let it go already: it is taken
    again, and a folder another process holds by then is left to it."""
    root = Path(os.path.abspath(root))
    before = _before.pop(root, None)
    if before is None:  # not claimed by this process, or its run started
        return
    handle = _claimed.pop(root, None) or _lock_again(RunLayout(root).lock)
    if handle is None:
        return
    try:
        _undo_claim(root, before)
    finally:
        handle.close()  # closing the file releases its lock
    folder = root
    while before.made is not None and folder != before.made:
        folder = folder.parent
        with contextlib.suppress(OSError):  # not empty: something else is in it now
            folder.rmdir()


def _lock_again(lock: Path) -> BinaryIO | None:
    """The lock of a folder this process claimed and let go, if no one took it since."""
    try:
        handle = os.fdopen(os.open(lock, os.O_RDWR | os.O_CLOEXEC), "rb+")
    except OSError:  # gone: nothing of the claim is left to undo
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _undo_claim(root: Path, before: _Before) -> None:
    """While holding ``root``'s lock: remove what the claim (and an unstarted RunStore)
    put there; never a folder a manifest, task result or journal was written in."""
    layout = RunLayout(root)
    if before.made is not None:  # while locked: no other deepledger process wrote here
        if not _holds_run_output(layout):
            shutil.rmtree(root)
        return
    if not before.hydra:
        shutil.rmtree(layout.hydra, ignore_errors=True)
    if not before.tasks:
        with contextlib.suppress(OSError):  # not empty: left as it is
            layout.tasks.rmdir()
    if not before.lock:
        layout.lock.unlink(missing_ok=True)


def _holds_run_output(layout: RunLayout) -> bool:
    tasks = layout.tasks
    return (
        layout.manifest.exists()
        or layout.results.exists()
        or (tasks.is_dir() and any(tasks.iterdir()))
    )


def _take_lock(root: Path, key: str) -> BinaryIO:
    _refuse_a_file(root, key)
    try:
        root.mkdir(parents=True, exist_ok=True)
        # Not "w": opening a live run's lock must not truncate it (a write to its folder).
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        handle = os.fdopen(os.open(RunLayout(root).lock, flags, 0o644), "rb+")
    except OSError as exc:
        raise unusable(root, key, exc) from exc
    if not _lock_soon(handle):
        handle.close()
        raise RunDirectoryError(
            f"Another deepledger process is running in {root}. Wait for it to finish, or "
            f"choose another {key}=...; nothing in the folder was changed."
        )
    try:
        _check_writable(root, key)
    except BaseException:
        handle.close()
        raise
    return handle


def check_folder(root: Path, key: str) -> None:
    """What ``claim`` checks, without the lock: for a sweep's folder, which holds runs."""
    _refuse_a_file(root, key)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unusable(root, key, exc) from exc
    _check_writable(root, key)


def _refuse_a_file(root: Path, key: str) -> None:
    if root.exists() and not root.is_dir():
        raise RunDirectoryError(
            f"{key}={root} is a file, not a folder. Choose another {key}=..., or move the "
            "file away."
        )


def _check_writable(root: Path, key: str) -> None:
    """Refuse a folder this process cannot write and a disk too full for a run, without
    writing anything: ``access`` tells a read-only mount or an immutable folder even to
    root, whose writes pass permission bits."""
    if not os.access(root, os.W_OK | os.X_OK):
        raise RunDirectoryError(
            f"The run directory {key}={root} is read-only, and deepledger writes its results "
            f"there. Choose a folder you can write ({key}=...), or make this one writable."
        )
    try:
        stats = os.statvfs(root)
    except OSError as exc:
        raise unusable(root, key, exc) from exc
    free = stats.f_bavail * stats.f_frsize
    if free < MIN_FREE_BYTES:
        raise RunDirectoryError(
            f"The disk holding {key}={root} is full ({free // 1024} KiB free). Free some "
            "space or choose another folder; a resume keeps the tasks already recorded."
        )


def unusable(root: Path, key: str, exc: OSError) -> RunDirectoryError:
    reason = exc.strerror or str(exc)
    if exc.errno in DISK_FULL:
        advice = "the disk is full: free some space or choose another folder"
    elif exc.errno in _READ_ONLY:
        advice = "it is read-only: choose a folder you can write"
    elif exc.errno in (errno.ENOTDIR, errno.EEXIST):
        advice = "a part of the path is a file: choose another folder"
    else:
        advice = "choose another folder"
    return RunDirectoryError(
        f"Cannot write to the run directory {key}={root} ({reason}); {advice} ({key}=...)."
    )


def run_is_live(root: Path) -> bool:
    """Whether a deepledger process holds ``root`` now (a run still going), found
    without waiting: a killed run's lock went with its process."""
    try:
        with RunLayout(root).lock.open("rb") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:  # no lock file: never run, or not a run directory
        return False
    return False
