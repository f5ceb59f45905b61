"""The main job end to end: the real bundled model on two WorldFacts demo tasks, through
the real CLI, with the real tool servers; then a replay of what it recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.browser import open_report
from tests.support.cli import deepledger

ROOT = Path(__file__).resolve().parents[2]


def events(journal: Path) -> list[dict]:
    return [json.loads(line) for line in journal.read_text().splitlines()]


def test_the_bundled_model_runs_two_demo_tasks_end_to_end(tmp_path):
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepledger",
            "bench",
            "benchmark=worldfacts",
            "llm=local",
            "agent.context_compress_limit=1",
            "benchmark.execution.max_tasks=2",
            "benchmark.execution.max_concurrent=1",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "worldfacts: 2 tasks of 2 expected (2 finished, 0 errors), 2 judged" in done.stdout
    assert f"Run directory: {run_dir}" in done.stdout

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["llm"]["provider"] == "local"
    results = [json.loads(line) for line in (run_dir / "benchmark_results.jsonl").open()]
    assert len(results) == 2 and all(r["status"] == "finished" for r in results)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tasks"]["judged"] == 2
    economics = summary["token_economics"]
    assert economics["input_tokens_per_turn"] and economics["counted_with"].startswith("gguf:")

    journals = sorted((run_dir / "tasks").glob("*/attempt-*.jsonl"))
    assert len(journals) >= 2
    first = events(journals[0])
    calls = [e for e in first if e["event"] == "llm_call"]
    # llm.first_call: the first reply is a search the model only wrote the query of.
    assert calls[0]["forced_call"] is True
    searched = [e for e in first if e["event"] == "tool_results"]
    assert searched and searched[0]["calls"][0]["name"] == "search"
    assert calls[0]["usage"]["input_tokens"] > 500  # the server's own count of the prompt
    assert any(c["usage"]["cache_read_tokens"] > 0 for c in calls[1:])  # its prompt cache

    replayed = deepledger("replay", str(run_dir), timeout=300)
    assert replayed.returncode == 0, replayed.stderr
    assert "tokens counted with gguf:" in replayed.stdout and "round window 5" in replayed.stdout

    # The report bench wrote, in a browser: both tasks, the first one's trajectory.
    assert f"Report: {run_dir / 'report.html'}" in done.stdout
    with open_report(run_dir / "report.html") as visit:
        page = visit.page
        page.wait_for_selector("#chart-prompt canvas")
        assert page.locator("#task-table tbody tr").count() == 2
        page.click("#task-table tbody tr")
        page.wait_for_selector("#chart-task canvas")
        assert page.locator("#trajectory .ev.tool").count() >= 1  # the forced search
        visit.screenshot("report-local-demo.png")
    assert visit.problems == [] and visit.requests == []


def test_a_local_run_with_concurrent_tasks_is_told_one_at_a_time_is_faster():
    from deepledger.bench.services import concurrency_advice
    from deepledger.llm.factory import create_client
    from tests.support.config import composed

    def advice_for(*overrides: str) -> str | None:
        cfg = composed(*overrides)
        return concurrency_advice(cfg, create_client(cfg.llm).capabilities)

    advice = advice_for("llm=local", "benchmark.execution.max_concurrent=4")
    assert advice and "benchmark.execution.max_concurrent=1 is faster" in advice
    assert advice_for("llm=local", "benchmark.execution.max_concurrent=1") is None
    assert advice_for("llm=openai_compatible") is None
