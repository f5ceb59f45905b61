"""Results from Tavily's search API, with its generated short answer.

Request: ``POST {TAVILY_BASE_URL}/search`` with ``Authorization: Bearer <key>`` and a JSON
body: ``query``, ``max_results``, ``search_depth: basic``, ``include_answer: true`` and
``time_range`` (from ``tbs``: day, week, month or year).

Environment: ``TAVILY_API_KEY`` (required), ``TAVILY_BASE_URL`` (default
``https://api.tavily.com``).

Limits: Tavily has no pages and returns at most 20 results, so page N is taken from the
first ``N * num`` results and is empty beyond the twentieth; region, language, location
and autocorrect are ignored. Its ``answer`` (written by Tavily's own model) becomes the
answer box.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deepledger.messages import JSONObject
from deepledger.web.search import (
    AnswerBox,
    SearchQuery,
    SearchResponse,
    SearchResult,
    json_objects,
    plain_text,
)
from deepledger.web.search._http import KeyedBackend, join_url

KEY_ENV = "TAVILY_API_KEY"
BASE_URL_ENV = "TAVILY_BASE_URL"
DEFAULT_BASE_URL = "https://api.tavily.com"
MAX_RESULTS = 20  # Tavily's own ceiling


class TavilyBackend(KeyedBackend):
    """A client of Tavily's ``/search`` endpoint."""

    name = "tavily"
    service, key_env, key_where = "Tavily", KEY_ENV, "get one at tavily.com"
    base_url_env, default_base_url = BASE_URL_ENV, DEFAULT_BASE_URL

    async def search(self, query: SearchQuery) -> SearchResponse:
        key = self.api_key()
        skipped = (query.page_number - 1) * query.count
        if skipped >= MAX_RESULTS:
            note = f"Tavily returns at most {MAX_RESULTS} results; there is no page {query.page}."
            return SearchResponse(query=query, backend=self.name, notes=(note,))
        data = await self._http.request(
            "POST",
            join_url(self.base_url, "search"),
            headers={"Authorization": f"Bearer {key}"},
            body=request_body(query, min(MAX_RESULTS, skipped + query.count)),
        )
        return parse_response(query, data, skipped)


def request_body(query: SearchQuery, max_results: int) -> JSONObject:
    """Tavily's JSON body."""
    body: JSONObject = {
        "query": query.query,
        "max_results": max_results,
        "search_depth": "basic",
        "include_answer": True,
    }
    if query.time_range in ("day", "week", "month", "year"):
        body["time_range"] = query.time_range
    return body


def parse_response(query: SearchQuery, data: Mapping[str, Any], skipped: int) -> SearchResponse:
    """Tavily's answer, normalized; the first ``skipped`` results belong to earlier pages."""
    items = [item for item in json_objects(data.get("results")) if plain_text(item.get("url"))]
    results = tuple(
        SearchResult(
            title=plain_text(item.get("title")) or plain_text(item.get("url")),
            link=plain_text(item.get("url")),
            snippet=plain_text(item.get("content")),
            position=skipped + offset + 1,
            date=plain_text(item.get("published_date")) or None,
        )
        for offset, item in enumerate(items[skipped : skipped + query.count])
    )
    answer = plain_text(data.get("answer"))
    return SearchResponse(
        query=query,
        backend=TavilyBackend.name,
        results=results,
        answer_box=AnswerBox(answer=answer) if answer else None,
    )
