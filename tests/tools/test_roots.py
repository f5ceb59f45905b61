"""The folders and files our file servers are given: the working directory (or the home
folder, or a folder above either) is never a root unless the user says so; an attached
file comes without its folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepledger.config import ToolServerConfig
from deepledger.tools.roots import attach_file, is_wide, narrow_wide_roots

READER = ["-m", "deepledger.tools.servers.reader"]
TOOL_PYTHON = ["-m", "deepledger.tools.servers.tool_python", "--timeout", "60"]


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "home" / "work"
    (work / "data").mkdir(parents=True)
    (work / "notes.txt").write_text("notes")
    (work / "data" / "table.csv").write_text("a,b")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(work)
    return work


def servers(root: str) -> dict[str, ToolServerConfig]:
    return {
        "reader": ToolServerConfig(command="python", args=[*READER, "--root", root]),
        "tool-python": ToolServerConfig(command="python", args=[*TOOL_PYTHON, f"--root={root}"]),
        "theirs": ToolServerConfig(command="their-server", args=["--root", root]),
    }


def test_the_working_dir_home_and_folders_above_are_wide(work: Path) -> None:
    assert is_wide(work) and is_wide(work.parent) and is_wide(Path("/"))
    assert not is_wide(work / "data")


@pytest.mark.parametrize("root", [".", "..", "{work}"])
def test_a_wide_data_dir_becomes_the_attachments_inside_it(work: Path, root: str) -> None:
    configured = servers(root.format(work=work))
    elsewhere = work.parents[1] / "elsewhere.txt"  # beside the home folder, not in it
    narrow_wide_roots(configured, lambda: [work / "notes.txt", elsewhere], False)
    assert configured["reader"].args == [*READER, "--file", str(work / "notes.txt")]
    assert configured["tool-python"].args == [*TOOL_PYTHON, "--file", str(work / "notes.txt")]
    assert configured["theirs"].args == ["--root", root.format(work=work)]  # not ours to change


def test_a_wide_root_without_attachments_is_dropped(work: Path) -> None:
    configured = servers(".")
    narrow_wide_roots(configured, list, False)
    assert configured["reader"].args == READER


def test_a_data_folder_below_the_working_dir_stays_whole(work: Path) -> None:
    configured = servers("data")

    def never() -> list[Path]:
        raise AssertionError("the tasks are read only when a root is wide")

    narrow_wide_roots(configured, never, False)
    assert configured["reader"].args == [*READER, "--root", "data"]


def test_allow_working_dir_keeps_it_whole(work: Path) -> None:
    configured = servers(".")
    narrow_wide_roots(configured, lambda: [work / "notes.txt"], True)
    assert configured["reader"].args == [*READER, "--root", "."]


def test_an_attached_file_comes_without_its_folder(work: Path) -> None:
    configured = servers("data")
    attach_file(configured, Path("notes.txt"))
    assert configured["reader"].args[-2:] == ["--file", str(work / "notes.txt")]
    assert configured["tool-python"].args[-2:] == ["--file", str(work / "notes.txt")]
    assert str(work) not in configured["reader"].args
    assert configured["theirs"].args == ["--root", "data"]
