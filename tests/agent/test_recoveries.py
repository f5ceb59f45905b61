"""MiroThinker's recoveries, on by default (docs/agent.md#recoveries): a reply cut at
llm.max_tokens asked again with 10 % more room, aborted and empty replies retried,
``\\boxed{unknown}`` taken as no answer. ``deepledger bench`` in process against the
fake OpenAI server; the window cap with the scripted model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepledger.agent.cut import CutRetry, generate_with_room
from deepledger.context.guard import ContextWindow
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import ScriptedLLM, reply
from deepledger.llm.usage import UsageLedger
from deepledger.messages import Message, StopReason, Usage
from deepledger.records.events import ReplyCut
from deepledger.store.journal import Journal
from tests.support.doubles.fake_llm_server import FakeLLMServer, FakeUsage, RecordedRequest, Reply
from tests.support.doubles.faults import (
    SUMMARY_MARK,
    TOOL_SERVER,
    answer_for,
    bench_overrides,
    lookup_call,
    message_texts,
    run_in_process,
    task_key,
    write_suite,
)

BUDGET = 16384  # the openai_compatible preset's llm.max_tokens
CUT = FakeUsage(input_tokens=10, output_tokens=BUDGET)


def is_summary(request: RecordedRequest) -> bool:
    return any(SUMMARY_MARK in text for text in message_texts(request))


def answer(request: RecordedRequest) -> Reply:
    return Reply(f"\\boxed{{{answer_for(task_key(request) or '?')}}}")


async def bench(tmp_path: Path, responder, *extra: str) -> tuple[dict, list[RecordedRequest]]:
    """The one task's result line and the requests the model got."""
    data, run = tmp_path / "data", tmp_path / "run"
    write_suite(data, 1)
    with FakeLLMServer(responder=responder) as server:
        overrides = [*bench_overrides(data, server.openai_base_url), f"hydra.run.dir={run}"]
        await run_in_process([*overrides, *extra], run)
        assert not server.unexpected
        requests = list(server.requests)
    [line] = (run / "benchmark_results.jsonl").read_text().splitlines()
    return json.loads(line), requests


