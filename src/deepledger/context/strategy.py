"""Context strategies: which messages of the history go into the next request.

A strategy is a small object with ``select(history) -> messages``, chosen by
``agent.context.strategy``. It never changes the stored history, it only picks from it;
:class:`RequestBuilder` then repairs pairing (a safety net: a strategy that cuts only at
round boundaries never needs it) and applies ``keep_tool_result`` to what is left. A
strategy keeps or drops whole rounds (``rounds.py``). The conversation's
:class:`~deepledger.context.policy.ContextPolicy` is what callers use: it owns the
strategy, the builder, the window guard's estimate and when to compact.

- ``keep_tool_results`` (the default): every message, as the first seed's runtime does;
  ``keep_tool_result`` alone decides what is blanked.
- ``round_window``: the system prompt, the task, and the last ``keep_rounds`` rounds,
  cut ``cut_batch`` rounds at a time (``trim.py`` says why batches keep the cache).
- ``compaction`` (``compaction.py``): the system prompt, the task, notes the model wrote
  on the older rounds, and the last ``keep_rounds`` rounds; made near the window's end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from deepledger.config import ContextConfig, StrategyName
from deepledger.context.compaction import Compaction, MemoryIndex
from deepledger.context.pairing import (
    PairingProblem,
    last_reply_index,
    pairing_problems,
    repair_pairing,
)
from deepledger.context.rounds import split_rounds
from deepledger.context.trim import ToolResultTrimmer, batched_cut
from deepledger.errors import ConfigError
from deepledger.messages import Message


class ContextStrategy(Protocol):
    @property
    def name(self) -> str:
        """The strategy's ``agent.context.strategy`` name."""
        ...

    @property
    def cut_batch(self) -> int:
        """``agent.context.cut_batch``: how many tool results ``keep_tool_result`` (and
        this strategy, if it cuts rounds) cuts at a time."""
        ...

    def select(self, history: Sequence[Message]) -> list[Message]:
        """The messages of ``history`` to send, in order; never more than it holds."""
        ...


@dataclass(frozen=True)
class KeepToolResults:
    """Every message; ``keep_tool_result`` does the trimming."""

    cut_batch: int = 1
    name: str = "keep_tool_results"

    def select(self, history: Sequence[Message]) -> list[Message]:
        return list(history)


@dataclass
class RoundWindow:
    """The system prompt, the task and the last ``keep_rounds`` rounds; with
    ``cut_batch`` K, rounds pile up to ``keep_rounds + K`` and then the oldest K leave
    at once (``trim.batched_cut``), so the request only grows at its end between cuts.
    How many rounds are left out follows from the history, but for an urgent cut
    (:meth:`cut_now`) or one a recorded run made (:meth:`adopt`)."""

    keep_rounds: int
    cut_batch: int = 1
    name: str = "round_window"
    floor: int = field(default=0, compare=False)  # rounds an urgent cut left out
    # Batched: the most rounds a pick left out, kept out when the window guard takes the
    # newest exchange back (a whole batch would come back into the closing call).
    high: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if self.keep_rounds < 1:
            raise ConfigError(f"agent.context.keep_rounds={self.keep_rounds} must be at least 1.")
        if self.cut_batch < 1:
            raise ConfigError(f"agent.context.cut_batch={self.cut_batch} must be at least 1.")

    def select(self, history: Sequence[Message]) -> list[Message]:
        head, rounds = split_rounds(history)
        dropped = self._dropped(self._counted(rounds))
        if self.cut_batch > 1:
            dropped = self.high = max(dropped, min(self.high, len(rounds) - 1))
        kept = rounds[dropped:]
        return head + [message for round_ in kept for message in round_]

    def dropped(self, history: Sequence[Message]) -> int:
        """How many of the history's rounds the pick leaves out."""
        return self._dropped(self._counted(split_rounds(history)[1]))

    def pending(self, history: Sequence[Message]) -> int:
        """How many more rounds an urgent cut would leave out."""
        total = self._counted(split_rounds(history)[1])
        return max(0, total - self.keep_rounds - self._dropped(total))

    def cut_now(self, history: Sequence[Message]) -> None:
        """Leave out all but ``keep_rounds`` rounds at once; batches count from here."""
        total = self._counted(split_rounds(history)[1])
        self.floor = max(self.floor, total - self.keep_rounds)

    def _counted(self, rounds: list[list[Message]]) -> int:
        """The rounds the schedule counts. Batched, a last round without tool results
        (the model's answer, before the closing summary) is not one: a cut it set off
        would break the cache for the last call or two, which it cannot pay back.
        One at a time, every round counts, as the reference runtime does."""
        if self.cut_batch > 1 and rounds and not any(m.is_tool_results for m in rounds[-1]):
            return len(rounds) - 1
        return len(rounds)

    def adopt(self, dropped_total: int) -> None:
        """Take a cut a recorded run made: its oldest ``dropped_total`` rounds left out."""
        self.floor = max(self.floor, dropped_total)

    def _dropped(self, total: int) -> int:
        return min(total, batched_cut(total, self.keep_rounds, self.cut_batch, self.floor))


