"""Reasoning sent back where the server requires it (DeepSeek's thinking mode).

The fake's ``require_reasoning_content`` mode refuses an assistant message with tool
calls that lacks the ``reasoning_content`` it was issued with, as DeepSeek does; with
``llm.send_back_reasoning`` (the ``deepseek`` preset) the provider sends it and a tool
loop completes, end to end through ``deepledger run``.
"""

from __future__ import annotations

import pytest

from deepledger.config import compose, validate
from deepledger.errors import ConfigError, FatalLLMError
from deepledger.llm.base import GenerationSettings
from deepledger.llm.factory import create_client
from deepledger.llm.openai import OpenAIChatClient
from deepledger.messages import Message, ToolResult, ToolSpec
from tests.support.cli import deepledger
from tests.support.config import CONF
from tests.support.doubles.fake_llm_server import FakeLLMServer, FakeToolCall, Reply

TASK = [Message.system("You research."), Message.task("What is 2+2?")]
TOOLS = [ToolSpec("search", "Search", {"type": "object", "properties": {"q": {"type": "string"}}})]
SETTINGS = GenerationSettings(max_tokens=500)


def client_for(server: FakeLLMServer, **options) -> OpenAIChatClient:
    return OpenAIChatClient(
        "deepseek-reasoner",
        api_key="k",
        base_url=server.openai_base_url,
        timeout_seconds=10,
        **options,
    )


def script() -> list[Reply]:
    return [
        Reply(tool_calls=(FakeToolCall("search", {"q": "2+2"}, id="call_a"),), reasoning="Look."),
        Reply(tool_calls=(FakeToolCall("search", {"q": "4?"}, id="call_b"),)),  # no reasoning
        Reply(text="\\boxed{4}", reasoning="Done."),
    ]


async def tool_loop(client: OpenAIChatClient) -> list[Message]:
    """Three calls: two tool turns, then the answer; the history as last sent."""
    history = list(TASK)
    for _ in range(3):
        reply = await client.generate(history, TOOLS, SETTINGS)
        history.append(reply.message)
        if reply.message.tool_calls:
            call = reply.message.tool_calls[0]
            history.append(Message.native_tool_results([ToolResult(call.id, "4", name="search")]))
    return history


async def test_the_fake_refuses_a_tool_turn_without_its_reasoning():
    with FakeLLMServer(script(), require_reasoning_content=True) as server:
        async with client_for(server) as client:
            with pytest.raises(FatalLLMError, match="Missing `reasoning_content` field"):
                await tool_loop(client)
    assert len(server.rejected) == 1 and "message index 2" in server.rejected[0][1]


async def test_the_fake_refuses_reasoning_that_is_not_what_it_issued():
    with FakeLLMServer(script()[:1], require_reasoning_content=True) as server:
        async with client_for(server, send_back_reasoning=True) as client:
            first = await client.generate(TASK, TOOLS, SETTINGS)
            changed = Message.assistant("", first.message.tool_calls, reasoning="Other.")
            results = Message.native_tool_results([ToolResult("call_a", "4", name="search")])
            with pytest.raises(FatalLLMError, match="must be passed back"):
                await client.generate([*TASK, changed, results], TOOLS, SETTINGS)


async def test_with_send_back_reasoning_a_tool_loop_completes():
    with FakeLLMServer(script(), require_reasoning_content=True) as server:
        async with client_for(server, send_back_reasoning=True) as client:
            assert client.capabilities.send_back_reasoning
            history = await tool_loop(client)
        server.assert_all_consumed()
    assert history[-1].content == "\\boxed{4}"
    last = server.requests[-1].messages
    sent = [m["reasoning_content"] for m in last if m["role"] == "assistant"]
    # the second reply came with the fake's own reasoning line: sent back as issued
    assert sent == ["Look.", "Thinking about request 2."]
    assert "reasoning_content" not in server.requests[0].messages[-1]


async def test_an_answer_without_calls_sends_no_reasoning_and_the_default_sends_none():
    with FakeLLMServer([Reply("a", reasoning="r"), Reply("b")]) as server:
        async with client_for(server, send_back_reasoning=True) as client:
            first = await client.generate(TASK, (), SETTINGS)
            await client.generate([*TASK, first.message, Message.injected("more?")], (), SETTINGS)
    assert all("reasoning_content" not in m for m in server.requests[1].messages)
    assert not OpenAIChatClient(
        "m", api_key="k", base_url=None, timeout_seconds=1
    ).capabilities.send_back_reasoning


def test_the_deepseek_preset_turns_it_on(monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test-key-1234")
    cfg = compose(CONF, ["llm=deepseek"])
    assert cfg.llm.send_back_reasoning is True
    client = create_client(cfg.llm)
    assert client.capabilities.send_back_reasoning


def test_a_deepseek_style_run_with_native_tools_end_to_end(tmp_path, monkeypatch):
    """`deepledger run` on the deepseek preset: the fake refuses any tool turn without
    its reasoning, and the run answers."""
    call = FakeToolCall("time__get_current_time", {"timezone": "UTC"}, id="call_t")
    replies = [Reply(tool_calls=(call,), reasoning="Check the clock."), Reply("\\boxed{noon}")]
    with FakeLLMServer(
        replies, responder=lambda _: Reply("\\boxed{noon}"), require_reasoning_content=True
    ) as server:
        monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test-key-1234")
        run = deepledger(
            "run",
            "question=What time is it in UTC?",
            "llm=deepseek",
            f"llm.base_url={server.openai_base_url}",
            "agent.tool_protocol=native",
            "agent.main_agent.tools=[time]",
            f"hydra.run.dir={tmp_path}/run",
            cwd=tmp_path,
        )
        rejected = list(server.rejected)
        second = server.requests[1].body["messages"]
    assert run.returncode == 0, run.stderr
    assert not rejected
    assistant = next(m for m in second if m["role"] == "assistant")
    assert assistant["reasoning_content"] == "Check the clock."
    assert "noon" in run.stdout


def test_the_setting_on_a_provider_that_would_ignore_it_is_refused():
    cfg = compose(CONF, ["llm=anthropic", "llm.send_back_reasoning=true"])
    with pytest.raises(ConfigError, match="is a setting of the OpenAI protocol"):
        validate(cfg)
