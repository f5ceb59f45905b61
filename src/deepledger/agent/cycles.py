"""Cycle detection: whether the loop's newest replies go round the same turns again.

Each reply of the loop, kept or rolled back, is reduced to a :class:`ReplyKey` by
:func:`reply_key` (the reply and what came of it, call ids replaced by their places);
:func:`find_cycle` looks for a cycle of one to ``MAX_CYCLE_LENGTH`` replies that the
newest ones repeat ``agent.main_agent.max_cycle_repeats`` times after its first round,
and :func:`note_reply` adds a reply and says when the loop should end as ``looping``.
The turn loop and the resume (which rebuilds the replies from a journal) both use it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from deepledger.agent.rollback import RollbackReason
from deepledger.agent.state import ReplyKey
from deepledger.messages import Message, sorted_json
from deepledger.records.events import Looping

# The longest cycle of turns the loop check looks for: A-A-A, A-B-A-B-A-B, A-B-C-A-B-C-...
MAX_CYCLE_LENGTH = 3


@dataclass(frozen=True)
class Cycle:
    """What the loop check found: ``length`` replies a round, the round repeated
    ``repeats`` times after its first, which began at ``since_turn``."""

    length: int
    repeats: int
    since_turn: int
    with_rollbacks: bool  # found among all replies, rolled-back ones included


def reply_key(reply: Message, outcome: Message | RollbackReason, turn: int) -> ReplyKey:
    """``reply`` and what came of it (its tool results message, or why it was rolled
    back) as the cycle check compares them: the reply's text, thinking and calls, then
    the results. Call ids change from turn to turn when nothing else does (the protocols
    and the orchestrator number them by turn, providers make up their own), so each id
    is replaced by its place among the ids this reply and its results use: which result
    answers which call still counts, the id's spelling does not."""
    places: dict[str, int] = {}

    def place(call_id: str) -> int:
        return places.setdefault(call_id, len(places))

    calls = [
        [place(c.id), c.server_name, c.name, c.raw_arguments, c.arguments, c.parse_error]
        for c in reply.tool_calls
    ]
    said = [reply.content, [block.text for block in reply.thinking], calls]
    came: list[object]
    if isinstance(outcome, RollbackReason):
        came = ["rolled back", outcome.value]
    else:
        results = [
            [
                place(r.call_id),
                r.name,
                r.content,
                r.is_error,
                [[i.mime_type, i.data] for i in r.images],
            ]
            for r in outcome.tool_results
        ]
        came = [outcome.content, results]
    kept = not isinstance(outcome, RollbackReason)
    return ReplyKey(hashlib.sha256(sorted_json([said, came])).digest(), turn, kept)


def find_cycle(replies: Sequence[ReplyKey], repeats: int) -> Cycle | None:
    """The cycle the newest ``replies`` go round ``repeats`` times after its first round,
    if any: among the kept turns (what the conversation holds, so a rolled-back reply
    between two of them hides nothing), else among all replies (a model going round
    replies that are all rolled back). The shortest cycle wins: A-A-A is a cycle of one."""
    views: list[tuple[Sequence[ReplyKey], bool]] = [(replies, True)]
    if replies and replies[-1].kept:  # else the kept turns are as they were last time
        views.insert(0, ([r for r in replies if r.kept], False))
    for keys, with_rollbacks in views:
        length = _cycle_length(keys, repeats)
        if length is not None:
            first = keys[-length * (repeats + 1)]
            return Cycle(length, repeats, first.turn, with_rollbacks)
    return None


def _cycle_length(keys: Sequence[ReplyKey], repeats: int) -> int | None:
    """The length of the shortest cycle (1 to ``MAX_CYCLE_LENGTH``) the newest ``keys``
    repeat ``repeats`` times after its first round; None when they do not."""
    for length in range(1, MAX_CYCLE_LENGTH + 1):
        span = length * (repeats + 1)
        if len(keys) < span:
            return None
        tail = keys[-span:]
        if all(a.digest == b.digest for a, b in zip(tail, tail[length:], strict=False)):
            return length
    return None


def note_reply(
    replies: list[ReplyKey], reply: ReplyKey, *, repeats: int, turn: int
) -> Looping | None:
    """Add the newest ``reply`` (kept or rolled back) to ``replies``; the journal line
    that ends the loop at ``turn`` when they go round a cycle for the ``repeats``-th
    time after its first round (nothing new will come of another round), else None."""
    replies.append(reply)
    cycle = find_cycle(replies, repeats)
    if cycle is None:
        return None
    return Looping(
        turn=turn,
        repeats=cycle.repeats,
        cycle_length=cycle.length,
        since_turn=cycle.since_turn,
        with_rollbacks=cycle.with_rollbacks,
    )
