"""Results from the Brave Search web API.

Request: ``GET {BRAVE_BASE_URL}/res/v1/web/search`` with the key in the
``X-Subscription-Token`` header; parameters ``q``, ``count``, ``offset`` (the page, from
0), ``country`` (``gl``), ``search_lang`` (``hl``), ``freshness`` (from ``tbs``: pd, pw,
pm, py) and ``text_decorations=false``. ``hl`` and ``gl`` are sent in Brave's own codes
(``zh-cn`` as ``zh-hans``, ``ja`` as ``jp``, ``pt`` as ``pt-br``; ``_lang.py``); one
Brave does not document is left out, since Brave answers 422 to it.

Environment: ``BRAVE_API_KEY`` (required), ``BRAVE_BASE_URL`` (default
``https://api.search.brave.com``).

Limits: Brave returns at most 20 results a page and offsets up to 9 pages; ``location``
and ``autocorrect`` are ignored. Parsed: ``web.results`` (``age`` becomes the date),
the first ``infobox`` result as the knowledge graph, ``faq`` as related questions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deepledger.web.search import (
    KnowledgeGraph,
    RelatedQuestion,
    SearchQuery,
    SearchResponse,
    SearchResult,
    _lang,
    json_objects,
    plain_text,
)
from deepledger.web.search._http import KeyedBackend, join_url

KEY_ENV = "BRAVE_API_KEY"
BASE_URL_ENV = "BRAVE_BASE_URL"
DEFAULT_BASE_URL = "https://api.search.brave.com"
SEARCH_PATH = "res/v1/web/search"
MAX_COUNT = 20
MAX_OFFSET = 9
_FRESHNESS = {"day": "pd", "week": "pw", "month": "pm", "year": "py"}


class BraveBackend(KeyedBackend):
    """A client of Brave's web search endpoint."""

    name = "brave"
    service, key_env, key_where = "Brave", KEY_ENV, "get one at brave.com/search/api"
    base_url_env, default_base_url = BASE_URL_ENV, DEFAULT_BASE_URL

    async def search(self, query: SearchQuery) -> SearchResponse:
        data = await self._http.request(
            "GET",
            join_url(self.base_url, SEARCH_PATH),
            headers={"X-Subscription-Token": self.api_key()},
            params=request_params(query),
        )
        return parse_response(query, data)


def request_params(query: SearchQuery) -> dict[str, str | int]:
    """The query string of a Brave web search."""
    params: dict[str, str | int] = {
        "q": query.query,
        "count": min(query.count, MAX_COUNT),
        "offset": min(query.page_number - 1, MAX_OFFSET),
        "text_decorations": "false",
    }
    if country := _lang.brave_country(query.gl):
        params["country"] = country
    language = _lang.parse(query.hl, query.gl)
    if language is not None and (code := _lang.brave_language(language)):
        params["search_lang"] = code
    if freshness := _FRESHNESS.get(query.time_range or ""):
        params["freshness"] = freshness
    return params


def parse_response(query: SearchQuery, data: Mapping[str, Any]) -> SearchResponse:
    """Brave's answer, normalized."""
    web = data.get("web")
    items = json_objects(web.get("results")) if isinstance(web, dict) else []
    first = (query.page_number - 1) * min(query.count, MAX_COUNT) + 1
    results = tuple(
        SearchResult(
            title=plain_text(item.get("title")) or plain_text(item.get("url")),
            link=plain_text(item.get("url")),
            snippet=plain_text(item.get("description")),
            position=first + offset,
            date=plain_text(item.get("age")) or plain_text(item.get("page_age")) or None,
        )
        for offset, item in enumerate(i for i in items if plain_text(i.get("url")))
    )
    faq = data.get("faq")
    questions = tuple(
        RelatedQuestion(
            question=plain_text(item.get("question")),
            snippet=plain_text(item.get("answer")),
            title=plain_text(item.get("title")),
            link=plain_text(item.get("url")),
        )
        for item in (json_objects(faq.get("results")) if isinstance(faq, dict) else [])
        if plain_text(item.get("question"))
    )
    return SearchResponse(
        query=query,
        backend=BraveBackend.name,
        results=results,
        knowledge_graph=_knowledge_graph(data.get("infobox")),
        people_also_ask=questions,
    )


def _knowledge_graph(infobox: Any) -> KnowledgeGraph | None:
    boxes = json_objects(infobox.get("results")) if isinstance(infobox, dict) else []
    if not boxes or not plain_text(boxes[0].get("title")):
        return None
    box = boxes[0]
    pairs = box.get("attributes")
    attributes = tuple(
        (plain_text(pair[0]), plain_text(pair[1]))
        for pair in (pairs if isinstance(pairs, list) else [])
        if isinstance(pair, list) and len(pair) == 2 and plain_text(pair[0]) and plain_text(pair[1])
    )
    return KnowledgeGraph(
        title=plain_text(box.get("title")),
        type=plain_text(box.get("category")),
        description=plain_text(box.get("long_desc")) or plain_text(box.get("description")),
        link=plain_text(box.get("url")),
        attributes=attributes,
    )
