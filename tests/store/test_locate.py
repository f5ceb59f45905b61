"""Telling run folders from others, and the nearest run for a folder that is not one."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepledger.errors import ConfigError
from deepledger.store.layout import RunLayout
from deepledger.store.locate import nearest_run, require_run, run_kind, runs_under


def _bench(folder: Path) -> Path:
    folder.mkdir(parents=True)
    RunLayout(folder).manifest.write_text("{}")
    return folder


def _run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    RunLayout(folder).run_journal.write_text("")
    return folder


def test_the_kinds_are_told_apart(tmp_path: Path) -> None:
    assert run_kind(_bench(tmp_path / "b")) == "bench"
    assert run_kind(_run(tmp_path / "r")) == "run"
    (tmp_path / "other").mkdir()
    assert run_kind(tmp_path / "other") is None


def test_runs_under_a_logs_folder_are_found_without_entering_a_run(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    first = _bench(logs / "example" / "model" / "20261206_050000")
    second = _run(logs / "example" / "model" / "20261206_060000")
    _bench(first / "tasks" / "nested")  # inside a run: not a run of its own
    assert list(runs_under(logs)) == [(first, "bench"), (second, "run")]


def test_a_folder_that_is_not_a_run_names_the_nearest_one(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    _bench(logs / "example" / "m" / "20261206_050000")
    newest = _bench(logs / "example" / "m" / "20261206_060000")
    assert nearest_run(logs) == newest
    with pytest.raises(ConfigError) as raised:
        require_run(logs / "example", "report")
    message = str(raised.value)
    assert "\n" not in message
    assert "is not a run folder" in message and str(newest) in message


def test_a_run_of_the_wrong_kind_and_a_missing_folder_are_refused(tmp_path: Path) -> None:
    run = _run(tmp_path / "one")
    with pytest.raises(ConfigError, match="is a `deepledger run` folder"):
        require_run(run, "resume", kinds=("bench",))
    with pytest.raises(ConfigError, match="does not exist"):
        require_run(tmp_path / "nowhere", "export")
    assert require_run(run, "report") == "run"


def test_a_file_inside_a_run_names_that_run_not_a_newer_one_beside_it(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    older = _bench(logs / "example" / "model" / "20261206_050000")
    _bench(logs / "example" / "model" / "20261206_060000")
    attempt = older / "tasks" / "t1-abc" / "attempt-1-retry-0.jsonl"
    attempt.parent.mkdir(parents=True)
    attempt.write_text("")
    for inside in (older / "manifest.json", attempt):
        with pytest.raises(ConfigError, match=f"the nearest run folder is {older}\\.$"):
            require_run(inside, "export", kinds=("bench",))
