"""Both providers (OpenAI over aiohttp, Anthropic through its SDK) against the loopback fake."""

from __future__ import annotations

import pytest

from deepledger.llm.base import GenerationSettings
from deepledger.messages import Message, StopReason, ToolCall, ToolResult, ToolSpec, Usage
from tests.support.doubles.fake_llm_server import FakeLLMServer, FakeToolCall, FakeUsage, Reply
from tests.support.providers import PROTOCOLS, TASK, make_client, native_history, xml_history


@pytest.fixture
def server():
    with FakeLLMServer() as fake:
        yield fake
        fake.assert_all_consumed()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_text_reply_and_usage_with_cache(protocol, server):
    server.enqueue(
        Reply(
            text="\\boxed{4}",
            usage=FakeUsage(
                1000,
                20,
                cache_read_tokens=600,
                cache_write_tokens=300 if protocol == "anthropic" else 0,
            ),
        )
    )
    async with make_client(protocol, server) as client:
        response = await client.generate(
            TASK, settings=GenerationSettings(max_tokens=64, temperature=0.0)
        )
    assert response.text == "\\boxed{4}"
    assert response.stop_reason is StopReason.END_TURN
    expected_write = 300 if protocol == "anthropic" else 0
    assert response.usage == Usage(
        1000, 20, cache_read_tokens=600, cache_write_tokens=expected_write
    )
    assert response.usage.uncached_input_tokens == 400 - expected_write
    body = server.requests[0].body
    assert body["max_tokens"] == 64
    # The anthropic 2.x SDK takes no sampling parameters; OpenAI-compatible servers do.
    assert body.get("temperature") == (0.0 if protocol == "openai" else None)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_native_tool_call_reply(protocol, server):
    server.enqueue(Reply(tool_calls=(FakeToolCall("search", {"q": "capital of France"}, id="t1"),)))
    tools = [
        ToolSpec(
            "search",
            "Search the corpus",
            {"type": "object", "properties": {"q": {"type": "string"}}},
        )
    ]
    async with make_client(protocol, server) as client:
        response = await client.generate(TASK, tools)
    assert response.stop_reason is StopReason.TOOL_USE
    assert response.message.tool_calls == (
        ToolCall(
            "t1",
            "search",
            {"q": "capital of France"},
            raw_arguments=response.message.tool_calls[0].raw_arguments,
        ),
    )
    sent_tools = server.requests[0].body["tools"]
    assert len(sent_tools) == 1
    schema = (
        sent_tools[0]["function"]["parameters"]
        if protocol == "openai"
        else sent_tools[0]["input_schema"]
    )
    assert schema["properties"]["q"]["type"] == "string"


async def test_broken_json_arguments_are_repaired_or_reported(server):
    server.enqueue(
        Reply(
            tool_calls=(
                FakeToolCall("search", '{"q": "paris"', id="a"),
                FakeToolCall("search", "not json at all", id="b"),
            )
        )
    )
    async with make_client("openai", server) as client:
        calls = (await client.generate(TASK)).message.tool_calls
    assert calls[0].arguments == {"q": "paris"} and calls[0].parse_error is None
    assert calls[1].arguments == {} and "not a JSON object" in calls[1].parse_error
    assert calls[1].raw_arguments == "not json at all"


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        ("length", StopReason.MAX_TOKENS),
        ("content_filter", StopReason.CONTENT_FILTER),
        ("something_new", StopReason.OTHER),
    ],
)
async def test_stop_reasons_are_typed_not_crashes(protocol, finish, expected, server):
    server.enqueue(Reply(text="partial", finish_reason=finish))
    async with make_client(protocol, server) as client:
        response = await client.generate(TASK)
    assert response.stop_reason is expected and response.text == "partial"


async def test_openai_wire_pairs_tool_messages_by_id(server):
    server.enqueue(Reply(text="ok"))
    async with make_client("openai", server) as client:
        await client.generate(native_history())
    wire = server.requests[0].messages
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert [c["id"] for c in wire[2]["tool_calls"]] == ["c1", "c2"]
    assert wire[2]["tool_calls"][0]["function"]["arguments"] == '{"q": "a"}'
    assert [(m["tool_call_id"], m["content"]) for m in wire[3:5]] == [
        ("c1", "found a"),
        ("c2", "404"),
    ]


async def test_anthropic_wire_merges_turns_and_marks_cache(server):
    server.enqueue(Reply(text="ok"))
    async with make_client("anthropic", server) as client:
        await client.generate(native_history())
    body = server.requests[0].body
    assert body["system"] == [
        {"type": "text", "text": "You research.", "cache_control": {"type": "ephemeral"}}
    ]
    roles = [t["role"] for t in body["messages"]]
    assert roles == ["user", "assistant", "user"]  # results + injected prompt merged into one turn
    assistant, results = body["messages"][1]["content"], body["messages"][2]["content"]
    assert [b["type"] for b in assistant] == ["text", "tool_use", "tool_use"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert results[1]["is_error"] is True
    assert results[-1]["cache_control"] == {"type": "ephemeral"}  # newest user turn
    assert all("cache_control" not in b for b in results[:-1])


async def test_anthropic_prefill_loses_trailing_whitespace(server):
    server.enqueue(Reply(text="done"))
    async with make_client("anthropic", server) as client:
        await client.generate([*TASK, Message.assistant("Failure type: \n")])
    assert server.requests[0].messages[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Failure type:"}],
    }


async def test_xml_protocol_calls_stay_text_on_both_wires(server):
    server.enqueue(Reply(text="ok"), Reply(text="ok"))
    for protocol in PROTOCOLS:
        async with make_client(protocol, server) as client:
            await client.generate(xml_history())
    openai_wire, anthropic_wire = (r.messages for r in server.requests)
    assert openai_wire[2] == {"role": "assistant", "content": "<use_mcp_tool>...</use_mcp_tool>"}
    assert openai_wire[3] == {"role": "user", "content": "search returned: a"}
    assert [b["type"] for t in anthropic_wire for b in t["content"]] == ["text", "text", "text"]


async def test_empty_replies_never_reach_the_wire_as_invalid_turns(server):
    history = [
        *TASK,
        Message.assistant(""),
        Message.injected("Please answer."),
        Message.assistant("  \n"),
    ]
    server.enqueue(Reply(text="ok"), Reply(text="ok"))
    for protocol in PROTOCOLS:
        async with make_client(protocol, server) as client:
            await client.generate(history)
    openai_wire, anthropic_wire = (r.messages for r in server.requests)
    assert openai_wire[2] == {"role": "assistant", "content": ""}
    # Anthropic: the blank turns are left out and the user turns around them merge.
    assert [t["role"] for t in anthropic_wire] == ["user"]
    assert [b["text"] for b in anthropic_wire[0]["content"]] == ["What is 2+2?", "Please answer."]


async def test_repaired_arguments_go_back_as_valid_json(server):
    broken = ToolCall.from_raw("c1", "search", '{"q": "paris"')
    garbage = ToolCall.from_raw("c2", "search", "not json")
    history = [
        *TASK,
        Message.assistant("", [broken, garbage]),
        Message.native_tool_results([ToolResult("c1", "r"), ToolResult("c2", "bad args")]),
    ]
    server.enqueue(Reply(text="ok"))
    async with make_client("openai", server) as client:
        await client.generate(history)
    sent = [c["function"]["arguments"] for c in server.requests[0].messages[2]["tool_calls"]]
    assert sent == ['{"q": "paris"}', "{}"]
