"""The context strategies' registry: each ``agent.context.strategy`` name and its builder.

A strategy is one file in this folder (a :class:`~deepledger.context.strategy.
ContextStrategy`) and one line in :data:`STRATEGIES`; nothing else names it. The
configuration checks ``agent.context.strategy`` against this registry at startup
(:func:`strategy_problems`), so a name it does not hold is refused before any run.
"""

from __future__ import annotations

from collections.abc import Callable

from deepledger.config import ContextConfig
from deepledger.context.compaction import MemoryIndex
from deepledger.context.strategies.compaction import Compaction
from deepledger.context.strategies.keep_tool_results import KeepToolResults
from deepledger.context.strategies.round_window import RoundWindow
from deepledger.context.strategy import ContextStrategy
from deepledger.errors import ConfigError

__all__ = [
    "STRATEGIES",
    "Compaction",
    "KeepToolResults",
    "RoundWindow",
    "StrategyBuilder",
    "make_strategy",
    "strategy_problems",
    "writes_notes",
]

# How a strategy is built from ``agent.context``; the memory index is what compaction
# re-offers the agent in every set of notes (tools/memory.py).
StrategyBuilder = Callable[[ContextConfig, MemoryIndex | None], ContextStrategy]

STRATEGIES: dict[str, StrategyBuilder] = {
    "keep_tool_results": lambda cfg, memory: KeepToolResults(cfg.batch),
    "round_window": lambda cfg, memory: RoundWindow(cfg.keep_rounds, cfg.batch),
    "compaction": lambda cfg, memory: Compaction.from_config(cfg, memory),
}


def strategy_problems(cfg: ContextConfig) -> list[str]:
    """What is wrong with ``agent.context.strategy``: a name the registry does not hold."""
    if cfg.strategy in STRATEGIES:
        return []
    return [
        f"agent.context.strategy={cfg.strategy!r} is not a strategy; "
        f"use one of {', '.join(STRATEGIES)}."
    ]


def make_strategy(
    cfg: ContextConfig, *, memory_index: MemoryIndex | None = None
) -> ContextStrategy:
    """The strategy ``agent.context`` names; ``memory_index``: the names of the agent's
    memory notes, when it has the memory tool (only compaction uses them)."""
    if problems := strategy_problems(cfg):
        raise ConfigError(problems[0])
    return STRATEGIES[cfg.strategy](cfg, memory_index)


def writes_notes(cfg: ContextConfig) -> bool:
    """Whether the strategy ``agent.context`` names has a model write notes (then
    ``agent.context.summary_llm`` is a model to build and price)."""
    return make_strategy(cfg).writes_notes
