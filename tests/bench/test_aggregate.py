"""Averaging independent runs, and noticing the runs that cannot be averaged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepledger.bench.aggregate import RunLoadError, aggregate, format_aggregate, load_run
from deepledger.bench.metrics import summarize


def record(task_id: str, correct: bool | None, *, status: str = "finished") -> dict:
    return {
        "task_id": task_id,
        "correct": correct,
        "provenance": "summary",
        "status": status,
        "end_reason": "model_finished" if status == "finished" else "error",
        "attempts": [{"attempt": 1, "correct": correct, "carried_post_mortems": 0}],
        "usage": {"input_tokens": 1000, "output_tokens": 100},
        "cost": 0.01,
        "turns": 5,
        "tool_calls": 4,
    }


def write_run(run_dir: Path, records: list[dict], *, benchmark: str = "toy") -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "benchmark_results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = summarize(records, pass_at_k=1, benchmark=benchmark).to_json()
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def run_with(tmp_path: Path, name: str, n_correct: int, n_tasks: int = 4) -> Path:
    records = [record(f"t{i}", i < n_correct) for i in range(n_tasks)]
    return write_run(tmp_path / name, records)


def test_mean_std_min_max_over_three_runs(tmp_path):
    dirs = [run_with(tmp_path, f"run-{i}", n) for i, n in enumerate((2, 3, 4), start=1)]
    agg = aggregate(dirs)
    assert agg["complete"] is True
    assert (agg["runs_expected"], agg["runs_used"]) == (3, 3)
    assert agg["problems"] == []
    accuracy = agg["metrics"]["accuracy"]
    assert accuracy["mean"] == pytest.approx(0.75)
    assert accuracy["std"] == pytest.approx(0.25)  # sample std of 0.5, 0.75, 1.0
    assert (accuracy["min"], accuracy["max"], accuracy["n"]) == (0.5, 1.0, 3)
    assert agg["metrics"]["pass_at_k"]["mean"] == pytest.approx(0.75)
    assert agg["metrics"]["cost_total"]["mean"] == pytest.approx(0.04)
    assert agg["metrics"]["cost_total"]["std"] == pytest.approx(0.0)
    assert agg["metrics"]["tokens_total"]["max"] == 4 * 1100
    assert agg["metrics"]["turns_mean"]["mean"] == 5
    assert [r["accuracy"] for r in agg["runs"]] == [0.5, 0.75, 1.0]
    text = format_aggregate(agg)
    assert "3 of 3 runs averaged (complete)" in text
    assert "mean 0.750 ± 0.250 [0.500 .. 1.000] (n=3)" in text


def test_a_single_run_has_no_std(tmp_path):
    agg = aggregate([run_with(tmp_path, "only", 1)])
    assert agg["metrics"]["accuracy"]["std"] is None
    assert "± n/a" in format_aggregate(agg)


def test_failed_missing_and_errored_runs_are_reported_not_averaged(tmp_path):
    good = run_with(tmp_path, "run-1", 3)
    missing = tmp_path / "run-2"
    errored = write_run(
        tmp_path / "run-3",
        [
            record("t0", True),
            record("t1", True),
            record("t2", None, status="error"),
            record("t3", True),
        ],
    )
    crashed = tmp_path / "run-4"  # started, wrote results, never wrote its summary
    crashed.mkdir()
    (crashed / "benchmark_results.jsonl").write_text(json.dumps(record("t0", True)) + "\n")

    agg = aggregate([good, missing, errored, crashed])

    assert agg["complete"] is False
    assert (agg["runs_expected"], agg["runs_used"]) == (4, 1)
    reasons = {Path(p["dir"]).name: p["reason"] for p in agg["problems"]}
    assert set(reasons) == {"run-2", "run-3", "run-4"}
    assert "does not exist" in reasons["run-2"]
    assert "1 of 4 tasks ended in an error" in reasons["run-3"]
    assert "no summary.json" in reasons["run-4"]
    # only the good run is in the statistics (run-3's 3/3 judged would have inflated it)
    assert agg["metrics"]["accuracy"]["mean"] == 0.75
    assert agg["metrics"]["accuracy"]["n"] == 1
    text = format_aggregate(agg)
    assert "1 of 4 runs averaged (INCOMPLETE)" in text
    assert "problem:" in text and "run-4" in text


def test_a_run_covering_fewer_tasks_than_the_others_is_a_problem(tmp_path):
    full = [run_with(tmp_path, f"run-{i}", 2) for i in (1, 2)]
    short = run_with(tmp_path, "run-3", 2, n_tasks=3)
    agg = aggregate([*full, short])
    assert agg["complete"] is False
    assert agg["runs_used"] == 2
    assert agg["problems"] == [
        {"dir": str(short), "reason": "covers 3 tasks, another run covers 4"}
    ]


def test_a_run_with_fewer_tasks_than_it_expected_is_a_problem(tmp_path):
    run_dir = run_with(tmp_path, "run-1", 2)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["tasks"]["expected"] = 10
    (run_dir / "summary.json").write_text(json.dumps(summary))
    agg = aggregate([run_dir])
    assert agg["complete"] is False
    assert agg["problems"][0]["reason"] == "only 4 of 10 expected tasks ran"


def test_load_run_needs_the_results_file_and_a_readable_summary(tmp_path):
    run_dir = run_with(tmp_path, "run-1", 2)
    assert load_run(run_dir).accuracy == 0.5
    (run_dir / "benchmark_results.jsonl").unlink()
    with pytest.raises(RunLoadError, match=r"no benchmark_results\.jsonl"):
        load_run(run_dir)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "benchmark_results.jsonl").write_text("")
    (broken / "summary.json").write_text("{not json")
    with pytest.raises(RunLoadError, match="unreadable"):
        load_run(broken)
