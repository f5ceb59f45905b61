"""A server that refuses a prompt as too long, and a task too long for the window.

Never an attempt recorded as "finished, wrong" because of the refusal: where the guard
can still act, the request is shrunk and asked again (journaled as ``context_overflow``);
where it cannot, the attempt is an error a resume runs again; a request known not to fit
is never sent. With the scripted model, then through the real provider and the runner
against the loopback fake server.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from deepledger.bench.metrics import summarize
from deepledger.context.guard import request_tokens
from deepledger.context.strategies.compaction import Compaction
from deepledger.errors import ContextOverflowError
from deepledger.llm.factory import create_client
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import EndReason, MessageKind
from deepledger.records.events import ClosingCallSkipped, Compacted, ContextOverflow, TaskFinished
from deepledger.store.files import read_jsonl
from tests.support.agent import call, make, restate
from tests.support.bench import run
from tests.support.config import composed
from tests.support.doubles.fake_llm_server import FakeLLMServer, Fault, Reply

VLLM_SAYS = (
    "This model's maximum context length is {limit} tokens. However, you requested "
    "{asked} tokens ({asked} in the messages, 0 in the completion). Please reduce the "
    "length of the messages or completion."
)
# Well over any window below, in bytes and in tokens.
HUGE_QUESTION = "What is the sum of the numbers that follow? " + " ".join(
    str(n) for n in range(200_000)
)


def refusal(limit: int = 8192, asked: int = 9000) -> ContextOverflowError:
    said = VLLM_SAYS.format(limit=limit, asked=asked)
    return ContextOverflowError(f"openai returned HTTP 400: {said}", provider="openai", status=400)


# -- the scripted model ----------------------------------------------------------------


async def test_a_refused_turn_loses_its_newest_exchange_and_the_task_is_answered():
    llm = ScriptedLLM(responder=restate, steps=[call("a"), refusal(), "\\boxed{ok}"])
    orchestrator, journal = await make(llm)
    state = await orchestrator.run("task")
    assert (state.end_reason, state.final_answer) == (EndReason.WINDOW_EXHAUSTED, "ok")
    overflow = journal.of(ContextOverflow)[0]
    assert overflow.provider_said.startswith("openai returned HTTP 400: This model's")
    assert overflow.estimated_tokens > 100  # our count of the refused request
    assert (overflow.limit, overflow.server_limit) == (100_000, 8192)
    assert (overflow.action, overflow.dropped_messages) == ("ended_loop", 2)
    events = [e.event for e in journal.events]
    assert events.index("context_overflow") < events.index("window_exhausted")
    # the summary went out without the exchange the refused request ended with
    assert [m.kind for m in llm.calls[-1].messages] == [
        MessageKind.SYSTEM,
        MessageKind.TASK,
        MessageKind.INJECTED,
    ]


async def test_a_refused_first_turn_has_nothing_to_drop_and_ends_the_attempt_in_error():
    llm = ScriptedLLM([refusal(limit=200_000)])
    orchestrator, journal = await make(llm)
    with pytest.raises(ContextOverflowError, match="maximum context length is 200000") as raised:
        await orchestrator.run("task")
    assert "nothing the window guard could drop" in str(raised.value)
    assert len(llm.calls) == 1  # no closing call after it: it would be refused the same way
    assert journal.of(ContextOverflow)[0].action == "gave_up"
    assert not journal.of(TaskFinished)


async def test_the_window_the_server_states_is_the_one_later_turns_are_checked_against():
    """The server serves 3,000 tokens though the config says 100,000: after its refusal
    the loop compacts and goes on, and from then on compacts before 3,000 by itself."""
    refused = []

    def model(messages, tools):
        if messages[-1].content.startswith("You keep the notes"):
            return "Task goal: the task. Confirmed facts: looked things up."
        turns = sum(m.kind is MessageKind.TOOL_RESULTS for m in messages)
        if turns == 3 and not refused:
            refused.append(len(llm.calls))  # this call is the last one recorded
            raise refusal(limit=3000, asked=3100)
        return call(f"q{len(messages)}")

    llm = ScriptedLLM(responder=model)
    strategy = Compaction(1, compact_at=0.8, min_saving=0.1)
    orchestrator, journal = await make(llm, window=100_000, max_turns=30, context=strategy)
    state = await orchestrator.run("task")
    overflow = journal.of(ContextOverflow)
    assert [(o.action, o.server_limit) for o in overflow] == [("compacted", 3000)]
    assert orchestrator.window.limit == 3000 and state.turn == 30
    # Against 100,000 these short rounds would never be due for compaction again.
    assert len(journal.of(Compacted)) >= 2
    after = llm.calls[refused[0] :]
    sizes = [request_tokens(c.messages, reply_budget=100, counter=llm.token_counter) for c in after]
    assert len(refused) == 1 and max(sizes) <= 3000


async def test_a_task_bigger_than_the_window_sends_no_request_and_says_why():
    llm = ScriptedLLM([])  # any call would fail the test: the script is empty
    orchestrator, journal = await make(llm, window=32_768)
    state = await orchestrator.run(HUGE_QUESTION)
    assert llm.calls == []
    assert (state.final_answer, state.provenance.value) == (None, "none")
    assert state.end_reason is EndReason.WINDOW_EXHAUSTED
    assert state.end_detail.startswith("the task alone does not fit")
    assert "32,768-token window (llm.max_context_length); no request was sent" in (state.end_detail)
    assert journal.of(ClosingCallSkipped)[0].reason == state.end_detail
    assert journal.of(TaskFinished)[0].end_detail == state.end_detail


async def test_a_stated_window_too_small_for_the_task_ends_the_attempt_in_error():
    # Known only from the server's refusal, not from llm.max_context_length: the server's
    # setup, not a finished task without an answer (a resume runs it again).
    task = "Explain this. " + "word " * 2000
    llm = ScriptedLLM([refusal(limit=1024, asked=2100)])
    orchestrator, journal = await make(llm, window=100_000)
    with pytest.raises(ContextOverflowError, match="window of 1,024 tokens") as raised:
        await orchestrator.run(task)
    assert "is smaller than the system prompt, the task and the summary prompt" in str(raised.value)
    assert "llm.max_context_length to the server's real window (1024)" in str(raised.value)
    assert len(llm.calls) == 1  # the refused turn; the closing call is known not to fit
    assert journal.of(ContextOverflow)[0].action == "ended_loop"
    (skipped,) = journal.of(ClosingCallSkipped)
    assert skipped.task_alone and skipped.limit == 1024


# -- the real provider and the runner against the loopback fake server --------------------


def vllm_refusal(limit: int, asked: int) -> Fault:
    """A 400 as vLLM's OpenAI server writes it."""
    said = VLLM_SAYS.format(limit=limit, asked=asked)
    body = {"object": "error", "message": said, "type": "BadRequestError", "code": 400}
    return Fault(status=400, body=json.dumps(body))


