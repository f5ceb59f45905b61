"""What the installed package holds: the wheel built from this tree ships every module and
data file of ``src/deepledger`` (prompts, report assets, ``py.typed``) and nothing else;
the test doubles (``tests/support/doubles``) stay with the tests.

The wheel is built once, offline, by the build backend ``pyproject.toml`` names, called
directly in a child process on a copy of what a source distribution holds (the tree
itself stays free of ``build/`` and a second ``egg-info``): about two seconds."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "deepledger"
# What the build reads besides src/: the project's metadata, its readme and (setuptools'
# default license-files globs) any licence at the root.
TOP_LEVEL = ("pyproject.toml", "README.md")
LICENCE_GLOBS = ("LICEN[CS]E*", "COPYING*", "NOTICE*", "AUTHORS*")
BUILD = (
    "import sys, tomllib, importlib\n"
    "backend = tomllib.load(open('pyproject.toml', 'rb'))['build-system']['build-backend']\n"
    "print(importlib.import_module(backend).build_wheel(sys.argv[1]))\n"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    tree = tmp_path_factory.mktemp("wheel-source")
    for name in TOP_LEVEL:
        shutil.copy2(ROOT / name, tree / name)
    for pattern in LICENCE_GLOBS:
        for licence in ROOT.glob(pattern):
            shutil.copy2(licence, tree / licence.name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "src", tree / "src", ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-c", BUILD, str(out)],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    name = built.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(out / name) as archive:
        yield archive


def _source_files() -> set[str]:
    return {
        path.relative_to(SOURCE.parent).as_posix()
        for path in SOURCE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_the_wheel_holds_no_test_doubles(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    assert not [n for n in names if n.startswith(("deepledger/testing/", "tests/"))]
    # By content, wherever in the wheel a copy would be (llm/endpoints.py shares a name
    # with the router's doubles, not their code).
    doubles = {
        p.read_bytes(): p.name for p in (ROOT / "tests" / "support" / "doubles").glob("*.py")
    }
    assert len(doubles) >= 12, "the test doubles are not where this test looks for them"
    assert not [n for n in names if wheel.read(n) in doubles]


def test_the_wheel_ships_the_package_and_only_it(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"deepledger"}
    shipped = {n for n in names if n.startswith("deepledger/")}
    assert shipped == _source_files()


def test_the_wheel_ships_the_prompts_and_the_report_assets(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert "deepledger/py.typed" in names
    assert "deepledger/prompts/judge.md" in names
    assert any(n.startswith("deepledger/prompts/mirothinker/") for n in names)
    assert any(n.startswith("deepledger/report/assets/") for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "deepledger = deepledger.cli:main" in wheel.read(entry_points).decode()
