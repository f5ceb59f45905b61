"""Real MCP servers over stdio: sessions, sharing, failures, limits."""

from __future__ import annotations

import asyncio
import sys

import pytest

from deepledger.config import ToolServerConfig
from deepledger.tools.pool import ToolManager
from deepledger.tools.session import ToolServerStartError
from tests.support.tool_servers import CRASH_ON_START, HANG_BEFORE_HANDSHAKE, call, flaky


@pytest.fixture
async def manager():
    manager = ToolManager({})
    yield manager
    await manager.aclose()


async def test_a_third_party_server_from_pypi_works_as_a_tool(manager):
    manager.servers["time"] = ToolServerConfig(
        command="mcp-server-time", args=["--local-timezone", "UTC"]
    )
    tools = manager.for_task(["time"])
    listed = await tools.start()
    assert "get_current_time" in [t.name for t in listed]
    result = await tools.call(call("get_current_time", server="time", timezone="UTC"))
    assert not result.is_error and '"timezone": "UTC"' in result.content
    assert result.call_id == "id-get_current_time"
    await tools.aclose()


async def test_shared_servers_are_one_session_and_task_servers_one_per_task(manager):
    manager.servers |= {"shared": flaky(scope="shared"), "private": flaky(scope="task")}
    first, second = manager.for_task(["shared", "private"]), manager.for_task(["shared", "private"])
    await first.start()
    await second.start()
    pids = {}
    for name, tools in (("first", first), ("second", second)):
        for server in ("shared", "private"):
            text = (await tools.call(call("echo", server=server, text="hi"))).content
            pids[name, server] = text.split("pid ")[1].rstrip(")")
    assert pids["first", "shared"] == pids["second", "shared"]
    assert pids["first", "private"] != pids["second", "private"]
    # Calls reuse the session: the same process answers every time.
    again = (await first.call(call("echo", server="private", text="again"))).content
    assert again.endswith(f"pid {pids['first', 'private']})")
    await first.aclose()
    await second.aclose()


async def test_tool_errors_and_oversized_results_are_data(manager):
    manager.servers["flaky"] = flaky()
    tools = manager.for_task(["flaky"])
    await tools.start()
    failed = await tools.call(call("fail"))
    assert failed.is_error and "the tool failed on purpose" in failed.content
    big = await tools.call(call("big"))
    assert big.content.startswith("y" * 1000)
    assert big.content.endswith("...[truncated: 49000 more characters]")
    await tools.aclose()


async def test_a_crashed_server_is_restarted_and_given_up_if_it_fails_again_at_once(manager):
    manager.servers["flaky"] = flaky()
    tools = manager.for_task(["flaky"])
    await tools.start()
    first_pid = (await tools.call(call("echo", text="a"))).content.split("pid ")[1]
    crashed = await tools.call(call("crash"))
    assert crashed.is_error and "restarted" in crashed.content
    after = await tools.call(call("echo", text="b"))
    assert not after.is_error and after.content.split("pid ")[1] != first_pid
    # A success since the restart: the next crash earns another restart ...
    assert "restarted" in (await tools.call(call("crash"))).content
    # ... but failing again before anything succeeded gives the server up.
    again = await tools.call(call("crash"))
    assert again.is_error and "now unavailable" in again.content
    gone = await tools.call(call("echo", text="c"))
    assert gone.is_error and "unavailable" in gone.content
    await tools.aclose()


async def test_a_slow_tool_times_out_without_restarting_a_server_that_still_answers(manager):
    # 5 s, not less: the limit also covers the echo calls that must succeed on a loaded machine.
    manager.servers["flaky"] = flaky(call_timeout_seconds=5.0)
    tools = manager.for_task(["flaky"])
    await tools.start()
    pid = (await tools.call(call("echo", text="a"))).content.split("pid ")[1]
    hung = await tools.call(call("hang"))
    assert hung.is_error and hung.content == "flaky.hang timed out after 5s."
    still = await tools.call(call("echo", text="still here"))
    assert still.content.split("pid ")[1] == pid  # the same process: no restart
    await tools.aclose()


async def test_a_hung_server_is_restarted(manager):
    manager.servers["flaky"] = flaky(call_timeout_seconds=5.0)  # covers the echo calls too
    tools = manager.for_task(["flaky"])
    await tools.start()
    pid = (await tools.call(call("echo", text="a"))).content.split("pid ")[1]
    frozen = await tools.call(call("freeze"))
    assert frozen.is_error and "timed out" in frozen.content and "restarted" in frozen.content
    after = await tools.call(call("echo", text="b"))
    assert not after.is_error and after.content.split("pid ")[1] != pid
    await tools.aclose()


