"""Task-scoped sessions started before their task claims them: the run's warm spares.

A ``scope: task`` server is one process per task, and its start (a Python interpreter,
the MCP SDK, the server's own imports) costs seconds when a wave of tasks starts its
servers at once on a few cores: each task's first tool call waited for it
(benchmarks/perf/task_servers.py). With a plan (:meth:`ToolManager.warm_ahead`), the
pool starts the first wave's servers as soon as it is told, and each time a task claims
one it begins one for a later task, so a later wave finds its servers up.

Task scope still means fresh state: a spare is handed to exactly one task and never
back, a spare that died before its task is replaced by a fresh session, and those never
claimed are closed with the pool. There are never more spares of a server than tasks
still expected to claim one, nor more than the run's concurrency.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from deepledger.tools.session import McpConnection


@dataclass
class _Plan:
    """One server's spares and how many claims are still expected."""

    remaining: int
    spares: list[McpConnection] = field(default_factory=list)


class Spares:
    """Sessions of ``scope: task`` servers started ahead of the tasks that claim them."""

    def __init__(self, new_session: Callable[[str], McpConnection]) -> None:
        self._new_session = new_session  # a session not yet started, wired to the pool
        self._plans: dict[str, _Plan] = {}
        self._concurrency = 0
        # Starts waiting for another's, by spare: a spare claimed before its start began
        # is started by its task, and the deferred start must not follow (after the
        # task closed it, it would start a process nobody holds).
        self._deferred: dict[McpConnection, asyncio.Task[None]] = {}
        self._closing: set[asyncio.Task[None]] = set()  # dead spares being let go of

    def plan(self, servers: list[str], tasks: int, concurrency: int) -> None:
        """Expect ``tasks`` tasks, ``concurrency`` at a time, each claiming ``servers``;
        start the first wave's sessions now (needs a running event loop). Close any
        spares an earlier plan left."""
        self._concurrency = max(0, concurrency)
        for name in servers:
            if old := self._plans.pop(name, None):
                for spare in old.spares:
                    self._let_go(spare)
            self._plans[name] = _Plan(remaining=max(0, tasks))
            self._top_up(name)

    def task_began(self) -> None:
        """One more of the planned tasks has begun: fewer spares are worth keeping. A
        task's retries, attempts and sub-agents claim spares too, but only its start
        counts, so they never use up what later tasks were planned."""
        for plan in self._plans.values():
            plan.remaining = max(0, plan.remaining - 1)

    def claim(self, name: str) -> McpConnection | None:
        """A started (or starting) session of ``name`` for one task, taken out of the
        spares for good; None when none is ready (the task starts its own). Either
        way a spare for a later task begins starting. A spare that failed to start
        ends the plan of its server: the tasks' own starts report the failure, and a
        server that cannot start is not started again and again ahead of them."""
        plan = self._plans.get(name)
        if plan is None:
            return None
        claimed = None
        while plan.spares and claimed is None:
            spare = plan.spares.pop(0)
            if spare.failed_reason:
                self._let_go(spare)
                for other in self._plans.pop(name).spares:
                    self._let_go(other)
                return None
            if _dead(spare):  # its process ended before any task used it: a fresh one
                self._let_go(spare)
            else:
                claimed = spare
        if claimed is not None and (deferred := self._deferred.pop(claimed, None)):
            deferred.cancel()  # its task starts it now, as it would a fresh session
        self._top_up(name, after=claimed)
        return claimed

    def _top_up(self, name: str, after: McpConnection | None = None) -> None:
        """Spares up to the bounds. One for a later task starts once ``after`` (the
        session a task just took) is up: on few cores, starting both at once would
        make the task that is running wait longer for the sake of one that is not."""
        plan = self._plans[name]
        while len(plan.spares) < min(plan.remaining, self._concurrency):
            spare = self._new_session(name)
            plan.spares.append(spare)
            if after is None or not after.starting:
                spare.start_in_background()
            else:
                self._defer(spare, after)

    def _defer(self, spare: McpConnection, after: McpConnection) -> None:
        task = asyncio.get_running_loop().create_task(_start_after(spare, after))
        self._deferred[spare] = task  # held: the loop keeps only a weak reference
        task.add_done_callback(lambda _: self._deferred.pop(spare, None))

    def _let_go(self, spare: McpConnection) -> None:
        if deferred := self._deferred.pop(spare, None):
            deferred.cancel()
        _spawn(self._closing, spare.close())

    def waiting(self, name: str) -> list[McpConnection]:
        """The unclaimed spares of ``name`` (for tests and the benchmark)."""
        plan = self._plans.get(name)
        return list(plan.spares) if plan else []

    async def aclose(self) -> None:
        """Close every spare no task claimed; the plan ends (no more are started)."""
        spares = [s for plan in self._plans.values() for s in plan.spares]
        self._plans.clear()
        deferred = list(self._deferred.values())
        for task in deferred:  # a start not begun is not begun now
            task.cancel()
        await asyncio.gather(*deferred, return_exceptions=True)
        # One close that fails must not leave the others' processes running.
        await asyncio.gather(
            *(s.close() for s in spares), *list(self._closing), return_exceptions=True
        )


def _spawn(tasks: set[asyncio.Task[None]], work: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(work)
    tasks.add(task)  # held: the loop keeps only a weak reference
    task.add_done_callback(tasks.discard)


async def _start_after(spare: McpConnection, first: McpConnection) -> None:
    await first.wait_started()
    spare.start_in_background()


def _dead(spare: McpConnection) -> bool:
    """A spare that failed to start, or whose server stopped after starting."""
    return bool(spare.failed_reason) or (spare.ever_started and (spare.exited or not spare.alive))
