"""The context policy: one object decides what each request sends and when to compact."""

from __future__ import annotations

import itertools
import pickle

import pytest

from deepledger.config import ContextConfig
from deepledger.context.compaction import ModelNotes
from deepledger.context.guard import ContextWindow, WindowGuard, check_window, drop_last_exchange
from deepledger.context.policy import ContextPolicy
from deepledger.context.rounds import split_rounds
from deepledger.context.strategies import Compaction, KeepToolResults, RoundWindow, make_strategy
from deepledger.context.trim import OMITTED_PLACEHOLDER
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.tokens import CharCounter, count_messages
from deepledger.llm.usage import UsageLedger
from deepledger.messages import (
    Message,
    MessageKind,
    Usage,
    forget_wire,
    remember_wire,
    wire_memo,
)
from deepledger.records.events import Compacted, ContextCut
from deepledger.store.journal import Journal
from tests.support.histories import COUNTER, NOTES, growing_histories, padded

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


# -- batched cuts --------------------------------------------------------------------------
def turns(count: int, size: int = 400) -> list[list[Message]]:
    """The history before each of ``count`` turns, each result ``size`` words long."""
    return growing_histories(count, lambda n: f"result {n} " + "word " * size)


async def run_turns(policy: ContextPolicy, states: list[list[Message]]) -> list[list[Message]]:
    return [(await policy.prepare(h, None, turn=n)).messages for n, h in enumerate(states)]


def keeping(keep: int, batch: int, window: int = 10**9) -> tuple[ContextPolicy, Journal]:
    journal = Journal(None)
    strategy = KeepToolResults(cut_batch=batch)
    policy = ContextPolicy(
        strategy, keep_tool_result=keep, guard=guard(window), journal=journal, usage_reported=False
    )
    return policy, journal


async def test_each_batched_cut_is_journaled_with_what_it_freed_and_what_it_left_uncached():
    policy, journal = keeping(2, 3)
    sent = await run_turns(policy, turns(11))
    cuts = journal.of(ContextCut)
    assert [c.turn for c in cuts] == [5, 8, 11]
    assert [(c.results_blanked, c.blanked_total, c.urgent) for c in cuts] == [
        (3, 3, False),
        (3, 6, False),
        (3, 9, False),
    ]
    chars = CharCounter()  # the journal's estimate
    placeholder = count_messages(chars, [Message.text_tool_results(OMITTED_PLACEHOLDER, [])])
    result = count_messages(chars, [turns(1)[1][-1]])
    assert cuts[0].tokens_freed == pytest.approx(3 * (result - placeholder), rel=0.05)
    # What comes after the first blanked result is billed uncached: two kept results.
    assert 2 * result < cuts[0].uncached_tokens < 3 * result
    assert len(sent[5]) == len(sent[4]) + 2  # a cut keeps every message's place


async def test_an_urgent_cut_comes_when_the_guard_would_otherwise_end_the_loop():
    states = turns(8)
    # A window the batched request of turn 5 fits and that of turn 6 overflows.
    batched = ContextPolicy(KeepToolResults(cut_batch=5), keep_tool_result=2)
    fits, over = [(await batched.prepare(states[n], closing=[])).messages for n in (5, 6)]
    policy, journal = keeping(2, 5, (window_at(1.0, fits) + window_at(1.0, over)) // 2)
    sent = await run_turns(policy, states[:8])
    assert all(sent)  # no turn was ruled out
    cuts = [(c.turn, c.urgent, c.blanked_total) for c in journal.of(ContextCut)]
    assert cuts == [(6, True, 4)]  # down to the limit at once; the next batch is not due yet
    assert sent[7][: len(sent[6])] == sent[6]  # and the request grows at its end from there
    # With no batch piling up there is nothing to cut early: the guard ends the loop.
    cut_down = ContextPolicy(KeepToolResults(cut_batch=1), keep_tool_result=2)
    small = (await cut_down.prepare(states[6], closing=[])).messages
    one, _ = keeping(2, 1, window_at(1.0, small) - 1)
    assert not (await one.prepare(states[6], None, turn=6)).fits


async def test_a_policy_made_mid_way_sends_what_the_uninterrupted_one_did():
    """As a resume does: the same history, a new policy, the journal's cuts taken back."""
    states = turns(16)
    batched = ContextPolicy(KeepToolResults(cut_batch=5), keep_tool_result=2)
    big = (await batched.prepare(states[6], closing=[])).messages
    policy, journal = keeping(2, 5, window_at(1.0, big) - 50)  # an urgent cut at turn 6
    uninterrupted = await run_turns(policy, states)
    assert any(c.urgent for c in journal.of(ContextCut))
    for start in (3, 7, 12):
        resumed, _ = keeping(2, 5, window_at(1.0, big) - 50)
        for cut in journal.of(ContextCut):
            if cut.turn < start:
                resumed.adopt_cut(cut)
        again = [(await resumed.prepare(h, None, turn=n)).messages for n, h in enumerate(states)]
        assert again[start:] == uninterrupted[start:], start


async def test_the_stable_prefix_is_what_the_next_cut_leaves_as_it_was():
    states = turns(14)
    policy, _ = keeping(2, 3)
    requests = [await policy.prepare(h, None, turn=n) for n, h in enumerate(states)]
    for before, after in itertools.pairwise(requests):
        assert after.messages[: before.stable_prefix] == before.messages[: before.stable_prefix]
    assert requests[5].stable_prefix == 2 + 2 * 3 + 1  # head, three blanked rounds, a reply
    window = ContextPolicy(RoundWindow(2, cut_batch=3), guard=guard(10**9))
    assert (await window.prepare(states[9], None, turn=9)).stable_prefix == 2  # the head
    everything = ContextPolicy(guard=guard(10**9))
    request = await everything.prepare(states[9], None, turn=9)
    assert request.stable_prefix == len(request.messages)  # nothing is ever cut


async def test_an_urgent_cut_that_cannot_save_the_turn_leaves_nothing_behind():
    states = turns(8)
    policy, journal = keeping(2, 5, 10)  # nothing fits a 10-token window
    assert not (await policy.prepare(states[6], None, turn=6)).fits
    trimmer = policy._builder.trimmer
    assert (trimmer.floor, trimmer.high) == (0, 0) and not journal.of(ContextCut)


@pytest.mark.parametrize("strategy", ["keep", "window"])
async def test_what_a_batch_cut_stays_cut_when_the_guard_takes_the_newest_exchange_back(strategy):
    states = turns(7)
    if strategy == "keep":
        policy = ContextPolicy(KeepToolResults(cut_batch=5), keep_tool_result=2)
    else:
        policy = ContextPolicy(RoundWindow(2, cut_batch=5))
    cut = await policy.prepare(states[7], closing=[])  # seven results: five cut
    assert cut.blanked == 5 or cut.left_out == 10
    closing = await policy.prepare(drop_last_exchange(states[7])[0], closing=[])
    # Six results left: a fresh schedule would show them all again; the closing call
    # keeps the cut and only loses the newest exchange.
    assert closing.messages == cut.messages[:-2]
