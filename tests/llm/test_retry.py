"""The retry policy around real SDK clients, against faults from the loopback server."""

from __future__ import annotations

import socket

import pytest

from deepledger.errors import (
    ContextOverflowError,
    EndpointUnreachableError,
    FatalLLMError,
    IncompleteReplyError,
    LLMConnectionError,
    LLMTimeoutError,
    RateLimitedError,
    TransientLLMError,
)
from deepledger.llm.base import GenerationSettings
from deepledger.llm.retry import RetryingClient, RetryPolicy
from deepledger.messages import Message
from tests.support.doubles.fake_llm_server import (
    FakeLLMServer,
    Fault,
    Reply,
    malformed_body,
    rate_limited,
    server_error,
    slow,
)
from tests.support.providers import PROTOCOLS, make_client

TASK = [Message.task("What is 2+2?")]
POLICY = RetryPolicy(
    max_attempts=4,
    initial_wait_seconds=0.5,
    max_wait_seconds=8.0,
    jitter_seconds=0.25,
    max_retry_after_seconds=30.0,
)


class SleepRecorder:
    """Stands in for asyncio.sleep: records the waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def server():
    with FakeLLMServer() as fake:
        yield fake
        fake.assert_all_consumed()


def retrying(protocol, server, policy=POLICY, timeout=5.0):
    sleeper = SleepRecorder()
    return RetryingClient(make_client(protocol, server, timeout), policy, sleep=sleeper), sleeper


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_429_waits_exactly_retry_after_then_succeeds(protocol, server):
    server.enqueue(rate_limited(retry_after=7), Reply(text="ok"))
    client, sleeper = retrying(protocol, server)
    async with client:
        response = await client.generate(TASK)
    assert response.text == "ok"
    assert sleeper.waits == [7.0] and client.retries == 1
    assert len(server.requests) == 2


async def test_retry_after_is_capped(server):
    server.enqueue(rate_limited(retry_after=3600), Reply(text="ok"))
    client, sleeper = retrying("openai", server)
    async with client:
        await client.generate(TASK)
    assert sleeper.waits == [30.0]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_500_then_success_backs_off_exponentially_with_jitter(protocol, server):
    server.enqueue(server_error(500), server_error(503), Reply(text="ok"))
    client, sleeper = retrying(protocol, server)
    async with client:
        assert (await client.generate(TASK)).text == "ok"
    first, second = sleeper.waits
    assert 0.5 <= first <= 0.75 and 1.0 <= second <= 1.25


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_timeout_is_retried(protocol, server):
    # The first reply comes far past the limit; the second has the whole 3 s, which a
    # loopback reply gets even on a loaded machine.
    server.enqueue(slow(30.0), Reply(text="in time"))
    client, sleeper = retrying(protocol, server, timeout=3.0)
    async with client:
        assert (await client.generate(TASK)).text == "in time"
    assert len(sleeper.waits) == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_malformed_body_is_retried(protocol, server):
    server.enqueue(malformed_body(), Reply(text="ok"))
    client, _ = retrying(protocol, server)
    async with client:
        assert (await client.generate(TASK)).text == "ok"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_gives_up_after_max_attempts_with_the_typed_error(protocol, server):
    server.enqueue(*[rate_limited(retry_after=1)] * 4)
    client, sleeper = retrying(protocol, server)
    async with client:
        with pytest.raises(RateLimitedError) as info:
            await client.generate(TASK)
    assert info.value.status == 429 and info.value.retry_after == 1.0
    assert len(server.requests) == 4 and len(sleeper.waits) == 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_unfixable_4xx_fails_fast(protocol, status, server):
    server.enqueue(Fault(status=status))
    client, sleeper = retrying(protocol, server)
    async with client:
        with pytest.raises(FatalLLMError) as info:
            await client.generate(TASK)
    assert info.value.status == status
    assert not isinstance(info.value, TransientLLMError)
    assert len(server.requests) == 1 and sleeper.waits == []


async def test_prompt_too_long_is_a_context_overflow(server):
    server.enqueue(
        Fault(
            status=400,
            body='{"error": {"message": "This model\'s maximum context '
            'length is 8192 tokens", "type": "invalid_request_error"}}',
        )
    )
    client, _ = retrying("openai", server)
    async with client:
        with pytest.raises(ContextOverflowError, match="maximum context length"):
            await client.generate(TASK)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_unreachable_base_url_names_the_address_after_retrying():
    from deepledger.llm.openai import OpenAIChatClient

    port = closed_port()
    url = f"http://127.0.0.1:{port}/v1"
    sleeper = SleepRecorder()
    inner = OpenAIChatClient("m", api_key="k", base_url=url, timeout_seconds=2)
    policy = RetryPolicy(max_attempts=2, unreachable_after_seconds=20)
    async with RetryingClient(inner, policy, sleep=sleeper) as client:
        # never reached in this client's life: unreachable, not busy (a suite stops on it),
        # once it refused through the waits of the window (not waited here)
        with pytest.raises(EndpointUnreachableError) as info:
            await client.generate(TASK)
    assert isinstance(info.value.__cause__, LLMConnectionError)
    assert f"127.0.0.1:{port}" in str(info.value)
    assert "llm.base_url" in str(info.value) and sum(sleeper.waits) >= 20


async def test_timeout_error_names_the_setting(server):
    server.enqueue(slow(2.0), slow(2.0))
    client, _ = retrying("anthropic", server, policy=RetryPolicy(max_attempts=2), timeout=0.2)
    async with client:
        with pytest.raises(LLMTimeoutError, match=r"llm\.timeout_seconds"):
            await client.generate(TASK)


@pytest.mark.parametrize(
    "fault",
    [
        Fault(
            status=429,
            body='{"error": {"message": "You exceeded your current quota, please check your plan",'
            ' "type": "insufficient_quota", "code": "insufficient_quota"}}',
        ),
        Fault(status=429, headers={"x-should-retry": "false"}),
    ],
    ids=["quota", "x-should-retry"],
)
async def test_a_429_that_waiting_cannot_fix_is_not_retried(fault, server):
    server.enqueue(fault)
    client, sleeper = retrying("openai", server)
    async with client:
        with pytest.raises(FatalLLMError):
            await client.generate(TASK)
    assert sleeper.waits == [] and len(server.requests) == 1


@pytest.mark.parametrize("body", ["[]", '{"type": "message"}', '{"error": "upstream hiccup"}'])
async def test_anthropic_200_that_is_not_a_message_is_retried(body, server):
    server.enqueue(Fault(status=200, body=body), Reply(text="ok"))
    client, sleeper = retrying("anthropic", server)
    async with client:
        assert (await client.generate(TASK)).text == "ok"
    assert len(sleeper.waits) == 1


@pytest.mark.parametrize(
    "body", ["[]", '{"object": "chat.completion"}', '{"error": {"message": "upstream hiccup"}}']
)
async def test_openai_200_that_is_not_a_completion_is_retried(body, server):
    server.enqueue(Fault(status=200, body=body), Reply(text="ok"))
    client, sleeper = retrying("openai", server)
    async with client:
        assert (await client.generate(TASK)).text == "ok"
    assert len(sleeper.waits) == 1


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('{"detail": "This model\'s maximum context length is 8192 tokens"}', "maximum context"),
        ('{"error": "prompt is too long"}', "prompt is too long"),
        ('{"message": "context window exceeded"}', "context window exceeded"),
        ("plain text: context length exceeded", "plain text: context length exceeded"),
    ],
    ids=["fastapi-detail", "error-string", "bare-message", "not-json"],
)
async def test_openai_error_bodies_of_any_server_shape_are_read(body, words, server):
    """vLLM answers {"detail"}, gateways a bare string or text: the words still decide."""
    server.enqueue(Fault(status=400, body=body))
    client, _ = retrying("openai", server)
    async with client:
        with pytest.raises(ContextOverflowError) as info:
            await client.generate(TASK)
    assert words in str(info.value)


async def test_an_aborted_reply_is_retried_and_raises_once_the_attempts_are_spent(server):
    server.enqueue(Reply("half", finish_reason="abort"), Reply("4"))
    client, sleeper = retrying("openai", server)
    async with client:
        response = await client.generate(TASK)
        assert response.text == "4" and len(sleeper.waits) == 1
        server.enqueue(*[Reply("half", finish_reason="abort")] * POLICY.max_attempts)
        with pytest.raises(IncompleteReplyError, match="abort"):
            await client.generate(TASK)


async def test_an_empty_reply_is_retried_and_kept_once_the_attempts_are_spent(server):
    client, sleeper = retrying("openai", server)
    async with client:
        server.enqueue(Reply(""), Reply("4"))
        assert (await client.generate(TASK)).text == "4"
        server.enqueue(*[Reply("")] * POLICY.max_attempts)
        assert (await client.generate(TASK)).text == ""  # the model's reply, after all
    assert len(sleeper.waits) == 1 + POLICY.max_attempts - 1


@pytest.mark.parametrize(
    ("reply", "settings"),
    [
        (Reply("", reasoning="thought it through"), None),  # thinking is not nothing
        (Reply("", finish_reason="length"), None),  # cut: the agent asks with more room
        (Reply(""), GenerationSettings(temperature=0)),  # greedy: it would come again
    ],
    ids=["thinking", "cut", "greedy"],
)
async def test_replies_that_are_not_retried(server, reply, settings):
    server.enqueue(reply)
    client, sleeper = retrying("openai", server)
    async with client:
        await client.generate(TASK, settings=settings)
    assert sleeper.waits == []


async def test_aborted_and_empty_replies_are_kept_with_the_key_off(server):
    server.enqueue(Reply("half", finish_reason="abort"), Reply(""))
    client, sleeper = retrying("openai", server, RetryPolicy(aborted_or_empty=False))
    async with client:
        assert (await client.generate(TASK)).text == "half"
        assert (await client.generate(TASK)).text == ""
    assert sleeper.waits == []
