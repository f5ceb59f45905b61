"""Anthropic's cache breakpoints on the wire (the loopback fake refuses more than the
API's four): the system prompt, the end of the stable prefix the context policy names,
and the newest user turn."""

from __future__ import annotations

import json

import pytest

from deepledger.context.policy import ContextPolicy
from deepledger.context.strategies import KeepToolResults, RoundWindow
from deepledger.llm.anthropic import to_wire
from deepledger.llm.base import GenerationSettings
from deepledger.messages import Message, ToolCall, ToolResult
from tests.support.doubles.fake_llm_server import (
    FakeLLMServer,
    RecordedRequest,
    Reply,
    wire_problem,
)
from tests.support.doubles.faults import (
    SUMMARY_MARK,
    answer_for,
    bench_overrides,
    lookup_call,
    message_texts,
    run_in_process,
    task_key,
    write_suite,
)
from tests.support.providers import TASK, make_client

CACHED = {"type": "ephemeral"}


def research(turns: int, native: bool) -> list[Message]:
    history = list(TASK)
    for n in range(1, turns + 1):
        call = ToolCall(f"c{n}", "search", {"q": n}, server_name="" if native else "web")
        history.append(Message.assistant(f"Searching {n}.", [call]))
        result = ToolResult(f"c{n}", f"page {n} " * 50)
        if native:
            history.append(Message.native_tool_results([result]))
        else:
            history.append(Message.text_tool_results(f"page {n} " * 50, [result]))
    return history


def breakpoints(body: dict) -> list[tuple[str, int, int]]:
    """Where the cache_control marks are: ("system", 0, block) or (role, turn, block)."""
    found = [
        ("system", 0, i) for i, b in enumerate(body.get("system") or []) if "cache_control" in b
    ]
    for t, turn in enumerate(body["messages"]):
        found += [
            (turn["role"], t, i) for i, b in enumerate(turn["content"]) if "cache_control" in b
        ]
    return found


@pytest.mark.parametrize("native", [False, True], ids=["xml", "native"])
async def test_a_batched_cut_keeps_a_breakpoint_before_it_on_the_wire(native):
    """keep_tool_result=2 in batches of 3: the breakpoint sits after the blanked
    results, which the next cut leaves as they are."""
    policy = ContextPolicy(KeepToolResults(cut_batch=3), keep_tool_result=2)
    with FakeLLMServer() as server:
        async with make_client("anthropic", server) as client:
            for turns in (5, 6):
                request = await policy.prepare(research(turns, native), closing=[])
                server.enqueue(Reply(text="ok"))
                settings = GenerationSettings(max_tokens=50, cache_prefix=request.stable_prefix)
                await client.generate(request.messages, settings=settings)
        server.assert_all_consumed()  # the fake refused nothing (four breakpoints at most)
    first, second = (r.body for r in server.requests)
    assert first["system"][-1]["cache_control"] == CACHED
    # Turn 5 cut three results: the stable prefix ends at the reply of the fourth turn.
    marks = breakpoints(first)
    assert (
        len(marks) == 3 and marks[0][0] == "system" and marks[-1][1] == len(first["messages"]) - 1
    )
    role, stable_turn, block = marks[1]
    marked_turn = first["messages"][stable_turn]
    assert role == "assistant" and marked_turn["content"][0]["text"] == "Searching 4."
    assert block == len(marked_turn["content"]) - 1  # its last block: text, or the tool_use
    # The next request sends everything up to that breakpoint as it was, mark and all.
    assert second["messages"][: stable_turn + 1] == first["messages"][: stable_turn + 1]


def test_without_a_stable_prefix_the_breakpoints_are_as_before():
    history = research(3, native=True)
    system, turns = to_wire(history)
    assert system[-1]["cache_control"] == CACHED
    marked = [t for t in turns for b in t["content"] if "cache_control" in b]
    assert marked == [turns[-1]]  # the newest user turn only
    _, with_prefix = to_wire(history, stable_prefix=2)  # system prompt and task
    assert "cache_control" in with_prefix[0]["content"][-1]


async def test_a_round_window_marks_the_end_of_the_head():
    policy = ContextPolicy(RoundWindow(2, cut_batch=3))
    request = await policy.prepare(research(6, native=False), closing=[])
    assert request.stable_prefix == 2
    _, turns = to_wire(request.messages, request.stable_prefix)
    assert turns[0]["content"][0]["text"] == TASK[1].content  # the task, merged or not
    assert turns[0]["content"][0]["cache_control"] == CACHED


def test_the_fake_refuses_more_breakpoints_than_the_api_takes():
    block = {"type": "text", "text": "x", "cache_control": CACHED}
    body = {"system": [block], "messages": [{"role": "user", "content": [block] * 4}]}
    assert "maximum of 4 blocks with cache_control" in (wire_problem("anthropic", body) or "")
    body["messages"][0]["content"] = [block] * 3
    assert wire_problem("anthropic", body) is None


class LookingUp:
    """Looks up a new key each turn for ``steps`` turns, then answers (XML calls)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def __call__(self, request: RecordedRequest) -> Reply:
        key = task_key(request) or "?"
        if SUMMARY_MARK in message_texts(request)[-1]:
            return Reply(f"\\boxed{{{answer_for(key)}}}")
        done = sum(m.get("role") == "assistant" for m in request.messages)
        if done >= self.steps:
            return Reply("I have what I need.")
        return Reply(f"Step {done}.\n" + lookup_call(f"{key}-{done}", "none"))


async def test_the_loop_sends_its_policys_stable_prefix_as_a_breakpoint(tmp_path, monkeypatch):
    """End to end (the bench runner, the turn loop, the fault tool server): with
    keep_tool_result=1 cut two at a time, each loop call marks the end of the stable
    prefix, and the request after a cut shares everything before that mark."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    data = tmp_path / "data"
    write_suite(data, 1)
    with FakeLLMServer(responder=LookingUp(6)) as server:
        extra = [
            "agent.keep_tool_result=1",
            "agent.context.cut_batch=2",
            f"hydra.run.dir={tmp_path}",
        ]
        overrides = bench_overrides(data, server.base_url, tools=True, llm="anthropic", extra=extra)
        await run_in_process(overrides, tmp_path / "run")
        assert not server.unexpected
        bodies = [r.body for r in server.requests]
    loop = [b for b in bodies if SUMMARY_MARK not in json.dumps(b["messages"][-1])]
    assert len(loop) == 7
    marks = [breakpoints(b) for b in loop]
    assert all(len(m) == 3 for m in marks[3:])  # system, stable prefix, newest user turn
    for before, after, mark in zip(loop, loop[1:], marks, strict=False):
        if len(mark) == 3:  # the cache keys on the content; a mark moved on is no change
            stable = mark[1][1]
            assert unmarked(after)[: stable + 1] == unmarked(before)[: stable + 1]
    assert len({m[1] for m in marks[3:]}) > 1  # the mark moved on with the cuts


def unmarked(body: dict) -> list[dict]:
    return [
        {
            **turn,
            "content": [
                {k: v for k, v in b.items() if k != "cache_control"} for b in turn["content"]
            ],
        }
        for turn in body["messages"]
    ]
