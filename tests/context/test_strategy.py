"""Context strategies and the pairing invariant, over many random histories.

Each history is built from a seed: system prompt, task, then rounds of replies with
0-3 parallel calls (native or XML), their results (XML ones sometimes with a notice for
malformed markup), and now and then an injected prompt. Seeds make failures replayable:
a failing case names its seed.
"""

from __future__ import annotations

import random

import pytest

from deepledger.config import CUT_BATCH, ContextConfig
from deepledger.context.pairing import (
    INTERRUPTED,
    Break,
    pairing_problems,
    repair_pairing,
)
from deepledger.context.rounds import split_rounds
from deepledger.context.strategies import KeepToolResults, RoundWindow, make_strategy
from deepledger.context.strategy import RequestBuilder
from deepledger.errors import ConfigError
from deepledger.messages import Message, MessageKind, Role, ToolCall, ToolResult
from tests.support.histories import SEEDS, random_history


def strategies():
    return [KeepToolResults(), *(RoundWindow(k) for k in (1, 2, 3, 5))]


@pytest.mark.parametrize("strategy", strategies(), ids=lambda s: f"{s.name}")
@pytest.mark.parametrize("keep", [-1, 0, 2])
def test_every_strategy_keeps_pairing_head_and_never_grows_the_request(strategy, keep):
    for seed in SEEDS:
        history = random_history(seed)
        assert pairing_problems(history) == [], seed  # the generator makes sound histories
        builder = RequestBuilder(strategy, keep)
        request = builder(history)
        assert pairing_problems(request) == [], seed
        assert builder.last_repairs == [], seed  # round cuts never need a repair
        assert request[0] == history[0], seed
        assert request[1].kind is MessageKind.TASK and request[1].content == f"task {seed}"
        assert len(request) <= len(history), seed
        assert builder.last_dropped == len(history) - len(request), seed


def test_round_window_keeps_exactly_the_last_rounds():
    for seed in SEEDS:
        history = random_history(seed)
        head, rounds = split_rounds(history)
        assert head == history[:2] and sum(map(len, rounds)) == len(history) - 2, seed
        for round_ in rounds:  # one reply a round, a user prompt only at its start
            assert sum(m.role is Role.ASSISTANT for m in round_) == 1, seed
            users = [i for i, m in enumerate(round_) if m.kind is MessageKind.INJECTED]
            assert users in ([], [0]), seed
        for k in (1, 3):
            kept = RoundWindow(k).select(history)
            assert kept == head + [m for r in rounds[-k:] for m in r], seed


def test_closing_prompts_come_after_the_window_and_take_no_round():
    history = random_history(7)
    _, rounds = split_rounds(history)
    builder = RequestBuilder(RoundWindow(1))
    request = builder(history, closing=[Message.injected("Answer now.")])
    assert request == history[:2] + rounds[-1] + [Message.injected("Answer now.")]
    assert builder.last_dropped == len(history) - 2 - len(rounds[-1])


def naive_cut(history: list[Message], rng: random.Random) -> list[Message]:
    """What a careless trimmer does: drop a few messages anywhere after the task."""
    body = history[2:]
    for _ in range(rng.randint(1, 3)):
        if body:
            body.pop(rng.randrange(len(body)))
    return history[:2] + body


def test_repair_fixes_any_naive_cut_deterministically_and_is_idempotent():
    broken_seen = 0
    for seed in SEEDS:
        rng = random.Random(seed)
        cut = naive_cut(random_history(seed), rng)
        repaired, problems = repair_pairing(cut)
        broken_seen += bool(problems)
        assert pairing_problems(repaired) == [], seed
        assert repair_pairing(repaired) == (repaired, []), seed
        assert repair_pairing(cut)[0] == repaired, seed  # same input, same output
        assert repaired[:2] == cut[:2], seed
    assert broken_seen > 100  # the cuts really did break pairing, often


def test_repair_drops_orphans_and_answers_calls_with_interrupted():
    reply = Message.assistant("", [ToolCall("a", "f"), ToolCall("b", "f")])
    results = Message.native_tool_results([ToolResult("a", "ra"), ToolResult("z", "rz")])
    orphan = Message.native_tool_results([ToolResult("q", "rq")])
    history = [
        Message.system("s"),
        Message.task("t"),
        orphan,
        reply,
        results,
        Message.assistant("end"),
    ]
    repaired, problems = repair_pairing(history)
    assert {(p.kind, p.call_id) for p in problems} == {
        (Break.ORPHAN_RESULTS, ""),
        (Break.RESULT_WITHOUT_CALL, "z"),
        (Break.CALL_WITHOUT_RESULT, "b"),
    }
    fixed = repaired[3]
    assert [(r.call_id, r.content) for r in fixed.tool_results] == [("a", "ra"), ("b", INTERRUPTED)]
    assert len(repaired) == 5 and repaired[2] is reply


def test_a_reply_whose_calls_never_ran_may_precede_the_closing_prompt():
    """The loop ended (max turns) before the newest reply's calls ran: not a break."""
    reply = Message.assistant("", [ToolCall("a", "f", server_name="kb")])
    history = [Message.system("s"), Message.task("t"), reply, Message.injected("Answer now.")]
    assert pairing_problems(history) == []
    earlier = [Message.system("s"), Message.task("t"), reply, Message.assistant("more")]
    repaired, problems = repair_pairing(earlier)
    assert [p.kind for p in problems] == [Break.CALL_WITHOUT_RESULT]
    assert repaired[3].role is Role.USER and INTERRUPTED in repaired[3].content  # XML: text


