"""A whole research task on loopback: the real OpenAI SDK against the scripted HTTP
fake, and our real search, reader and python servers over stdio, in both protocols."""

from __future__ import annotations

import json

import pytest

from deepledger.agent.task import AgentFactory
from deepledger.config import tool_servers
from deepledger.llm.factory import create_client
from deepledger.messages import MessageKind
from deepledger.store.journal import Journal
from deepledger.tools.pool import ToolManager
from tests.support.config import composed
from tests.support.doubles.fake_llm_server import FakeLLMServer, FakeToolCall, Reply

STEPS = [
    ("search", "search", {"query": "Eiffel Tower Paris", "k": 3}),
    ("reader", "read", {"source": "PLACEHOLDER"}),
    ("python", "run_python", {"code": "height = 330\nheight * 2"}),
]


def xml_block(server: str, tool: str, arguments: dict) -> str:
    return (
        f"<use_mcp_tool>\n<server_name>{server}</server_name>\n<tool_name>{tool}</tool_name>\n"
        f"<arguments>\n{json.dumps(arguments)}\n</arguments>\n</use_mcp_tool>"
    )


def script(protocol: str, attached: str) -> list[Reply]:
    replies = []
    for i, (server, tool, arguments) in enumerate(STEPS):
        if tool == "read":
            arguments = {"source": attached}
        if protocol == "xml":
            replies.append(Reply(f"Step {i + 1}.\n" + xml_block(server, tool, arguments)))
        else:
            call = FakeToolCall(f"{server}__{tool}", arguments, id=f"call_{i}")
            replies.append(Reply(f"Step {i + 1}.", tool_calls=(call,)))
    replies.append(Reply("Twice the height is \\boxed{660} metres."))
    replies.append(Reply("\\boxed{660}"))  # the closing summary call
    return replies


@pytest.mark.parametrize("protocol", ["xml", "native"])
async def test_multi_turn_research_task_with_real_tools(protocol, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    attached = tmp_path / "notes.md"
    attached.write_text("# Notes\nThe tower is 330 metres tall.\n")
    server = FakeLLMServer(script(protocol, str(attached)))
    with server:
        cfg = composed(
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            f"agent.tool_protocol={protocol}",
            "agent.main_agent.tools=[search,reader,python]",
            f"benchmark.data.data_dir={tmp_path}",
        )
        llm = create_client(cfg.llm)
        manager = ToolManager(tool_servers(cfg), log_dir=tmp_path / "tool_servers")
        journal = Journal(tmp_path / "journal.jsonl")
        try:
            state = await AgentFactory(cfg, llm, manager).solve(
                "How tall is twice the tower?", journal, file_path=str(attached)
            )
        finally:
            journal.close()
            await manager.aclose()
            await llm.aclose()
        server.assert_all_consumed()
        requests = [r.body for r in server.requests]

    assert (state.final_answer, state.tool_calls, state.turn) == ("660", 3, 4)
    results = [m for m in state.history if m.kind is MessageKind.TOOL_RESULTS]
    texts = [m.content if protocol == "xml" else m.tool_results[0].content for m in results]
    assert "Eiffel Tower" in texts[0]
    assert "330 metres tall" in texts[1]
    assert "660" in texts[2]
    assert not any(r.is_error for m in results for r in m.tool_results)
    if protocol == "native":
        offered = {t["function"]["name"] for t in requests[0]["tools"]}
        assert {"search__search", "reader__read", "python__run_python"} <= offered
        assert requests[1]["messages"][-1]["role"] == "tool"
    else:
        assert "tools" not in requests[0]
        assert "## Server name: python" in requests[0]["messages"][0]["content"]
    assert str(attached) in requests[0]["messages"][1]["content"]  # the task names the file


async def test_a_crashing_tool_server_does_not_end_the_task(tmp_path):
    """The loop with a real server that dies mid-task: the model sees an error, the server
    comes back, and the task finishes."""
    import sys

    from deepledger.llm.scripted import ScriptedLLM
    from tests.support.tool_servers import FLAKY

    flaky = FLAKY
    cfg = composed(
        "agent.main_agent.tools=[flaky]",
        f"+tools.flaky={{command: {sys.executable}, args: [{flaky}]}}",
    )
    llm = ScriptedLLM(
        [
            xml_block("flaky", "crash", {}),
            xml_block("flaky", "echo", {"text": "back?"}),
            "It came back: \\boxed{yes}",
            "\\boxed{yes}",
        ]
    )
    manager = ToolManager(tool_servers(cfg))
    try:
        state = await AgentFactory(cfg, llm, manager).solve("Is it back?", Journal(None))
    finally:
        await manager.aclose()
    crash, echo = [m for m in state.history if m.kind is MessageKind.TOOL_RESULTS]
    assert "[flaky.crash error]" in crash.content and "restarted" in crash.content
    assert "[flaky.echo result]\necho: back?" in echo.content
    assert state.final_answer == "yes"


@pytest.mark.parametrize("sees_images", [True, False])
async def test_an_attached_image_goes_with_the_task_to_a_model_that_sees_images(
    tmp_path, monkeypatch, sees_images
):
    import base64

    from tests.support.providers import PNG

    monkeypatch.chdir(tmp_path)
    picture = tmp_path / "chart.png"
    picture.write_bytes(base64.b64decode(PNG))
    with FakeLLMServer([Reply("It is a chart: \\boxed{chart}"), Reply("\\boxed{chart}")]) as server:
        cfg = composed(
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            f"llm.accepts_images={str(sees_images).lower()}",
            "agent.main_agent.tools=[]",
            f"benchmark.data.data_dir={tmp_path}",
        )
        llm = create_client(cfg.llm)
        manager = ToolManager(tool_servers(cfg))
        journal = Journal(tmp_path / "journal.jsonl")
        try:
            state = await AgentFactory(cfg, llm, manager).solve(
                "What is in the picture?", journal, file_path=str(picture)
            )
        finally:
            journal.close()
            await manager.aclose()
            await llm.aclose()
    first = server.requests[0]
    assert state.final_answer == "chart"
    task = first.messages[1]["content"]
    assert str(picture) in (task[0]["text"] if sees_images else task)
    assert [(i.role, i.mime_type, i.data) for i in first.images] == (
        [("user", "image/png", PNG)] if sees_images else []
    )
    started = json.loads((tmp_path / "journal.jsonl").read_text().splitlines()[1])
    assert [i["source"] for i in started["task_images"]] == (["chart.png"] if sees_images else [])
    assert "data" not in json.dumps(started["task_images"])
