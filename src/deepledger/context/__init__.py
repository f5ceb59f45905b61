"""The context layer: what each request sends the model, and when to compact.

``ContextPolicy`` (policy.py) turns an agent's history into the next ``Request``:
``keep_tool_result`` trimming (trim.py), a strategy choosing the rounds sent
(strategy.py, rounds.py), compaction (compaction.py), the window guard (guard.py) and the
pairing check (pairing.py); replay.py rebuilds a run's requests under another policy.
``ContextPolicy`` and ``Request`` are importable from here, each on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepledger.lazy import lazy_exports

if TYPE_CHECKING:
    from deepledger.context.policy import ContextPolicy, Request

__getattr__ = lazy_exports(
    __name__,
    {
        "policy": ("ContextPolicy", "Request"),
    },
)

__all__ = [
    "ContextPolicy",
    "Request",
]
