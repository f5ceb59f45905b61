"""A small disk for the tests that fill one: a tmpfs mounted for the test, unmounted
after. Mounting needs root (or CAP_SYS_ADMIN); without it the test skips and says so.

``small_disk`` is a fixture every test can ask for (``tests/conftest.py`` loads this
module as a plugin)."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

DISK_SIZE = "2m"  # above the 1 MiB a run needs free to start (store/lock.py)


@contextlib.contextmanager
def small_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's syntax: ``2m``, ``512k``) at ``mount_point``."""
    mount_point.mkdir(parents=True, exist_ok=True)
    if not shutil.which("mount"):
        pytest.skip("no `mount` command: cannot make a small disk to fill")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): {mounted.stderr}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mount_point)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_SIZE at tmp_path/disk, unmounted afterwards."""
    with small_tmpfs(tmp_path / "disk", DISK_SIZE) as mount_point:
        yield mount_point


def whole_lines(path: Path) -> list[dict]:
    """The JSON lines of a file a full disk stopped: every one whole, none torn."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), "the journal ends in a torn line"
    return [json.loads(line) for line in data.splitlines()]