async def test_garbage_on_stdout_does_not_take_the_task_down(manager):
    manager.servers["flaky"] = flaky(call_timeout_seconds=3.0)
    tools = manager.for_task(["flaky"])
    await tools.start()
    garbled = await tools.call(call("garbage"))
    assert garbled.content == "answered after garbage" or garbled.is_error
    assert not (await tools.call(call("echo", text="after"))).is_error
    await tools.aclose()


async def test_a_lone_surrogate_does_not_break_a_shared_session(manager):
    manager.servers["flaky"] = flaky()
    tools = manager.for_task(["flaky"])
    await tools.start()
    odd = await tools.call(call("echo", text="bad \ud800 char"))
    assert not odd.is_error and "bad ? char" in odd.content
    assert manager.connection("flaky", {}).restarts == 0
    await tools.aclose()


async def test_task_scoped_sessions_share_one_stderr_log_per_server(tmp_path):
    manager = ToolManager({"private": flaky(scope="task")}, log_dir=tmp_path)
    for _ in range(3):
        tools = manager.for_task(["private"])
        await tools.start()
        await tools.aclose()
    assert list(manager._errlogs) == ["private"]
    await manager.aclose()


async def test_a_server_that_cannot_start_is_left_out_unless_required(manager):
    manager.servers |= {
        "flaky": flaky(),
        "broken": ToolServerConfig(command="/nonexistent/srv", startup_timeout_seconds=5),
    }
    tools = manager.for_task(["flaky", "broken"])
    listed = await tools.start()
    assert {t.server for t in listed} == {"flaky"} and "broken" in tools.unavailable
    result = await tools.call(call("anything", server="broken"))
    assert result.is_error and "unavailable" in result.content
    await tools.aclose()
    # The failure is remembered: the next task leaves it out without trying again.
    later = manager.for_task(["broken"])
    assert await later.start() == [] and "broken" in later.unavailable
    manager.servers["broken"].required = True
    with pytest.raises(ToolServerStartError):
        await manager.for_task(["broken"]).start()


async def test_only_named_environment_variables_reach_the_server(manager, monkeypatch):
    monkeypatch.setenv("DL_PASSED", "1")
    monkeypatch.setenv("DL_SECRET", "do-not-leak")
    monkeypatch.delenv("DL_OPTIONAL_MISSING", raising=False)
    manager.servers["flaky"] = flaky(
        env_from=["DL_PASSED", "DL_OPTIONAL_MISSING"], env={"DL_FIXED": "x"}
    )
    tools = manager.for_task(["flaky"])
    await tools.start()
    names = (await tools.call(call("env"))).content.split()
    assert "DL_PASSED" in names and "DL_FIXED" in names and "PATH" in names
    assert "DL_SECRET" not in names and "DL_OPTIONAL_MISSING" not in names
    await tools.aclose()


async def test_blacklisted_tools_are_not_offered(manager):
    manager.servers["flaky"] = flaky()
    tools = manager.for_task(["flaky"], blacklist=["crash", "flaky.hang"])
    names = {t.name for t in await tools.start()}
    assert "echo" in names and not names & {"crash", "hang"}
    blocked = await tools.call(call("crash"))
    assert blocked.is_error and "There is no tool flaky.crash" in blocked.content
    await tools.aclose()


async def test_a_shared_server_with_instances_spreads_concurrent_calls(manager):
    manager.servers["flaky"] = flaky(instances=2)
    first, second = manager.for_task(["flaky"]), manager.for_task(["flaky"])
    await first.start()
    await second.start()
    answers = await asyncio.gather(
        *(tools.call(call("echo", text=str(n))) for n, tools in enumerate([first, second] * 3))
    )
    pids = {a.content.split("pid ")[1] for a in answers}
    assert len(pids) == 2  # both processes served calls, and no more were started
    assert len(manager.connections("flaky", {})) == 2
    await first.aclose()
    await second.aclose()


# ----------------------------------------------------------------- servers that do not start


def python_server(script: str, **overrides) -> ToolServerConfig:
    return ToolServerConfig(command=sys.executable, args=["-c", script], **overrides)


