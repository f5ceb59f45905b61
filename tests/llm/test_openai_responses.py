"""The OpenAI Responses API provider (``llm.provider=openai_responses``) against the
fake's ``/v1/responses`` endpoint, which refuses what the API refuses (chat-shaped
requests, unanswered calls, reasoning items dropped, changed or not issued)."""

from __future__ import annotations

import json

import pytest

from deepledger.config import compose, validate
from deepledger.errors import (
    ConfigError,
    ContextOverflowError,
    FatalLLMError,
    RateLimitedError,
    TransientLLMError,
)
from deepledger.llm.base import GenerationSettings
from deepledger.llm.factory import create_client
from deepledger.llm.openai_responses import OpenAIResponsesClient
from deepledger.llm.retry import RetryingClient, RetryPolicy
from deepledger.messages import (
    ImagePart,
    Message,
    StopReason,
    ThinkingBlock,
    ToolResult,
    ToolSpec,
    Usage,
)
from tests.support.cli import deepledger
from tests.support.config import CONF
from tests.support.doubles.fake_llm_server import (
    FakeLLMServer,
    FakeToolCall,
    FakeUsage,
    Fault,
    Reply,
    rate_limited,
)
from tests.support.providers import PNG, xml_history

TASK = [Message.system("You research."), Message.task("What is 2+2?")]
TOOLS = [ToolSpec("search", "Search", {"type": "object", "properties": {"q": {"type": "string"}}})]
SETTINGS = GenerationSettings(max_tokens=500, temperature=0.3, top_p=0.9, reasoning_effort="high")


def client_for(server: FakeLLMServer, model: str = "o3-pro", **options) -> OpenAIResponsesClient:
    return OpenAIResponsesClient(
        model, api_key="k", base_url=server.openai_base_url, timeout_seconds=10, **options
    )


def search_then_answer(**first) -> list[Reply]:
    call = FakeToolCall("search", {"q": "2+2"}, id="call_a")
    return [Reply(tool_calls=(call,), **first), Reply(text="\\boxed{4}")]


async def two_turns(client, settings=SETTINGS):
    first = await client.generate(TASK, TOOLS, settings)
    results = Message.native_tool_results([ToolResult("call_a", "4", name="search")])
    second = await client.generate([*TASK, first.message, results], TOOLS, settings)
    return first, second


