"""Prices: genai-prices' bundled data for the models it knows at the provider serving
them, conf/pricing's entry first, and every price says which of the two it is."""

from __future__ import annotations

import json
import pickle
import subprocess
from decimal import Decimal

import genai_prices
import pytest
from genai_prices import data_snapshot

from deepledger.bench.metrics import format_summary
from deepledger.bench.services import price_sources
from deepledger.config import PriceConfig
from deepledger.llm.usage import UsageLedger, find_price, price_of, priced_by, sources_line
from deepledger.messages import LLMResponse, Message, StopReason, Usage
from deepledger.prices import library_price, library_version
from deepledger.records.results import SummaryRecord
from tests.llm.test_usage import table
from tests.support.bench import bench_command
from tests.support.cli import ROOT
from tests.support.config import CONF, composed
from tests.support.doubles.bench_model import respond_http
from tests.support.doubles.fake_llm_server import FakeLLMServer

LIBRARY = f"genai-prices {genai_prices.__version__}"
OPENAI, ANTHROPIC = "https://api.openai.com/v1", "https://api.anthropic.com"


def official(usage: Usage, model: str, provider: str) -> float:
    """The library's own calculation, through its public API."""
    calc = genai_prices.calc_price(
        genai_prices.Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        ),
        model,
        provider_id=provider,
    )
    return float(calc.total_price)


CALLS = [
    Usage(1_000, 200),
    Usage(50_000, 3_000, cache_read_tokens=40_000),
    Usage(30_000, 1_000, cache_read_tokens=10_000, cache_write_tokens=15_000),
    Usage(300_000, 5_000, cache_read_tokens=100_000, cache_write_tokens=50_000),  # long context
]


@pytest.mark.parametrize(
    ("model", "provider", "provider_id"),
    [
        ("gpt-4.1", "openai", "openai"),
        ("gpt-4.1-2025-04-14", "openai", "openai"),  # a dated id
        ("gpt-5-mini", "openai", "openai"),
        ("claude-sonnet-4-5-20250929", "anthropic", "anthropic"),  # a long-context tier
        ("claude-sonnet-4-6", "anthropic", "anthropic"),
    ],
)
def test_a_known_model_costs_what_the_library_says(model, provider, provider_id):
    price = find_price(model, {}, provider)
    assert price is not None and price.source.startswith(f"{LIBRARY} ({provider_id}/")
    for usage in CALLS:
        assert price.cost(usage) == pytest.approx(official(usage, model, provider_id))


def test_the_per_million_prices_are_the_librarys_cache_prices_included():
    gpt = find_price("gpt-4.1", {}, "openai")
    assert gpt is not None and gpt.source == f"{LIBRARY} (openai/gpt-4.1)"
    assert (gpt.input, gpt.output, gpt.cache_read, gpt.cache_write) == (2.0, 8.0, 0.5, 2.0)
    claude = find_price("claude-sonnet-4-6", {}, "anthropic")
    assert claude is not None
    assert (claude.input, claude.output, claude.cache_read, claude.cache_write) == (
        3.0,
        15.0,
        0.3,
        3.75,
    )
    # a million cached tokens read costs the cache-read price, not the input price
    assert claude.cost(Usage(1_000_000, 0, cache_read_tokens=1_000_000)) == pytest.approx(0.3)
    assert claude.cost(Usage(1_000_000, 0, cache_write_tokens=1_000_000)) == pytest.approx(3.75)


def test_the_provider_is_the_one_base_url_names():
    by_url = find_price("gpt-4.1", {}, "openai", OPENAI)
    assert by_url is not None and by_url.source == f"{LIBRARY} (openai/gpt-4.1)"
    claude = find_price("claude-sonnet-4-6", {}, "anthropic", ANTHROPIC)
    assert claude is not None and claude.source == f"{LIBRARY} (anthropic/claude-sonnet-4-6)"
    azure = find_price("gpt-4.1", {}, "azure_openai", "https://res.openai.azure.com/openai/v1")
    assert azure is not None and azure.source.startswith(f"{LIBRARY} (azure/")


@pytest.mark.parametrize(
    ("model", "provider", "base_url"),
    [
        ("mystery-model-9000", "openai", None),  # the library does not know it
        ("gpt-4.1", "openai", "http://127.0.0.1:8000/v1"),  # self-hosted: no provider's bill
        ("gpt-4.1", "openai", "http://gpu-box:8000/v1"),
        ("Qwen3-8B", "qwen", None),
        ("gpt-4.1", "local", None),
        ("SmolLM2-135M-Instruct", "local", None),
    ],
)
def test_what_no_price_knows_stays_unpriced_never_free(model, provider, base_url):
    assert find_price(model, {}, provider, base_url) is None
    ledger = UsageLedger(price=find_price(model, {}, provider, base_url))
    reply = LLMResponse(Message.assistant("x"), StopReason.END_TURN, Usage(10, 5))
    ledger.record(reply)
    assert ledger.cost is None
    assert priced_by(model, None) == f"unpriced: {model}"


