"""The context policy: one object decides what each request sends and when to compact."""

from __future__ import annotations

import pickle

from deepledger.config import ContextConfig
from deepledger.context.compaction import Compaction, ModelNotes
from deepledger.context.guard import ContextWindow, WindowGuard, check_window, drop_last_exchange
from deepledger.context.policy import ContextPolicy
from deepledger.context.rounds import split_rounds
from deepledger.context.strategy import RoundWindow, make_strategy
from deepledger.context.trim import OMITTED_PLACEHOLDER
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.usage import UsageLedger
from deepledger.messages import (
    Message,
    MessageKind,
    Usage,
    forget_wire,
    remember_wire,
    wire_memo,
)
from deepledger.records.events import Compacted
from deepledger.store.journal import Journal
from tests.support.histories import COUNTER, NOTES, padded

SUMMARY = "Answer now in \\boxed{}."
HUGE = Usage(input_tokens=10**9, output_tokens=0)  # a last call that filled any window


def guard(window: int) -> WindowGuard:
    return WindowGuard(COUNTER, ContextWindow(window), 100, SUMMARY)


def compacting(window: int, notes_llm: ScriptedLLM) -> tuple[ContextPolicy, Journal]:
    journal = Journal(None)
    notes = ModelNotes(notes_llm, GenerationSettings(max_tokens=500), journal, UsageLedger())
    policy = ContextPolicy(
        Compaction(1, min_saving=0.0), guard=guard(window), notes=notes, journal=journal
    )
    return policy, journal


def window_at(fraction: float, history: list[Message]) -> int:
    """A window the guard's estimate of ``history`` fills to ``fraction``."""
    return int(guard(10**9).estimate(history, None).total / fraction)


async def test_a_closing_request_is_the_pick_then_its_prompts_trimmed_never_guarded():
    history = padded(11)
    policy = ContextPolicy(RoundWindow(1), keep_tool_result=0, guard=guard(10))
    prompt = Message.injected(SUMMARY)
    request = await policy.prepare(history, HUGE, closing=[prompt])
    head, rounds = split_rounds(history)
    assert request.fits and request.window is None  # a 10-token window rules out nothing
    assert request.messages[: len(head)] == head and request.messages[-1] == prompt
    assert request.left_out == len(history) - len(head) - len(rounds[-1])
    results = [m for m in request.messages if m.kind is MessageKind.TOOL_RESULTS]
    assert request.blanked == len(results) and all(
        m.content in ("", OMITTED_PLACEHOLDER) for m in results
    )


async def test_a_turn_over_the_window_sends_nothing_and_continues_without_its_newest_exchange():
    history = padded(11)
    window = window_at(1.5, RoundWindow(1).select(history))  # the pick is over it
    policy = ContextPolicy(RoundWindow(1), guard=guard(window))
    request = await policy.prepare(history, None, turn=4)
    assert not request.fits and request.messages == []
    # The verdict is on the pick, but the history to continue from is the whole one.
    assert request.window is not None
    assert request.window.history == drop_last_exchange(history)[0]
    assert (await policy.prepare(history, None, turn=4, closing=[])).messages  # still built


async def test_with_no_usage_yet_the_whole_history_is_counted_in_a_replay_the_pick():
    """Before any call has reported usage the guard counts the history as it stands, as
    the loop always has, so a round window does not lower the estimate; a replay, whose
    calls report none, counts the pick."""
    history = padded(11)
    pick = RoundWindow(1).select(history)
    window = (window_at(1.0, pick) + window_at(1.0, history)) // 2  # the pick fits, not all
    request = await ContextPolicy(RoundWindow(1), guard=guard(window)).prepare(history, None)
    old = check_window(
        history,
        last_usage=None,
        summary_prompt=SUMMARY,
        max_context_length=window,
        max_tokens=100,
        counter=COUNTER,
    )
    assert not old.fits and request.window == old
    replayed = ContextPolicy(RoundWindow(1), guard=guard(window), usage_reported=False)
    assert (await replayed.prepare(history, None)).fits


async def test_compaction_is_due_near_the_end_of_the_window_not_before():
    history = padded(11)
    early, journal = compacting(window_at(0.5, history), ScriptedLLM([]))
    assert not (await early.prepare(history, None, turn=3)).compacted and not journal.events
    policy, journal = compacting(window_at(0.9, history), ScriptedLLM([NOTES]))
    request = await policy.prepare(history, None, turn=3)
    assert request.compacted and request.fits and request.prefix_broken_by is None
    assert NOTES in request.messages[2].content and journal.of(Compacted)[0].turn == 3
    assert request.left_out > 0  # the older rounds are in the notes, not the request


async def test_after_a_compaction_the_last_usage_is_not_trusted_until_the_next_request():
    """The last call's usage describes a request from before the notes: the guard
    counts the compacted pick instead, until a request has been built from it."""
    history = padded(11)
    policy, _ = compacting(window_at(0.5, history), ScriptedLLM([NOTES]))
    assert await policy.compact_now(history, turn=3)  # as after the server's refusal
    request = await policy.prepare(history, HUGE, turn=3)
    assert request.fits and not request.compacted
    # The next turn's usage is that request's: trusted again (and this one overflows).
    assert not (await policy.prepare(history, HUGE, turn=4)).fits


async def test_only_a_compacting_policy_compacts_or_adopts_notes():
    history = padded(11)
    policy = ContextPolicy(make_strategy(ContextConfig("round_window", 2)), guard=guard(1000))
    assert not policy.compacts and not await policy.compact_now(history, turn=1)
    assert not policy.adopt_notes(history, NOTES, rounds_kept=1)
    compaction, _ = compacting(1000, ScriptedLLM([]))
    assert compaction.compacts and compaction.adopt_notes(history, NOTES, rounds_kept=1)
    picked = (await compaction.prepare(history, closing=[])).messages
    assert NOTES in picked[2].content


async def test_messages_a_turn_does_not_send_give_back_their_kept_wire_bytes():
    history = padded(11)
    policy = ContextPolicy(RoundWindow(3), keep_tool_result=1, guard=guard(10**9))
    for message in history:  # as a client's encoder leaves them (llm/openai.py)
        remember_wire(message, "_openai_wire", b"{...}")
    request = await policy.prepare(history, None)
    sent = {id(m) for m in request.messages}
    assert request.left_out and request.blanked  # rounds dropped, results blanked
    for message in history:
        kept = wire_memo(message, "_openai_wire")
        assert (kept is not None) is (id(message) in sent), message.kind


def test_a_copied_message_leaves_its_kept_wire_bytes_behind():
    message = Message.task("x" * 5_000)
    remember_wire(message, "_openai_wire", b"x" * 5_000)
    copy = pickle.loads(pickle.dumps(message))
    assert copy == message and wire_memo(copy, "_openai_wire") is None
    forget_wire(message)
    assert wire_memo(message, "_openai_wire") is None
