"""Tool calls written slightly wrong, run as meant (tools/repair.py), on real MCP servers
over stdio: tool-python's own server, and the flaky test server for routing."""

from __future__ import annotations

import re
import sys

import pytest

from deepledger.config import ToolServerConfig
from deepledger.messages import ToolCall
from deepledger.tools.pool import ToolManager
from deepledger.tools.repair import CallRepairs, rename_code, sandbox_ids
from deepledger.tools.types import ToolInfo
from tests.support.tool_servers import call, flaky

ALL = CallRepairs(python_arguments=True, unknown_server=True)


def tool_python() -> ToolServerConfig:
    return ToolServerConfig(
        command=sys.executable,
        args=["-m", "deepledger.tools.servers.tool_python", "--timeout", "30"],
        scope="task",
        call_timeout_seconds=60.0,
    )


@pytest.fixture
async def manager():
    manager = ToolManager({"tool-python": tool_python(), "flaky": flaky(), "other": flaky()})
    yield manager
    await manager.aclose()


def python(tool: str = "run_python_code", **arguments: object) -> ToolCall:
    return ToolCall(f"id-{len(arguments)}", tool, dict(arguments), server_name="tool-python")


async def test_code_and_a_missing_sandbox_id_are_repaired_and_the_sandbox_kept(manager):
    tools = manager.for_task(["tool-python"], repairs=ALL)
    await tools.start()
    first = await tools.call(python(code="x = 6 * 7\nprint(x)"))
    assert not first.is_error and "42" in first.content
    [repair] = tools.take_repaired()
    assert (repair.kind, repair.written, repair.ran) == (
        "python_arguments",
        "tool-python.run_python_code",
        "tool-python.run_python_code",
    )
    assert "code read as code_block" in repair.detail and "no sandbox_id" in repair.detail
    # A made-up id runs in the same sandbox: the variable is still there.
    second = await tools.call(python(code_block="print(x + 1)", sandbox_id="default"))
    assert not second.is_error and "43" in second.content
    [repair] = tools.take_repaired()
    assert "sandbox_id 'default' unknown" in repair.detail
    # A shell command without an id runs there too.
    shell = await tools.call(python("run_command", command="echo hello"))
    assert not shell.is_error and "hello" in shell.content
    await tools.aclose()


async def test_a_sandbox_the_model_created_is_used_as_given(manager):
    tools = manager.for_task(["tool-python"], repairs=ALL)
    await tools.start()
    created = await tools.call(ToolCall("c", "create_sandbox", {}, server_name="tool-python"))
    sandbox = re.search(r"sandbox_id: (\S+)", created.content).group(1)  # type: ignore[union-attr]
    ran = await tools.call(python(code_block="print('mine')", sandbox_id=sandbox))
    assert not ran.is_error and "mine" in ran.content
    assert tools.take_repaired() == []
    await tools.aclose()


async def test_without_the_repair_the_same_calls_fail(manager):
    tools = manager.for_task(["tool-python"])  # repairs off
    await tools.start()
    wrong_name = await tools.call(python(code="print(1)", sandbox_id="default"))
    assert wrong_name.is_error and "code_block" in wrong_name.content
    made_up = await tools.call(python(code_block="print(1)", sandbox_id="default"))
    assert made_up.is_error and "There is no sandbox" in made_up.content
    assert tools.take_repaired() == []
    await tools.aclose()


async def test_a_call_to_an_unknown_server_goes_to_the_one_tool_of_its_name(manager):
    tools = manager.for_task(["flaky"], repairs=ALL)
    await tools.start()
    result = await tools.call(call("echo", server="search", text="hi"))
    assert not result.is_error and "hi" in result.content
    [repair] = tools.take_repaired()
    assert (repair.kind, repair.written) == ("unknown_server", "search.echo")
    assert repair.ran == "flaky.echo"
    await tools.aclose()


async def test_a_tool_name_two_servers_offer_is_not_guessed(manager):
    tools = manager.for_task(["flaky", "other"], repairs=ALL)
    await tools.start()
    result = await tools.call(call("echo", server="search", text="hi"))
    assert result.is_error and "There is no tool search.echo" in result.content
    assert tools.take_repaired() == []
    await tools.aclose()


async def test_routing_is_off_without_its_key(manager):
    tools = manager.for_task(["flaky"])
    await tools.start()
    result = await tools.call(call("echo", server="search", text="hi"))
    assert result.is_error and "There is no tool search.echo" in result.content
    await tools.aclose()


def test_only_a_missing_code_block_is_filled_from_code():
    schema = {"properties": {"code_block": {}, "sandbox_id": {}}}
    info = ToolInfo("tool-python", "run_python_code", "", schema)
    assert rename_code(info, {"code": "1"}) == ({"code_block": "1"}, "code read as code_block")
    both = {"code": "1", "code_block": "2"}
    assert rename_code(info, both) == (both, None)
    other = ToolInfo("tool-python", "run_command", "", schema)
    assert rename_code(other, {"code": "1"}) == ({"code": "1"}, None)


def test_sandbox_ids_are_read_from_create_sandbox_results():
    assert sandbox_ids("Sandbox created with sandbox_id: sbx-12ab") == ["sbx-12ab"]
    assert sandbox_ids("[notice]\nslow disk\n\nSandbox created with sandbox_id: a1") == ["a1"]
    assert sandbox_ids("no sandbox here") == []
