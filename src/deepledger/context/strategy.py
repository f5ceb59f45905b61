"""The context strategy interface, and the request builder that applies a strategy's pick.

A strategy is an object with ``select(history) -> messages``, chosen by
``agent.context.strategy``. It never changes the stored history, it only picks from it;
:class:`RequestBuilder` then repairs pairing (a safety net: a strategy that cuts only at
round boundaries never needs it) and applies ``keep_tool_result`` to what is left. The
conversation's :class:`~deepledger.context.policy.ContextPolicy` is what callers use: it
owns the strategy, the builder, the window guard's estimate and when to compact.

:class:`ContextStrategy` is everything the policy, the replay and a resume ask of a
strategy, each with a default that does nothing (keeps every message, never cuts on a
schedule, never compacts), so a strategy overrides only what it does. The strategies are
one file each under ``strategies/``, named in its registry (``strategies/__init__.py``);
no caller asks which concrete strategy it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from deepledger.context.compaction import NotesWriter
from deepledger.context.pairing import (
    PairingProblem,
    last_reply_index,
    pairing_problems,
    repair_pairing,
)
from deepledger.context.rounds import split_rounds
from deepledger.context.trim import ToolResultTrimmer
from deepledger.llm.tokens import TokenCounter
from deepledger.messages import Message
from deepledger.store.journal import Journal


class ContextStrategy:
    """What a context strategy is asked; every default does nothing.

    ``name`` is its ``agent.context.strategy`` name; ``cut_batch`` is
    ``agent.context.cut_batch``: how many tool results ``keep_tool_result`` (and the
    strategy, if it cuts rounds on a schedule) cuts at a time.
    """

    name: str
    cut_batch: int
    # Whether it replaces rounds with notes a model writes: only then does the policy
    # give it a notes writer, and does ``agent.context.summary_llm`` name a model to
    # build and price.
    writes_notes: ClassVar[bool] = False

    def select(self, history: Sequence[Message]) -> list[Message]:
        """The messages of ``history`` to send, in order; never more than it holds."""
        return list(history)

    # The cut schedule: rounds left out as the history grows, journaled as cuts.

    def dropped(self, history: Sequence[Message]) -> int:
        """How many of the history's rounds the pick leaves out by its schedule."""
        return 0

    def pending(self, history: Sequence[Message]) -> int:
        """How many more rounds an urgent cut (:meth:`cut_now`) would leave out."""
        return 0

    def cut_now(self, history: Sequence[Message]) -> None:
        """Cut down to the limit at once: the window guard would end the loop otherwise."""

    def marks(self) -> tuple[int, ...]:
        """What :meth:`cut_now` changes, to put back when the cut did not help."""
        return ()

    def restore_marks(self, marks: tuple[int, ...]) -> None:
        """Put back what :meth:`marks` returned."""

    def adopt_cut(self, dropped_total: int) -> None:
        """Take a cut a recorded run journaled: its oldest ``dropped_total`` rounds out."""

    # Compaction: older rounds replaced by notes (``writes_notes`` strategies only).

    def compaction_due(self, estimated_tokens: int, window: int) -> bool:
        """Whether a request of ``estimated_tokens`` in ``window`` calls for notes."""
        return False

    async def compact(
        self,
        history: Sequence[Message],
        *,
        notes_writer: NotesWriter,
        counter: TokenCounter,
        window: int,
        journal: Journal,
        turn: int,
        keep_tool_result: int = -1,
        urgent: bool = False,
    ) -> bool:
        """Replace older rounds with notes; whether the request changed."""
        return False

    def adopt_notes(self, history: Sequence[Message], summary: str, rounds_kept: int) -> bool:
        """Take notes a recorded run wrote (a replay of its own policy, a resume);
        False when this strategy writes none."""
        return False

    def adopt_failed_compaction(self, history: Sequence[Message]) -> None:
        """A recorded compaction of ``history`` failed: do not try it again as it is."""

    def notes_not_rebuildable(self) -> str | None:
        """Why notes this strategy writes cannot be rebuilt from the journal (a resume
        then starts the attempt over); None when they can."""
        return None

    # The prompt cache and the replay's table.

    def stable_prefix(self, messages: Sequence[Message]) -> int:
        """How many leading ``messages`` of a request no later pick changes (where a
        provider's cache breakpoint pays off longest): by default the head (system prompt
        and task), which no strategy may drop, so a strategy that cuts rounds and says
        nothing here never puts a breakpoint where its next cut breaks it; one that never
        cuts says "all of them". ``keep_tool_result`` is the policy's to account for."""
        return len(split_rounds(messages)[0])

    def describe(self, keep_tool_result: int) -> str:
        """The policy's name in a replay's table, with ``keep_tool_result``."""
        kept = kept_results(keep_tool_result, self.cut_batch)
        return f"{self.name}, {kept}" if kept else self.name


def kept_results(keep_tool_result: int, cut_batch: int) -> str:
    """What ``keep_tool_result`` keeps, in a few words ("" when it keeps all)."""
    if keep_tool_result == -1:
        return ""
    batch = f", cut {cut_batch} at a time" if cut_batch > 1 else ""
    return f"keep {keep_tool_result} tool results{batch}"


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
