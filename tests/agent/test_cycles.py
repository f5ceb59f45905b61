"""The loop check: a cycle of one to three turns, gone round again and again, ends the loop."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from deepledger.agent.answer import AnswerPolicy
from deepledger.agent.cycles import reply_key
from deepledger.agent.rollback import RollbackReason
from deepledger.agent.state import Provenance
from deepledger.agent.task import AgentFactory
from deepledger.config import tool_servers
from deepledger.llm.scripted import ScriptedLLM, reply
from deepledger.messages import EndReason, Message, MessageKind, ToolCall, ToolResult
from deepledger.records.codec import decode
from deepledger.records.events import AnswerSkipped, Looping, PostMortem
from deepledger.store.journal import Journal
from deepledger.tools.pool import ToolManager
from deepledger.tools.protocols import NativeProtocol
from deepledger.tools.types import LocalTool
from tests.support.agent import call, make
from tests.support.config import composed

A, B, C = call("a"), call("b"), call("c")
# Replies no call can be read from: rolled back as unparsable, each different.
BROKEN_1, BROKEN_2 = (f"<use_mcp_tool><server_name>kb{i}</server_name>" for i in (1, 2))


def going_round(*replies, first=()):
    """A model that says ``first``, then ``replies`` in turn, round and round."""
    turns = itertools.cycle(replies)
    return ScriptedLLM(steps=list(first), responder=lambda messages, tools: next(turns))


async def run(llm, *, repeats=None, **options):
    options.setdefault("cap", 0)  # no rollbacks unless a test asks for them
    orchestrator, journal = await make(llm, **options)
    if repeats is not None:
        orchestrator.limits = replace(orchestrator.limits, max_cycle_repeats=repeats)
    state = await orchestrator.run("task")
    return state, journal


async def test_the_same_turn_three_times_ends_the_loop_as_today():
    """Length 1 with the default: two repeats after the first, as before cycles."""
    state, journal = await run(going_round(A), max_turns=50)
    assert state.end_reason is EndReason.LOOPING and state.turn == 3
    [looping] = journal.of(Looping)
    assert (looping.turn, looping.repeats, looping.cycle_length) == (3, 2, 1)
    assert (looping.since_turn, looping.with_rollbacks) == (1, False)


async def test_two_turns_in_turn_end_the_loop_at_the_configured_repeats():
    state, journal = await run(going_round(A, B), max_turns=50)
    assert state.end_reason is EndReason.LOOPING and state.turn == 6  # A B · A B · A B
    [looping] = journal.of(Looping)
    assert (looping.cycle_length, looping.repeats, looping.since_turn) == (2, 2, 1)


async def test_a_cycle_of_three_turns_ends_the_loop():
    state, journal = await run(going_round(A, B, C), max_turns=50)
    assert state.end_reason is EndReason.LOOPING and state.turn == 9
    [looping] = journal.of(Looping)
    assert (looping.cycle_length, looping.since_turn) == (3, 1)


async def test_a_cycle_of_four_is_not_looked_for():
    """A-B-A-C: every turn came before, but no cycle of one to three turns repeats."""
    state, journal = await run(going_round(A, B, A, C), max_turns=16)
    assert state.end_reason is EndReason.TURNS_EXHAUSTED and state.turn == 16
    assert not journal.of(Looping)


async def test_the_same_replies_with_new_results_are_no_cycle():
    readings = itertools.count()

    async def news_each_time(arguments):
        if arguments["query"] == "b":
            return f"reading {next(readings)}"
        return "always the same"

    orchestrator, journal = await make(going_round(A, B), max_turns=10, cap=0)
    info = orchestrator.tools.tools[0]
    orchestrator.tools.local[(info.server, info.name)] = LocalTool(info, news_each_time)
    state = await orchestrator.run("task")
    assert state.end_reason is EndReason.TURNS_EXHAUSTED and state.turn == 10
    assert not journal.of(Looping)


@pytest.mark.parametrize("ids", ["provider", "missing"])
async def test_calls_whose_ids_differ_still_go_round(ids):
    """Native calls with the provider's ids, new each time, or none (the protocol then
    numbers them by turn): the ids are not what the model said."""
    numbers = itertools.count()

    def model(messages, tools):
        n = next(numbers)
        call_id = f"call_{n:04x}" if ids == "provider" else ""
        return reply("", [ToolCall(call_id, "kb__lookup", {"query": "ab"[n % 2]})])

    state, journal = await run(ScriptedLLM(responder=model), protocol=NativeProtocol())
    assert state.end_reason is EndReason.LOOPING and state.turn == 6
    assert journal.of(Looping)[0].cycle_length == 2


def test_a_reply_key_leaves_ids_out_but_keeps_which_result_answers_which_call():
    def turn(first_id, second_id, *, swapped=False):
        calls = (ToolCall(first_id, "f", {"x": 1}), ToolCall(second_id, "f", {"x": 2}))
        answering = (second_id, first_id) if swapped else (first_id, second_id)
        answers = [ToolResult(answering[0], "one"), ToolResult(answering[1], "two")]
        return Message.assistant("", calls), Message.native_tool_results(answers)

    key = reply_key(*turn("c1", "c2"), 1)
    assert reply_key(*turn("t9c1", "t9c2"), 9).digest == key.digest
    assert reply_key(*turn("c1", "c2", swapped=True), 1).digest != key.digest
    said = turn("c1", "c2")[0]
    rolled_back = reply_key(said, RollbackReason.DUPLICATE, 2)
    assert not rolled_back.kept and rolled_back.digest != key.digest


async def test_rolled_back_replies_count_toward_a_cycle():
    """After one kept turn the model goes round two replies that are both rolled back:
    with room for ten rollbacks in a row, the sixth ends the loop."""
    llm = going_round(BROKEN_1, BROKEN_2, first=[A])
    state, journal = await run(llm, cap=10)
    assert state.end_reason is EndReason.LOOPING
    assert state.turn == 1 and len(state.rollbacks) == 6
    [looping] = journal.of(Looping)
    assert (looping.cycle_length, looping.with_rollbacks, looping.since_turn) == (2, True, 2)


async def test_rollbacks_between_the_turns_of_a_cycle_hide_it_not():
    """Greedy decoding: a repeated query is rolled back, asked again, said again and kept.
    Among all replies that is a cycle of four (A, A kept, B, B kept); the kept turns go
    round A-B, and end the loop."""
    llm = going_round(A, A, B, B, first=[A, B])
    state, journal = await run(llm, cap=5, max_turns=50)
    assert state.end_reason is EndReason.LOOPING
    assert state.turn == 6 and len(state.rollbacks) == 4
    [looping] = journal.of(Looping)
    assert (looping.cycle_length, looping.with_rollbacks, looping.since_turn) == (2, False, 1)


@pytest.mark.parametrize(
    ("repeats", "replies", "turns"),
    [(1, (A,), 2), (1, (A, B), 4), (3, (A,), 4), (3, (A, B), 8), (3, (A, B, C), 12)],
)
async def test_max_cycle_repeats_sets_how_long_a_cycle_may_go_round(repeats, replies, turns):
    state, journal = await run(going_round(*replies), repeats=repeats, max_turns=50)
    assert state.end_reason is EndReason.LOOPING and state.turn == turns
    assert journal.of(Looping)[0].repeats == repeats


@pytest.mark.parametrize(("setting", "turns"), [(None, 3), (1, 2), (4, 5)])
async def test_max_cycle_repeats_comes_from_the_role_s_config(setting, turns):
    """An unknown tool answers with the same error every time: the same turn ends the
    loop the third time by default (null), the second at 1, the fifth at 4."""
    stuck = call("x", server="nowhere", tool="lookup")
    overrides = [] if setting is None else [f"agent.main_agent.max_cycle_repeats={setting}"]
    cfg = composed("agent.tool_protocol=xml", "agent.main_agent.tools=[]", *overrides)
    manager = ToolManager(tool_servers(cfg))
    journal = Journal(None)
    try:
        factory = AgentFactory(cfg, going_round(stuck), manager)
        state = await factory.solve("task", journal)
    finally:
        await manager.aclose()
    assert state.end_reason is EndReason.LOOPING and state.turn == turns
    assert journal.of(Looping)[0].repeats == turns - 1


MANAGED = AnswerPolicy(context_management=True, max_final_answer_retries=1)
FINAL = replace(MANAGED, is_final_retry=True)
MAYBE = "Maybe \\boxed{Lyon}? " + A  # an intermediate answer, and the same call again


def undecided(messages, tools):
    """MAYBE every turn; asked to close (an answer, a post-mortem), no box."""
    return "I could not decide." if messages[-1].kind is MessageKind.INJECTED else MAYBE


async def finish(policy, *, max_turns):
    """The undecided model finalized under ``policy``; its loop ends looping at turn 3,
    or out of turns before that."""
    llm = ScriptedLLM(responder=undecided)
    orchestrator, journal = await make(llm, max_turns=max_turns, cap=0)
    orchestrator.finalizer.policy = policy
    state = await orchestrator.run("task")
    after_loop = [e.event for e in journal.events]
    after_loop = after_loop[after_loop.index("loop_ended") + 1 :]
    return state, journal, after_loop


async def test_looping_with_an_intermediate_box_is_finalized_as_turns_exhausted():
    """Context management on, not the final retry: no closing answer, a post-mortem for
    the next retry, the intermediate box unused, exactly as when the turns run out."""
    looping, journal, finalized = await finish(MANAGED, max_turns=50)
    out_of_turns, _, finalized_out_of_turns = await finish(MANAGED, max_turns=2)
    assert looping.end_reason is EndReason.LOOPING and looping.intermediate_answers
    assert out_of_turns.end_reason is EndReason.TURNS_EXHAUSTED
    assert finalized == finalized_out_of_turns
    assert journal.of(AnswerSkipped) and journal.of(PostMortem)
    assert looping.final_answer is None and looping.post_mortem
    # On the final retry both ask for the answer, then fall back to the box.
    for max_turns, reason in ((50, EndReason.LOOPING), (2, EndReason.TURNS_EXHAUSTED)):
        state, journal, _ = await finish(FINAL, max_turns=max_turns)
        assert state.end_reason is reason and not journal.of(AnswerSkipped)
        assert (state.final_answer, state.provenance) == ("Lyon", Provenance.INTERMEDIATE_FALLBACK)


def test_a_looping_line_from_before_cycles_reads_as_a_cycle_of_one():
    old = decode({"ts": "2026-01-01T00:00:00+00:00", "event": "looping", "turn": 3, "repeats": 2})
    assert isinstance(old, Looping)
    assert (old.cycle_length, old.since_turn, old.with_rollbacks) == (1, None, False)
