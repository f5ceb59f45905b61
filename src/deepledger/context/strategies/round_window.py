"""``round_window``: the system prompt, the task, and the last ``keep_rounds`` rounds.

Rounds are cut ``cut_batch`` at a time (``trim.py`` says why batches keep the prompt
cache), at once when the window guard would otherwise end the loop; a cut a recorded run
journaled is taken back on a replay or a resume.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from deepledger.context.rounds import split_rounds
from deepledger.context.strategy import ContextStrategy, kept_results
from deepledger.context.trim import batched_cut
from deepledger.errors import ConfigError
from deepledger.messages import Message


@dataclass
class RoundWindow(ContextStrategy):
    """The system prompt, the task and the last ``keep_rounds`` rounds; with
    ``cut_batch`` K, rounds pile up to ``keep_rounds + K`` and then the oldest K leave
    at once (``trim.batched_cut``), so the request only grows at its end between cuts.
    How many rounds are left out follows from the history, but for an urgent cut
    (:meth:`cut_now`) or one a recorded run made (:meth:`adopt_cut`)."""

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
        return self._dropped(self._counted(split_rounds(history)[1]))

    def pending(self, history: Sequence[Message]) -> int:
        total = self._counted(split_rounds(history)[1])
        return max(0, total - self.keep_rounds - self._dropped(total))

    def cut_now(self, history: Sequence[Message]) -> None:
        """Leave out all but ``keep_rounds`` rounds at once; batches count from here."""
        total = self._counted(split_rounds(history)[1])
        self.floor = max(self.floor, total - self.keep_rounds)

    def marks(self) -> tuple[int, ...]:
        return self.floor, self.high

    def restore_marks(self, marks: tuple[int, ...]) -> None:
        self.floor, self.high = marks

    def adopt_cut(self, dropped_total: int) -> None:
        self.floor = max(self.floor, dropped_total)

    def describe(self, keep_tool_result: int) -> str:
        batch = f", cut {self.cut_batch} at a time" if self.cut_batch > 1 else ""
        base = f"round window {self.keep_rounds}{batch}"
        # The batch is said once, with the window: the same batch cuts the results.
        kept = kept_results(keep_tool_result, 1)
        return f"{base}, {kept}" if kept else base

    def _counted(self, rounds: list[list[Message]]) -> int:
        """The rounds the schedule counts. Batched, a last round without tool results
        (the model's answer, before the closing summary) is not one: a cut it set off
        would break the cache for the last call or two, which it cannot pay back.
        One at a time, every round counts, as the reference runtime does."""
        if self.cut_batch > 1 and rounds and not any(m.is_tool_results for m in rounds[-1]):
            return len(rounds) - 1
        return len(rounds)

    def _dropped(self, total: int) -> int:
        return min(total, batched_cut(total, self.keep_rounds, self.cut_batch, self.floor))
