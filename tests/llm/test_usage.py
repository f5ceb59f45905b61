from __future__ import annotations

import pytest

from deepledger.llm.anthropic import AnthropicClient
from deepledger.llm.openai import OpenAIChatClient
from deepledger.llm.usage import Price, UsageLedger, find_price
from deepledger.messages import Message, Usage
from tests.support.doubles.fake_llm_server import FakeLLMServer, FakeUsage, Reply

TABLE = {
    "claude-sonnet-4-6": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75},
    "gpt-4.1": {"input": 2.0, "output": 8.0, "cache_read": 0.5, "cache_write": None},
    "gpt-4.1-mini": {"input": 0.4, "output": 1.6, "cache_read": None, "cache_write": None},
}


class Cfg(dict):
    __getattr__ = dict.__getitem__


def table():
    return {name: Cfg(v) for name, v in TABLE.items()}


def test_price_lookup_exact_then_longest_prefix_then_unknown():
    assert find_price("gpt-4.1", table()).input == 2.0
    assert find_price("gpt-4.1-mini-2025-04-14", table()).input == 0.4  # not gpt-4.1's price
    assert find_price("claude-sonnet-4-6-20260101", table()).cache_write == 3.75
    assert find_price("mystery-model", table()) is None
    assert find_price("gpt-4.1-mini", table()).cache_read == 0.4  # defaults to input


def test_cost_splits_uncached_cache_reads_writes_and_output():
    price = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=100_000,
        cache_read_tokens=600_000,
        cache_write_tokens=300_000,
    )
    # 100k uncached x 3 + 600k x 0.3 + 300k x 3.75 + 100k x 15, per million
    assert price.cost(usage) == pytest.approx(0.3 + 0.18 + 1.125 + 1.5)


async def test_ledger_totals_both_sdk_shapes():
    ledger = UsageLedger(price=find_price("claude-sonnet-4-6", table()))
    with FakeLLMServer(
        [
            Reply("a", usage=FakeUsage(2000, 100, cache_read_tokens=1500, cache_write_tokens=400)),
            Reply("b", usage=FakeUsage(3000, 50, cache_read_tokens=1000)),
        ]
    ) as server:
        anthropic = AnthropicClient(
            "claude-sonnet-4-6", api_key="k", base_url=server.base_url, timeout_seconds=5
        )
        openai = OpenAIChatClient(
            "gpt", api_key="k", base_url=server.openai_base_url, timeout_seconds=5
        )
        async with anthropic, openai:
            ledger.record(await anthropic.generate([Message.task("q")]))
            ledger.record(await openai.generate([Message.task("q")]))
        server.assert_all_consumed()
    assert ledger.total == Usage(5000, 150, cache_read_tokens=2500, cache_write_tokens=400)
    assert ledger.last_usage == Usage(3000, 50, cache_read_tokens=1000)
    first = (100 * 3.0 + 1500 * 0.3 + 400 * 3.75 + 100 * 15.0) / 1e6
    assert ledger.calls[0].cost == pytest.approx(first)
    assert ledger.cost == pytest.approx(sum(c.cost for c in ledger.calls))


def test_unknown_price_means_unknown_cost_not_zero():
    ledger = UsageLedger(price=None)
    from deepledger.llm.scripted import reply

    ledger.record(reply("x", usage=Usage(10, 5)))
    assert ledger.cost is None and ledger.total == Usage(10, 5)
