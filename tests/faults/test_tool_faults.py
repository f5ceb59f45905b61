"""Tool servers that fail: a crash in the middle of a call, a call that hangs past its
timeout, a server that freezes, garbage on the protocol channel, an answer too big for
the wire, a tool error, and a server that cannot start. The model (ResearchModel) calls
``faulty.lookup`` with the fault its plan names and calls again after a failure."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.doubles.fake_llm_server import FakeLLMServer
from tests.support.doubles.fault_tool_server import START_FAILURE
from tests.support.doubles.faults import (
    FaultInjector,
    ResearchModel,
    accuracy,
    bench_overrides,
    finished_keys,
    latest_outcomes,
    read_tool_calls,
    run_in_process,
    task_key,
    write_suite,
)

ROOT = Path(__file__).resolve().parents[2]
RUN_BOUND_SECONDS = 180
# A call that does not answer is cut at 2 s; a message over 1 MiB is refused by the client.
TOOL_SETTINGS = {"call_timeout_seconds": 2, "max_message_bytes": 1024 * 1024}


async def bench(server, tmp_path, *extra: str, tool_args=(), settings=None):
    overrides = bench_overrides(
        tmp_path / "data",
        server.openai_base_url,
        tools=True,
        tool_log=tmp_path / "tool_calls.jsonl",
        tool_args=tool_args,
        tool_settings={**TOOL_SETTINGS, **(settings or {})},
        extra=extra,
    )
    return await asyncio.wait_for(run_in_process(overrides, tmp_path / "run"), RUN_BOUND_SECONDS)


def calls_by_key(tmp_path) -> dict[str, list[str]]:
    calls: dict[str, list[str]] = {}
    for call in read_tool_calls(tmp_path / "tool_calls.jsonl"):
        calls.setdefault(call["key"], []).append(call["fault"])
    return calls


def tool_results_seen(server: FakeLLMServer, key: str) -> list[str]:
    """What the model was told by the tool turns of ``key``'s conversation, last request."""
    last = [r for r in server.requests if task_key(r) == key][-1]
    return [m["content"] for m in last.messages[2:] if m["role"] == "user"]


async def test_each_tool_fault_is_survived_and_the_task_still_answers(seed, tmp_path):
    faults = ["crash", "hang", "freeze", "garbage", "huge", "error"]
    keys = write_suite(tmp_path / "data", len(faults))
    plan = {key: [fault] for key, fault in zip(keys, faults, strict=True)}
    model = FaultInjector(ResearchModel(use_tools=True, tool_faults=plan), seed=seed)
    with FakeLLMServer(responder=model) as server:
        # One task at a time: each fault meets a server that the last one left healthy.
        await bench(server, tmp_path, "benchmark.execution.max_concurrent=1")
        told = {key: tool_results_seen(server, key) for key in keys}
        server.assert_all_consumed()
    outcomes = latest_outcomes(tmp_path / "run")
    assert {k: r["status"] for k, r in outcomes.items()} == dict.fromkeys(keys, "finished")
    assert accuracy(tmp_path / "run") == 1.0  # every fault was followed by a good call
    by_fault = dict(zip(faults, keys, strict=True))
    expected = {key: [*faults, "none"] for key, faults in plan.items()}
    expected[by_fault["garbage"]] = ["garbage"]  # answered despite it: no second call
    assert calls_by_key(tmp_path) == expected
    assert "restarted" in told[by_fault["crash"]][0]
    assert "timed out after 2s" in told[by_fault["hang"]][0]
    assert "timed out after 2s" in told[by_fault["freeze"]][0]
    assert "restarted" in told[by_fault["freeze"]][0]  # it could not answer the ping
    assert "code-" in told[by_fault["garbage"]][0]  # the lines around garbage still count
    assert "error" in told[by_fault["huge"]][0] and len(told[by_fault["huge"]][0]) < 10_000
    assert "failed (on purpose)" in told[by_fault["error"]][0]


async def test_random_tool_faults_under_concurrency_leave_every_task_recorded(seed, tmp_path):
    import random

    draw = random.Random(seed)
    keys = write_suite(tmp_path / "data", 8)
    plan = {k: [draw.choice(["none", "crash", "garbage", "error", "huge"])] for k in keys}
    print(f"tool faults: {plan}")
    model = FaultInjector(ResearchModel(use_tools=True, tool_faults=plan), seed=seed)
    with FakeLLMServer(responder=model) as server:
        await bench(server, tmp_path, "benchmark.execution.max_concurrent=4")
    outcomes = latest_outcomes(tmp_path / "run")
    assert set(outcomes) == set(keys)
    # A crash cuts the calls in flight with it, and a server that fails again right
    # after its restart is given up on: such tasks say "\boxed{unknown}" (no answer:
    # agent.recovery.boxed_non_answers), but they finish, and they are errors that say
    # which server they ran without.
    for key, record in outcomes.items():
        assert record["final_answer"] in (f"code-{key}", None)
        given_up = record.get("tool_servers_given_up")
        assert record["status"] == ("error" if given_up else "finished")
        assert not given_up or set(given_up) == {"faulty"}
    assert all(len(calls) <= 3 for calls in calls_by_key(tmp_path).values())


