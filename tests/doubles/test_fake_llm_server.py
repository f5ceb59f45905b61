"""FakeLLMServer driven through the real async OpenAI and Anthropic SDKs."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import anthropic
import httpx
import openai
import pytest

from tests.support.doubles.fake_llm_server import (
    NO_STEP_LEFT,
    FakeLLMServer,
    FakeToolCall,
    FakeUsage,
    Fault,
    RecordedImage,
    RecordedRequest,
    Reply,
    malformed_body,
    rate_limited,
    server_error,
    slow,
)

MESSAGES = [{"role": "user", "content": "What is 2+2?"}]


def openai_client(server: FakeLLMServer, max_retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="x", max_retries=max_retries)


def anthropic_client(server: FakeLLMServer, max_retries: int = 0) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.base_url, api_key="x", max_retries=max_retries)


async def ask_openai(server: FakeLLMServer, **kwargs):
    async with openai_client(server) as client:
        return await client.chat.completions.create(model="gpt-test", messages=MESSAGES, **kwargs)


async def ask_anthropic(server: FakeLLMServer, **kwargs):
    async with anthropic_client(server) as client:
        return await client.messages.create(
            model="claude-test", max_tokens=64, messages=MESSAGES, **kwargs
        )


@pytest.mark.asyncio
async def test_text_reply_and_usage_openai() -> None:
    usage = FakeUsage(
        input_tokens=100, output_tokens=7, cache_read_tokens=30, cache_write_tokens=20
    )
    async with FakeLLMServer([Reply(text="4", usage=usage, model="gpt-fake")]) as server:
        completion = await ask_openai(server)
        server.assert_all_consumed()

    assert isinstance(completion, openai.types.chat.ChatCompletion)
    choice = completion.choices[0]
    assert choice.message.content == "4"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert completion.model == "gpt-fake"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 100
    assert completion.usage.completion_tokens == 7
    assert completion.usage.total_tokens == 107
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 30


@pytest.mark.asyncio
async def test_text_reply_and_usage_anthropic() -> None:
    usage = FakeUsage(
        input_tokens=100, output_tokens=7, cache_read_tokens=30, cache_write_tokens=20
    )
    async with FakeLLMServer([Reply(text="4", usage=usage)]) as server:
        message = await ask_anthropic(server)
        server.assert_all_consumed()

    assert isinstance(message, anthropic.types.Message)
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "4"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 50  # uncached part only
    assert message.usage.cache_read_input_tokens == 30
    assert message.usage.cache_creation_input_tokens == 20
    assert message.usage.output_tokens == 7


@pytest.mark.asyncio
async def test_tool_call_openai() -> None:
    steps = [
        Reply(tool_calls=(FakeToolCall("add", {"a": 2, "b": 2}),)),
        Reply(text="calling", tool_calls=(FakeToolCall("add", '{"a": 2,', id="call_custom"),)),
    ]
    async with FakeLLMServer(steps) as server:
        first = await ask_openai(server)
        second = await ask_openai(server)

    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.content is None
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.id == "call_1"
    assert call.type == "function"
    assert call.function.name == "add"
    assert json.loads(call.function.arguments) == {"a": 2, "b": 2}

    message = second.choices[0].message
    assert message.content == "calling"
    assert message.tool_calls is not None
    assert message.tool_calls[0].id == "call_custom"
    assert message.tool_calls[0].function.arguments == '{"a": 2,'  # broken JSON sent verbatim


@pytest.mark.asyncio
async def test_tool_call_anthropic() -> None:
    steps = [
        Reply(
            text="Let me add.",
            tool_calls=(FakeToolCall("add", {"a": 2, "b": 2}), FakeToolCall("mul", '{"x": 3}')),
        ),
        Reply(tool_calls=(FakeToolCall("add", "{not json"),)),
    ]
    async with FakeLLMServer(steps) as server:
        first = await ask_anthropic(server)
        second = await ask_anthropic(server)

    assert first.stop_reason == "tool_use"
    assert [block.type for block in first.content] == ["text", "tool_use", "tool_use"]
    add, mul = first.content[1], first.content[2]
    assert isinstance(add, anthropic.types.ToolUseBlock)
    assert (add.id, add.name, add.input) == ("toolu_1", "add", {"a": 2, "b": 2})
    assert (mul.id, mul.name, mul.input) == ("toolu_2", "mul", {"x": 3})

    assert [block.type for block in second.content] == ["tool_use"]
    assert second.content[0].input == {"_raw": "{not json"}


@pytest.mark.asyncio
async def test_finish_reason_mapping() -> None:
    steps = [
        Reply(text="trunc", finish_reason="length"),
        Reply(text="", finish_reason="content_filter"),
    ]
    async with FakeLLMServer(steps + steps) as server:
        assert (await ask_openai(server)).choices[0].finish_reason == "length"
        assert (await ask_openai(server)).choices[0].finish_reason == "content_filter"
        assert (await ask_anthropic(server)).stop_reason == "max_tokens"
        refused = await ask_anthropic(server)
        server.assert_all_consumed()
    assert refused.stop_reason == "refusal"
    assert refused.content == []


@pytest.mark.asyncio
async def test_rate_limited_openai() -> None:
    async with FakeLLMServer([rate_limited(2)]) as server:
        with pytest.raises(openai.RateLimitError) as info:
            await ask_openai(server)
        server.assert_all_consumed()
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "2"
    assert info.value.code == "rate_limit_exceeded"


@pytest.mark.asyncio
async def test_rate_limited_anthropic() -> None:
    async with FakeLLMServer([rate_limited(2)]) as server:
        with pytest.raises(anthropic.RateLimitError) as info:
            await ask_anthropic(server)
    assert info.value.response.headers["retry-after"] == "2"
    assert info.value.type == "rate_limit_error"


@pytest.mark.asyncio
async def test_server_error_both_sdks() -> None:
    async with FakeLLMServer([server_error(), server_error(503)]) as server:
        with pytest.raises(openai.InternalServerError) as oa_info:
            await ask_openai(server)
        with pytest.raises(anthropic.InternalServerError) as an_info:
            await ask_anthropic(server)
        server.assert_all_consumed()
    assert oa_info.value.status_code == 500
    assert an_info.value.status_code == 503


@pytest.mark.asyncio
async def test_sdk_retries_through_faults() -> None:
    steps = [rate_limited(0.01), server_error(retry_after=0.01), Reply(text="finally")]
    async with FakeLLMServer(steps + steps) as server:
        async with openai_client(server, max_retries=2) as client:
            completion = await client.chat.completions.create(model="m", messages=MESSAGES)
        async with anthropic_client(server, max_retries=2) as client:
            message = await client.messages.create(model="m", max_tokens=8, messages=MESSAGES)
        server.assert_all_consumed()
    assert completion.choices[0].message.content == "finally"
    assert message.content[0].text == "finally"
    assert len(server.requests) == 6
    retry_counts = [req.headers.get("x-stainless-retry-count") for req in server.requests]
    assert retry_counts == ["0", "1", "2", "0", "1", "2"]


@pytest.mark.asyncio
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_slow_reply_times_out_and_close_is_prompt(sdk: str) -> None:
    # Nothing here races the clock: the reply is due in a minute, so the client's short
    # timeout always fires first; on a loaded machine the server may read the request
    # only after the client gave up, so it is waited for; and "prompt" means well under
    # the minute a close that waited for the sleeping handler would take.
    server = FakeLLMServer([slow(60)]).start()
    try:
        if sdk == "openai":
            with pytest.raises(openai.APITimeoutError):
                await ask_openai(server, timeout=0.5)
        else:
            with pytest.raises(anthropic.APITimeoutError):
                await ask_anthropic(server, timeout=0.5)
        await wait_until(lambda: len(server.requests) == 1, within=30)
    finally:
        started = time.monotonic()
        server.close()
        elapsed = time.monotonic() - started
    assert elapsed < 15
    assert len(server.requests) == 1


async def wait_until(condition, within: float) -> None:
    deadline = time.monotonic() + within
    while not condition() and time.monotonic() < deadline:  # noqa: ASYNC110 - another thread's state
        await asyncio.sleep(0.05)


@pytest.mark.asyncio
async def test_slow_reply_within_timeout_succeeds() -> None:
    async with FakeLLMServer([slow(0.05, Reply(text="ok"))]) as server:
        completion = await ask_openai(server, timeout=30)
    assert completion.choices[0].message.content == "ok"


@pytest.mark.asyncio
async def test_malformed_body_raises_json_decode_error() -> None:
    # Neither SDK wraps a truncated JSON 200 body: the JSONDecodeError escapes as-is.
    async with FakeLLMServer([malformed_body(), malformed_body()]) as server:
        with pytest.raises(json.JSONDecodeError):
            await ask_openai(server)
        with pytest.raises(json.JSONDecodeError):
            await ask_anthropic(server)
        server.assert_all_consumed()


@pytest.mark.asyncio
async def test_fault_with_verbatim_body_and_headers() -> None:
    fault = Fault(
        status=400,
        headers={"X-Custom": "yes"},
        body='{"error": {"message": "nope", "type": "bad"}}',
    )
    async with FakeLLMServer([fault]) as server:
        with pytest.raises(openai.BadRequestError) as info:
            await ask_openai(server)
    assert info.value.message == "Error code: 400 - nope"
    assert info.value.type == "bad"
    assert info.value.response.headers["x-custom"] == "yes"


@pytest.mark.asyncio
async def test_unexpected_request_and_assert_all_consumed() -> None:
    async with FakeLLMServer() as server:
        with pytest.raises(openai.InternalServerError) as info:
            await ask_openai(server)
        assert NO_STEP_LEFT in str(info.value)
        with pytest.raises(anthropic.InternalServerError) as an_info:
            await ask_anthropic(server)
        assert NO_STEP_LEFT in str(an_info.value)

    assert [req.protocol for req in server.unexpected] == ["openai", "anthropic"]
    assert server.requests == server.unexpected
    with pytest.raises(AssertionError, match="2 unexpected request"):
        server.assert_all_consumed()


def test_assert_all_consumed_lists_remaining_steps() -> None:
    server = FakeLLMServer([Reply(text="never sent")])
    server.enqueue(rate_limited())
    with pytest.raises(AssertionError, match=r"2 scripted step\(s\) not consumed:\n.*never sent"):
        server.assert_all_consumed()
    with pytest.raises(TypeError):
        server.enqueue("not a step")  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_recorded_requests() -> None:
    with FakeLLMServer([Reply(text="a"), Reply(text="b")]) as server:
        await ask_openai(server, temperature=0)
        await ask_anthropic(server, system="be brief")

    oa, an = server.requests
    assert isinstance(oa, RecordedRequest)
    assert (oa.protocol, oa.path) == ("openai", "/v1/chat/completions")
    assert oa.messages == MESSAGES
    assert oa.body["model"] == "gpt-test"
    assert oa.body["temperature"] == 0
    assert oa.headers["authorization"] == "Bearer x"
    assert oa.headers["content-type"] == "application/json"

    assert (an.protocol, an.path) == ("anthropic", "/v1/messages")
    assert an.messages == MESSAGES
    assert an.body["system"] == "be brief"
    assert an.body["max_tokens"] == 64
    assert "anthropic-version" in an.headers


@pytest.mark.asyncio
async def test_responder_used_after_script() -> None:
    def responder(request: RecordedRequest) -> Reply | Fault:
        question = request.messages[-1]["content"]
        return Reply(text=f"{request.protocol}: {question}")

    async with FakeLLMServer([Reply(text="scripted")], responder=responder) as server:
        first = await ask_openai(server)
        second = await ask_openai(server)
        third = await ask_anthropic(server)
        server.assert_all_consumed()

    assert first.choices[0].message.content == "scripted"
    assert second.choices[0].message.content == "openai: What is 2+2?"
    assert third.content[0].text == "anthropic: What is 2+2?"
    assert server.unexpected == []


@pytest.mark.asyncio
async def test_responder_error_is_reported() -> None:
    def responder(request: RecordedRequest) -> Reply:
        raise RuntimeError("boom")

    async with FakeLLMServer(responder=responder) as server:
        with pytest.raises(openai.InternalServerError, match="boom"):
            await ask_openai(server)
    with pytest.raises(AssertionError, match="boom"):
        server.assert_all_consumed()


@pytest.mark.asyncio
async def test_unknown_path_and_invalid_json() -> None:
    async with FakeLLMServer([Reply(text="kept")]) as server:
        async with httpx.AsyncClient(base_url=server.base_url) as http:
            missing = await http.post("/v1/embeddings", json={"input": "x"})
            invalid = await http.post(
                "/v1/chat/completions",
                content=b"{oops",
                headers={"content-type": "application/json"},
            )
        assert missing.status_code == 404
        assert "unknown endpoint" in missing.json()["error"]["message"]
        assert invalid.status_code == 400
        assert invalid.json()["error"]["type"] == "invalid_request_error"

        assert [req.path for req in server.unexpected] == ["/v1/embeddings", "/v1/chat/completions"]
        assert server.unexpected[1].body == {"_invalid_json": "{oops"}
        assert len(server.pending) == 1  # neither request consumed a step

        with pytest.raises(openai.NotFoundError):
            async with openai.AsyncOpenAI(
                base_url=server.base_url + "/v2", api_key="x", max_retries=0
            ) as client:
                await client.chat.completions.create(model="m", messages=MESSAGES)
        assert (await ask_openai(server)).choices[0].message.content == "kept"


def test_base_url_requires_start() -> None:
    server = FakeLLMServer()
    with pytest.raises(RuntimeError):
        _ = server.base_url
    with server:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.openai_base_url == server.base_url + "/v1"
    server.close()  # idempotent


PIXELS = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()
DATA_URL = f"data:image/png;base64,{PIXELS}"


def anthropic_image(media_type: str = "image/png", data: str = PIXELS) -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


@pytest.mark.asyncio
async def test_content_parts_and_image_blocks_are_accepted_and_recorded() -> None:
    openai_messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": DATA_URL}},
                {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
            ],
        }
    ]
    anthropic_messages = [
        {"role": "user", "content": "Look at it."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "s", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "a shot"}, anthropic_image()],
                },
                anthropic_image("image/webp"),
            ],
        },
    ]
    async with FakeLLMServer([Reply(text="a cat"), Reply(text="a dog")]) as server:
        async with openai_client(server) as client:
            await client.chat.completions.create(model="m", messages=openai_messages)
        async with anthropic_client(server) as client:
            await client.messages.create(model="m", max_tokens=9, messages=anthropic_messages)
        server.assert_all_consumed()

    oa, an = server.requests
    assert oa.messages == openai_messages and an.messages == anthropic_messages
    assert oa.images == [RecordedImage(0, "user", "image/png", PIXELS)]  # URLs are not inline
    assert an.images == [
        RecordedImage(2, "user", "image/png", PIXELS, tool_use_id="t1"),
        RecordedImage(2, "user", "image/webp", PIXELS),
    ]


@pytest.mark.parametrize(
    ("messages", "refusal"),
    [
        (
            [
                {
                    "role": "tool",
                    "tool_call_id": "c",
                    "content": [{"type": "image_url", "image_url": {"url": DATA_URL}}],
                }
            ],
            "only allowed for messages with role 'user'",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}
                    ],
                }
            ],
            "not valid base64",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}],
                }
            ],
            "invalid image URL",
        ),
    ],
)
@pytest.mark.asyncio
async def test_openai_image_parts_the_api_refuses_are_refused(messages, refusal) -> None:
    async with FakeLLMServer([Reply(text="unused")]) as server:
        async with openai_client(server) as client:
            with pytest.raises(openai.BadRequestError, match=refusal):
                await client.chat.completions.create(model="m", messages=messages)
        assert len(server.pending) == 1 and len(server.unexpected) == 1
        with pytest.raises(AssertionError, match="unexpected request"):
            server.assert_all_consumed()


@pytest.mark.parametrize(
    ("content", "role", "refusal"),
    [
        ([anthropic_image("image/bmp")], "user", "media type 'image/bmp' is not supported"),
        ([anthropic_image(data="")], "user", "not valid base64"),
        ([anthropic_image()], "assistant", "only allowed in user turns"),
        ([{"type": "text", "text": "  "}], "user", "non-whitespace text"),
        (
            [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "tool_use"}]}],
            "user",
            "cannot hold a 'tool_use' block",
        ),
    ],
)
@pytest.mark.asyncio
async def test_anthropic_blocks_the_api_refuses_are_refused(content, role, refusal) -> None:
    messages = [{"role": "user", "content": "hi"}] if role == "assistant" else []
    messages.append({"role": role, "content": content})
    async with FakeLLMServer([Reply(text="unused")]) as server:
        async with anthropic_client(server) as client:
            with pytest.raises(anthropic.BadRequestError, match=refusal):
                await client.messages.create(model="m", max_tokens=9, messages=messages)
        assert len(server.pending) == 1 and len(server.unexpected) == 1


@pytest.mark.asyncio
async def test_thinking_mode_answers_in_anthropics_error_shape() -> None:
    call = FakeToolCall("search", {"q": "x"}, id="toolu_1")
    thinking = {"type": "enabled", "budget_tokens": 1024}
    server = FakeLLMServer([Reply(tool_calls=(call,))], anthropic_thinking=True)
    async with server, anthropic_client(server) as client:
        first = await client.messages.create(
            model="claude-test", max_tokens=2048, messages=MESSAGES, thinking=thinking
        )
        assert [b.type for b in first.content] == ["thinking", "tool_use"]
        assert first.content[0].signature
        without_blocks = [
            *MESSAGES,
            {"role": "assistant", "content": [first.content[1].model_dump()]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}],
            },
        ]
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(
                model="claude-test", max_tokens=2048, messages=without_blocks, thinking=thinking
            )
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert "must start with a thinking block" in info.value.body["error"]["message"]
    ((_, why),) = server.rejected
    assert info.value.body["error"]["message"] == f"fake server: {why}"
