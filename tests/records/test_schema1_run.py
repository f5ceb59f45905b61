"""A run directory made by the release before typed records (schema 1) still resumes and
reports: ``tests/fixtures/runs/schema1`` was written by that release's ``deepledger
bench`` (four tasks, one with two failed format-retries), and is used as it was."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from deepledger.testing.fake_llm_server import FakeLLMServer
from tests.support.bench import bench_command, results
from tests.support.cli import ROOT, deepledger
from tests.support.report import embedded

SCHEMA1 = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "schema1"


def old_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(SCHEMA1, run_dir)
    return run_dir


def test_a_schema1_run_resumes_with_nothing_redone(tmp_path):
    run_dir = old_run(tmp_path)
    before = results(run_dir)
    journals = sorted(p.relative_to(run_dir) for p in run_dir.glob("tasks/*/*.jsonl"))
    with FakeLLMServer() as server:  # any request would get a 500 and be listed
        command = bench_command(server.openai_base_url, run_dir, "benchmark.execution.report=false")
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert server.requests == [] and server.unexpected == []
    assert results(run_dir) == before  # every task was finished: none run or judged again
    assert sorted(p.relative_to(run_dir) for p in run_dir.glob("tasks/*/*.jsonl")) == journals
    assert "accuracy" in done.stdout


def test_a_schema1_run_is_reported_with_every_task_and_trajectory(tmp_path):
    run_dir = old_run(tmp_path)
    done = deepledger("report", str(run_dir))
    assert done.returncode == 0, done.stderr
    data, trajectories = embedded(run_dir / "report.html")
    assert data["run"]["missing"] == []
    assert sorted(t["id"] for t in data["tasks"]) == ["easy/1", "hard #2", "näive 3", "open-4"]
    hard_task = trajectories[[t["id"] for t in data["tasks"]].index("hard #2")]
    hard = hard_task["journals"]
    assert [j["retry"] for j in hard] == [0, 1, 2]
    assert [j["carried_post_mortems"] for j in hard] == [0, 1, 2]
    events = [e["event"] for e in hard[0]["events"]]
    assert events[:2] == ["retry_started", "task_started"] and "post_mortem" in events
    calls = hard_task["calls"]  # one loop call a retry, from its llm_call event
    assert [c["turn"] for c in calls] == [1, 1, 1] and all(c["input"] > 0 for c in calls)
