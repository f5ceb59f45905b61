"""One sandbox's writable folders on a file system of a fixed size: the sandbox's disk quota.

Without it the work folder lies in the host's temp folder and fills it as far as the disk
goes (4 GB in a user's test). Here every sandbox gets an ext4 file system in a sparse
file of ``--disk-mb`` bytes, loop-mounted, holding its three writable folders:

``home/``  the work folder (cwd, ``HOME``, ``TMPDIR``, where uploads land)
``tmp/``   bound at ``/tmp`` inside
``shm/``   bound at ``/dev/shm`` inside

so the work folder, ``/tmp`` and ``/dev/shm`` share one quota, and a write past it fails with
ENOSPC ("No space left on device"), which the code sees as an ``OSError``. The bytes are on
disk, not in RAM (tmpfs would count against memory as well), and the file system outlives
any one worker: files survive a session restart, as the work folder always did. The file
holds no journal (scratch data: nothing to recover after a crash) and reserves no blocks
for root.

It needs ``mkfs.ext4`` and ``mount``/``umount`` (util-linux) and the right to mount (root);
where they are missing, ``probe_quota_disk`` says why and the sandbox keeps a plain folder,
and its description says the work folder is then not limited beyond each file's size.

The folder holding the file and its mount point is named ``deepledger-disk-<server pid>-``
in the host's temp folder, unless that folder is itself in memory (tmpfs or ramfs, as
``/tmp`` is on Debian 13, Fedora and Arch): then in ``/var/tmp``, so the image's bytes are
on disk. A killed server cannot unmount, so every server unmounts and deletes the disks of
servers no longer alive when it starts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from deepledger.tools.servers.sandbox_cgroups import owner_alive

_PREFIX = "deepledger-disk-"
_TOOL_TIMEOUT_SECONDS = 30
_MIN_BYTES = 8 * 1024 * 1024  # ext4 needs room for its own tables
_MOUNTS = Path("/proc/self/mounts")
_IN_MEMORY = ("tmpfs", "ramfs")
_ON_DISK = Path("/var/tmp")


class DiskQuotaUnavailableError(RuntimeError):
    """A size-limited file system cannot be made here; the message says why."""


class QuotaDisk:
    """A mounted ext4 of ``size_bytes`` whose folders belong to ``owner`` (uid, gid)."""

    def __init__(self, size_bytes: int, owner: tuple[int, int]) -> None:
        self.size_bytes = max(size_bytes, _MIN_BYTES)
        self.folder = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=disk_parent()))
        self.mount_point = self.folder / "mnt"
        self.mounted = False
        try:
            self._make(owner)
        except BaseException:
            self.close()
            raise

    @property
    def home(self) -> Path:
        return self.mount_point / "home"

    @property
    def tmp(self) -> Path:
        return self.mount_point / "tmp"

    @property
    def shm(self) -> Path:
        return self.mount_point / "shm"

    def _make(self, owner: tuple[int, int]) -> None:
        image = self.folder / "disk.img"
        with open(image, "wb") as file:
            file.truncate(self.size_bytes)  # sparse: takes only what is written
        self.mount_point.mkdir()
        uid, gid = owner
        _run(
            ["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-i", "16384",
             "-E", f"root_owner={uid}:{gid}", str(image)]
        )  # fmt: skip
        _run(["mount", "-t", "ext4", "-o", "loop,nosuid,nodev", str(image), str(self.mount_point)])
        self.mounted = True
        shutil.rmtree(self.mount_point / "lost+found", ignore_errors=True)
        for folder, mode in ((self.home, 0o700), (self.tmp, 0o1777), (self.shm, 0o1777)):
            folder.mkdir()
            os.chown(folder, uid, gid)
            folder.chmod(mode)

    def used_bytes(self) -> int:
        """Bytes in use, as the sandbox would see ``df`` say."""
        stats = os.statvfs(self.mount_point)
        return (stats.f_blocks - stats.f_bfree) * stats.f_frsize

    def full(self) -> bool:
        """Nearly no room left: less than a buffered write (1 MiB) or 2 % of the size, so a
        write that just failed for lack of room counts though it filled what it could."""
        stats = os.statvfs(self.mount_point)
        return stats.f_bavail * stats.f_frsize < max(2**20, self.size_bytes // 50)

    def close(self) -> None:
        """Unmount and delete. Synchronous: also called from a SIGTERM handler."""
        if self.mounted:
            self.mounted = not _unmount(self.mount_point)
        if not self.mounted:
            shutil.rmtree(self.folder, ignore_errors=True)


def _run(argv: list[str]) -> None:
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_TOOL_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DiskQuotaUnavailableError(f"{argv[0]} failed: {exc}") from exc
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip() or f"status {done.returncode}"
        raise DiskQuotaUnavailableError(f"{argv[0]} failed: {detail}")


def _unmount(mount_point: Path) -> bool:
    """Unmount (lazily if a process still holds it: it goes when that one does)."""
    for argv in (["umount", str(mount_point)], ["umount", "-l", str(mount_point)]):
        try:
            _run(argv)
            return True
        except DiskQuotaUnavailableError:
            continue
    return False


def probe_quota_disk(size_bytes: int) -> str:
    """Why a quota disk cannot be made here ("" if it can), proven by making one."""
    if os.geteuid() != 0:
        return "mounting needs root"
    missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found on PATH"
    remove_stale_disks()
    try:
        QuotaDisk(min(size_bytes, _MIN_BYTES), (0, 0)).close()
    except (OSError, DiskQuotaUnavailableError) as exc:
        return str(exc)
    return ""


def disk_parent(mounts: str | None = None) -> Path:
    """Where disk images go: the temp folder, unless it is in RAM (then /var/tmp)."""
    temp = Path(tempfile.gettempdir())
    if mounts is None:
        try:
            mounts = _MOUNTS.read_text()
        except OSError:
            return temp
    return _ON_DISK if _file_system_of(temp, mounts) in _IN_MEMORY else temp


def _file_system_of(path: Path, mounts: str) -> str:
    """The type of the file system holding ``path``: the longest mount point above it."""
    real = Path(os.path.realpath(path))
    best, fstype = -1, ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = Path(fields[1].replace("\\040", " "))
        depth = len(mount_point.parts)
        if real.is_relative_to(mount_point) and depth >= best:  # later mounts hide earlier
            best, fstype = depth, fields[2]
    return fstype


def remove_stale_disks() -> None:
    """Unmount and delete the disks of servers that are no longer alive (killed ones)."""
    pattern = re.compile(re.escape(_PREFIX) + r"(\d+)-")
    parents = dict.fromkeys((Path(tempfile.gettempdir()), disk_parent()))
    for folder in (found for parent in parents for found in parent.glob(f"{_PREFIX}*")):
        match = pattern.match(folder.name)
        if match is None or owner_alive(int(match.group(1))):
            continue
        mount_point = folder / "mnt"
        if os.path.ismount(mount_point) and not _unmount(mount_point):
            continue
        shutil.rmtree(folder, ignore_errors=True)
