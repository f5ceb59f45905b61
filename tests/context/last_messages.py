"""A toy context strategy, in one file as a new strategy is: the system prompt, the task,
and the newest rounds that together hold at least ``keep`` messages.

It cuts only at round boundaries (no pairing to repair) and on no schedule of its own, so
it overrides what it changes of the interface's defaults: its pick, the rounds it leaves
out (journaled as cuts), the prompt-cache prefix that stays put, and its name in a
replay's table. ``tests/context/test_new_strategy.py`` registers it and runs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deepledger.config import ContextConfig
from deepledger.context.compaction import MemoryIndex
from deepledger.context.rounds import split_rounds
from deepledger.context.strategy import ContextStrategy
from deepledger.messages import Message

NAME = "last_messages"


@dataclass(frozen=True)
class LastMessages(ContextStrategy):
    keep: int
    cut_batch: int = 1
    name: str = NAME

    @classmethod
    def from_config(cls, cfg: ContextConfig, memory_index: MemoryIndex | None) -> LastMessages:
        return cls(cfg.keep_rounds, cfg.batch)  # agent.context.keep_rounds: the N messages

    def select(self, history: Sequence[Message]) -> list[Message]:
        head, rounds = split_rounds(history)
        return head + [m for round_ in rounds[self.dropped(history) :] for m in round_]

    def dropped(self, history: Sequence[Message]) -> int:
        _, rounds = split_rounds(history)
        kept, held = len(rounds), 0
        while kept > 0 and held < self.keep:
            kept -= 1
            held += len(rounds[kept])
        return kept

    def describe(self, keep_tool_result: int) -> str:
        return f"last {self.keep} messages"
