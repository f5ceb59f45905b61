"""Web search behind one interface: a query in, normalized results out, whatever the engine.

::

    backend = create_backend("serper")          # or searxng, tavily, brave, local
    async with backend:
        response = await backend.search(SearchQuery("eiffel tower height", num=5))
    for result in response.results:
        print(result.position, result.title, result.link)

Backends
    ``serper`` (Google results through serper.dev), ``searxng`` (a self-hosted metasearch
    instance), ``tavily``, ``brave``, ``sogou`` (Tencent Cloud's web search API, which
    MiroThinker's ``sogou_search`` calls) and ``local`` (the offline full-text corpus of
    :mod:`deepledger.web.corpus`, so every web preset also runs without a
    network). Each reads its key and base URL from the environment when it is created
    (see its module); a missing key is reported by the first search, not at creation,
    so a server can start and tell the model what is wrong.

Results
    :class:`SearchResponse` holds the ranked :class:`SearchResult` list (title, link,
    snippet, position, date if the engine gave one) and, where the engine has them, an
    answer box, a knowledge graph, related questions and related searches. Options a
    backend cannot honour (a region for the local corpus, say) are ignored.

Errors
    Every failure is a :class:`SearchError` whose message is safe to show the model and
    the logs: it names the cause and the variable or flag to change, never a key. The
    tree::

        SearchError
         ├── SearchConfigError        a key or base URL is missing or malformed
         ├── SearchRejectedError      the engine refused the request (401/403, other 4xx)
         └── SearchUnavailableError   worth retrying: timeouts, unreachable, 5xx, bad bodies
              └── SearchRateLimitedError   HTTP 429, with the engine's Retry-After

Limits
    No caching here (the runtime caches identical tool calls); no pagination beyond what
    each engine offers (noted in each module).
"""

from __future__ import annotations

import asyncio
import html
import importlib
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

from deepledger.blocked_urls import BlockedURLs
from deepledger.errors import DeepLedgerError
from deepledger.llm.retry import RetryPolicy
from deepledger.messages import JSONObject

__all__ = [
    "DEFAULT_RETRY",
    "AnswerBox",
    "BackendOptions",
    "KnowledgeGraph",
    "RelatedQuestion",
    "SearchBackend",
    "SearchConfigError",
    "SearchError",
    "SearchQuery",
    "SearchRateLimitedError",
    "SearchRejectedError",
    "SearchResponse",
    "SearchResult",
    "SearchUnavailableError",
    "backend_names",
    "create_backend",
    "json_objects",
    "plain_text",
    "register_backend",
    "without_answer_leaks",
]

# Searches are interactive steps of an agent: a few quick retries, not minutes of waiting.
DEFAULT_RETRY = RetryPolicy(
    max_attempts=3,
    initial_wait_seconds=1.0,
    max_wait_seconds=8.0,
    jitter_seconds=0.5,
    max_retry_after_seconds=30.0,
)


# --- errors -------------------------------------------------------------------------------


class SearchError(DeepLedgerError):
    """A search failed; the message says why and is free of secrets."""


class SearchConfigError(SearchError):
    """The backend cannot work as configured: a key or base URL is missing or malformed."""


class SearchRejectedError(SearchError):
    """The engine refused the request; sending it again would not help."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class SearchUnavailableError(SearchError):
    """The engine could not answer this time (timeout, unreachable, 5xx, unreadable body)."""


class SearchRateLimitedError(SearchUnavailableError):
    """HTTP 429; ``retry_after`` is the engine's requested wait in seconds, if it gave one."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# --- queries and results ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """What to search for. ``None`` leaves an option to the engine's default.

    ``gl`` is a region (ISO 3166-1 alpha-2, "us"), ``hl`` a language (ISO 639-1, "en"),
    ``tbs`` Google's time filter (``qdr:h``/``d``/``w``/``m``/``y``), ``location`` a place
    name for local results; engines without an equivalent ignore them.
    """

    query: str
    num: int | None = None
    page: int | None = None
    gl: str | None = None
    hl: str | None = None
    location: str | None = None
    tbs: str | None = None
    autocorrect: bool | None = None

    @property
    def count(self) -> int:
        """How many results were asked for (10 unless said)."""
        return self.num if self.num and self.num > 0 else 10

    @property
    def page_number(self) -> int:
        """Which page of results, from 1."""
        return self.page if self.page and self.page > 0 else 1

    @property
    def time_range(self) -> str | None:
        """``tbs`` as a word ("hour", "day", "week", "month", "year"), or None."""
        match = re.fullmatch(r"qdr:([hdwmy])\d*", (self.tbs or "").strip())
        if not match:
            return None
        return {"h": "hour", "d": "day", "w": "week", "m": "month", "y": "year"}[match.group(1)]


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One ranked result; ``position`` counts from 1 across pages. ``sitelinks`` are
    (title, link) pairs of the site's own pages shown under the result, ``attributes``
    (label, value) facts the engine put beside it (Serper has both)."""

    title: str
    link: str
    snippet: str
    position: int
    date: str | None = None
    sitelinks: tuple[tuple[str, str], ...] = ()
    attributes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class AnswerBox:
    """A direct answer the engine put above the results (Google's box, Tavily's answer)."""

    answer: str = ""
    snippet: str = ""
    title: str = ""
    link: str = ""