def test_strategy_config_is_checked():
    assert make_strategy(ContextConfig()).name == "keep_tool_results"
    assert make_strategy(ContextConfig("round_window", 3)) == RoundWindow(3, CUT_BATCH)
    assert make_strategy(ContextConfig("round_window", 3, cut_batch=1)) == RoundWindow(3)
    with pytest.raises(ConfigError, match=r"agent\.context\.strategy='window'"):
        make_strategy(ContextConfig("window"))
    with pytest.raises(ConfigError, match=r"agent\.context\.keep_rounds=0"):
        RoundWindow(0)


def grow(history: list[Message], turn: int) -> list[Message]:
    call = ToolCall(f"c{turn}", "lookup", {"q": turn}, "kb")
    results = [ToolResult(call.id, f"result {turn}")]
    return [
        *history,
        Message.assistant(f"reply {turn}", [call]),
        Message.text_tool_results(f"result {turn}", results),
    ]


@pytest.mark.parametrize(
    ("strategy", "keep", "broken_at", "by"),
    [
        (KeepToolResults(), -1, [], None),  # append-only: the cache always hits
        # each turn blanks the result before the newest
        (KeepToolResults(), 1, [2, 3, 4], "keep_tool_result"),
        # the window starts sliding at the third round
        (RoundWindow(2), -1, [3, 4], "context_strategy"),
    ],
    ids=["keep-everything", "keep-1", "round-window-2"],
)
def test_a_broken_prefix_is_noticed_with_its_cause(strategy, keep, broken_at, by):
    builder = RequestBuilder(strategy, keep)
    history = [Message.system("s"), Message.task("t")]
    broken, causes = [], set()
    for turn in range(1, 5):
        history = grow(history, turn)
        builder(history)
        if builder.last_prefix_broken:
            broken.append(turn)
            causes.add(builder.last_prefix_broken_by)
        else:
            assert builder.last_prefix_broken_by is None
    assert broken == broken_at
    assert causes == ({by} if by else set())


def test_the_builder_checks_only_what_changed_and_still_finds_new_breaks():
    """The second request appends to a sound first one; its check starts near the end,
    yet a reply whose calls never ran stops being exempt once another reply follows."""
    reply = Message.assistant("", [ToolCall("a", "f", server_name="kb")])
    first = [Message.system("s"), Message.task("t"), reply, Message.injected("note")]
    builder = RequestBuilder(KeepToolResults())
    builder(first)
    assert builder.last_repairs == []  # the loop ended before the call ran: not a break
    builder([*first, Message.assistant("more")])
    assert [(p.kind, p.call_id) for p in builder.last_repairs] == [(Break.CALL_WITHOUT_RESULT, "a")]
    grown = random_history(3)
    builder = RequestBuilder(KeepToolResults())
    for end in range(2, len(grown) + 1):
        builder(grown[:end])
        assert builder.last_repairs == []
    orphan = Message.native_tool_results([ToolResult("zz", "late")])
    builder([*grown, Message.injected("x"), orphan])
    assert [p.kind for p in builder.last_repairs] == [Break.ORPHAN_RESULTS]


# -- batched round windows (agent.context.cut_batch) ---------------------------------------
def research(turns: int, answer: bool = False) -> list[Message]:
    history = [Message.system("sys"), Message.task("task")]
    for n in range(1, turns + 1):
        call = ToolCall(f"c{n}", "search", {"q": n}, server_name="web")
        history += [
            Message.assistant(f"reply {n}", [call]),
            Message.text_tool_results(f"result {n}", [ToolResult(f"c{n}", f"raw {n}")]),
        ]
    if answer:
        history.append(Message.assistant("Done: \\boxed{1}"))
    return history


def test_a_batched_window_lets_rounds_pile_up_then_drops_a_batch_at_once():
    window = RoundWindow(2, cut_batch=3)
    kept = [len(split_rounds(window.select(research(n)))[1]) for n in range(12)]
    assert kept == [0, 1, 2, 3, 4, 2, 3, 4, 2, 3, 4, 2]
    builder = RequestBuilder(window)
    breaks = [n for n in range(12) if (builder(research(n)), builder.last_prefix_broken)[1]]
    assert breaks == [5, 8, 11]  # between them each request only grew at its end
    assert [len(split_rounds(RoundWindow(2).select(research(n)))[1]) for n in range(5)] == [
        *(0, 1, 2, 2, 2)  # one at a time: the reference runtime's window
    ]


def test_the_models_answer_does_not_set_off_a_batched_cut_for_the_closing_call():
    # Four rounds of results, then the answer: a fifth round, which one at a time cuts.
    assert len(split_rounds(RoundWindow(2, cut_batch=3).select(research(4, answer=True)))[1]) == 5
    assert len(split_rounds(RoundWindow(2).select(research(4, answer=True)))[1]) == 2


def test_an_urgent_window_cut_and_an_adopted_one_count_batches_on_from_there():
    window = RoundWindow(2, cut_batch=3)
    assert window.pending(research(4)) == 2
    window.cut_now(research(4))
    assert [window.dropped(research(n)) for n in range(4, 9)] == [2, 2, 2, 5, 5]
    adopted = RoundWindow(2, cut_batch=3)
    adopted.adopt_cut(2)
    assert [adopted.dropped(research(n)) for n in range(4, 9)] == [2, 2, 2, 5, 5]
    with pytest.raises(ConfigError, match=r"agent\.context\.cut_batch=0"):
        RoundWindow(2, cut_batch=0)