async def test_a_text_reply_its_usage_with_cached_tokens_and_the_request_shape():
    usage = FakeUsage(1000, 20, cache_read_tokens=600)
    with FakeLLMServer([Reply("\\boxed{4}", usage=usage)]) as server:
        async with client_for(server, "gpt-4.1") as client:
            response = await client.generate(TASK, settings=SETTINGS)
        server.assert_all_consumed()
    assert (response.text, response.stop_reason) == ("\\boxed{4}", StopReason.END_TURN)
    assert response.usage == Usage(1000, 20, cache_read_tokens=600)
    assert response.response_id == "resp_fake_1"
    (request,) = server.requests
    assert (request.protocol, request.path) == ("responses", "/v1/responses")
    body = request.body
    assert body["input"] == [
        {"role": "system", "content": "You research."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert (body["max_output_tokens"], body["store"], body["reasoning"]) == (
        500,
        False,
        {"effort": "high"},
    )
    assert (body["temperature"], body["top_p"]) == (0.3, 0.9)
    assert not {"messages", "max_tokens", "include"} & body.keys()


async def test_a_reasoning_models_tool_loop_sends_its_reasoning_back_encrypted():
    script = search_then_answer(reasoning="I should search.")
    with FakeLLMServer(script) as server:
        async with client_for(server) as client:
            first, second = await two_turns(client)
        server.assert_all_consumed()
    assert first.stop_reason is StopReason.TOOL_USE
    (call,) = first.message.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_a", "search", {"q": "2+2"})
    (block,) = first.message.thinking
    assert (block.text, block.signature) == ("I should search.", "rs_fake_1")
    assert block.redacted_data and block.redacted_data.startswith("gAAAA")
    assert second.text == "\\boxed{4}"
    asked, followed = (r.body for r in server.requests)
    assert asked["include"] == ["reasoning.encrypted_content"]
    assert "temperature" not in asked and "top_p" not in asked
    assert asked["tools"] == [
        {
            "type": "function",
            "name": "search",
            "description": "Search",
            "parameters": TOOLS[0].parameters,
            "strict": False,
        }
    ]
    assert [item.get("type", item.get("role")) for item in followed["input"]] == [
        "system",
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    reasoning, function_call, output = followed["input"][2:]
    assert reasoning == {
        "type": "reasoning",
        "id": "rs_fake_1",
        "summary": [{"type": "summary_text", "text": "I should search."}],
        "encrypted_content": block.redacted_data,
    }
    assert function_call == {
        "type": "function_call",
        "call_id": "call_a",
        "name": "search",
        "arguments": '{"q": "2+2"}',
    }
    assert output == {"type": "function_call_output", "call_id": "call_a", "output": "4"}


@pytest.mark.parametrize(
    ("damage", "refusal"),
    [
        ("dropped", "without its required 'reasoning' item: 'rs_fake_1'"),
        ("changed", "must carry the encrypted_content it came with"),
        ("invented", "Item with id 'rs_other' not found"),
    ],
)
async def test_the_fake_refuses_a_turn_whose_reasoning_was_lost_or_changed(damage, refusal):
    with FakeLLMServer(search_then_answer()) as server:
        async with client_for(server) as client:
            first = await client.generate(TASK, TOOLS, SETTINGS)
            (block,) = first.message.thinking
            kept = {
                "dropped": (),
                "changed": (ThinkingBlock(block.text, block.signature, "gAAAAforged"),),
                "invented": (ThinkingBlock("x", "rs_other", "gAAAA"),),
            }[damage]
            reply = Message.assistant("", first.message.tool_calls, thinking=kept)
            results = Message.native_tool_results([ToolResult("call_a", "4", name="search")])
            with pytest.raises(FatalLLMError, match="HTTP 400"):
                await client.generate([*TASK, reply, results], TOOLS, SETTINGS)
    assert len(server.rejected) == 1 and refusal in server.rejected[0][1]


async def test_the_fake_refuses_chat_shaped_requests_and_unanswered_calls():
    with FakeLLMServer() as server:
        async with client_for(server, "gpt-4.1") as client:
            refused = [
                {"model": "m", "messages": [{"role": "user", "content": "q"}]},
                {"model": "m", "input": "q", "max_tokens": 5},
                {"model": "m", "input": "q", "tools": [{"type": "function", "function": {}}]},
                {
                    "model": "m",
                    "input": [
                        {"type": "function_call", "call_id": "c", "name": "s", "arguments": "{}"}
                    ],
                },
                {
                    "model": "m",
                    "input": [{"type": "function_call_output", "call_id": "c", "output": "x"}],
                },
            ]
            for body in refused:
                with pytest.raises(FatalLLMError, match="HTTP 400"):
                    await client.post(client._url, body)
    reasons = [why for _, why in server.rejected]
    assert len(reasons) == 5
    assert "'input'" in reasons[0] and "max_output_tokens" in reasons[1]
    assert "tools[0].name" in reasons[2] and "No tool output found" in reasons[3]
    assert "No tool call found" in reasons[4]


async def test_reasoning_without_encrypted_content_is_kept_but_not_sent_back():
    """A model not asked for encrypted content (not a reasoning model by name) may still
    return a reasoning item: its bare id would be looked up in a store that holds
    nothing, so it stays on the message and off the wire."""
    with FakeLLMServer(search_then_answer(reasoning="Plain.")) as server:
        async with client_for(server, "gpt-4.1") as client:
            first, second = await two_turns(client)
        server.assert_all_consumed()
    (block,) = first.message.thinking
    assert (block.text, block.redacted_data) == ("Plain.", None)
    assert second.text == "\\boxed{4}"
    assert "reasoning" not in [i.get("type") for i in server.requests[1].body["input"]]


async def test_earlier_turns_reasoning_is_left_out_and_xml_calls_stay_text():
    with FakeLLMServer([Reply("ok")]) as server:
        async with client_for(server, "gpt-4.1") as client:
            history = xml_history()
            history[2] = Message.assistant(
                history[2].content, history[2].tool_calls, thinking=[ThinkingBlock("t", "rs_9")]
            )
            await client.generate(history, TOOLS, SETTINGS)
        server.assert_all_consumed()
    items = server.requests[0].body["input"]
    assert [i.get("role") for i in items] == ["system", "user", "assistant", "user"]
    assert items[2]["content"].startswith("<use_mcp_tool>")  # the call stays in its text


@pytest.mark.parametrize(
    ("reply", "expected", "raw"),
    [
        (Reply("cut", finish_reason="length"), StopReason.MAX_TOKENS, "max_output_tokens"),
        (Reply("", finish_reason="content_filter"), StopReason.CONTENT_FILTER, "content_filter"),
    ],
)
async def test_an_incomplete_response_says_why(reply, expected, raw):
    with FakeLLMServer([reply]) as server:
        async with client_for(server, "gpt-4.1") as client:
            response = await client.generate(TASK, settings=SETTINGS)
    assert (response.stop_reason, response.raw_stop_reason) == (expected, raw)


FAILED = {
    "id": "resp_x",
    "object": "response",
    "status": "failed",
    "output": [],
    "error": {"code": "server_error", "message": "The model failed to generate a response."},
}


@pytest.mark.parametrize(
    ("step", "error"),
    [
        (Fault(status=200, body=json.dumps(FAILED)), TransientLLMError),
        (Fault(status=500), TransientLLMError),
        (rate_limited(2), RateLimitedError),
        (
            Fault(
                status=400,
                body=json.dumps(
                    {
                        "error": {
                            "message": "Your input exceeds the context window of this model.",
                            "type": "invalid_request_error",
                            "param": "input",
                            "code": "context_length_exceeded",
                        }
                    }
                ),
            ),
            ContextOverflowError,
        ),
        (Fault(status=200, body='{"id": "x", "output": ['), TransientLLMError),
    ],
)
async def test_errors_are_classified_as_the_chat_clients_are(step, error):
    with FakeLLMServer([step]) as server:
        async with client_for(server, "gpt-4.1") as client:
            with pytest.raises(error):
                await client.generate(TASK, settings=SETTINGS)


async def test_a_transient_failure_is_retried_by_the_one_policy():
    failed = Fault(status=200, body=json.dumps(FAILED))
    with FakeLLMServer([failed, Fault(status=503), Reply("\\boxed{4}")]) as server:
        waits: list[float] = []

        async def sleep(seconds: float) -> None:
            waits.append(seconds)

        client = RetryingClient(client_for(server, "gpt-4.1"), RetryPolicy(), sleep=sleep)
        async with client:
            response = await client.generate(TASK, settings=SETTINGS)
        server.assert_all_consumed()
    assert response.text == "\\boxed{4}" and client.retries == 2 and len(waits) == 2


def test_the_preset_builds_the_responses_client(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-1234")
    cfg = compose(CONF, ["llm=openai_responses"])
    assert (cfg.llm.provider, cfg.llm.model_name) == ("openai_responses", "o3-pro")
    client = create_client(cfg.llm)
    assert isinstance(client, RetryingClient) and isinstance(client.inner, OpenAIResponsesClient)
    assert client.provider == "openai_responses"
    assert client.capabilities.send_back_reasoning and not client.capabilities.prefill
    assert client.inner._url == "https://api.openai.com/v1/responses"


@pytest.mark.parametrize("protocol", ["native", "xml"])
def test_deepledger_run_answers_a_tool_task_on_a_responses_fake(tmp_path, monkeypatch, protocol):
    """`deepledger run` on the openai_responses preset: a tool call, its result, the
    answer; the fake refuses any request that breaks the API's rules."""
    if protocol == "native":
        call = FakeToolCall("time__get_current_time", {"timezone": "UTC"}, id="call_t")
        first = Reply(tool_calls=(call,), reasoning="Check the clock.")
    else:
        first = Reply(
            "<use_mcp_tool>\n<server_name>time</server_name>\n<tool_name>get_current_time"
            '</tool_name>\n<arguments>\n{"timezone": "UTC"}\n</arguments>\n</use_mcp_tool>'
        )
    replies = [first, Reply("It is \\boxed{noon}.")]
    with FakeLLMServer(replies, responder=lambda _: Reply("\\boxed{noon}")) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-1234")
        run = deepledger(
            "run",
            "question=What time is it in UTC?",
            "llm=openai_responses",
            f"llm.base_url={server.openai_base_url}",
            f"agent.tool_protocol={protocol}",
            "agent.main_agent.tools=[time]",
            f"hydra.run.dir={tmp_path}/run",
            cwd=tmp_path,
        )
        rejected = list(server.rejected)
        requests = [r.body for r in server.requests]
    assert run.returncode == 0, run.stderr
    assert not rejected
    assert all(r.protocol == "responses" for r in server.requests)
    assert "noon" in run.stdout
    second = requests[1]["input"]
    if protocol == "native":
        kinds = [item.get("type") for item in second]
        assert kinds.index("reasoning") < kinds.index("function_call")
        assert kinds.index("function_call") < kinds.index("function_call_output")
        (output,) = [
            item["output"] for item in second if item.get("type") == "function_call_output"
        ]
    else:
        assert "function_call" not in json.dumps(second)
        output = second[-1]["content"]
    assert "UTC" in output  # the time tool's result reached the model


def test_a_prefill_asked_of_the_responses_api_is_refused():
    cfg = compose(CONF, ["llm=openai_responses", "llm.assistant_prefill=true"])
    with pytest.raises(ConfigError, match="continues no trailing assistant message"):
        validate(cfg)


async def test_images_go_as_input_image_parts_in_user_messages_only():
    chart = ImagePart("image/png", PNG, "chart.png")
    results = Message.native_tool_results(
        [ToolResult("call_a", "a chart", name="shot", images=(chart,))]
    )
    with FakeLLMServer(search_then_answer()) as server:
        async with client_for(server, "gpt-4.1", accepts_images=True) as client:
            task = [TASK[0], Message.task("What does it show?", [chart])]
            first = await client.generate(task, TOOLS, SETTINGS)
            await client.generate([*task, first.message, results], TOOLS, SETTINGS)
        server.assert_all_consumed()
    items = server.requests[1].body["input"]
    assert items[1]["content"] == [
        {"type": "input_text", "text": "What does it show?"},
        {"type": "input_image", "image_url": chart.data_url},
    ]
    output, shown = items[-2:]
    assert output == {"type": "function_call_output", "call_id": "call_a", "output": "a chart"}
    assert shown["role"] == "user"
    assert [p["type"] for p in shown["content"]] == ["input_text", "input_image"]
    assert "call_a" in shown["content"][0]["text"]


def test_the_responses_provider_is_priced_as_the_openai_api():
    from deepledger.prices import library_price

    price = library_price("o3-pro", "openai_responses", None)
    assert price is not None and price == library_price("o3-pro", "openai", None)
