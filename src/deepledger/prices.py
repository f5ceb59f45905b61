"""Model prices from ``genai-prices``, the price library its maintainers keep current.

Only the data snapshot bundled with the installed package is read: nothing is fetched
at run time (the library's background updater is never started), so a run prices the
same offline as online and a run's prices are those of the version it names.

Which provider's price applies: a model served from ``llm.base_url`` is priced by the
provider whose API that URL is (genai-prices knows them by URL: api.openai.com,
api.anthropic.com, *.openai.azure.com, ...); a self-hosted server (localhost, a GPU
box) matches none and stays unpriced. Without a ``base_url`` the provider's public API
is meant: ``openai``, ``anthropic`` and ``azure_openai`` are looked up by name; the
``local`` and ``qwen`` providers are self-hosted and never priced here. With neither
(``deepledger replay --price MODEL``: "at that model's price") the library finds the
provider from the model's name.

Prices are per call, as the provider bills: uncached input, cache reads, cache writes
and output each at their price, and a long-context tier (a higher price for every
token of a call whose input passes a threshold) where the library has one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from importlib.metadata import version
from typing import Any

LIBRARY = "genai-prices"
# Our providers (config's Provider) whose public API genai-prices names.
_PROVIDER_IDS = {"openai": "openai", "anthropic": "anthropic", "azure_openai": "azure"}
_SELF_HOSTED = frozenset({"local", "qwen"})


def library_version() -> str:
    return f"{LIBRARY} {version('genai-prices')}"


@dataclass(frozen=True)
class LibraryPrice:
    """One model's price as the library has it, fixed when looked up."""

    source: str  # "genai-prices 0.2.5 (openai/gpt-4.1)"
    # USD per million tokens below any long-context tier (what a person reads)
    input: float
    output: float
    cache_read: float
    cache_write: float
    # genai_prices.types.ModelPrice, which computes the cost of a call (unhashable: the
    # figures above and the source say which price this is)
    model_price: Any = field(compare=False, hash=False)

    def cost(
        self, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int
    ) -> float:
        """USD of one call; ``input_tokens`` is the whole prompt, cached parts included."""
        from genai_prices import Usage

        # a server that counts cached tokens beyond the prompt: the prompt holds them
        usage = Usage(
            input_tokens=max(input_tokens, cache_read + cache_write),
            output_tokens=output_tokens,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
        )
        return float(self.model_price.calc_price(usage)["total_price"])


def library_price(model: str, provider: str | None, base_url: str | None) -> LibraryPrice | None:
    """The library's price of ``model`` served at ``base_url`` by ``provider`` (module
    docstring; neither: the provider its name says), or None when it has none."""
    from genai_prices.data_snapshot import get_snapshot

    provider_id = None
    if base_url is None and provider is not None:
        if provider in _SELF_HOSTED or provider not in _PROVIDER_IDS:
            return None
        provider_id = _PROVIDER_IDS[provider]
    try:
        found, info = get_snapshot().find_provider_model(model, None, provider_id, base_url)
    except LookupError:
        return None
    prices = info.get_prices(datetime.now(UTC))
    if prices.input_mtok is None or prices.output_mtok is None:
        return None  # priced by something else (images, seconds): not ours to guess
    input_price = _base(prices.input_mtok)
    read, write = _base_or_none(prices.cache_read_mtok), _base_or_none(prices.cache_write_mtok)
    return LibraryPrice(
        source=f"{library_version()} ({found.id}/{info.id})",
        input=input_price,
        output=_base(prices.output_mtok),
        # a cache price the provider does not list is billed as input (the library's rule)
        cache_read=input_price if read is None else read,
        cache_write=input_price if write is None else write,
        model_price=prices,
    )


def _base(price: Any) -> float:
    """A per-million price below any tier: a Decimal, or a TieredPrices' base."""
    return float(price if isinstance(price, Decimal) else price.base)


def _base_or_none(price: Any) -> float | None:
    return None if price is None else _base(price)
