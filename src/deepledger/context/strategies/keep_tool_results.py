"""``keep_tool_results`` (the default): every message, as the first seed's runtime does.

``agent.keep_tool_result`` alone decides what is blanked; the strategy cuts nothing, so
every interface default (``strategy.py``) holds for it but the cache's stable prefix:
the whole request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deepledger.context.strategy import ContextStrategy, kept_results
from deepledger.messages import Message


@dataclass(frozen=True)
class KeepToolResults(ContextStrategy):
    """Every message; ``keep_tool_result`` does the trimming."""

    cut_batch: int = 1
    name: str = "keep_tool_results"

    def stable_prefix(self, messages: Sequence[Message]) -> int:
        """All of them: no later pick drops a message."""
        return len(messages)

    def describe(self, keep_tool_result: int) -> str:
        return kept_results(keep_tool_result, self.cut_batch) or "keep everything"
