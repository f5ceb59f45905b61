"""Google results through serper.dev.

Request: ``POST {SERPER_BASE_URL}/search`` with the key in the ``X-API-KEY`` header and a
JSON body holding ``q`` and whichever of ``gl``, ``hl``, ``location``, ``num``, ``tbs``,
``page`` and ``autocorrect`` the query sets.

Environment: ``SERPER_API_KEY`` (required), ``SERPER_BASE_URL`` (default
``https://google.serper.dev``; point it at a proxy or a test double).

Parsed: ``organic`` (title, link, snippet, position, date, and the ``sitelinks`` and
``attributes`` Serper puts under some results), ``answerBox``, ``knowledgeGraph`` (its
``attributes`` mapping becomes label/value pairs), ``peopleAlsoAsk`` and
``relatedSearches``. Other parts of Serper's answer (top stories, images) are dropped.
Links are kept as Serper sends them (percent-encoded); the MiroThinker-named search
tool decodes them as MiroThinker's does (``tools/servers/web_search.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deepledger.messages import JSONObject
from deepledger.web.search import (
    AnswerBox,
    KnowledgeGraph,
    RelatedQuestion,
    SearchQuery,
    SearchResponse,
    SearchResult,
    json_objects,
    plain_text,
)
from deepledger.web.search._http import KeyedBackend, join_url

KEY_ENV = "SERPER_API_KEY"
BASE_URL_ENV = "SERPER_BASE_URL"
DEFAULT_BASE_URL = "https://google.serper.dev"


class SerperBackend(KeyedBackend):
    """A client of Serper's Google search endpoint."""

    name = "serper"
    service, key_env, key_where = "Serper", KEY_ENV, "get one at serper.dev"
    base_url_env, default_base_url = BASE_URL_ENV, DEFAULT_BASE_URL

    async def search(self, query: SearchQuery) -> SearchResponse:
        data = await self._http.request(
            "POST",
            join_url(self.base_url, "search"),
            headers={"X-API-KEY": self.api_key(), "Content-Type": "application/json"},
            body=request_body(query),
        )
        return parse_response(query, data)


def request_body(query: SearchQuery) -> JSONObject:
    """Serper's JSON body: ``q`` and only the options the query sets."""
    body: JSONObject = {"q": query.query}
    options = {
        "gl": query.gl,
        "hl": query.hl,
        "location": query.location,
        "num": query.num,
        "tbs": query.tbs,
        "page": query.page,
        "autocorrect": query.autocorrect,
    }
    body.update((key, value) for key, value in options.items() if value is not None)
    return body


def parse_response(query: SearchQuery, data: Mapping[str, Any]) -> SearchResponse:
    """Serper's answer, normalized."""
    return SearchResponse(
        query=query,
        backend=SerperBackend.name,
        results=_organic(query, data.get("organic")),
        answer_box=_answer_box(data.get("answerBox")),
        knowledge_graph=_knowledge_graph(data.get("knowledgeGraph")),
        people_also_ask=tuple(
            RelatedQuestion(
                question=plain_text(item.get("question")),
                snippet=plain_text(item.get("snippet")),
                title=plain_text(item.get("title")),
                link=plain_text(item.get("link")),
            )
            for item in json_objects(data.get("peopleAlsoAsk"))
            if plain_text(item.get("question"))
        ),
        related_searches=tuple(
            text
            for item in json_objects(data.get("relatedSearches"))
            if (text := plain_text(item.get("query")))
        ),
    )


def _organic(query: SearchQuery, items: Any) -> tuple[SearchResult, ...]:
    first = (query.page_number - 1) * query.count + 1  # when Serper leaves positions out
    results = []
    for offset, item in enumerate(json_objects(items)):
        link = plain_text(item.get("link"))
        if not link:
            continue
        position = item.get("position")
        results.append(
            SearchResult(
                title=plain_text(item.get("title")) or link,
                link=link,
                snippet=plain_text(item.get("snippet")),
                position=position if isinstance(position, int) else first + offset,
                date=plain_text(item.get("date")) or None,
                sitelinks=tuple(
                    (plain_text(link.get("title")), plain_text(link.get("link")))
                    for link in json_objects(item.get("sitelinks"))
                    if plain_text(link.get("link"))
                ),
                attributes=_pairs(item.get("attributes")),
            )
        )
    return tuple(results)


def _pairs(attributes: Any) -> tuple[tuple[str, str], ...]:
    """A Serper ``attributes`` mapping as (label, value) pairs, empty ones left out."""
    return tuple(
        (plain_text(label), plain_text(value))
        for label, value in (attributes.items() if isinstance(attributes, dict) else ())
        if plain_text(label) and plain_text(value)
    )


def _answer_box(box: Any) -> AnswerBox | None:
    if not isinstance(box, dict):
        return None
    answer = AnswerBox(
        answer=plain_text(box.get("answer")),
        snippet=plain_text(box.get("snippet")),
        title=plain_text(box.get("title")),
        link=plain_text(box.get("link")),
    )
    return answer if answer.answer or answer.snippet else None


def _knowledge_graph(graph: Any) -> KnowledgeGraph | None:
    if not isinstance(graph, dict) or not plain_text(graph.get("title")):
        return None
    pairs = _pairs(graph.get("attributes"))
    return KnowledgeGraph(
        title=plain_text(graph.get("title")),
        type=plain_text(graph.get("type")),
        description=plain_text(graph.get("description")),
        link=plain_text(graph.get("website")) or plain_text(graph.get("descriptionLink")),
        source=plain_text(graph.get("descriptionSource")),
        attributes=pairs,
    )