def journal_events(tmp_path: Path, name: str) -> list[dict]:
    lines = [
        json.loads(line)
        for path in sorted((tmp_path / "run").rglob("attempt-*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    return [line for line in lines if line.get("event") == name]


async def test_a_cut_reply_is_asked_again_with_ten_percent_more_room(tmp_path):
    loop_calls = 0

    def responder(request: RecordedRequest) -> Reply:
        nonlocal loop_calls
        if is_summary(request):
            return answer(request)
        loop_calls += 1
        if loop_calls <= 2:  # cut mid-thinking, twice
            return Reply("<think>Let me weigh the", finish_reason="length", usage=CUT)
        return answer(request)

    record, requests = await bench(tmp_path, responder)
    budgets = [r.body["max_tokens"] for r in requests]
    # int(16384 * 1.1), then int(18022 * 1.1), as MiroThinker's client grows it
    assert budgets[:3] == [BUDGET, 18022, 19824]
    assert record["end_reason"] == "model_finished" and record["correct"] is True
    cuts = journal_events(tmp_path, "reply_cut")
    assert [(c["attempt"], c["max_tokens"], c["next_max_tokens"]) for c in cuts] == [
        (1, BUDGET, 18022),
        (2, 18022, 19824),
    ]
    # Every attempt's tokens are counted: two cut ones, the answer, the summary.
    assert record["usage"]["output_tokens"] == 2 * BUDGET + 5 + 5


async def test_a_reply_still_cut_after_the_last_attempt_is_no_answer(tmp_path):
    record, requests = await bench(
        tmp_path,
        lambda request: Reply("<think>and so", finish_reason="length", usage=CUT),
        "agent.recovery.cut_reply_attempts=3",
    )
    assert record["end_reason"] == "cut_or_empty" and record["final_answer"] is None
    # three loop attempts, then three for the one summary call
    assert [r.body["max_tokens"] for r in requests] == [BUDGET, 18022, 19824] * 2


async def test_the_larger_budget_never_goes_past_the_window():
    cut = reply("<think>half", stop_reason=StopReason.MAX_TOKENS, usage=Usage(900, 100))
    llm = ScriptedLLM([cut] * 5)
    journal, ledger = Journal(None), UsageLedger()
    response = await generate_with_room(
        llm,
        [Message.task("q")],
        None,
        GenerationSettings(max_tokens=100),
        retry=CutRetry(10, ContextWindow(1030)),
        journal=journal,
        ledger=ledger,
        turn=1,
    )
    # 900 prompt tokens in a 1030-token window: 110, then 121 would pass 130 ... 130, stop
    assert [c.settings.max_tokens for c in llm.calls] == [100, 110, 121, 130]
    assert response.stop_reason is StopReason.MAX_TOKENS
    assert len(journal.of(ReplyCut)) == 3 and len(ledger.delegated) == 3


@pytest.mark.parametrize(
    "bad", [Reply("partial", finish_reason="abort"), Reply("")], ids=["abort", "empty"]
)
async def test_an_aborted_or_empty_reply_is_retried_not_the_end_of_the_task(tmp_path, bad):
    loop_calls = 0

    def responder(request: RecordedRequest) -> Reply:
        nonlocal loop_calls
        loop_calls += 1
        return bad if loop_calls == 1 else answer(request)

    record, requests = await bench(tmp_path, responder)
    assert record["end_reason"] == "model_finished" and record["correct"] is True
    assert len(requests) == 3  # the bad reply, the loop's again, the summary


async def test_an_empty_reply_that_stays_empty_ends_the_loop_cut_or_empty(tmp_path):
    record, requests = await bench(tmp_path, lambda request: Reply(""))
    assert record["end_reason"] == "cut_or_empty"
    assert len(requests) == 2 * 5  # llm.retry.max_attempts for the loop's and the summary's


async def test_an_abort_that_persists_is_an_error_a_resume_runs_again(tmp_path):
    record, requests = await bench(
        tmp_path, lambda request: Reply("part", finish_reason="abort"), "llm.retry.max_attempts=2"
    )
    assert record["status"] == "error" and "abort" in record["error"]
    assert len(requests) == 2


async def test_a_boxed_unknown_is_no_answer_so_the_format_retry_follows(tmp_path):
    summaries = 0

    def responder(request: RecordedRequest) -> Reply:
        nonlocal summaries
        if not is_summary(request):
            return Reply("I could not find it. \\boxed{unknown}")
        summaries += 1
        return Reply("\\boxed{\\text{Unknown}}") if summaries == 1 else answer(request)

    record, _ = await bench(tmp_path, responder, "agent.max_final_answer_retries=2")
    assert record["provenance"] == "boxed_retry" and record["correct"] is True
    assert summaries == 2


async def test_a_boxed_unknown_is_the_answer_with_the_rule_off(tmp_path):
    record, _ = await bench(
        tmp_path,
        lambda request: Reply("\\boxed{unknown}"),
        "agent.max_final_answer_retries=2",
        "agent.recovery.boxed_non_answers=false",
    )
    assert record["final_answer"] == "unknown" and record["provenance"] == "summary"


@pytest.mark.parametrize("route", [True, False], ids=["routed", "off"])
async def test_a_call_to_a_server_the_agent_lacks_reaches_the_one_tool_of_its_name(tmp_path, route):
    """The model names a server it does not have (agent.recovery.route_unknown_server);
    the fault server's `lookup` is the only tool of that name, so the call runs there."""
    loop_calls = 0

    def responder(request: RecordedRequest) -> Reply:
        nonlocal loop_calls
        if is_summary(request):
            return answer(request)
        loop_calls += 1
        if loop_calls == 1:
            wrong = lookup_call(task_key(request) or "?", "none")
            return Reply(wrong.replace(f">{TOOL_SERVER}<", ">search_and_scrape_webpage<"))
        return answer(request)

    data, run = tmp_path / "data", tmp_path / "run"
    write_suite(data, 1)
    with FakeLLMServer(responder=responder) as server:
        overrides = [
            *bench_overrides(data, server.openai_base_url, tools=True),
            f"hydra.run.dir={run}",
            f"agent.recovery.route_unknown_server={str(route).lower()}",
        ]
        await run_in_process(overrides, run)
    [results] = journal_events(tmp_path, "tool_results")
    [result] = results["results"]
    repaired = journal_events(tmp_path, "tool_call_repaired")
    if route:
        assert not result.get("is_error") and answer_for("k01") in result["content"]
        assert [(r["kind"], r["written"], r["ran"]) for r in repaired] == [
            ("unknown_server", "search_and_scrape_webpage.lookup", f"{TOOL_SERVER}.lookup")
        ]
    else:
        assert result["is_error"] and "There is no tool" in result["content"]
        assert repaired == []


async def test_no_larger_attempt_once_a_task_limit_is_reached():
    cut = reply("<think>half", stop_reason=StopReason.MAX_TOKENS, usage=Usage(10, 100))
    llm = ScriptedLLM([cut] * 5)
    journal, ledger = Journal(None), UsageLedger()
    response = await generate_with_room(
        llm,
        [Message.task("q")],
        None,
        GenerationSettings(max_tokens=100),
        retry=CutRetry(10, None, over_limit=lambda: len(ledger.delegated) >= 1),
        journal=journal,
        ledger=ledger,
    )
    # the first cut reply is counted aside; the second finds the limit reached
    assert len(llm.calls) == 2 and len(journal.of(ReplyCut)) == 1
    assert response.stop_reason is StopReason.MAX_TOKENS
