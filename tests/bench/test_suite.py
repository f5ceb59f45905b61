"""One `deepledger bench` run from config to summary (bench/suite.py), on runs its own
code path recorded with the scripted model (tests/support/runs.py)."""

from __future__ import annotations

import json

import pytest

from deepledger.bench import services, suite
from deepledger.bench.suite import _write_report, resume_may_change_config
from tests.support.config import composed
from tests.support.runs import TASKS


def read(path):
    return json.loads(path.read_text())


def test_a_finished_run_leaves_its_results_summary_manifest_and_report(finished_run):
    results = [json.loads(line) for line in (finished_run / "benchmark_results.jsonl").open()]
    assert len(results) == TASKS and [r["status"] for r in results].count("error") == 1
    summary = read(finished_run / "summary.json")
    assert summary["tasks"]["total"] == summary["tasks"]["expected"] == TASKS
    assert (summary["tasks"]["finished"], summary["tasks"]["errors"]) == (TASKS - 1, 1)
    assert "unavailable" not in summary["token_economics"]  # replayed once the tasks ended
    assert summary["post_mortems"]["with"]["attempts"] == 1  # the task that missed the box
    (session,) = read(finished_run / "manifest.json")["runs"]
    assert session["finished_at"] and session["argv"][0] == "bench"
    assert (finished_run / "report.html").is_file()


def test_a_killed_run_has_the_results_of_its_finished_tasks_and_no_summary(killed_run):
    results = [json.loads(line) for line in (killed_run / "benchmark_results.jsonl").open()]
    assert [r["task_id"] for r in results] == [f"worldfacts-demo-00{n}" for n in (1, 2, 3)]
    assert not (killed_run / "summary.json").exists()
    (session,) = read(killed_run / "manifest.json")["runs"]
    assert session["finished_at"] is None


def test_a_report_not_wanted_is_not_written(finished_run):
    (finished_run / "report.html").unlink()
    assert _write_report(finished_run, read(finished_run / "summary.json"), wanted=False) is None
    assert not (finished_run / "report.html").exists()


def test_a_report_that_fails_costs_the_run_nothing_and_says_how_to_retry(
    finished_run, monkeypatch, capsys
):
    def broken(root, summary):
        raise OSError("no space left on device")

    monkeypatch.setattr(suite, "write_run_report", broken)
    summary = read(finished_run / "summary.json")
    assert _write_report(finished_run, summary) is None
    said = capsys.readouterr().err
    assert "OSError: no space left on device" in said
    assert f"Try again with: deepledger report {finished_run}" in said


@pytest.mark.parametrize(
    ("overrides", "allowed"),
    [
        ((), False),
        (("+resume.allow_config_change=true",), True),
        (("+resume.allow_config_change=false",), False),
    ],
)
def test_a_resume_may_change_the_config_only_when_told(overrides, allowed):
    assert resume_may_change_config(composed(*overrides)) is allowed


def test_the_open_file_limit_is_raised_to_what_the_tasks_need(monkeypatch):
    import resource

    set_to = []
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (1024, 1_048_576))
    monkeypatch.setattr(resource, "setrlimit", lambda kind, limits: set_to.append(limits))
    services.ensure_open_files(5)  # 271 files: the soft limit is enough
    services.ensure_open_files(2048)
    assert set_to == [(services.FILES_PER_TASK * 2048 + services.FILES_FOR_THE_RUN, 1_048_576)]


def test_more_tasks_than_the_hard_open_file_limit_allows_are_refused_before_any_work(tmp_path):
    import resource
    import subprocess
    import sys

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (400, 400))

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepledger",
            "bench",
            "benchmark=example",
            "benchmark.execution.max_concurrent=100",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=low_limit,
    )
    assert run.returncode == 2, run.stderr
    assert "benchmark.execution.max_concurrent=100 needs about 556 open files" in run.stderr
    assert "at most 400" in run.stderr
    assert not (tmp_path / "run" / "manifest.json").exists()


async def test_a_strategy_the_registry_does_not_hold_is_refused_before_any_work(tmp_path):
    """validate() alone cannot name the strategies (their registry is a floor above the
    config): a caller that composed its own config is stopped by run_suite itself."""
    from deepledger.bench.suite import run_suite
    from deepledger.errors import ConfigError
    from tests.support.config import CONF

    cfg = composed("agent.context.strategy=sliding")
    with pytest.raises(ConfigError, match=r"agent\.context\.strategy='sliding' is not a strategy"):
        await run_suite(cfg, tmp_path / "run", CONF, ["bench"])
    assert not (tmp_path / "run").exists()
