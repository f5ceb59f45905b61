"""The default tool servers' folders, from a working directory outside the repository:
relative paths as the presets write them are found in the project."""

from __future__ import annotations

import shutil
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


async def test_a_config_folder_elsewhere_is_the_project(elsewhere: Path, monkeypatch) -> None:
    """The reader as a run starts it (its own process, the environment the tool manager
    gives it), with the relative data_dir the task loader finds in the project."""
    from deepledger.config import compose, tool_servers
    from deepledger.messages import ToolCall
    from deepledger.tools.pool import ToolManager

    project = elsewhere / "project"
    shutil.copytree(ROOT / "conf", project / "conf")
    (project / "mydata").mkdir()
    (project / "mydata" / "note.txt").write_text("the tower is 330 m\n")
    monkeypatch.setenv("DEEPLEDGER_CONFIG_DIR", str(project / "conf"))
    (elsewhere / "work").mkdir()
    monkeypatch.chdir(elsewhere / "work")
    cfg = compose(project / "conf", ["benchmark.data.data_dir=mydata"])
    servers = tool_servers(cfg)
    assert "mydata" in servers["reader"].args
    manager = ToolManager({"reader": servers["reader"]}, log_dir=elsewhere / "logs")
    tools = manager.for_task(["reader"])
    try:
        assert [t.name for t in await tools.start()] == ["read"], tools.unavailable
        result = await tools.call(ToolCall("c1", "read", {"source": "note.txt"}, "reader"))
    finally:
        await tools.aclose()
        await manager.aclose()
    assert not result.is_error and "the tower is 330 m" in result.content
