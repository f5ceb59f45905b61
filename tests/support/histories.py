"""Random, well-paired conversation histories (one per seed, so a failing case names
its seed) and compaction driven on them with a scripted note writer."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from deepledger.context.compaction import ModelNotes, NoteWriter
from deepledger.context.strategies.compaction import Compaction
from deepledger.llm.base import GenerationSettings
from deepledger.llm.tokens import default_counter
from deepledger.llm.usage import UsageLedger
from deepledger.messages import Message, MessageKind, ToolCall, ToolResult
from deepledger.store.journal import Journal

SEEDS = range(300)
COUNTER = default_counter()
NOTES = "Task goal: find it. Confirmed facts: none. Key decisions: none. Open leads: all."


def random_history(seed: int) -> list[Message]:
    rng = random.Random(seed)
    native = rng.random() < 0.5
    history = [Message.system("sys"), Message.task(f"task {seed}")]
    for turn in range(1, rng.randint(1, 14) + 1):
        if rng.random() < 0.15:
            history.append(Message.injected(f"note {turn}"))
        calls = [
            ToolCall(f"t{turn}c{i}", "lookup", {"q": i}, "" if native else "kb")
            for i in range(1, rng.choice([0, 1, 1, 1, 2, 3]) + 1)
        ]
        history.append(Message.assistant(f"reply {turn}", calls))
        if not calls:
            continue
        results = [ToolResult(c.id, f"result of {c.id}") for c in calls]
        if native:
            history.append(Message.native_tool_results(results))
        else:
            if rng.random() < 0.2:  # malformed markup gets a notice with no call of its own
                results.append(ToolResult(f"t{turn}m1", "Tool call not run", is_error=True))
            text = "\n\n".join(r.content for r in results)
            history.append(Message.text_tool_results(text, results))
    return history


def padded(seed: int):
    """A random history whose tool results are long enough to be worth compacting."""
    pad = " facts" * 200
    return [
        m
        if m.kind is not MessageKind.TOOL_RESULTS
        else replace(
            m,
            content=m.content + pad if m.content else "",
            tool_results=tuple(replace(r, content=r.content + pad) for r in m.tool_results),
        )
        for m in random_history(seed)
    ]


async def compact(
    strategy: Compaction,
    history,
    llm,
    keep=-1,
    urgent=False,
    ledger=None,
    writer: NoteWriter | None = None,
) -> tuple[bool, Journal]:
    """``strategy`` compacting ``history``, its notes written by ``llm`` (or by
    ``writer``'s model)."""
    journal = Journal(None)
    ledger = ledger if ledger is not None else UsageLedger()
    notes = ModelNotes(llm, GenerationSettings(max_tokens=500), journal, ledger, writer)
    changed = await strategy.compact(
        history,
        notes_writer=notes,
        counter=COUNTER,
        window=100_000,
        journal=journal,
        turn=9,
        keep_tool_result=keep,
        urgent=urgent,
    )
    return changed, journal


def growing_histories(turns: int, result: Callable[[int], str]) -> list[list[Message]]:
    """The history before each of ``turns`` turns of one XML tool call and its result
    (``result(n)``, the text turn n's result message carries): a task only growing."""
    history = [Message.system("sys"), Message.task("task")]
    states = [list(history)]
    for n in range(1, turns + 1):
        call = ToolCall(f"c{n}", "search", {"q": n}, server_name="web")
        history += [
            Message.assistant(f"reply {n}", [call]),
            Message.text_tool_results(result(n), [ToolResult(f"c{n}", f"raw {n}")]),
        ]
        states.append(list(history))
    return states
