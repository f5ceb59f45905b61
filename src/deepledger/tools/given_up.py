"""Which tool servers a piece of work lost: the servers given up on for the run that it
wanted while, or after, they were given up on.

A server that stops answering is restarted; one that fails again before any call has
succeeded since, or whose restart fails, is given up on for the rest of the run
(``session.py``). Every task that wanted it from then on goes without its tools, and
that must not pass for a clean run: the runner notes, for each format-retry, the servers
given up on that its calls or its start ran into, and the task's record turns that
into an error (``records/results.py``, ``TaskRecord.finished``).

The noting goes through a context variable, not through the objects in between (the
agent, its sub-agents, the tool view of each): whatever code runs in the retry's
asyncio task, or in tasks it starts, reports to the retry's own collection, and
concurrent tasks never see each other's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_noted: ContextVar[dict[str, str] | None] = ContextVar("deepledger_servers_given_up", default=None)


@contextmanager
def noting_given_up() -> Iterator[dict[str, str]]:
    """Collect, for the work inside, server -> why it was given up on."""
    lost: dict[str, str] = {}
    token = _noted.set(lost)
    try:
        yield lost
    finally:
        _noted.reset(token)


def note_given_up(server: str, reason: str) -> None:
    """The current work wanted ``server``, which is given up on (outside any collection,
    a test driving the tools alone: nothing to note)."""
    lost = _noted.get()
    if lost is not None:
        lost.setdefault(server, reason)
