"""Check that the running environment holds exactly what the lock pins.

Every installed distribution must appear in ``requirements.lock`` or
``requirements-data.txt`` (for this interpreter and platform: markers are evaluated)
at the version installed. deepledger itself is the one exception. Prints each
distribution that differs and how to fix it; exit 1 if any does, 0 otherwise.

    .venv/bin/python scripts/check_lock.py [LOCK_FILE ...]
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
LOCK_FILES = (ROOT / "requirements.lock", ROOT / "requirements-data.txt")
PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;]+)\s*(?:;(?P<marker>.*))?$"
)
NOT_LOCKED = {"deepledger"}  # the project itself, installed from the work tree


def pins(lock_files: list[Path]) -> dict[str, str]:
    """Name -> version of every pin that applies to this interpreter and platform."""
    pinned: dict[str, str] = {}
    for lock_file in lock_files:
        for number, raw in enumerate(lock_file.read_text(encoding="utf-8").splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            match = PIN.match(line)
            if match is None:
                raise SystemExit(f"{lock_file}:{number}: not a `name==version` pin: {raw!r}")
            marker = match["marker"]
            if marker and not Marker(marker.strip()).evaluate():
                continue
            pinned[canonicalize_name(match["name"])] = match["version"]
    return pinned


def installed() -> dict[str, str]:
    """Name -> version of every distribution this interpreter can import from."""
    return {
        canonicalize_name(dist.metadata["Name"]): dist.version for dist in metadata.distributions()
    }


def differences(pinned: dict[str, str], present: dict[str, str]) -> list[str]:
    """One line per installed distribution the lock does not pin at its version."""
    lines = []
    for name, version in sorted(present.items()):
        if name in NOT_LOCKED:
            continue
        locked = pinned.get(name)
        if locked is None:
            lines.append(
                f"  {name} {version} is installed but not in the lock"
                f" (`.venv/bin/python -m pip uninstall {name}`, or add it to pyproject.toml)"
            )
        elif not same_version(locked, version):
            lines.append(f"  {name} {version} is installed, the lock pins {locked}")
    return lines


def same_version(locked: str, installed: str) -> bool:
    """Equal as versions (``2.0`` is ``2.0.0``), or as text where one is not a version."""
    try:
        return Version(locked) == Version(installed)
    except InvalidVersion:
        return locked == installed


def main(argv: list[str]) -> int:
    lock_files = [Path(arg) for arg in argv] or list(LOCK_FILES)
    problems = differences(pins(lock_files), installed())
    if not problems:
        return 0
    print(f"The environment ({sys.prefix}) differs from the lock:", file=sys.stderr)
    print("\n".join(problems), file=sys.stderr)
    print(
        "Run scripts/setup.sh again to install the lock's versions. If you changed a\n"
        "dependency in pyproject.toml, refresh the lock with scripts/lock.sh first\n"
        "(docs/testing.md#the-lock).",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
