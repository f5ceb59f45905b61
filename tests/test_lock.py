"""The lock: everything installed is pinned, the pins agree with pyproject.toml, and the
check that setup runs names what differs."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "scripts" / "check_lock.py"
LOCK = ROOT / "requirements.lock"


def run_check(*lock_files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), *map(str, lock_files)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def locked_versions() -> dict[str, str]:
    """Name -> version for every pin of the lock that applies here."""
    sys.path.insert(0, str(CHECK.parent))
    try:
        import check_lock
    finally:
        sys.path.remove(str(CHECK.parent))
    return check_lock.pins([LOCK, ROOT / "requirements-data.txt"])


def test_every_installed_distribution_is_the_locked_one() -> None:
    result = run_check()
    assert result.returncode == 0, result.stderr


def test_a_distribution_missing_from_the_lock_is_named(tmp_path: Path) -> None:
    lines = LOCK.read_text(encoding="utf-8").splitlines()
    partial = tmp_path / "partial.lock"
    partial.write_text("\n".join(line for line in lines if not line.startswith("lxml==")))
    other = tmp_path / "other.lock"
    other.write_text("\n".join("lxml==5.0.0" if line.startswith("lxml==") else line
                               for line in lines))  # fmt: skip
    data = ROOT / "requirements-data.txt"
    missing, differs = run_check(partial, data), run_check(other, data)
    assert missing.returncode == 1 and differs.returncode == 1
    installed = locked_versions()["lxml"]
    assert f"  lxml {installed} is installed but not in the lock" in missing.stderr
    assert f"  lxml {installed} is installed, the lock pins 5.0.0" in differs.stderr
    assert "scripts/lock.sh" in missing.stderr  # says how to refresh


def test_the_lock_satisfies_every_requirement_of_pyproject() -> None:
    # A dependency changed in pyproject.toml without refreshing the lock fails here.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in ("local", "test", "ray"):
        requirements += project["optional-dependencies"][extra]
    locked = locked_versions()
    stale = []
    for text in requirements:
        requirement = Requirement(text)
        version = locked.get(canonicalize_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            stale.append(f"{text} (lock: {version})")
    assert stale == [], "refresh the lock with scripts/lock.sh"
