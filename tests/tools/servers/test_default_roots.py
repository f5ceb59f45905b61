"""The default tool servers' folders, from a working directory outside the repository:
relative paths as the presets write them are found in the project."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepledger.tools.servers import tool_python
from deepledger.tools.servers.reader import Reader

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_readers_relative_root_is_found_in_the_project(elsewhere: Path) -> None:
    assert Reader([Path("benchmarks/example")]).roots == [ROOT / "benchmarks/example"]


def test_tool_pythons_relative_root_is_found_in_the_project(elsewhere: Path) -> None:
    args, _ = tool_python._parse_args(["--root", "benchmarks/example"])
    assert args.root == [ROOT / "benchmarks/example"]


def test_a_folder_of_that_name_in_the_working_directory_wins(elsewhere: Path) -> None:
    (elsewhere / "benchmarks/example").mkdir(parents=True)
    assert Reader([Path("benchmarks/example")]).roots == [elsewhere / "benchmarks/example"]


def test_a_config_folder_elsewhere_is_the_project(elsewhere: Path, monkeypatch) -> None:
    project = elsewhere / "project"
    (project / "conf").mkdir(parents=True)
    (project / "mydata").mkdir()
    monkeypatch.setenv("DEEPLEDGER_CONFIG_DIR", str(project / "conf"))
    (elsewhere / "work").mkdir()
    monkeypatch.chdir(elsewhere / "work")
    assert Reader([Path("mydata")]).roots == [project / "mydata"]
