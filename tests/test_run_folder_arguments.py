"""Every command that takes a run folder refuses any other folder in one line that says
what it expected and names the nearest run folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepledger.cli import main
from deepledger.store.layout import RunLayout


@pytest.mark.parametrize("command", ["report", "replay", "judge"])
def test_a_folder_that_is_not_a_run_gets_one_line_naming_the_nearest_run(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "logs" / "example" / "model" / "20261206_050000"
    run.mkdir(parents=True)
    RunLayout(run).manifest.write_text("{}", encoding="utf-8")
    not_a_run = tmp_path / "logs" / "example"

    assert main([command, str(not_a_run)]) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert f"{not_a_run} is not a run folder; deepledger {command} expects" in line
    assert f"the nearest run folder is {run}" in line


@pytest.mark.parametrize("command", ["judge"])
def test_a_single_question_folder_is_not_taken_for_a_bench_run(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = tmp_path / "asked"
    asked.mkdir()
    RunLayout(asked).run_journal.write_text("", encoding="utf-8")

    assert main([command, str(asked)]) == 2
    assert "is a `deepledger run` folder" in capsys.readouterr().err


def test_an_error_naming_its_command_is_not_prefixed_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    RunLayout(run).manifest.write_text("{}", encoding="utf-8")

    assert main(["export", str(run)]) == 2  # no format

    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("deepledger export: needs a run folder and a format")


def test_a_usage_error_says_what_was_wrong_before_the_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["report", "logs/x", "--bogus"]) == 2
    assert capsys.readouterr().err.startswith("deepledger report does not take --bogus.\nusage:")
    assert main(["resume"]) == 2
    assert capsys.readouterr().err.startswith("deepledger resume needs the run folder")