def xml_call() -> str:
    return (
        "Let me look.\n<use_mcp_tool><server_name>kb</server_name><tool_name>lookup"
        '</tool_name><arguments>{"query": "x"}</arguments></use_mcp_tool>'
    )


def suite(folder: Path, questions: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"task_id": task_id, "task_question": question, "ground_truth": "Paris"})
        for task_id, question in questions.items()
    ]
    (folder / "standardized_data.jsonl").write_text("\n".join(lines) + "\n")
    return folder


async def bench(
    server: FakeLLMServer, data: Path, root: Path, *overrides: str, protocol: str = "openai"
) -> list[dict]:
    """The runner on the suite in ``data``, against ``server`` in either wire protocol."""
    preset = ["llm=openai_compatible", f"llm.base_url={server.openai_base_url}"]
    if protocol == "anthropic":
        preset = ["llm=anthropic", f"llm.base_url={server.base_url}"]
    cfg = composed(
        *preset,
        "llm.max_context_length=32768",
        "llm.max_tokens=1024",
        f"benchmark.data.data_dir={data}",
        "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1",
        "benchmark.execution.max_concurrent=1",
        *overrides,
    )
    llm = create_client(cfg.llm)
    try:
        return await run(cfg, llm, root)
    finally:
        await llm.aclose()


@pytest.mark.parametrize("compress", [0, 2])
async def test_over_http_a_question_bigger_than_the_window_never_reaches_the_server(
    tmp_path, compress, caplog
):
    data = suite(tmp_path / "data", {"huge": HUGE_QUESTION, "small": "Capital of France?"})
    with FakeLLMServer(responder=lambda request: Reply("\\boxed{Paris}")) as server:
        with caplog.at_level(logging.WARNING):
            records = await bench(
                server, data, tmp_path / "run", f"agent.context_compress_limit={compress}"
            )
        sizes = [len(json.dumps(r.body)) for r in server.requests]
        server.assert_all_consumed()
    assert sizes and max(sizes) < 50_000  # the small task's calls only
    assert not any("numbers that follow" in json.dumps(r.body) for r in server.requests)
    huge = next(r for r in records if r["task_id"] == "huge")
    assert (huge["status"], huge["final_answer"], huge["provenance"]) == ("finished", None, "none")
    assert huge["end_reason"] == "window_exhausted"
    assert huge["end_detail"].startswith("the task alone does not fit")
    assert "32,768-token window (llm.max_context_length)" in huge["end_detail"]
    assert huge["usage"]["input_tokens"] == 0
    # Told by the typed flag, not by the wording: no further retry or attempt.
    assert huge["stopped"] == "does_not_fit"
    ((retry,),) = [a["retries"] for a in huge["attempts"]]
    assert retry["does_not_fit"] is True
    said = [r.getMessage() for r in caplog.records if "does not fit" in r.getMessage()]
    assert said == [f"task huge: {huge['end_detail']}"]  # once, however many retries


