"""Usage counts that are not non-negative integers: unknown, estimated, logged once;
never a TypeError, never a negative total."""

from __future__ import annotations

import logging

import pytest

from deepledger.llm import usage as usage_module
from deepledger.llm.anthropic import AnthropicClient
from deepledger.llm.openai import OpenAIChatClient
from deepledger.llm.usage import UsageLedger, token_count
from deepledger.messages import Message
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply

TASK = [Message.system("You research."), Message.task("What is the capital of France?")]
ODD_VALUES = [None, -5, "12", 1.5, {"tokens": 3}, True, [7]]


@pytest.fixture(autouse=True)
def fresh_reports(monkeypatch):
    monkeypatch.setattr(usage_module, "_REPORTED", set())


@pytest.mark.parametrize("value", ODD_VALUES)
def test_token_count_takes_only_non_negative_integers(value, caplog):
    with caplog.at_level(logging.WARNING, logger="deepledger.llm.usage"):
        assert token_count(value, "usage.prompt_tokens", "openai") is None
        assert token_count(value, "usage.prompt_tokens", "openai") is None
    assert len(caplog.records) == 1  # once, not at every call
    assert "usage.prompt_tokens" in caplog.text and "not a non-negative integer" in caplog.text
    assert token_count(0, "x", "openai") == 0 and token_count(12, "x", "openai") == 12


def test_an_optional_count_may_be_absent_without_a_word(caplog):
    with caplog.at_level(logging.WARNING, logger="deepledger.llm.usage"):
        assert token_count(None, "usage.cache", "openai", required=False) is None
    assert not caplog.records


def client_for(protocol: str, server: FakeLLMServer):
    if protocol == "openai":
        return OpenAIChatClient(
            "m", api_key="k", base_url=server.openai_base_url, timeout_seconds=5
        )
    return AnthropicClient("m", api_key="k", base_url=server.base_url, timeout_seconds=5)


def odd_usage(protocol: str, value) -> dict:
    if protocol == "openai":
        return {
            "prompt_tokens": value,
            "completion_tokens": value,
            "total_tokens": value,
            "prompt_tokens_details": {"cached_tokens": value},
        }
    return {
        "input_tokens": value,
        "output_tokens": value,
        "cache_read_input_tokens": value,
        "cache_creation_input_tokens": value,
    }


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("value", ODD_VALUES)
async def test_odd_usage_from_a_server_is_estimated(protocol, value, caplog):
    replies = [Reply(text="Paris.", raw_usage=odd_usage(protocol, value)) for _ in range(2)]
    with FakeLLMServer(replies) as server, caplog.at_level(logging.WARNING):
        async with client_for(protocol, server) as client:
            responses = [await client.generate(TASK) for _ in range(2)]
        server.assert_all_consumed()
    ledger = UsageLedger()
    for response in responses:
        ledger.record(response)
        usage = response.usage
        assert all(
            isinstance(n, int) and n >= 0
            for n in (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens)
        )
        assert usage.input_tokens > 0 and usage.output_tokens > 0  # estimated, not zero
        assert usage.uncached_input_tokens >= 0
    assert ledger.total.total_tokens == 2 * responses[0].usage.total_tokens
    warned = [r for r in caplog.records if "not a non-negative integer" in r.getMessage()]
    assert 1 <= len(warned) <= 4  # once per field, not once per call


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_usage_that_is_not_an_object_is_estimated(protocol):
    with FakeLLMServer([Reply(text="Paris.", raw_usage="lots")]) as server:
        async with client_for(protocol, server) as client:
            usage = (await client.generate(TASK)).usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0


async def test_cache_reads_above_the_prompt_never_make_a_negative_count():
    wire = {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 50},
    }
    with FakeLLMServer([Reply(text="Paris.", raw_usage=wire)]) as server:
        async with client_for("openai", server) as client:
            usage = (await client.generate(TASK)).usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.uncached_input_tokens) == (10, 10, 0)
