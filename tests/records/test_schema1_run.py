"""A run directory made by the release before typed records (schema 1) still resumes and
reports: ``tests/fixtures/runs/schema1`` was written by that release's ``deepledger
bench`` (four tasks, one with two failed format-retries), and is used as it was."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.support.bench import bench_command, results
from tests.support.cli import ROOT, deepledger
from tests.support.doubles.bench_model import respond_http
from tests.support.doubles.fake_llm_server import FakeLLMServer
from tests.support.report import embedded

SCHEMA1 = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "schema1"


def old_run(tmp_path: Path) -> Path:
    """A copy of the fixture, its recorded paths moved to this checkout: it was made in
    another folder, and a resume from a moved data folder is refused as changed settings
    (rightly: that is not what this test is about)."""
    run_dir = tmp_path / "run"
    shutil.copytree(SCHEMA1, run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    recorded_suite = manifest["config"]["benchmark"]["data"]["data_dir"]
    recorded_root = recorded_suite.removesuffix("/tests/bench/suite")
    for path in [run_dir / "manifest.json", *(run_dir / ".hydra").glob("*.yaml")]:
        path.write_text(path.read_text().replace(recorded_root, str(ROOT)))
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


def shape(value: object) -> object:
    """``value`` with each leaf replaced by its JSON type's name (int and float apart):
    equal shapes hold the same keys in the same order, with the same types."""
    if isinstance(value, dict):
        return list(zip(value, map(shape, value.values()), strict=True))
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__


def without_version(data: dict) -> dict:
    return {key: value for key, value in data.items() if key != "schema_version"}


def without_added(line: dict) -> dict:
    """A progress line without the keys later releases added at its end: its input
    digest (bench/inputs.py), which an older reader keeps as an unknown field."""
    assert list(line)[-2:] == ["input_digest", "schema_version"]
    return {key: value for key, value in line.items() if key != "input_digest"}


def test_a_new_run_writes_its_summary_and_progress_as_schema1_did(tmp_path):
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=respond_http) as server:  # the fixture's own run, again
        command = bench_command(server.openai_base_url, run_dir, "benchmark.execution.report=false")
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    old_summary = json.loads((SCHEMA1 / "summary.json").read_text())
    assert next(iter(summary)) == "schema_version"  # the one key schema 2 adds
    assert shape(without_version(summary)) == shape(old_summary)
    old_progress = sorted(SCHEMA1.glob("tasks/*/progress.jsonl"))
    assert len(old_progress) == 4
    for old in old_progress:
        new = run_dir / old.relative_to(SCHEMA1)
        lines = [json.loads(line) for line in new.read_text().splitlines()]
        old_lines = [json.loads(line) for line in old.read_text().splitlines()]
        assert all(list(line)[-1] == "schema_version" for line in lines)  # added last
        lines = [without_added(line) for line in lines]
        assert [shape(without_version(line)) for line in lines] == list(map(shape, old_lines))