async def test_over_http_a_refusal_with_nothing_to_drop_is_an_error_a_resume_runs_again(
    tmp_path,
):
    data = suite(tmp_path / "data", {"t1": "Capital of France?"})
    with FakeLLMServer([vllm_refusal(8192, 9000)]) as server:
        records = await bench(server, data, tmp_path / "run")
        server.assert_all_consumed()
        assert len(server.requests) == 1  # the refused turn only: no closing call after it
    (record,) = records
    assert (record["status"], record["end_reason"]) == ("error", "error")
    assert record["error"].startswith("ContextOverflowError: openai returned HTTP 400")
    assert "maximum context length is 8192 tokens" in record["error"]
    summary = summarize(records, pass_at_k=1, benchmark="overflow").to_json()
    assert summary["tasks"]["errors"] == 1 and summary["tasks"]["finished"] == 0
    # The same run again: the errored task runs again (and now is answered).
    with FakeLLMServer([Reply("It is \\boxed{Paris}."), Reply("\\boxed{Paris}")]) as server:
        records = await bench(server, data, tmp_path / "run")
        server.assert_all_consumed()
    (record,) = records
    assert (record["status"], record["final_answer"], record["correct"]) == (
        "finished",
        "Paris",
        True,
    )


async def test_over_http_a_server_window_below_the_reply_budget_is_an_error_not_a_wrong_answer(
    tmp_path,
):
    # The server's window (8,192) is below llm.max_tokens (16,384): only its refusal says
    # so. Not "finished, wrong": an error naming the keys to change, which a resume redoes.
    data = suite(tmp_path / "data", {"t1": "Capital of France?"})
    with FakeLLMServer([vllm_refusal(8192, 16_500)]) as server:
        records = await bench(server, data, tmp_path / "run", "llm.max_tokens=16384")
        server.assert_all_consumed()
        assert len(server.requests) == 1  # no closing call: it is known not to fit
    (record,) = records
    assert (record["status"], record["end_reason"], record["correct"]) == ("error", "error", False)
    assert "the server's window of 8,192 tokens" in record["error"]
    assert "below or too close to llm.max_tokens=16,384" in record["error"]
    assert "set llm.max_context_length to the server's real window (8192)" in record["error"]
    summary = summarize(records, pass_at_k=1, benchmark="overflow").to_json()
    assert summary["tasks"]["errors"] == 1 and summary["tasks"]["finished"] == 0
    # Fixed as the message says, the same run again answers it.
    with FakeLLMServer([Reply("It is \\boxed{Paris}."), Reply("\\boxed{Paris}")]) as server:
        records = await bench(server, data, tmp_path / "run", "llm.max_context_length=8192")
        server.assert_all_consumed()
    (record,) = records
    assert (record["status"], record["final_answer"], record["correct"]) == (
        "finished",
        "Paris",
        True,
    )


def anthropic_refusal(limit: int, asked: int) -> Fault:
    """A 400 as the Anthropic API writes it."""
    said = f"prompt is too long: {asked} tokens > {limit} maximum"
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": said}}
    return Fault(status=400, body=json.dumps(body))


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_over_http_a_refused_turn_is_dropped_and_the_summary_fits_the_stated_window(
    tmp_path, monkeypatch, protocol
):
    data = suite(tmp_path / "data", {"t1": "Capital of France?"})
    refused = vllm_refusal(2048, 2100) if protocol == "openai" else anthropic_refusal(2048, 2100)
    script = [Reply(xml_call()), refused, Reply("\\boxed{Paris}")]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with FakeLLMServer(script) as server:
        records = await bench(
            server, data, tmp_path / "run", "llm.max_tokens=256", protocol=protocol
        )
        server.assert_all_consumed()
        summary_request = server.requests[-1]
    (record,) = records
    assert (record["status"], record["final_answer"], record["end_reason"]) == (
        "finished",
        "Paris",
        "window_exhausted",
    )
    # system (apart, for Anthropic), task, summarize: the refused turn's exchange dropped
    roles = [m["role"] for m in summary_request.messages]
    assert roles == (["system", "user", "user"] if protocol == "openai" else ["user"])
    events = read_jsonl(tmp_path / "run" / record["attempts"][0]["retries"][0]["journal"])
    overflow = next(e for e in events if e["event"] == "context_overflow")
    assert (overflow["server_limit"], overflow["action"]) == (2048, "ended_loop")


def test_deepledger_run_says_why_a_question_bigger_than_the_window_has_no_answer(tmp_path):
    from tests.support.cli import deepledger

    question = "Sum these numbers " + " ".join(str(n) for n in range(4000))  # ~20 KB
    with FakeLLMServer() as server:  # no step scripted: any request is "unexpected"
        run = deepledger(
            "run",
            f"question={question}",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            "llm.max_context_length=2048",
            "llm.max_tokens=256",
            "agent.main_agent.tools=[]",
            f"hydra.run.dir={tmp_path}/run",
            cwd=tmp_path,
        )
        assert server.requests == []
    assert run.returncode == 0, run.stderr
    assert "Answer: (none)" in run.stdout
    why = [line for line in run.stdout.splitlines() if line.startswith("Why: ")]
    assert len(why) == 1 and why[0].startswith("Why: the task alone does not fit")
    assert (run.stdout + run.stderr).count("does not fit") == 1  # said once
    assert "2,048-token window (llm.max_context_length)" in why[0]
