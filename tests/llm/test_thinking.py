"""Anthropic extended thinking: blocks kept typed, journaled, and sent back as the API
requires, against the fake's thinking mode (which refuses what the real API refuses)."""

from __future__ import annotations

import json

import pytest

from deepledger.config import compose, validate
from deepledger.errors import ConfigError, FatalLLMError
from deepledger.llm.anthropic import AnthropicClient
from deepledger.llm.base import GenerationSettings
from deepledger.llm.factory import create_client
from deepledger.messages import Message, ThinkingBlock, ToolResult, ToolSpec
from deepledger.records.codec import decode, encode_line
from deepledger.records.events import AssistantTurn
from tests.support.cli import deepledger
from tests.support.config import CONF
from tests.support.doubles.fake_llm_server import FakeLLMServer, FakeToolCall, Reply

THINKING = {"type": "enabled", "budget_tokens": 2048}
SETTINGS = GenerationSettings(max_tokens=4096)
TASK = [Message.system("You research."), Message.task("What is 2+2?")]
TOOLS = [ToolSpec("search", "Search", {"type": "object", "properties": {"q": {"type": "string"}}})]


def thinking_client(server: FakeLLMServer, thinking=THINKING) -> AnthropicClient:
    return AnthropicClient(
        "claude-test", api_key="k", base_url=server.base_url, timeout_seconds=10, thinking=thinking
    )


def search_then_answer() -> list[Reply]:
    call = FakeToolCall("search", {"q": "2+2"}, id="toolu_a")
    return [
        Reply(reasoning="I should look it up.", redacted_thinking=True, tool_calls=(call,)),
        Reply(text="\\boxed{4}", reasoning="The result says 4."),
    ]


def after_search(first: Message) -> list[Message]:
    return [*TASK, first, Message.native_tool_results([ToolResult("toolu_a", "4", name="search")])]


