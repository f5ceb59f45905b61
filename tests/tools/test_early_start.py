"""A task's own (``scope: task``) server starts with its task, while the first model
request is in flight: neither the request nor the server waits for the other.

The server here cannot finish its handshake until the model's first reply has been
asked for (it waits for a file the scripted model writes), so the test is about order,
not time: a task that waited for its server before the first request would never send
it (the server gives up after its startup timeout and the task runs without it), and a
server started only at the first tool call would not be starting when the model is asked.
"""

from __future__ import annotations

import sys
from pathlib import Path

from deepledger.agent.task import AgentFactory
from deepledger.config import ToolServerConfig
from deepledger.llm.scripted import ScriptedLLM
from deepledger.store.journal import Journal
from deepledger.tools.list_cache import ToolListCache, server_key
from deepledger.tools.pool import ToolManager
from deepledger.tools.session import resolve_command
from deepledger.tools.task_tools import TaskTools
from tests.support.config import composed
from tests.support.tool_servers import FLAKY

# Wait for the gate file, then serve the flaky server's tools (echo among them).
GATED = (
    "import os, runpy, sys, time\n"
    "gate = sys.argv[1]\n"
    "while not os.path.exists(gate):\n"
    "    time.sleep(0.01)\n"
    "sys.argv = sys.argv[2:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)
ECHO = {
    "name": "echo",
    "description": "Return the text.",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
}


class Views(ToolManager):
    """The pool, keeping the agents' views it hands out."""

    def for_task(self, *args, **kwargs) -> TaskTools:
        view = super().for_task(*args, **kwargs)
        self.views.append(view)
        return view


async def test_a_task_scoped_server_starts_while_the_first_request_is_in_flight(tmp_path: Path):
    gate = tmp_path / "gate"
    gated = ToolServerConfig(
        command=sys.executable,
        args=["-c", GATED, str(gate), FLAKY],
        scope="task",
        startup_timeout_seconds=30,  # only a broken order waits this long
    )
    cache = ToolListCache(tmp_path / "cache")
    cache.store(server_key(resolve_command(gated.command), list(gated.args), gated), [ECHO])
    manager = Views({"gated": gated}, tmp_path / "logs", list_cache=cache)
    manager.views = []
    seen: list[str] = []

    def first(messages, tools) -> str:
        session = manager.views[0].session("gated")
        seen.append("starting" if session.starting and not session.alive else "not starting")
        gate.write_text("go")  # the server may now finish its handshake
        return (
            "<use_mcp_tool><server_name>gated</server_name><tool_name>echo</tool_name>"
            '<arguments>{"text": "hi"}</arguments></use_mcp_tool>'
        )

    def second(messages, tools) -> str:
        seen.append(messages[-1].content)
        return "\\boxed{hi}"

    cfg = composed("agent.main_agent.tools=[]", "agent.max_final_answer_retries=1")
    cfg.agent.main_agent.tools = ["gated"]
    llm = ScriptedLLM([first, second], responder=lambda messages, tools: "\\boxed{hi}")
    try:
        await AgentFactory(cfg, llm, manager).solve("Say hi.", Journal(None))
    finally:
        await manager.aclose()
    assert seen[0] == "starting"  # asked while the server was still starting
    assert "echo: hi" in seen[1]  # and its first call waited for it, then ran
