"""``compaction``: older rounds replaced by notes the model writes, once the window is near full.

The request becomes the system prompt, the task, one message of notes on the earlier
work (task goal, confirmed facts, key decisions, open leads), and the last
``keep_rounds`` rounds unchanged. The stored history is never changed: the strategy
remembers its notes and how many rounds they stand for, and picks from the history
like any other strategy, cutting only at round boundaries.

When. Every compaction rewrites the start of the request, so a provider's prompt cache
starts over; between compactions the request only grows at the end and the cache keeps
hitting. Compacting a little every turn would pay the cache break every turn for small
savings. So compaction waits for the brink, and then takes a large bite:

- it is due when the window guard's estimate of the request (the same terms: the
  prompt, the summarize prompt, the reply budget, slack) reaches ``compact_at`` of the
  window (default 0.8);
- it happens only if the rounds it would replace hold at least ``min_saving`` of the
  request's tokens (default 0.25): a smaller saving does not pay for the cache break;
  except when the window guard would otherwise end the loop, where any saving is taken;
- the notes must be shorter than what they replace, so a compaction never grows the
  request.

Who writes the notes is a :class:`~deepledger.context.compaction.NotesWriter`
(``context/compaction.py``): a model, or the replay's double.

A summary call that fails or comes back empty leaves the request as it was; this is
journaled, and it is not tried again until another round has been added (nor after a
resume: :meth:`Compaction.adopt_failed_compaction`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from deepledger.config import ContextConfig
from deepledger.context.compaction import MemoryIndex, NotesJob, NotesWriter
from deepledger.context.rounds import split_rounds
from deepledger.context.strategy import ContextStrategy, kept_results
from deepledger.context.trim import trim_tool_results
from deepledger.errors import ConfigError
from deepledger.llm.tokens import TokenCounter, count_messages
from deepledger.messages import Message
from deepledger.prompts import render
from deepledger.records.events import Compacted, CompactionFailed, CompactionSkipped
from deepledger.store.journal import Journal

log = logging.getLogger(__name__)


@dataclass
class Compaction(ContextStrategy):
    keep_rounds: int
    compact_at: float = 0.8
    min_saving: float = 0.25
    summary_max_tokens: int = 1024
    # The index goes into every compaction's notes, so the agent knows what it can read
    # back (None: the agent has no memory tool).
    memory_index: MemoryIndex | None = None
    cut_batch: int = 1  # keep_tool_result's batches (trim.py); compaction has its own rule
    name: str = "compaction"
    notes: Message | None = field(default=None, init=False)
    covered: int = field(default=0, init=False)  # rounds of the history the notes replace
    compactions: int = field(default=0, init=False)
    _failed_at_rounds: int = field(default=-1, init=False)
    writes_notes: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.keep_rounds < 1:
            raise ConfigError(f"agent.context.keep_rounds={self.keep_rounds} must be at least 1.")
        if not 0 < self.compact_at < 1:
            raise ConfigError(
                f"agent.context.compact_at={self.compact_at} must be between 0 and 1 "
                "(a fraction of llm.max_context_length)."
            )
        if not 0 <= self.min_saving < 1:
            raise ConfigError(
                f"agent.context.min_saving={self.min_saving} must be at least 0 and below 1."
            )

    def select(self, history: Sequence[Message]) -> list[Message]:
        head, rounds = split_rounds(history)
        notes = [self.notes] if self.notes is not None else []
        return head + notes + [m for round_ in rounds[self.covered :] for m in round_]

    @classmethod
    def from_config(cls, cfg: ContextConfig, memory_index: MemoryIndex | None) -> Compaction:
        """The strategy ``agent.context`` sets up; ``memory_index``: the agent's memory
        notes' names, when it has the memory tool."""
        return cls(
            cfg.keep_rounds,
            compact_at=cfg.compact_at,
            min_saving=cfg.min_saving,
            summary_max_tokens=cfg.summary_max_tokens,
            memory_index=memory_index,
            cut_batch=cfg.batch,
        )

    def compaction_due(self, estimated_tokens: int, window: int) -> bool:
        return estimated_tokens >= self.compact_at * window

    def adopt_notes(self, history: Sequence[Message], summary: str, rounds_kept: int) -> bool:
        """Take notes a recorded run wrote (``summary``, with ``rounds_kept`` rounds of
        ``history`` after them) as if this strategy had written them."""
        _, rounds = split_rounds(history)
        self.notes = Message.injected(render("compacted.md", summary=summary))
        self.covered = max(0, len(rounds) - rounds_kept)
        self.compactions += 1
        return True

    def adopt_failed_compaction(self, history: Sequence[Message]) -> None:
        self._failed_at_rounds = len(split_rounds(history)[1])

    def notes_not_rebuildable(self) -> str | None:
        if self.memory_index and self.memory_index():
            # Notes written with a memory index list its names as they were then, which
            # the journal does not keep: rebuilt notes could differ from the ones sent.
            return "compaction notes listed memory notes, whose names then are not journaled"
        return None

    def describe(self, keep_tool_result: int) -> str:
        base = (
            f"compaction {self.keep_rounds} rounds at {self.compact_at:g}, min {self.min_saving:g}"
        )
        kept = kept_results(keep_tool_result, self.cut_batch)
        return f"{base}, {kept}" if kept else base

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
        """Replace older rounds with notes; whether the request changed. Sizes are
        those of the request as sent, after ``keep_tool_result``. ``urgent``: the window
        guard would end the loop otherwise, so any saving is worth it."""
        head, rounds = split_rounds(history)
        upto = len(rounds) - self.keep_rounds
        if upto <= self.covered or self._failed_at_rounds == len(rounds):
            return False  # nothing old enough to replace, or this very state just failed
        recent = [m for round_ in rounds[upto:] for m in round_]

        def sent_tokens(notes: Message | None) -> int:
            """The request's size with ``notes`` in place of the older rounds, as sent
            (after keep_tool_result)."""
            picked = head + ([notes] if notes else []) + recent
            return count_messages(counter, trim_tool_results(picked, keep_tool_result))

        before = count_messages(counter, trim_tool_results(self.select(history), keep_tool_result))
        if not urgent and before - sent_tokens(self.notes) < self.min_saving * before:
            journal.write(
                CompactionSkipped(
                    turn=turn,
                    reason="saving below agent.context.min_saving",
                    request_tokens=before,
                    without_older_rounds=sent_tokens(self.notes),
                )
            )
            return False
        old = [m for round_ in rounds[self.covered : upto] for m in round_]
        job = NotesJob(head, self.notes, old, turn, self.summary_max_tokens, counter, window)
        text, why = await notes_writer.write(job)
        notes = Message.injected(self._notes_text(text)) if text else None
        if notes is not None and sent_tokens(notes) >= before:
            notes, why = None, "the notes were not shorter than the rounds they replace"
        if notes is None:
            log.warning("compaction at turn %d left the history as it was: %s", turn, why)
            journal.write(CompactionFailed(turn=turn, reason=why, rounds=upto - self.covered))
            self._failed_at_rounds = len(rounds)
            return False
        replaced = upto - self.covered
        self.notes, self.covered = notes, upto
        self.compactions += 1
        journal.write(
            Compacted(
                turn=turn,
                rounds_replaced=replaced,
                rounds_kept=len(rounds) - upto,
                tokens_before=before,
                tokens_after=sent_tokens(notes),
                notes=text,
            )
        )
        return True

    def _notes_text(self, summary: str) -> str:
        text = render("compacted.md", summary=summary)
        names = self.memory_index() if self.memory_index else []
        if names:
            text += "\n\n" + render("compacted_memory.md", names=", ".join(names))
        return text