def test_a_conf_pricing_entry_wins_over_the_library():
    price = find_price("gpt-4.1-2025-04-14", table(), "openai")
    assert price is not None and price.source == "conf/pricing: gpt-4.1"
    assert price.cost(Usage(1_000_000, 0)) == 2.0
    mine = {"gpt-4.1": PriceConfig(input=1.0, output=1.0)}
    cheaper = find_price("gpt-4.1", mine, "openai", OPENAI)
    assert cheaper is not None and cheaper.source == "conf/pricing: gpt-4.1"
    assert cheaper.cost(Usage(1_000_000, 1_000_000)) == 2.0  # not the library's 10.0


def test_a_price_given_on_the_command_line_wins_over_the_library():
    cfg = composed("llm=openai", "+pricing={gpt-4.1: {input: 1.0, output: 1.0}}")
    price = price_of(cfg.llm, cfg.pricing)
    assert price is not None and price.source == "conf/pricing: gpt-4.1"
    assert price.cost(Usage(1_000_000, 1_000_000)) == 2.0
    assert price_sources(cfg, CONF) == {"gpt-4.1": "conf/pricing: gpt-4.1"}


def test_the_bundled_local_model_is_free_and_says_so():
    cfg = composed("llm=local")
    price = price_of(cfg.llm, cfg.pricing)
    assert price is not None and price.cost(Usage(1_000, 1_000)) == 0.0
    assert price.source == "conf/pricing: SmolLM2-135M-Instruct"
    assert price_sources(cfg, CONF) == {
        "SmolLM2-135M-Instruct": "conf/pricing: SmolLM2-135M-Instruct"
    }


def test_the_default_openai_preset_is_priced_by_the_library():
    cfg = composed("llm=openai")
    assert price_sources(cfg, CONF) == {"gpt-4.1": f"{LIBRARY} (openai/gpt-4.1)"}
    # a run whose model nothing prices: the summary keeps schema 1's shape
    assert price_sources(composed("llm=openai_compatible"), CONF) is None


def test_only_the_bundled_data_is_read():
    library_price("gpt-4.1", "openai", None)
    assert data_snapshot._custom_snapshot is None  # no update was fetched or set
    assert library_version() == LIBRARY


def test_every_cost_line_names_its_source():
    summary = SummaryRecord(cost_total=0.5, cost_mean_per_task=0.25)
    summary.prices = {"gpt-4.1": f"{LIBRARY} (openai/gpt-4.1)"}
    assert f"$0.5000 total · $0.2500/task · priced by {LIBRARY} (openai/gpt-4.1)" in (
        format_summary(summary)
    )
    summary.prices = {"gpt-4.1": "conf/pricing: gpt-4.1"}
    assert "priced by conf/pricing: gpt-4.1" in format_summary(summary)
    unknown = SummaryRecord(cost_total=None, cost_unknown_tasks=2)
    unknown.prices = {"gpt-4.1": f"{LIBRARY} (openai/gpt-4.1)", "mystery": "unpriced"}
    assert (
        f"unknown (2 tasks without a price) · gpt-4.1 priced by {LIBRARY} (openai/gpt-4.1); "
        "unpriced: mystery"
    ) in format_summary(unknown)


def test_sources_line_of_one_model_and_of_several():
    assert sources_line(None) == ""
    assert sources_line({"m": "unpriced"}) == "unpriced: m"
    assert sources_line({"a": "conf/pricing: a", "b": "x"}) == (
        "a priced by conf/pricing: a; b priced by x"
    )


def test_a_tier_applies_to_each_call_not_to_their_sum():
    price = find_price("claude-sonnet-4-5", {}, "anthropic")
    assert price is not None
    small = Usage(150_000, 0)
    # two calls under the 200k threshold: base price each, as the provider bills them
    assert price.cost(small) * 2 == pytest.approx(float(Decimal("0.9")))
    assert price.cost(small + small) == pytest.approx(1.8)  # one call over it: the tier


def test_a_library_price_hashes_and_travels_to_a_worker():
    # Ray sends what a worker needs by pickle; a frozen dataclass must hash
    price = find_price("claude-sonnet-4-5", {}, "anthropic")
    assert price is not None
    again = pickle.loads(pickle.dumps(price))
    assert again == price and hash(again) == hash(price)
    assert again.cost(CALLS[-1]) == price.cost(CALLS[-1])


def test_a_run_says_who_priced_it_in_its_summary_and_printout(tmp_path):
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=respond_http) as server:
        command = bench_command(
            server.openai_base_url,
            run_dir,
            "benchmark.execution.report=false",
            "+pricing={served-model: {input: 1.0, output: 2.0}}",
        )
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["prices"] == {"served-model": "conf/pricing: served-model"}
    assert summary["cost_total"] > 0
    assert "/task · priced by conf/pricing: served-model" in done.stdout + done.stderr
