"""`deepledger bench` killed with SIGKILL at seeded random points, then resumed with the
same command until it ends: every task recorded once, nothing finished redone.

The kill comes from the model fake itself, on the n-th request of a run (n drawn from
the seed), so where it lands depends on the run's progress, not on the machine's speed.
It takes the whole process group: the bench and its tool server die together.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.doubles.fake_llm_server import FakeLLMServer
from tests.support.doubles.faults import (
    KillAtRequest,
    ResearchModel,
    bench_overrides,
    latest_outcomes,
    read_results,
    read_tool_calls,
    task_key,
    write_suite,
)

ROOT = Path(__file__).resolve().parents[2]
TASKS = 8
KILLS = 3
REQUESTS_PER_TASK = 3  # the tool call, the answer, the closing summary


def launch(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the kill takes its children too
    )


def test_sigkill_at_random_points_then_resume_loses_and_redoes_nothing(seed, tmp_path):
    draw = random.Random(seed)
    data, run_dir, tool_log = tmp_path / "data", tmp_path / "run", tmp_path / "tool_calls.jsonl"
    keys = write_suite(data, TASKS)
    killer = KillAtRequest(ResearchModel(use_tools=True, delay=0.05))
    with FakeLLMServer(responder=killer) as server:
        overrides = bench_overrides(
            data,
            server.openai_base_url,
            tools=True,
            tool_log=tool_log,
            extra=["benchmark.execution.max_concurrent=2", f"hydra.run.dir={run_dir}"],
        )
        command = [sys.executable, "-m", "deepledger", "bench", *overrides]
        for run in range(KILLS + 1):
            finished_before = {k for k, r in latest_outcomes(run_dir).items()
                               if r["status"] == "finished"}  # fmt: skip
            tool_calls_before, requests_before = (
                len(read_tool_calls(tool_log)),
                len(server.requests),
            )
            left = (TASKS - len(finished_before)) * REQUESTS_PER_TASK
            kill_at = draw.randint(left // 3 + 1, max(left, 2)) if run < KILLS else None
            print(f"run {run}: {len(finished_before)} finished, kill at request {kill_at}")
            process = launch(command)
            killer.arm(process.pid, kill_at)
            _, stderr = process.communicate(timeout=300)
            if run < KILLS and killer.killed.is_set():
                assert process.returncode == -signal.SIGKILL
            elif run == KILLS:
                assert process.returncode == 0, stderr[-3000:]
            asked = {task_key(r) for r in server.requests[requests_before:]}
            assert not asked & finished_before, f"run {run} asked about finished tasks again"
            called = {c["key"] for c in read_tool_calls(tool_log)[tool_calls_before:]}
            assert not called & finished_before, f"run {run} called tools for finished tasks"

    lines = read_results(run_dir)  # each line whole: a kill never leaves a torn record
    outcomes = latest_outcomes(run_dir)
    assert set(outcomes) == set(keys) and {r["status"] for r in outcomes.values()} == {"finished"}
    finished_lines = [r["task_id"] for r in lines if r["status"] == "finished"]
    assert sorted(finished_lines) == sorted(keys)  # none finished twice
    assert all(r["final_answer"] == f"code-{r['task_id']}" for r in outcomes.values())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tasks"]["finished"] == TASKS and summary["tasks"]["errors"] == 0
    assert len(json.loads((run_dir / "manifest.json").read_text())["runs"]) == KILLS + 1
    # benchmark.execution.resume=turn (the default): killed retries went on from their
    # journals rather than from their first turn; a kill that landed where there was
    # nothing to rebuild says why in the journal it set aside.
    journals = [p for p in (run_dir / "tasks").rglob("*.jsonl") if p.name != "progress.jsonl"]
    events = [json.loads(line) for p in journals for line in p.read_text().splitlines()]
    resumed = [e for e in events if e["event"] == "resumed"]
    assert resumed, "no killed retry was continued from its journal"
    assert all(e["resumed_at_turn"] >= 0 for e in resumed)
    assert all(e["reason"] for e in events if e["event"] == "resume_fell_back")
