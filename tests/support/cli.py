"""The installed `deepledger` command, run as a user would, from the repository root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def deepledger(
    *args: str, env_drop: tuple[str, ...] = (), cwd: Path = ROOT, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The command as a user types it, its output captured."""
    env = {k: v for k, v in os.environ.items() if k not in env_drop}
    return subprocess.run(
        [*deepledger_command(), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def deepledger_command() -> list[str]:
    """The installed ``deepledger`` (else ``python -m deepledger``), as argv's start."""
    exe = shutil.which("deepledger", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "deepledger"]
