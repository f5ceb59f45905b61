"""A reply cut at llm.max_tokens or empty is never an answer: the loop ends
``cut_or_empty``, the summary's end reasons say so, and a cut summary reply with a box
in it is not taken as the final answer. Against the fake OpenAI server, in process,
with the recoveries that ask such replies again turned off (tests/agent/
test_recoveries.py has them on)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepledger.bench.metrics import format_summary
from deepledger.records.results import SummaryRecord
from tests.support.doubles.fake_llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.support.doubles.faults import (
    SUMMARY_MARK,
    answer_for,
    bench_overrides,
    message_texts,
    run_in_process,
    task_key,
    write_suite,
)


def records(run: Path) -> list[dict]:
    lines = (run / "benchmark_results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


# A cut reply kept as it is, an empty one not asked again.
RECOVERIES_OFF = ("agent.recovery.cut_reply_attempts=1", "llm.retry.aborted_or_empty=false")


async def bench(tmp_path: Path, responder, *extra: str) -> tuple[dict, list[dict], int]:
    data, run = tmp_path / "data", tmp_path / "run"
    write_suite(data, 1)
    with FakeLLMServer(responder=responder) as server:
        overrides = [
            *bench_overrides(data, server.openai_base_url),
            f"hydra.run.dir={run}",
            *RECOVERIES_OFF,
        ]
        summary = await run_in_process([*overrides, *extra], run)
        assert not server.unexpected
        return summary, records(run), len(server.requests)


@pytest.mark.parametrize("finish", ["length", "stop"], ids=["cut", "empty"])
async def test_an_empty_or_cut_reply_ends_the_loop_as_cut_or_empty_not_answered(tmp_path, finish):
    summary, [record], calls = await bench(
        tmp_path, lambda request: Reply("", finish_reason=finish)
    )
    assert record["end_reason"] == "cut_or_empty"
    assert record["final_answer"] is None and record["provenance"] == "none"
    # the loop's reply, then the one closing call (agent.max_final_answer_retries=1)
    assert calls == 2
    assert summary["end_reasons"]["cut_or_empty"] == 1
    assert summary["end_reasons"]["answered"] == 0
    line = format_summary(SummaryRecord.load(summary))
    assert "cut_or_empty 1" in line and "answered 0" in line


async def test_a_cut_summary_reply_is_not_taken_as_the_answer(tmp_path):
    """The loop answers; the summary reply holds a box but was cut at max_tokens: no
    final answer from it (the next reply, whole, gives it)."""
    summaries = 0

    def responder(request: RecordedRequest) -> Reply:
        nonlocal summaries
        if not any(SUMMARY_MARK in text for text in message_texts(request)):
            return Reply("I know it.")
        summaries += 1
        key = task_key(request) or "?"
        boxed = f"\\boxed{{{answer_for(key)}}}"
        return Reply(boxed + " and", finish_reason="length") if summaries == 1 else Reply(boxed)

    _, [record], calls = await bench(tmp_path, responder, "agent.max_final_answer_retries=2")
    assert record["end_reason"] == "model_finished"
    assert record["provenance"] == "boxed_retry"  # the second summary reply's box
    assert record["correct"] is True and calls == 3