# How each ``agent.context.strategy`` is built from its settings; the memory index is
# what compaction re-offers the agent in every set of notes (tools/memory.py).
StrategyBuilder = Callable[[ContextConfig, MemoryIndex | None], ContextStrategy]
STRATEGIES: dict[StrategyName, StrategyBuilder] = {
    StrategyName.KEEP_TOOL_RESULTS: lambda cfg, memory: KeepToolResults(cfg.batch),
    StrategyName.ROUND_WINDOW: lambda cfg, memory: RoundWindow(cfg.keep_rounds, cfg.batch),
    StrategyName.COMPACTION: lambda cfg, memory: Compaction(
        cfg.keep_rounds,
        compact_at=cfg.compact_at,
        min_saving=cfg.min_saving,
        summary_max_tokens=cfg.summary_max_tokens,
        memory_index=memory,
        cut_batch=cfg.batch,
    ),
}


def make_strategy(
    cfg: ContextConfig, *, memory_index: MemoryIndex | None = None
) -> ContextStrategy:
    """The strategy ``agent.context`` names; ``memory_index``: the names of the agent's
    memory notes, when it has the memory tool (only compaction uses them)."""
    try:
        build = STRATEGIES[StrategyName(cfg.strategy)]
    except ValueError:
        raise ConfigError(
            f"agent.context.strategy={cfg.strategy!r} is not a strategy; "
            f"use one of {', '.join(StrategyName)}."
        ) from None
    return build(cfg, memory_index)


class RequestBuilder:
    """What one conversation sends each time: the strategy's pick, repaired, trimmed.

    After each call, ``last_dropped`` says how many history messages the strategy left
    out, ``last_repairs`` which pairing breaks were fixed, ``last_blanked`` how many
    tool-result messages ``keep_tool_result`` blanked, and ``last_prefix_kept`` how many
    leading messages the request shares with the one before it. When that is fewer than
    the earlier request had, the prefix was broken (``last_prefix_broken``): a provider's
    prompt cache can only reuse the shared part, so blanking an old result or sliding
    the window costs the whole rest of the prompt at the uncached price.
    ``last_prefix_broken_by`` says what broke it: ``context_strategy`` (the pick itself
    changed: a round left the window, or a repair), else ``keep_tool_result`` (an older
    result was blanked); None when the prefix held.
    """

    def __init__(self, strategy: ContextStrategy, keep_tool_result: int = -1) -> None:
        self.strategy = strategy
        self.trimmer = ToolResultTrimmer(keep_tool_result, batch=strategy.cut_batch)
        self.last_dropped = 0
        self.last_repairs: list[PairingProblem] = []
        self.last_prefix_kept = 0
        self.last_prefix_broken = False
        self.last_prefix_broken_by: str | None = None
        self._previous: list[Message] = []
        self._previous_pick: list[Message] = []  # the same request before trimming
        # Whether that pick was sound as selected, and its newest reply: a pick that only
        # appends to a sound one needs checking from there on, so the check costs the
        # same on turn 300 as on turn 3.
        self._previous_pick_sound = False
        self._previous_last_reply = 0

    @property
    def last_blanked(self) -> int:
        return self.trimmer.last_blanked

    def __call__(
        self,
        history: Sequence[Message],
        closing: Sequence[Message] = (),
        picked: list[Message] | None = None,
    ) -> list[Message]:
        """The request for ``history``; ``closing`` prompts (summarize, post-mortem) go
        after the strategy's pick, so they never take the place of a round. ``picked``:
        the strategy's pick of ``history`` when the caller has made it already."""
        if picked is None:
            picked = self.strategy.select(history)
        selected = picked + list(closing)
        self.last_dropped = len(history) - len(selected) + len(closing)
        start = 0
        if self._previous_pick_sound:
            unchanged = shared_prefix(self._previous_pick, selected)
            start = max(0, min(unchanged - 1, self._previous_last_reply))
        self._previous_pick_sound = not pairing_problems(selected, start)
        if self._previous_pick_sound:
            repaired, self.last_repairs = selected, []
            self._previous_last_reply = last_reply_index(selected)
        else:
            repaired, self.last_repairs = repair_pairing(selected)
        request = self.trimmer(repaired, history)
        self.last_prefix_kept = shared_prefix(self._previous, request)
        self.last_prefix_broken = self.last_prefix_kept < len(self._previous)
        self.last_prefix_broken_by = None
        if self.last_prefix_broken:
            pick_held = shared_prefix(self._previous_pick, repaired) >= self.last_prefix_kept + 1
            self.last_prefix_broken_by = "keep_tool_result" if pick_held else "context_strategy"
        self._previous, self._previous_pick = request, repaired
        return request


def shared_prefix(earlier: Sequence[Message], later: Sequence[Message]) -> int:
    """How many leading messages two requests have in common."""
    count = 0
    for a, b in zip(earlier, later, strict=False):
        if a is not b and a != b:  # most are the same objects: identity settles it
            break
        count += 1
    return count
