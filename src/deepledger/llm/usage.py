"""Token and cost accounting, per call and per task.

Prices: the ``pricing`` table in config (``conf/pricing/``, USD per million tokens,
by model name or its longest listed prefix) wins; a model it does not list is priced by
the genai-prices library's bundled data (``deepledger.prices``: the provider the model
is served by, never a fetch). A model neither prices has an *unknown* cost (``None``),
never zero, so a report cannot quietly claim a run was free. Every price says its
source (``Price.source``), which summaries and reports repeat.

Token counts a server reports are read through :func:`token_count`: anything but a
non-negative integer (``null``, ``-5``, ``"12"``, ``1.5``, an object) is *unknown*,
logged once per provider and field, and the provider estimates the count instead, so
a strange server never raises a TypeError nor drives a total below zero.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from deepledger.config import LLMConfig, PriceConfig, price_key
from deepledger.messages import LLMResponse, StopReason, Usage
from deepledger.prices import LibraryPrice, library_price

log = logging.getLogger(__name__)

PER_MILLION = 1_000_000
_REPORTED: set[tuple[str, str]] = set()  # (provider, field) already logged


def token_count(value: Any, name: str, provider: str, *, required: bool = True) -> int | None:
    """``value`` if it is a non-negative integer, else ``None`` (unknown).

    ``required``: the server should always send it, so a missing or null value is
    logged too; an optional field (cache reads) may be absent without a word.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if value is not None or required:
        report_unreadable(provider, name, value)
    return None


def report_unreadable(provider: str, name: str, value: Any) -> None:
    """Log, once per provider and field, that a usage value could not be used."""
    if (provider, name) in _REPORTED:
        return
    _REPORTED.add((provider, name))
    log.warning(
        "%s sent %s=%.80r, which is not a non-negative integer: counted as unknown and "
        "estimated (said once per run and field)",
        provider,
        name,
        value,
    )


@dataclass(frozen=True)
class Price:
    """USD per million tokens (below any long-context tier), and who says so."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    source: str = "pricing"  # "pricing.gpt-4.1" (the config's table) or the library's
    # the library's price computes each call's cost
    library: LibraryPrice | None = field(default=None, compare=False)

    @classmethod
    def from_config(cls, cfg: PriceConfig, source: str = "pricing") -> Price:
        cache_read = cfg.input if cfg.cache_read is None else cfg.cache_read
        cache_write = cfg.input if cfg.cache_write is None else cfg.cache_write
        return cls(
            float(cfg.input), float(cfg.output), float(cache_read), float(cache_write), source
        )

    @classmethod
    def from_library(cls, price: LibraryPrice) -> Price:
        return cls(
            price.input, price.output, price.cache_read, price.cache_write, price.source, price
        )

    def cost(self, usage: Usage) -> float:
        if self.library is not None:
            return self.library.cost(
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
            )
        return (
            usage.uncached_input_tokens * self.input
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
            + usage.output_tokens * self.output
        ) / PER_MILLION


def find_price(
    model: str,
    table: Mapping[str, PriceConfig],
    provider: str | None = None,
    base_url: str | None = None,
) -> Price | None:
    """The table's entry for ``model`` or for its longest listed prefix (dated variants);
    else, given where the model is served (``provider``, ``base_url``), the library's
    price; else None (unknown)."""
    key = price_key(model, table)
    if key is not None:
        return Price.from_config(table[key], f"conf/pricing: {key}")
    found = library_price(model, provider, base_url)
    return None if found is None else Price.from_library(found)


def price_of(llm: LLMConfig, table: Mapping[str, PriceConfig]) -> Price | None:
    """The price of the model an llm preset serves."""
    return find_price(llm.model_name, table, llm.provider, llm.base_url)


UNPRICED = "unpriced"  # a model's source in summary.json's prices when nothing prices it


def priced_by(model: str, price: Price | None) -> str:
    """What a cost line says of its price: its source, or that there is none."""
    return said_source(model, UNPRICED if price is None else price.source)


def said_source(model: str, source: str) -> str:
    return f"{UNPRICED}: {model}" if source == UNPRICED else f"priced by {source}"


def sources_line(prices: Mapping[str, str] | None) -> str:
    """What priced a run's costs: one model's source, or each model's."""
    if not prices:
        return ""
    if len(prices) == 1:
        ((model, source),) = prices.items()
        return said_source(model, source)
    return "; ".join(
        f"{UNPRICED}: {model}" if source == UNPRICED else f"{model} priced by {source}"
        for model, source in prices.items()
    )


