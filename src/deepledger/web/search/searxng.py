"""Results from a self-hosted SearXNG metasearch instance; no key needed.

Request: ``GET {SEARXNG_BASE_URL}/search?q=...&format=json&pageno=N``, plus
``language`` (``hl`` as a SearXNG locale, ``lang`` or ``lang-REGION``: ``zh-cn``,
``zh_CN`` and ``zh`` with ``gl=cn`` all become ``zh-CN``; see ``_lang.py``) and
``time_range`` (from ``tbs``: day, week, month or year; SearXNG has no "past hour"),
with an ``Accept-Language`` header naming the same language (``*`` without ``hl``):
SearXNG's bot limiter answers 429 to a request without one.

Environment: ``SEARXNG_BASE_URL`` (required; the instance's address, with any path prefix
it is served under).

The instance must allow JSON output (``json`` under ``search.formats`` in its
``settings.yml``); otherwise it answers 403, reported as such. SearXNG returns a fixed
page of results (about 10 to 20, depending on its engines); ``num`` cuts that page, it
cannot lengthen it. Parsed: ``results``, ``answers`` (the first becomes the answer box),
``infoboxes`` (the first becomes the knowledge graph) and ``suggestions``; engines that
did not respond are listed in the response's notes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deepledger.web.search import (
    AnswerBox,
    BackendOptions,
    KnowledgeGraph,
    SearchBackend,
    SearchConfigError,
    SearchQuery,
    SearchResponse,
    SearchResult,
    _lang,
    json_objects,
    plain_text,
)
from deepledger.web.search._http import JsonClient, join_url

BASE_URL_ENV = "SEARXNG_BASE_URL"


class SearxngBackend(SearchBackend):
    """A client of SearXNG's JSON search API."""

    name = "searxng"

    def __init__(self, base_url: str | None, options: BackendOptions) -> None:
        self.base_url = base_url
        self._http = JsonClient(
            "SearXNG",
            options,
            auth_hint=(
                "SearXNG refuses format=json unless `json` is listed under search.formats "
                "in its settings.yml (or a proxy in front of it wants credentials)."
            ),
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str], options: BackendOptions) -> SearxngBackend:
        return cls(env.get(BASE_URL_ENV) or None, options)

    async def search(self, query: SearchQuery) -> SearchResponse:
        if not self.base_url:
            raise SearchConfigError(
                f"{BASE_URL_ENV} is not set: the SearXNG search backend needs the address "
                f"of a SearXNG instance, e.g. {BASE_URL_ENV}=http://localhost:8888."
            )
        data = await self._http.request(
            "GET",
            join_url(self.base_url, "search"),
            headers=request_headers(query),
            params=request_params(query),
        )
        return parse_response(query, data)

    async def aclose(self) -> None:
        await self._http.aclose()


def request_params(query: SearchQuery) -> dict[str, str | int]:
    """The query string of a SearXNG search."""
    params: dict[str, str | int] = {
        "q": query.query,
        "format": "json",
        "pageno": query.page_number,
    }
    if (language := _lang.parse(query.hl, query.gl)) is not None:
        params["language"] = _lang.searxng_locale(language)
    if query.time_range in ("day", "week", "month", "year"):
        params["time_range"] = query.time_range
    return params


def request_headers(query: SearchQuery) -> dict[str, str]:
    """The headers of a SearXNG search: the query's language as ``Accept-Language``."""
    return {"Accept-Language": _lang.accept_language(_lang.parse(query.hl, query.gl))}


def parse_response(query: SearchQuery, data: Mapping[str, Any]) -> SearchResponse:
    """SearXNG's answer, normalized."""
    first = (query.page_number - 1) * query.count + 1
    results: list[SearchResult] = []
    for item in json_objects(data.get("results")):
        link = plain_text(item.get("url"))
        if link:
            results.append(
                SearchResult(
                    title=plain_text(item.get("title")) or link,
                    link=link,
                    snippet=plain_text(item.get("content")),
                    position=first + len(results),
                    date=plain_text(item.get("publishedDate")) or None,
                )
            )
    suggestions = data.get("suggestions")
    return SearchResponse(
        query=query,
        backend=SearxngBackend.name,
        results=tuple(results[: query.count]),
        answer_box=_answer_box(data.get("answers")),
        knowledge_graph=_knowledge_graph(data.get("infoboxes")),
        related_searches=tuple(text for text in map(plain_text, suggestions or ()) if text)
        if isinstance(suggestions, list)
        else (),
        notes=_unresponsive(data.get("unresponsive_engines")),
    )


def _answer_box(answers: Any) -> AnswerBox | None:
    """The first answer: a plain string in older SearXNG, an object in newer ones."""
    for answer in answers if isinstance(answers, list) else ():
        if isinstance(answer, dict):
            text = plain_text(answer.get("answer"))
            if text:
                return AnswerBox(answer=text, link=plain_text(answer.get("url")))
        elif text := plain_text(answer):
            return AnswerBox(answer=text)
    return None


def _knowledge_graph(infoboxes: Any) -> KnowledgeGraph | None:
    for box in json_objects(infoboxes):
        title = plain_text(box.get("infobox"))
        if not title:
            continue
        urls = json_objects(box.get("urls"))
        link = plain_text(box.get("id")) or (plain_text(urls[0].get("url")) if urls else "")
        attributes = tuple(
            (plain_text(attribute.get("label")), plain_text(attribute.get("value")))
            for attribute in json_objects(box.get("attributes"))
            if plain_text(attribute.get("label")) and plain_text(attribute.get("value"))
        )
        return KnowledgeGraph(
            title=title,
            description=plain_text(box.get("content")),
            link=link if link.startswith(("http://", "https://")) else "",
            source=plain_text(box.get("engine")),
            attributes=attributes,
        )
    return None


def _unresponsive(engines: Any) -> tuple[str, ...]:
    """A note naming the engines that failed (SearXNG lists [name, reason] pairs)."""
    failed = [
        f"{plain_text(entry[0])} ({plain_text(entry[1])})"
        if isinstance(entry, list) and len(entry) >= 2
        else plain_text(entry)
        for entry in (engines if isinstance(engines, list) else ())
    ]
    failed = [text for text in failed if text]
    return (f"Engines that did not respond: {', '.join(failed)}.",) if failed else ()
