"""A task file with many bad lines (a wrong field mapping skips them all) shows the first
20 and how many more; summary.json keeps every one, also after `deepledger report`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

from deepledger.bench.suite import SKIPPED_LINES_SHOWN, shown_notices
from tests.support.bench import bench_command
from tests.support.cli import deepledger
from tests.support.doubles.bench_model import respond_http
from tests.support.doubles.fake_llm_server import FakeLLMServer

BAD_LINES = 30


def test_the_first_lines_are_shown_then_how_many_more():
    problems = [f"qa.jsonl:{n}: no question" for n in range(1, BAD_LINES + 1)]
    loaded = SimpleNamespace(problems=problems, warnings=["a warning"], tasks=["a task"])
    notices = shown_notices(loaded)
    assert notices[:SKIPPED_LINES_SHOWN] == [f"skipped {p}" for p in problems[:20]]
    assert notices[20:] == [
        "… and 10 more lines skipped (all listed in summary.json's extra.skipped_lines)",
        "warning: a warning",
    ]
    assert len(shown_notices(SimpleNamespace(problems=problems[:20], warnings=[], tasks=[]))) == 20


def test_a_bench_prints_twenty_skipped_lines_and_keeps_them_all(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    good = {"task_id": "one", "task_question": "EASY: France?", "ground_truth": "Paris"}
    lines = [json.dumps({"id": n}) for n in range(BAD_LINES)] + [json.dumps(good)]
    (data / "standardized_data.jsonl").write_text("\n".join(lines) + "\n")
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=respond_http) as server:
        command = bench_command(server.openai_base_url, run_dir, f"benchmark.data.data_dir={data}")
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("deepledger: skipped ") == SKIPPED_LINES_SHOWN
    assert (
        "… and 10 more lines skipped (all listed in summary.json's extra.skipped_lines)"
        in done.stderr
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    skipped = summary["extra"]["skipped_lines"]
    assert len(skipped) == BAD_LINES
    assert deepledger("report", str(run_dir), cwd=tmp_path).returncode == 0
    rebuilt = json.loads((run_dir / "summary.json").read_text())
    assert rebuilt["extra"]["rebuilt"] and rebuilt["extra"]["skipped_lines"] == skipped


def test_shown_notices_names_no_summary_when_no_task_is_left(tmp_path: Path):
    problems = [f"qa.jsonl:{n}: no question" for n in range(1, BAD_LINES + 1)]
    notices = shown_notices(SimpleNamespace(problems=problems, warnings=[], tasks=[]))
    assert notices[-1] == "… and 10 more lines skipped"
