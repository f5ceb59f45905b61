"""The agent: one attempt at a task, from the task message to the final answer.

``Orchestrator`` (orchestrator.py) runs the turn loop over a ``RunState``
(state.py), each step in a module of its own (ask.py, tool_turn.py, overflow.py,
cycles.py, rollback.py, cut.py) and budgets in limits.py; ``AnswerGenerator``
(answer.py) turns the loop's end into a final answer or a post-mortem;
``AgentFactory`` (task.py) wires a task's tools, prompt and sub-agents. Those four are
importable from here, each on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepledger.lazy import lazy_exports

if TYPE_CHECKING:
    from deepledger.agent.answer import AnswerGenerator
    from deepledger.agent.orchestrator import Orchestrator
    from deepledger.agent.state import RunState
    from deepledger.agent.task import AgentFactory

__getattr__ = lazy_exports(
    __name__,
    {
        "answer": ("AnswerGenerator",),
        "orchestrator": ("Orchestrator",),
        "state": ("RunState",),
        "task": ("AgentFactory",),
    },
)

__all__ = [
    "AgentFactory",
    "AnswerGenerator",
    "Orchestrator",
    "RunState",
]