@dataclass(frozen=True, slots=True)
class KnowledgeGraph:
    """An entity panel: what the query names, with facts as (label, value) pairs."""

    title: str
    type: str = ""
    description: str = ""
    link: str = ""
    source: str = ""
    attributes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class RelatedQuestion:
    """A "people also ask" entry, with the passage that answers it if given."""

    question: str
    snippet: str = ""
    title: str = ""
    link: str = ""


@dataclass(frozen=True, slots=True)
class SearchResponse:
    """What one search found. ``notes`` are remarks for the reader (engines that failed)."""

    query: SearchQuery
    backend: str
    results: tuple[SearchResult, ...] = ()
    answer_box: AnswerBox | None = None
    knowledge_graph: KnowledgeGraph | None = None
    people_also_ask: tuple[RelatedQuestion, ...] = ()
    related_searches: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


_TAG = re.compile(r"<[^>]{0,200}>")


def plain_text(value: Any) -> str:
    """A display string from a JSON value: HTML tags dropped, entities decoded,
    whitespace collapsed; "" for anything that is not a string or a number."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return ""
    text = html.unescape(_TAG.sub("", str(value)))
    return " ".join(text.split())


def json_objects(value: Any) -> list[JSONObject]:
    """The JSON objects in a list (anything else in it, or a non-list, is skipped)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def without_answer_leaks(
    response: SearchResponse, rules: BlockedURLs
) -> tuple[SearchResponse, int]:
    """``response`` without the results, answer box and related questions that link to a
    page ``rules`` block, and how many were dropped (``blocked_urls.py``).

    Positions are kept as the engine gave them; a note tells the reader how many
    results were dropped, so the count is journaled with the tool result.
    """

    def shown(link: str) -> bool:
        return not link or rules.rule_for(link) is None

    results = tuple(
        replace(r, sitelinks=tuple(pair for pair in r.sitelinks if shown(pair[1])))
        for r in response.results
        if shown(r.link)
    )
    asked = tuple(q for q in response.people_also_ask if shown(q.link))
    box = response.answer_box if response.answer_box and shown(response.answer_box.link) else None
    dropped = len(response.results) - len(results) + len(response.people_also_ask) - len(asked)
    dropped += sum(len(r.sitelinks) for r in response.results if shown(r.link))
    dropped -= sum(len(r.sitelinks) for r in results)
    dropped += int(response.answer_box is not None and box is None)
    if not dropped:
        return response, 0
    note = (
        f"{dropped} result{'s' if dropped != 1 else ''} dropped as answer leaks (pages "
        "that publish benchmark answers; web.blocked_urls)."
    )
    kept = replace(response, results=results, people_also_ask=asked, answer_box=box)
    return replace(kept, notes=(*response.notes, note)), dropped


# --- the interface ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """How a backend behaves, beyond what the environment says.

    ``sleep`` is swappable so tests can check retry waits without waiting; ``corpus`` and
    ``cache_dir`` concern only the local backend.
    """

    timeout_seconds: float = 20.0
    retry: RetryPolicy = DEFAULT_RETRY
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    corpus: Path | None = None
    cache_dir: Path | None = None


class SearchBackend(ABC):
    """A search engine client. Use it as an async context manager, or call ``aclose``."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def from_env(cls, env: Mapping[str, str], options: BackendOptions) -> SearchBackend:
        """The backend configured from environment variables (it must not fail on a
        missing key: ``search`` reports that)."""

    @abstractmethod
    async def search(self, query: SearchQuery) -> SearchResponse:
        """Run one search; raise :class:`SearchError` on any failure."""

    async def aclose(self) -> None:  # noqa: B027 - optional: not every backend holds connections
        """Release connections (nothing to do by default)."""

    async def __aenter__(self) -> SearchBackend:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


# --- the registry -------------------------------------------------------------------------

# Built-in backends are imported only when asked for, so choosing one never loads the rest.
_BUILTIN: dict[str, str] = {
    "serper": "deepledger.web.search.serper:SerperBackend",
    "searxng": "deepledger.web.search.searxng:SearxngBackend",
    "tavily": "deepledger.web.search.tavily:TavilyBackend",
    "brave": "deepledger.web.search.brave:BraveBackend",
    "local": "deepledger.web.search.local:LocalBackend",
    "sogou": "deepledger.web.search.sogou:SogouBackend",
}
_REGISTERED: dict[str, type[SearchBackend]] = {}


def register_backend(name: str, backend: type[SearchBackend]) -> None:
    """Offer another backend under ``name`` (it replaces a built-in of that name)."""
    _REGISTERED[name] = backend


def backend_names() -> list[str]:
    """Every backend name :func:`create_backend` accepts."""
    return sorted(set(_BUILTIN) | set(_REGISTERED))


def backend_class(name: str) -> type[SearchBackend]:
    """The backend class registered under ``name``."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in _BUILTIN:
        known = ", ".join(backend_names())
        raise SearchConfigError(f"Unknown search backend {name!r}; choose one of: {known}.")
    module_name, class_name = _BUILTIN[name].split(":")
    backend: type[SearchBackend] = getattr(importlib.import_module(module_name), class_name)
    return backend


def create_backend(
    name: str,
    *,
    env: Mapping[str, str] | None = None,
    options: BackendOptions | None = None,
) -> SearchBackend:
    """The backend ``name``, configured from ``env`` (default: this process's environment)."""
    backend = backend_class(name)
    return backend.from_env(os.environ if env is None else env, options or BackendOptions())