@dataclass(frozen=True)
class CallRecord:
    model: str
    usage: Usage
    cost: float | None
    stop_reason: StopReason


@dataclass
class UsageLedger:
    """Every model call of one task (or attempt), and their totals."""

    price: Price | None = None
    calls: list[CallRecord] = field(default_factory=list)
    # Calls made on this task's behalf by sub-agents: in the totals, not in last_usage
    # (which describes this conversation's own window).
    delegated: list[CallRecord] = field(default_factory=list)
    # Calls the scrape-and-extract tool made to boil pages down: in the totals, and
    # reported apart (another model may make them, at another price).
    extraction: list[CallRecord] = field(default_factory=list)
    # Told after each call is added (a task's budget, for the live progress display):
    # set while the ledger's agent runs, in this process only.
    on_call: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def record(self, response: LLMResponse, price: Price | None = None) -> CallRecord:
        """Add one call; ``price``: the model's, when it is not this ledger's."""
        call = self._priced(response, price)
        self.calls.append(call)
        return self._told(call)

    def record_aside(self, response: LLMResponse, price: Price | None = None) -> CallRecord:
        """A call made for this conversation but not in it (compaction notes): in the
        totals, not in ``last_usage``, which the window guard reads."""
        call = self._priced(response, price)
        self.delegated.append(call)
        return self._told(call)

    def record_extraction(self, response: LLMResponse, price: Price | None = None) -> CallRecord:
        """A call the page extractor made for this conversation: in the totals, kept
        apart in ``extraction_total``, never in ``last_usage``."""
        call = self._priced(response, price)
        self.extraction.append(call)
        return self._told(call)

    def _told(self, call: CallRecord) -> CallRecord:
        if self.on_call is not None:
            try:
                self.on_call()
            except Exception:  # a display's count must never cost the call it was told of
                log.exception("the live usage count failed; it is off for this agent")
                self.on_call = None
        return call

    def _priced(self, response: LLMResponse, price: Price | None) -> CallRecord:
        price = price or self.price
        cost = price.cost(response.usage) if price else None
        return CallRecord(response.model, response.usage, cost, response.stop_reason)

    def absorb(self, other: UsageLedger) -> None:
        """Count a sub-agent's calls (and its own sub-agents') in this task's totals."""
        self.delegated += [*other.calls, *other.delegated]
        self.extraction += other.extraction

    @property
    def total(self) -> Usage:
        return sum((c.usage for c in self._every()), Usage())

    @property
    def extraction_total(self) -> Usage:
        return sum((c.usage for c in self.extraction), Usage())

    @property
    def extraction_cost(self) -> float | None:
        if any(c.cost is None for c in self.extraction):
            return None
        return sum(c.cost for c in self.extraction)  # type: ignore[misc]

    def _every(self) -> list[CallRecord]:
        return [*self.calls, *self.delegated, *self.extraction]

    @property
    def cost(self) -> float | None:
        """Total USD, or ``None`` if any call's price is unknown."""
        every = self._every()
        if any(c.cost is None for c in every):
            return None
        return sum(c.cost for c in every)  # type: ignore[misc]

    @property
    def last_usage(self) -> Usage | None:
        return self.calls[-1].usage if self.calls else None