async def test_a_required_server_that_crashes_on_start_fails_with_its_stderr(tmp_path):
    manager = ToolManager({"crashy": python_server(CRASH_ON_START, required=True)}, tmp_path)
    try:
        with pytest.raises(ToolServerStartError) as failed:
            await manager.for_task(["crashy"]).start()
        message = str(failed.value)
        first, *details = message.splitlines()
        assert (
            first
            == "tool server 'crashy' failed to start: it exited with status 3 before the handshake"
        )
        assert f"  command: {sys.executable} -c " in message
        assert "  its last 10 stderr lines:" in details
        assert details[-4:-2] == [
            "    | boot line 15",
            "    | ImportError: no module named frobnicate",
        ]
        assert "boot line 6" not in message and "    | boot line 7" in details  # the last ten
        assert f"  full log: {tmp_path / 'crashy.stderr.log'}" in details
        assert "TaskGroup" not in message and "Connection closed" not in message
        assert "frobnicate" in (tmp_path / "crashy.stderr.log").read_text()  # the whole log
        assert "boot line 1\n" in (tmp_path / "crashy.stderr.log").read_text()
        with pytest.raises(ToolServerStartError, match="exited with status 3"):  # next task
            await manager.for_task(["crashy"]).start()
    finally:
        await manager.aclose()


@pytest.mark.parametrize("scope", ["shared", "task"])
async def test_an_optional_server_that_cannot_start_is_logged_once_and_named_to_the_model(
    tmp_path, caplog, scope
):
    manager = ToolManager({"crashy": python_server(CRASH_ON_START, scope=scope)}, tmp_path)
    try:
        for _ in range(3):  # three tasks
            tools = manager.for_task(["crashy"])
            assert await tools.start() == []
            assert "frobnicate" in tools.unavailable["crashy"]  # the journal's copy: all of it
            told = await tools.call(call("anything", server="crashy"))
            await tools.aclose()
    finally:
        await manager.aclose()
    assert told.is_error and told.content == (
        "Tool server 'crashy' is unavailable in this task (tool server 'crashy' failed to "
        "start: it exited with status 3 before the handshake); use the other tools."
    )
    logged = [r.getMessage() for r in caplog.records if "crashy" in r.getMessage()]
    assert len(logged) == 1 and "frobnicate" in logged[0] and "go on without it" in logged[0]


async def test_a_server_that_hangs_before_the_handshake_is_stopped_and_named(tmp_path):
    slow = python_server(HANG_BEFORE_HANDSHAKE, startup_timeout_seconds=5, required=True)
    manager = ToolManager({"slow": slow}, tmp_path)
    try:
        with pytest.raises(ToolServerStartError) as failed:
            await manager.for_task(["slow"]).start()
    finally:
        await manager.aclose()
    first, *details = str(failed.value).splitlines()
    assert first == (
        "tool server 'slow' did not complete the MCP handshake within 5s "
        "(tools.slow.startup_timeout_seconds); it was stopped (SIGTERM)"
    )
    assert "    | loading a huge index..." in details
    assert f"  full log: {tmp_path / 'slow.stderr.log'}" in details


async def test_a_command_that_cannot_run_is_named_without_a_log(manager):
    manager.servers["gone"] = ToolServerConfig(command="/nonexistent/srv", required=True)
    with pytest.raises(ToolServerStartError) as failed:
        await manager.for_task(["gone"]).start()
    assert str(failed.value).splitlines()[:2] == [
        "tool server 'gone' failed to start: cannot run /nonexistent/srv: No such file or "
        "directory",
        "  command: /nonexistent/srv",
    ]


def test_task_group_wrappers_are_unwrapped_into_their_causes():
    from mcp import MCPError
    from mcp.types import CONNECTION_CLOSED

    from deepledger.tools.session import _cause

    wrapped = ExceptionGroup(
        "unhandled errors in a TaskGroup",
        [
            ExceptionGroup("inner", [MCPError(CONNECTION_CLOSED, "Connection closed")]),
            ValueError("bad handshake"),
            ValueError("bad handshake"),
        ],
    )
    assert _cause(wrapped) == (
        "the server closed the connection before the handshake; bad handshake"
    )
    only_cancelled = BaseExceptionGroup("g", [asyncio.CancelledError()])
    assert _cause(only_cancelled) == "CancelledError"


async def test_a_restart_is_logged_with_how_the_server_ended(tmp_path, caplog):
    manager = ToolManager({"flaky": flaky()}, tmp_path)
    tools = manager.for_task(["flaky"])
    try:
        await tools.start()
        await tools.call(call("crash"))  # os._exit(3) in the middle of a call
    finally:
        await tools.aclose()
        await manager.aclose()
    (logged,) = [r.getMessage() for r in caplog.records if "stopped answering" in r.getMessage()]
    first, *details = logged.splitlines()
    assert first == "tool server 'flaky' stopped answering (it exited with status 3); restarting it"
    assert f"  full log: {tmp_path / 'flaky.stderr.log'}" in details