async def test_a_tool_server_that_cannot_start_is_reported_and_left_out(seed, tmp_path):
    keys = write_suite(tmp_path / "data", 3)
    model = FaultInjector(ResearchModel(use_tools=True), seed=seed)
    with FakeLLMServer(responder=model) as server:
        await bench(server, tmp_path, tool_args=["--fail-start"])
        told = tool_results_seen(server, keys[0])
    outcomes = latest_outcomes(tmp_path / "run")
    assert {k: r["status"] for k, r in outcomes.items()} == dict.fromkeys(keys, "finished")
    # The model says \boxed{unknown}: no answer (agent.recovery.boxed_non_answers).
    assert {r["final_answer"] for r in outcomes.values()} == {None}
    assert told and "faulty" in told[0]  # the model learns the tool is not there
    assert START_FAILURE in (tmp_path / "run" / "tool_servers" / "faulty.stderr.log").read_text()


async def test_a_required_server_that_cannot_start_fails_its_tasks_until_it_is_fixed(
    seed, tmp_path
):
    keys = write_suite(tmp_path / "data", 3)
    model = FaultInjector(ResearchModel(use_tools=True), seed=seed)
    broken = tmp_path / "broken"  # the server fails to start while this file exists
    broken.touch()
    same = {"tool_args": ["--fail-start-while", str(broken)], "settings": {"required": "true"}}
    with FakeLLMServer(responder=model) as server:
        summary = await bench(server, tmp_path, **same)
        first = latest_outcomes(tmp_path / "run")
        assert {k: r["status"] for k, r in first.items()} == dict.fromkeys(keys, "error")
        assert summary["tasks"]["errors"] == 3
        assert all("faulty" in r["error"] for r in first.values())
        broken.unlink()  # fixed: the same command resumes
        summary = await bench(server, tmp_path, **same)
    assert summary["tasks"]["errors"] == 0 and finished_keys(tmp_path / "run") == set(keys)
    assert accuracy(tmp_path / "run") == 1.0
    assert calls_by_key(tmp_path) == {key: ["none"] for key in keys}


@pytest.mark.skipif(sys.platform != "linux", reason="the stderr tail check reads Linux pipes")
async def test_a_server_that_cannot_start_says_why_in_the_error(seed, tmp_path):
    """Issue #14 item 2: the message carries the last lines of the server's stderr."""
    write_suite(tmp_path / "data", 1)
    model = FaultInjector(ResearchModel(use_tools=True), seed=seed)
    with FakeLLMServer(responder=model) as server:
        await bench(server, tmp_path, tool_args=["--fail-start"], settings={"required": "true"})
    (record,) = latest_outcomes(tmp_path / "run").values()
    assert "index file is missing" in record["error"]


def test_a_server_given_up_on_is_an_error_of_every_task_that_wanted_it(seed, tmp_path):
    """A server that crashes on two turns in a row (the second right after its restart)
    is given up on: the task it happened in and the later task that wanted it are errors
    in their records, in the summary (a line naming it, with how its process ended) and
    in the exit code, 1. A real `deepledger bench`: the exit code is the CLI's."""
    first, later = write_suite(tmp_path / "data", 2)
    plan = {first: ["crash", "crash"]}
    model = FaultInjector(ResearchModel(use_tools=True, tool_faults=plan), seed=seed)
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=model) as server:
        overrides = bench_overrides(
            tmp_path / "data",
            server.openai_base_url,
            tools=True,
            tool_log=tmp_path / "tool_calls.jsonl",
            tool_settings=TOOL_SETTINGS,
            extra=["benchmark.execution.max_concurrent=1", f"hydra.run.dir={run_dir}"],
        )
        bench = subprocess.run(
            [sys.executable, "-m", "deepledger", "bench", *overrides],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=RUN_BOUND_SECONDS,
        )
    assert bench.returncode == 1, bench.stderr[-3000:]
    assert calls_by_key(tmp_path) == {first: ["crash", "crash"]}  # none once given up
    outcomes = latest_outcomes(run_dir)
    assert {k: r["status"] for k, r in outcomes.items()} == {first: "error", later: "error"}
    for record in outcomes.values():
        assert record["error"].startswith("ToolServerGivenUp: ran without 'faulty'")
        assert "exited with status 3" in record["tool_servers_given_up"]["faulty"]
        assert record["final_answer"] is None  # \boxed{unknown}, without the tool
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tasks"]["errors"] == 2
    given_up = summary["tool_servers_given_up"]["faulty"]
    assert given_up["tasks"] == 2 and given_up["task_ids"] == [first, later]
    assert "fault_tool_server" in given_up["reason"]  # its command, in the details
    (line,) = [x for x in bench.stdout.splitlines() if "given up" in x]
    assert "'faulty': 2 tasks ran without it" in line and "exited with status 3" in line
