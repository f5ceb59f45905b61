"""A small disk for the tests that fill one: a tmpfs mounted for the test, unmounted
after. Mounting needs root (or CAP_SYS_ADMIN); without it the test skips and says so."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


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
