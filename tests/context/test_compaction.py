"""Compaction: notes written by the model replace older rounds, near the window's end."""

from __future__ import annotations

import pytest

from deepledger.config import CUT_BATCH, ContextConfig
from deepledger.context.compaction import NoteWriter, transcript
from deepledger.context.pairing import pairing_problems
from deepledger.context.rounds import split_rounds
from deepledger.context.strategies import Compaction, make_strategy
from deepledger.context.strategy import RequestBuilder
from deepledger.errors import ConfigError, TransientLLMError
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.tokens import count_messages
from deepledger.llm.usage import Price, UsageLedger
from deepledger.messages import MessageKind
from deepledger.records.events import Compacted, CompactionFailed, CompactionSkipped
from tests.support.config import composed
from tests.support.histories import COUNTER, NOTES, SEEDS, compact, padded


@pytest.mark.parametrize("keep_rounds", [1, 2, 4])
@pytest.mark.parametrize("keep", [-1, 0, 2])
async def test_compaction_keeps_pairing_head_and_the_notes_and_never_grows(keep_rounds, keep):
    for seed in SEEDS[:120]:
        history = padded(seed)
        strategy = Compaction(keep_rounds, min_saving=0.0)
        before = RequestBuilder(Compaction(keep_rounds), keep)(history)
        changed, journal = await compact(strategy, history, ScriptedLLM([NOTES]), keep)
        head, rounds = split_rounds(history)
        builder = RequestBuilder(strategy, keep)
        request = builder(history)
        assert pairing_problems(request) == [] and builder.last_repairs == [], seed
        assert request[:2] == history[:2], seed  # the system prompt and the task
        assert count_messages(COUNTER, request) <= count_messages(COUNTER, before), seed
        if len(rounds) <= keep_rounds:
            assert not changed and request == before, seed
            continue
        if not changed:  # the old rounds were shorter than the notes: nothing to gain
            assert "not shorter" in journal.of(CompactionFailed)[0].reason, seed
            assert request == before, seed
            continue
        assert request[2].kind is MessageKind.INJECTED and NOTES in request[2].content, seed
        kept = [m for r in rounds[-keep_rounds:] for m in r]
        assert (
            builder(history)[3:] == RequestBuilder(Compaction(keep_rounds), keep)(head + kept)[2:]
        ), seed
        assert journal.of(Compacted)[0].rounds_replaced == len(rounds) - keep_rounds


async def test_notes_ride_along_and_the_next_compaction_builds_on_them():
    history = padded(11)
    strategy = Compaction(1, min_saving=0.0)
    llm = ScriptedLLM([NOTES, "Task goal: find it. Confirmed facts: more."])
    assert (await compact(strategy, history, llm))[0]
    grown = history + padded(12)[2:]  # more rounds after the first compaction
    changed, _ = await compact(strategy, grown, llm)
    assert changed and strategy.compactions == 2
    second_prompt = llm.calls[1].messages[0].content
    assert NOTES in second_prompt  # the earlier notes are part of what is summarized
    assert "Confirmed facts: more." in strategy.select(grown)[2].content


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("", "came back empty"),
        (TransientLLMError("server down"), "the summary call failed"),
        ("word " * 3000, "not shorter"),
    ],
    ids=["empty", "error", "longer"],
)
async def test_a_failed_summary_leaves_the_request_as_it_was(reply, reason):
    history = padded(11)
    strategy = Compaction(1, min_saving=0.0)
    before = strategy.select(history)
    changed, journal = await compact(strategy, history, ScriptedLLM([reply]))
    assert not changed and strategy.select(history) == before
    assert reason in journal.of(CompactionFailed)[0].reason
    # Not tried again on the same history: only once another round has come.
    assert not (await compact(strategy, history, ScriptedLLM([])))[0]


async def test_a_small_saving_is_not_worth_breaking_the_cache():
    history = padded(11)
    strategy = Compaction(1, min_saving=0.99)
    changed, journal = await compact(strategy, history, ScriptedLLM([]))
    assert not changed and journal.of(CompactionSkipped)
    # ...unless the window guard would end the loop otherwise: then any saving is taken.
    changed, _ = await compact(strategy, history, ScriptedLLM([NOTES]), urgent=True)
    assert changed


def test_the_transcript_is_plain_text_with_long_results_cut():
    history = padded(3)
    text = transcript(history[2:], result_chars=50)
    assert "[agent]\nreply 1" in text and "[tool result]" in text and " [...]" in text


def test_compaction_settings_are_checked():
    made = make_strategy(ContextConfig("compaction", 3, compact_at=0.7, min_saving=0.1))
    assert made == Compaction(3, compact_at=0.7, min_saving=0.1, cut_batch=CUT_BATCH)
    for bad, key in [
        (dict(keep_rounds=0), "keep_rounds=0"),
        (dict(keep_rounds=2, compact_at=1.0), "compact_at=1.0"),
        (dict(keep_rounds=2, compact_at=0.0), "compact_at=0.0"),
        (dict(keep_rounds=2, min_saving=1.0), "min_saving=1.0"),
    ]:
        with pytest.raises(ConfigError, match=rf"agent\.context\.{key}"):
            Compaction(**bad)


async def test_another_model_can_write_the_notes_at_its_own_price():
    history = padded(11)
    strategy = Compaction(1, min_saving=0.0)
    writer = ScriptedLLM([NOTES])
    other = NoteWriter(writer, GenerationSettings(max_tokens=300), Price(1.0, 2.0, 0.1, 1.0))
    ledger = UsageLedger()
    agent = ScriptedLLM([])  # must not be asked
    changed, _ = await compact(strategy, history, agent, ledger=ledger, writer=other)
    assert changed and len(writer.calls) == 1 and writer.calls[0].settings.max_tokens == 300
    # Priced as the writer, and aside from the loop's calls: the guard's last usage is
    # still the conversation's own.
    assert ledger.calls == [] and ledger.delegated[0].cost > 0


def test_the_notes_model_is_an_llm_preset_named_in_config():
    from deepledger.bench.services import note_writer
    from deepledger.cli import config_dir

    cfg = composed("agent.context.strategy=compaction", "agent.context.summary_llm=local")
    writer = note_writer(cfg, config_dir())
    assert writer is not None and writer.llm.model == "SmolLM2-135M-Instruct"
    assert note_writer(composed("agent.context.summary_llm=local"), config_dir()) is None
    bad = composed("agent.context.strategy=compaction", "agent.context.summary_llm=nope")
    with pytest.raises(ConfigError, match=r"agent\.context\.summary_llm='nope' is not an llm"):
        note_writer(bad, config_dir())


async def test_the_transcript_is_cut_to_the_note_writers_window():
    history = padded(11)
    strategy = Compaction(1, min_saving=0.0)
    writer = ScriptedLLM([NOTES])
    other = NoteWriter(writer, GenerationSettings(max_tokens=100), None, 2000)
    changed, _ = await compact(strategy, history, ScriptedLLM([]), writer=other)
    sent = writer.calls[0].messages[0].content
    assert changed and COUNTER.count(sent) < 2000 - strategy.summary_max_tokens
    assert " [...]" in sent  # long results were cut to make it fit
