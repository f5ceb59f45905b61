"""`deepledger export` as a user meets it: the run folders it takes, where it writes,
and one line for each kind of bad input (the real command in a subprocess where the
exit code and the files left behind are the point)."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from deepledger.cli import main
from deepledger.cli.export import HELP
from deepledger.records.results import TaskRecord
from deepledger.store.layout import RunLayout
from tests.export.test_results import record_pass_at_two
from tests.support.cli import deepledger


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_pass_at_two(tmp_path_factory.mktemp("export") / "run")


def unjudged_copy(run_dir: Path, into: Path) -> Path:
    """The run with only its task that has no ground truth: nothing was judged."""
    shutil.copytree(run_dir, into)
    results = RunLayout(into).results
    kept = [
        line
        for line in results.read_text(encoding="utf-8").splitlines()
        if TaskRecord.load(json.loads(line)).ground_truth is None
    ]
    assert len(kept) == 1
    results.write_text(kept[0] + "\n", encoding="utf-8")
    return into


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_bad_run_folder_and_nothing_judged_through_the_real_command(
    run_dir: Path, tmp_path: Path
) -> None:
    not_a_run = tmp_path / "notes"
    not_a_run.mkdir()
    shutil.copytree(run_dir, tmp_path / "logs" / "tiny" / "run")
    done = deepledger("export", str(not_a_run), "results", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    expects = "deepledger export expects a `deepledger bench` run folder"
    assert f"{not_a_run} is not a run folder; {expects}" in line
    assert f"the nearest run folder is {tmp_path / 'logs' / 'tiny' / 'run'}" in line

    unjudged = unjudged_copy(run_dir, tmp_path / "unjudged")
    out = tmp_path / "out"
    out.mkdir()
    before = files_in(tmp_path)
    done = deepledger(
        "export", str(unjudged), "results", "--only", "correct", "--out", str(out / "n" / "x.jsonl")
    )
    assert done.returncode == 1, done.stderr
    assert "--only correct, but no task of" in done.stderr
    assert "nothing written" in done.stderr
    assert files_in(tmp_path) == before  # not even an empty file


def test_unknown_format_lists_the_formats(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", str(run_dir), "csv"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "no format 'csv'; one of" in line and "results" in line


def test_the_format_and_a_run_folder_are_both_needed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "results"]) == 2
    assert "needs a run folder and a format" in capsys.readouterr().err
    assert main(["export", "x", "results", "--table", "csv"]) == 2
    assert "invalid choice: 'csv'" in capsys.readouterr().err


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--help"]) == 0
    said = capsys.readouterr().out
    assert said.startswith(HELP) and "results" in said


def test_default_output_is_in_the_current_folder_and_never_replaced(
    run_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(run_dir), "results", "--table", "parquet"]) == 0
    written = Path(capsys.readouterr().out.strip())
    assert written == tmp_path / f"tiny-gpt-4.1-{run_dir.name}.results.parquet"
    assert len(pd.read_parquet(written)) == 4
    assert files_in(tmp_path) == [written.name]  # no partial file left beside it

    assert main(["export", str(run_dir), "results", "--table", "parquet"]) == 2
    assert "exists; pass --force to replace it" in capsys.readouterr().err
    assert main(["export", str(run_dir), "results", "--out", "-"]) == 2
    assert "writes a file, not stdout (--out -)" in capsys.readouterr().err
    written.write_bytes(b"old")
    assert main(["export", str(run_dir), "results", "--table", "parquet", "--force"]) == 0
    assert len(pd.read_parquet(written)) == 4


def test_never_writes_into_a_run_folder(
    run_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = files_in(run_dir)
    assert main(["export", str(run_dir), "results", "--out", str(run_dir / "r.jsonl")]) == 2
    assert "which its run may still be writing" in capsys.readouterr().err
    monkeypatch.chdir(run_dir)
    assert main(["export", ".", "results"]) == 2
    assert "pass --out PATH outside any run folder" in capsys.readouterr().err
    assert files_in(run_dir) == before


def test_a_sweep_folder_stands_for_its_runs(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = tmp_path / "sweep"
    for job in ("0", "1"):
        shutil.copytree(run_dir, sweep / job)
    out = tmp_path / "sweep.jsonl"
    assert main(["export", "results", str(sweep), "--per-attempt", "--out", str(out)]) == 0
    frame = pd.read_json(out, lines=True, dtype=False)
    assert sorted(set(frame["run_dir"])) == [str(sweep / "0"), str(sweep / "1")]
    assert len(frame) == 12  # 6 attempts a run
    assert "from 2 runs" in capsys.readouterr().err
    # A MiroThinker export beside the runs (its run_N/ has a results file) is no run.
    assert main(["export", str(sweep / "0"), "mirothinker", "--out", str(sweep / "miro")]) == 0
    out.unlink()
    assert main(["export", "results", str(sweep), "--out", str(out)]) == 0
    assert "from 2 runs" in capsys.readouterr().err


def test_a_failed_export_leaves_nothing(
    run_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def half_written(rows: object, out: Path) -> None:
        out.write_text('{"task_id": "easy/1"}\n')
        raise OSError(errno.ENOSPC, "No space left on device", str(out))

    monkeypatch.setattr("deepledger.export.results.write_jsonl", half_written)
    out = tmp_path / "new" / "r.jsonl"
    assert main(["export", str(run_dir), "results", "--out", str(out)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "No space left on device" in line and f"nothing was written to {out}" in line
    assert files_in(tmp_path) == []  # not even the folder made for it


def test_filters_are_checked(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", str(run_dir), "results", "--min-turns", "3", "--max-turns", "2"]) == 2
    assert "--min-turns 3 is over --max-turns 2" in capsys.readouterr().err
    assert main(["export", str(run_dir), "results", "--end-reason", "answered"]) == 2
    assert "no end reason 'answered'; one of model_finished, turns_exhausted" in (
        capsys.readouterr().err
    )
    assert (
        main(["export", str(run_dir), "results", "--per-turn", "--out", str(tmp_path / "x")]) == 2
    )
    assert "--per-turn does not apply to results (it takes --only," in capsys.readouterr().err
    # An option the format does not use is refused, not ignored.
    for args in (["chatml", "--table", "parquet"], ["dpo", "--only", "all"]):
        assert main(["export", str(run_dir), *args, "--out", str(tmp_path / "x")]) == 2
        assert f"{args[1]} does not apply to {args[0]}" in capsys.readouterr().err
    assert main(["export", str(run_dir), "mirothinker", "--only", "correct"]) == 2
    assert "--only does not apply to mirothinker (it takes only --out and --force)" in (
        capsys.readouterr().err
    )
    assert files_in(tmp_path) == []


def test_whole_run_formats_take_a_run_nobody_judged(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unjudged = unjudged_copy(run_dir, tmp_path / "unjudged")
    assert main(["export", str(unjudged), "results", "--out", str(tmp_path / "r.jsonl")]) == 0
    assert main(["export", str(unjudged), "mirothinker", "--out", str(tmp_path / "miro")]) == 0
    assert any((tmp_path / "miro" / "run_1").glob("task_*.json"))
    # A training format keeps correct attempts by default: there are none.
    assert main(["export", str(unjudged), "chatml", "--out", str(tmp_path / "c.jsonl")]) == 1
    assert "--only correct (chatml's default), but no task of" in capsys.readouterr().err
    assert not (tmp_path / "c.jsonl").exists()


def test_a_folder_format_goes_into_a_new_or_empty_folder(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "miro"
    empty.mkdir()
    assert main(["export", str(run_dir), "mirothinker", "--out", str(empty)]) == 0
    written = capsys.readouterr().out.splitlines()
    assert written and all(Path(p).is_relative_to(empty) and Path(p).is_file() for p in written)
    assert [p.name for p in tmp_path.iterdir()] == ["miro"]  # no partial folder beside it
    # The logs the results name are where the export ended up, not its temporary folder.
    results = (empty / "run_1" / "benchmark_results.jsonl").read_text(encoding="utf-8")
    logs = [a["log_file_path"] for x in results.splitlines() for a in json.loads(x)["attempts"]]
    assert logs and all(Path(log).is_file() and Path(log).is_relative_to(empty) for log in logs)
    assert main(["export", str(run_dir), "mirothinker", "--out", str(empty)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    # --force replaces an earlier export whole (the new one named where it ends up) ...
    (empty / "run_2").mkdir()
    assert main(["export", str(run_dir), "mirothinker", "--out", str(empty), "--force"]) == 0
    assert capsys.readouterr().out.splitlines() == written
    assert sorted(p.name for p in empty.iterdir()) == ["run_1"]
    assert [p.name for p in tmp_path.iterdir()] == ["miro"]
    # ... and never a folder holding anything else; a file format never takes a folder.
    (empty / "notes.txt").write_text("mine")
    assert main(["export", str(run_dir), "mirothinker", "--out", str(empty), "--force"]) == 2
    assert "holds 'notes.txt', which no export wrote" in capsys.readouterr().err
    assert (empty / "notes.txt").read_text() == "mine"
    (empty / "notes.txt").unlink()
    shutil.copytree(run_dir, empty / "run_2")  # a deepledger run where MiroThinker puts its
    assert main(["export", str(run_dir), "mirothinker", "--out", str(empty), "--force"]) == 2
    assert "holds 'run_2', which no export wrote" in capsys.readouterr().err
    assert main(["export", str(run_dir), "results", "--out", str(empty), "--force"]) == 2
    assert "is a folder; this format writes a file" in capsys.readouterr().err


def test_a_run_folder_of_deepledger_run_is_for_the_training_formats_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    single = tmp_path / "asked"
    single.mkdir()
    RunLayout(single).run_journal.write_text("", encoding="utf-8")
    assert main(["export", str(single), "results", "--out", str(tmp_path / "r.jsonl")]) == 2
    assert f"{single} is a `deepledger run` folder; deepledger export expects" in (
        capsys.readouterr().err
    )
    # chatml takes it; this one has no recorded configuration to rebuild requests from.
    out = tmp_path / "s.jsonl"
    assert main(["export", str(single), "chatml", "--only", "all", "--out", str(out)]) == 2
    assert "has no recorded configuration" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["asked"]


def test_a_table_per_attempt_is_named_apart_from_the_table_per_task(
    run_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(run_dir), "results"]) == 0
    assert main(["export", str(run_dir), "results", "--per-attempt"]) == 0
    stem = f"tiny-gpt-4.1-{run_dir.name}"
    assert capsys.readouterr().out.split() == [
        str(tmp_path / f"{stem}.results.jsonl"),
        str(tmp_path / f"{stem}.results-per-attempt.jsonl"),
    ]