async def test_a_tool_using_turn_sends_its_thinking_blocks_back_unchanged():
    with FakeLLMServer(search_then_answer(), anthropic_thinking=True) as server:
        async with thinking_client(server) as client:
            first = await client.generate(TASK, TOOLS, SETTINGS)
            second = await client.generate(after_search(first.message), TOOLS, SETTINGS)
        server.assert_all_consumed()
    thinking, redacted = first.message.thinking
    assert (thinking.text, thinking.is_redacted, redacted.is_redacted) == (
        "I should look it up.",
        False,
        True,
    )
    assert thinking.signature and redacted.redacted_data
    assert first.message.reasoning is None  # the text lives in its block, once
    assert second.text == "\\boxed{4}"
    sent = server.requests[1].body
    assert sent["thinking"] == THINKING
    assistant = sent["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["thinking", "redacted_thinking", "tool_use"]
    assert assistant[0]["signature"] == thinking.signature
    assert assistant[1]["data"] == redacted.redacted_data


async def test_thinking_blocks_survive_the_journal_and_are_still_accepted():
    """A message written by the journal and read back (as the replay reads it) carries
    the same blocks, and the API takes them."""
    with FakeLLMServer(search_then_answer(), anthropic_thinking=True) as server:
        async with thinking_client(server) as client:
            first = await client.generate(TASK, TOOLS, SETTINGS)
            line = encode_line(AssistantTurn(turn=1, message=first.message))
            reread = decode(json.loads(line)).message
            assert reread.thinking == first.message.thinking
            await client.generate(after_search(reread), TOOLS, SETTINGS)
        server.assert_all_consumed()


@pytest.mark.parametrize(
    ("damage", "refusal"),
    [
        ("drop", "Expected `thinking` or `redacted_thinking`, but found `tool_use`"),
        ("edit", "Invalid `signature` in `thinking` block"),
        ("drop_redacted", "passed back complete and unmodified"),
    ],
)
async def test_the_fake_refuses_a_turn_whose_blocks_were_lost_or_changed(damage, refusal):
    """What the runtime did before thinking blocks were kept, and its near misses: the
    fake answers as the real API does, and the error is fatal (no retry fixes it)."""
    with FakeLLMServer(search_then_answer(), anthropic_thinking=True) as server:
        async with thinking_client(server) as client:
            first = (await client.generate(TASK, TOOLS, SETTINGS)).message
            thinking, redacted = first.thinking
            kept = {
                "drop": (),
                "edit": (ThinkingBlock(thinking.text + " (edited)", thinking.signature), redacted),
                "drop_redacted": (thinking,),
            }[damage]
            damaged = Message.assistant(first.content, first.tool_calls, thinking=kept)
            with pytest.raises(FatalLLMError, match="HTTP 400") as info:
                await client.generate(after_search(damaged), TOOLS, SETTINGS)
        assert refusal in str(info.value)
        assert len(server.rejected) == 1


async def test_blocks_of_an_earlier_turn_are_left_out():
    """After a user message that is not tool results (an injected prompt), the turn
    before it is over: its blocks are not required and are not sent."""
    with FakeLLMServer(
        [*search_then_answer(), Reply(text="summary")], anthropic_thinking=True
    ) as s:
        async with thinking_client(s) as client:
            first = (await client.generate(TASK, TOOLS, SETTINGS)).message
            second = (await client.generate(after_search(first), TOOLS, SETTINGS)).message
            closing = [*after_search(first), second, Message.injected("Summarize.")]
            await client.generate(closing, (), SETTINGS)
        s.assert_all_consumed()
    sent = s.requests[2].body["messages"]
    assistant_blocks = [b["type"] for m in sent if m["role"] == "assistant" for b in m["content"]]
    assert assistant_blocks == ["tool_use", "text"]


async def test_no_prefill_and_room_for_the_budget_while_thinking():
    with FakeLLMServer([Reply(text="note")], anthropic_thinking=True) as server:
        async with thinking_client(server) as client:
            assert client.capabilities.prefill is False
            # A compaction note asks for less than the thinking budget.
            await client.generate(TASK, (), GenerationSettings(max_tokens=1000))
        server.assert_all_consumed()
    assert server.requests[0].body["max_tokens"] == 1000 + THINKING["budget_tokens"]
    with FakeLLMServer() as server:
        assert AnthropicClient(
            "m", api_key="k", base_url=server.base_url, timeout_seconds=1
        ).capabilities.prefill


def test_thinking_from_config_reaches_the_client(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    cfg = compose(CONF, ["llm=anthropic", "llm.thinking={type: enabled, budget_tokens: 4000}"])
    validate(cfg)
    client = create_client(cfg.llm).inner
    assert client.thinking == {"type": "enabled", "budget_tokens": 4000}
    assert not client.capabilities.prefill


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["llm.thinking={type: enabled, budget_tokens: 500}"], "llm.thinking.budget_tokens=500"),
        (["llm.thinking={type: enabled, budget_tokens: 20000}"], "below llm.max_tokens"),
        (["llm.thinking={type: adaptive}", "+llm.extra_body.temperature=0.2"], "temperature"),
        (["llm.thinking={budget_tokens: 2000}"], "llm.thinking needs a type"),
    ],
)
def test_thinking_settings_anthropic_refuses_are_refused_naming_the_key(overrides, named):
    cfg = compose(CONF, ["llm=anthropic", "llm.max_tokens=16384", *overrides])
    with pytest.raises(ConfigError, match="Invalid configuration") as info:
        validate(cfg)
    assert named in str(info.value)


def test_thinking_on_another_provider_is_refused():
    cfg = compose(CONF, ["llm=openai", "llm.thinking={type: adaptive}"])
    with pytest.raises(ConfigError, match="is Anthropic's setting"):
        validate(cfg)


def test_a_thinking_run_with_native_tools_end_to_end(tmp_path, monkeypatch):
    """`deepledger run` with thinking on and native tool calls: the second request carries
    the first reply's blocks (the fake refuses it otherwise), and the journal keeps them."""
    call = FakeToolCall("time__get_current_time", {"timezone": "UTC"}, id="toolu_t")
    replies = [Reply(tool_calls=(call,), reasoning="Check the clock."), Reply("\\boxed{noon}")]
    with FakeLLMServer(
        replies, responder=lambda _: Reply("\\boxed{noon}"), anthropic_thinking=True
    ) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
        run = deepledger(
            "run",
            "question=What time is it in UTC?",
            "llm=anthropic",
            f"llm.base_url={server.base_url}",
            "llm.thinking={type: enabled, budget_tokens: 2048}",
            "agent.tool_protocol=native",
            "agent.main_agent.tools=[time]",
            f"hydra.run.dir={tmp_path}/run",
            cwd=tmp_path,
        )
        rejected = list(server.rejected)
        second = server.requests[1].body["messages"]
    assert run.returncode == 0, run.stderr
    assert not rejected
    assert [b["type"] for b in second[1]["content"]] == ["thinking", "tool_use"]
    events = [json.loads(line) for line in (tmp_path / "run/journal.jsonl").open()]
    messages = [e["message"] for e in events if isinstance(e.get("message"), dict)]
    kept = [m["thinking"] for m in messages if m.get("thinking")]
    assert kept and kept[0][0]["text"] == "Check the clock." and kept[0][0]["signature"]
