"""Warm spares (``tools/spares.py``): task-scoped servers started ahead of their tasks
still give every task a process of its own, replace one that died unclaimed, stay
within the plan's bounds and leave no process behind.

About order and identity, not time: each check waits for the state it needs.
"""

from __future__ import annotations

import asyncio
import os
import signal

from deepledger.tools.pool import ToolManager
from deepledger.tools.session import McpConnection
from deepledger.tools.task_tools import TaskTools
from tests.support.processes import Descendants, descendants_now
from tests.support.tool_servers import call, flaky


async def _pid(tools: TaskTools) -> str:
    text = (await tools.call(call("echo", server="private", text="hi"))).content
    return text.split("pid ")[1].rstrip(")")


async def _up(spares: list[McpConnection]) -> None:
    await asyncio.gather(*(s.ensure_started() for s in spares))


async def test_each_task_gets_its_own_spare_and_no_process_serves_two(tmp_path):
    manager = ToolManager({"private": flaky(scope="task")}, tmp_path)
    manager.warm_ahead(["private"], tasks=3, concurrency=2)
    first_wave = manager.spares.waiting("private")
    assert len(first_wave) == 2  # the concurrency bounds the spares, not the tasks
    await _up(first_wave)
    views = [manager.for_task(["private"]) for _ in range(4)]  # one more than planned
    pids = []
    for view in views:
        manager.task_began()  # as the runner says before each task
        await view.start()
        pids.append(await _pid(view))
        # Never more spares than tasks still to come, and none after the last.
        assert len(manager.spares.waiting("private")) <= 2
    assert len(set(pids)) == 4
    assert [v.session("private") for v in views[:2]] == first_wave  # claimed, not copied
    assert manager.spares.waiting("private") == []
    for view in views:
        await view.aclose()
    await manager.aclose()


async def test_a_spare_that_died_unclaimed_is_replaced(tmp_path):
    manager = ToolManager({"private": flaky(scope="task")}, tmp_path)
    manager.warm_ahead(["private"], tasks=1, concurrency=1)
    (spare,) = manager.spares.waiting("private")
    await spare.ensure_started()
    assert spare._process is not None and spare._process.pid is not None
    os.kill(spare._process.pid, signal.SIGKILL)
    assert spare._process._os_process is not None
    await spare._process._os_process.wait()  # the event loop has seen it end
    assert spare.exited
    tools = manager.for_task(["private"])
    await tools.start()
    assert tools.session("private") is not spare
    assert not (await tools.call(call("echo", server="private", text="hi"))).is_error
    await tools.aclose()
    await manager.aclose()


async def test_a_spare_that_failed_to_start_is_replaced_and_not_logged_unclaimed(tmp_path, caplog):
    manager = ToolManager({"private": flaky(scope="task", command="/nonexistent")}, tmp_path)
    manager.warm_ahead(["private"], tasks=2, concurrency=1)
    (spare,) = manager.spares.waiting("private")
    await asyncio.gather(spare._background, return_exceptions=True)
    assert spare.failed_reason and "failed to start" not in caplog.text
    tools = manager.for_task(["private"])
    await tools.start()  # a fresh session, which fails for this task as today
    assert tools.session("private") is not spare
    assert "private" in tools.unavailable
    # A server that cannot start is not started again ahead of the later task.
    assert manager.spares.waiting("private") == []
    await tools.aclose()
    await manager.aclose()


async def test_retries_and_sub_agents_do_not_use_up_the_later_tasks_spares(tmp_path):
    """Only a task's start counts against the plan: its retries, attempts and
    sub-agents take spares too, and the next task still finds one."""
    manager = ToolManager({"private": flaky(scope="task")}, tmp_path)
    manager.warm_ahead(["private"], tasks=2, concurrency=1)
    manager.task_began()
    for _ in range(3):  # the first task's three runs
        view = manager.for_task(["private"])
        await view.start()
        await view.aclose()
    assert len(manager.spares.waiting("private")) == 1  # still one for the second task
    await manager.aclose()


async def test_a_spare_claimed_before_its_deferred_start_is_not_started_again(tmp_path):
    """A spare whose start waits for the one a task took, claimed by the next task
    before it began: its task starts it, and the deferred start does not follow after
    that task closed it (a process nobody would hold)."""
    already = descendants_now(os.getpid())  # other tests' in this process
    watched = Descendants(os.getpid())
    try:
        manager = ToolManager({"private": flaky(scope="task")}, tmp_path)
        manager.warm_ahead(["private"], tasks=3, concurrency=1)
        first, second = manager.for_task(["private"]), manager.for_task(["private"])
        # The first claims the starting spare, and the next spare's start waits for it;
        # the second claims that one at once, before its deferred start could begin.
        await asyncio.gather(first.start(), second.start())
        assert not manager.spares._deferred  # the claimed spare's deferred start is off
        await second.aclose()
        await first.aclose()
        await manager.aclose()
        await asyncio.sleep(0)
    finally:
        watched.stop()
    assert watched.still_running(besides=already) == []


async def test_no_spare_outlives_the_pool(tmp_path):
    already = descendants_now(os.getpid())  # other tests' in this process
    watched = Descendants(os.getpid())
    try:
        manager = ToolManager({"private": flaky(scope="task")}, tmp_path)
        manager.warm_ahead(["private"], tasks=5, concurrency=3)
        await _up(manager.spares.waiting("private")[:1])
        tools = manager.for_task(["private"])  # one claimed, one started in its place
        await tools.start()
        await _pid(tools)
        await tools.aclose()
        await manager.aclose()  # the rest, started or still starting, close here
        assert manager.spares.waiting("private") == []
    finally:
        watched.stop()
    assert watched.ran("flaky_tool_server")
    assert watched.still_running(besides=already) == []


async def test_shared_and_unknown_servers_get_no_spares(tmp_path):
    manager = ToolManager({"shared": flaky(scope="shared")}, tmp_path)
    manager.warm_ahead(["shared", "missing"], tasks=4, concurrency=2)
    assert manager.spares.waiting("shared") == []
    await manager.aclose()
