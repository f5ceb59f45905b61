"""An MCP server for web search over a choice of engines, in deepledger's or MiroThinker's naming.

Run it as::

    python -m deepledger.tools.servers.web_search --backend serper|searxng|tavily|brave|local
        [--names deepledger|mirothinker] [--timeout S] [--max-attempts N]
        [--retry-wait S] [--retry-max-wait S] [--max-retry-after S]
        [--corpus PATH] [--cache-dir DIR]

Namings
    ``deepledger`` (default): server ``web_search``, tool ``search(query, num=10, page=1,
    gl=None, hl=None)``, answering in compact numbered text (answer box and knowledge
    graph first, then title, link, date and snippet of each result).

    ``mirothinker``: server ``search_and_scrape_webpage``, tools ``sogou_search(Query,
    Cnt=10)`` (Sogou through Tencent Cloud's API, ``TENCENTCLOUD_SECRET_ID``/``_KEY``, or
    the local corpus when ``--backend local``; JSON ``{"Query", "Pages": [{title, url,
    passage, date, site}]}``) and ``google_search(q, gl="us",
    hl="en", location=None, num=None, tbs=None, page=None, autocorrect=None)`` answering
    with the JSON MiroThinker's own tool of that name answers, and nothing else:
    ``organic`` (Serper's result objects: title, link, snippet, date, sitelinks,
    attributes, position) and ``searchParameters``. Like MiroThinker's tool, it
    percent-decodes every string that holds a URL (``%E4%B8%AD`` becomes ``中``), except
    the escapes whose decoding would change what the URL means (``%2F``, ``%3F``, ``%23``,
    ``%26``, ``%3D``, ``%25``, ``%20`` and the other RFC 3986 delimiters); and after a
    quoted query that found nothing, ``searchParameters`` names the unquoted query that
    was searched. The names, arguments and output MiroThinker models were trained on,
    whichever engine runs underneath.

Backends and their variables are described in :mod:`deepledger.web.search` and its
modules: Serper ``SERPER_API_KEY``/``SERPER_BASE_URL``, SearXNG ``SEARXNG_BASE_URL``,
Tavily ``TAVILY_API_KEY``/``TAVILY_BASE_URL``, Brave ``BRAVE_API_KEY``/``BRAVE_BASE_URL``,
local ``DEEPLEDGER_SEARCH_CORPUS``/``DEEPLEDGER_CACHE_DIR`` (or ``--corpus``/``--cache-dir``).

Behaviour
    A missing key, a rejected key, an unreachable engine or a timeout is an error result
    the model reads (in the MiroThinker naming, the bare JSON error object those models
    know, ``{"success": false, "error": ..., "results": []}``), never a crash; the server
    starts without a key and says what is missing on every call. 429 and 5xx are
    retried (``--max-attempts``, default 3, honouring Retry-After). A query in quotes
    that finds nothing is searched again without them. Results are not cached here: the
    runtime caches identical calls. At most 100 results a call. Results linking to pages
    that publish benchmark answers (huggingface.co datasets and spaces, and the patterns
    of ``DEEPLEDGER_BLOCKED_URLS``; ``deepledger.blocked_urls``) are dropped, and a note
    says how many: a ``Note:`` line in the text; in the MiroThinker naming, whose answer
    has no field for it, the server's log.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from deepledger.blocked_urls import BlockedURLs
from deepledger.llm.retry import RetryPolicy
from deepledger.messages import JSONObject
from deepledger.tools.servers._stdio import serve_stdio
from deepledger.web.search import (
    DEFAULT_RETRY,
    BackendOptions,
    SearchBackend,
    SearchError,
    SearchQuery,
    SearchResponse,
    backend_names,
    create_backend,
    plain_text,
    without_answer_leaks,
)
from deepledger.web.search.sogou import PAGE_FIELDS, SogouBackend

logger = logging.getLogger(__name__)

NAMINGS = ("deepledger", "mirothinker")
SERVER_NAMES = {"deepledger": "web_search", "mirothinker": "search_and_scrape_webpage"}
MAX_NUM = 100
ENGINE_LABELS = {
    "serper": "Google, through Serper",
    "searxng": "SearXNG metasearch",
    "tavily": "Tavily",
    "brave": "Brave Search",
    "local": "a local document collection; its links are corpus:// addresses to read",
    "sogou": "Sogou, through Tencent Cloud",
}


# --- searching ----------------------------------------------------------------------------


async def run_search(
    backend: SearchBackend, query: SearchQuery, *, as_retried: bool = False
) -> SearchResponse:
    """Search, and once more without quotes if a quoted query found nothing; then drop
    the results that link to pages publishing benchmark answers (``blocked_urls.py``).

    Engines treat quotes as "exactly this phrase", which often matches nothing when the
    model quotes loosely; the plain words usually find what it was after. The response
    names the query asked, with a note, or (``as_retried``, as MiroThinker's tool
    reports it) the unquoted query searched.
    """
    if not query.query.strip():
        raise SearchError("The search query is empty: give some words to search for.")
    query = replace(
        query,
        query=query.query.strip(),
        num=None if query.num is None else max(1, min(query.num, MAX_NUM)),
        page=None if query.page is None else max(1, query.page),
    )
    response = await backend.search(query)
    unquoted = " ".join(query.query.replace('"', " ").split())
    if not response.results and '"' in query.query and unquoted:
        retried = await backend.search(replace(query, query=unquoted))
        note = f"Nothing matched the quoted query; these results are for {unquoted!r}."
        response = (
            retried if as_retried else replace(retried, query=query, notes=(*retried.notes, note))
        )
    response, dropped = without_answer_leaks(response, BlockedURLs.from_environment())
    if dropped:
        logger.info("Dropped %d answer-leak result(s) for %r", dropped, query.query)
    return response


# --- what the model reads: deepledger naming ----------------------------------------------


def format_text(response: SearchResponse) -> str:
    """Results as compact numbered text; direct answers first."""
    query = response.query
    lines = [f"Search results for {query.query!r} (page {query.page_number}):", ""]
    if box := response.answer_box:
        answer = " — ".join(part for part in (box.answer, box.snippet) if part)
        source = f" ({box.title + ', ' if box.title else ''}{box.link})" if box.link else ""
        lines += [f"Answer: {answer}{source}", ""]
    if graph := response.knowledge_graph:
        kind = f" ({graph.type})" if graph.type else ""
        lines.append(f"About {graph.title}{kind}: {graph.description}".rstrip(": "))
        lines += [f"  {label}: {value}" for label, value in graph.attributes]
        lines += [f"  Link: {graph.link}"] if graph.link else []
        lines.append("")
    if not response.results:
        lines += ["No results. Try other or fewer words, or drop filters.", ""]
    for result in response.results:
        snippet = " — ".join(part for part in (result.date or "", result.snippet) if part)
        lines += [f"{result.position}. {result.title}", f"   {result.link}"]
        lines += [f"   {snippet}"] if snippet else []
        lines += [f"   {label}: {value}" for label, value in result.attributes]
        lines += [f"   - {title}: {link}" for title, link in result.sitelinks]
        lines.append("")
    if response.people_also_ask:
        lines.append("People also ask:")
        for item in response.people_also_ask:
            detail = f" {item.snippet}" if item.snippet else ""
            lines.append(f"- {item.question}{detail}{f' ({item.link})' if item.link else ''}")
        lines.append("")
    if response.related_searches:
        lines += ["Related searches: " + "; ".join(response.related_searches), ""]
    lines += [f"Note: {note}" for note in response.notes]
    return "\n".join(lines).rstrip()


# --- what the model reads: MiroThinker naming ---------------------------------------------


def mirothinker_shaped(response: SearchResponse) -> JSONObject:
    """What MiroThinker's ``google_search`` answers: ``organic`` and ``searchParameters``
    only, URLs percent-decoded as its tool decodes them."""
    data = serper_shaped(response)
    shaped = {key: data[key] for key in ("organic", "searchParameters")}
    decoded: JSONObject = readable_urls(shaped)
    return decoded


def serper_shaped(response: SearchResponse) -> JSONObject:
    """The response in Serper's JSON vocabulary, keys MiroThinker models expect."""
    query = response.query
    data: JSONObject = {
        "organic": [
            _without_empty(
                {
                    "title": r.title,
                    "link": r.link,
                    "snippet": r.snippet,
                    "date": r.date,
                    "sitelinks": [{"title": t, "link": link} for t, link in r.sitelinks],
                    "attributes": dict(r.attributes),
                    "position": r.position,
                }
            )
            for r in response.results
        ],
        "searchParameters": _without_empty(
            {
                "q": query.query,
                "gl": query.gl,
                "hl": query.hl,
                "location": query.location,
                "type": "search",
                "num": query.count,
                "page": query.page,
                "tbs": query.tbs,
                "autocorrect": query.autocorrect,
                "engine": "google" if response.backend == "serper" else response.backend,
            }
        ),
    }
    if box := response.answer_box:
        data["answerBox"] = _without_empty(
            {"title": box.title, "answer": box.answer, "snippet": box.snippet, "link": box.link}
        )
    if graph := response.knowledge_graph:
        data["knowledgeGraph"] = _without_empty(
            {"title": graph.title, "type": graph.type, "website": graph.link,
             "description": graph.description, "descriptionSource": graph.source,
             "attributes": dict(graph.attributes)}
        )  # fmt: skip
    if response.people_also_ask:
        data["peopleAlsoAsk"] = [
            _without_empty(
                {"question": q.question, "snippet": q.snippet, "title": q.title, "link": q.link}
            )
            for q in response.people_also_ask
        ]
    if response.related_searches:
        data["relatedSearches"] = [{"query": text} for text in response.related_searches]
    if response.notes:
        data["notes"] = list(response.notes)
    return data


# Escapes whose characters delimit a URL's parts (RFC 3986 gen-delims and sub-delims),
# "%" itself and the space: decoding them would change where the URL points.
_KEPT_ESCAPES = frozenset(b":/?#[]@!$&'()*+,;=% ")
_ESCAPE_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def readable_urls(value: Any) -> Any:
    """``value`` with every string that holds a URL (has ``http`` and ``%``) decoded by
    :func:`decode_escapes`, through lists and objects, as MiroThinker's search tools do."""
    if isinstance(value, str):
        return decode_escapes(value) if "%" in value and "http" in value else value
    if isinstance(value, list):
        return [readable_urls(item) for item in value]
    if isinstance(value, dict):
        return {key: readable_urls(item) for key, item in value.items()}
    return value


def decode_escapes(text: str) -> str:
    """Percent-escapes turned into the characters they spell, except ``_KEPT_ESCAPES``
    (left as written) and byte runs that are not UTF-8 (left encoded too)."""

    def decode(run: re.Match[str]) -> str:
        out: list[str] = []
        pending: list[str] = []  # escapes of bytes that decode together

        def flush() -> None:
            raw = bytes(int(escape[1:], 16) for escape in pending)
            try:
                out.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                out.append("".join(pending))
            pending.clear()

        for escape in re.findall(r"%[0-9A-Fa-f]{2}", run.group()):
            if int(escape[1:], 16) in _KEPT_ESCAPES:
                flush()
                out.append(escape)
            else:
                pending.append(escape)
        flush()
        return "".join(out)

    return _ESCAPE_RUN.sub(decode, text)


def _without_empty(fields: JSONObject) -> JSONObject:
    return {key: value for key, value in fields.items() if value not in (None, "", {}, [])}


def mirothinker_error(message: str) -> str:
    """A failure in the JSON form MiroThinker's search tool reports them in."""
    return json.dumps({"success": False, "error": message, "results": []}, ensure_ascii=False)


# --- the servers --------------------------------------------------------------------------


def _description(backend: SearchBackend, shape: str) -> str:
    engine = ENGINE_LABELS.get(backend.name, backend.name)
    return (
        f"Search the web ({engine}) and get the best-matching pages as {shape}, each with its "
        "title, link and a snippet, plus a direct answer, an entity summary, related "
        "questions and related searches when the engine has them. Open a link with a page "
        "reader to read the whole page."
    )


def _add_deepledger_tool(server: MCPServer, backend: SearchBackend) -> None:
    @server.tool(
        name="search",
        description=_description(backend, "numbered text"),
        structured_output=False,
    )
    async def search(
        query: Annotated[str, Field(description="What to search for, in plain words.")],
        num: Annotated[int, Field(description="How many results, 1 to 100.")] = 10,
        page: Annotated[int, Field(description="Which page of results, from 1.")] = 1,
        gl: Annotated[
            str | None, Field(description="Region code, ISO 3166-1 alpha-2 such as 'us'.")
        ] = None,
        hl: Annotated[
            str | None, Field(description="Language code, ISO 639-1 such as 'en'.")
        ] = None,
    ) -> str:
        request = SearchQuery(query, num=num, page=page, gl=gl, hl=hl)
        try:
            return format_text(await run_search(backend, request))
        except SearchError as exc:
            raise ToolError(str(exc)) from exc


def _add_mirothinker_tool(server: MCPServer, backend: SearchBackend) -> None:
    @server.tool(
        name="google_search",
        description=_description(backend, "JSON (organic results and search parameters)"),
        structured_output=False,
    )
    async def google_search(
        q: Annotated[str, Field(description="The search query.")],
        gl: Annotated[str, Field(description="Region, ISO 3166-1 alpha-2 (e.g. 'us').")] = "us",
        hl: Annotated[str, Field(description="Language, ISO 639-1 (e.g. 'en').")] = "en",
        location: Annotated[
            str | None, Field(description="Place to search from, e.g. 'Paris, France'.")
        ] = None,
        num: Annotated[int | None, Field(description="Number of results (10 if unset).")] = None,
        tbs: Annotated[
            str | None,
            Field(
                description="Time filter: qdr:h, qdr:d, qdr:w, qdr:m or qdr:y (past hour "
                "to past year)."
            ),
        ] = None,
        page: Annotated[int | None, Field(description="Page of results, from 1.")] = None,
        autocorrect: Annotated[
            bool | None, Field(description="Whether the engine may correct the spelling.")
        ] = None,
    ) -> CallToolResult:
        request = SearchQuery(
            q, num=10 if num is None else num, page=page, gl=gl, hl=hl,
            location=location, tbs=tbs, autocorrect=autocorrect,
        )  # fmt: skip
        try:
            response = await run_search(backend, request, as_retried=True)
        except SearchError as exc:
            # Returned rather than raised: a raised ToolError reaches the model behind the
            # SDK's "Error executing tool" prefix, and these models expect the bare JSON.
            return CallToolResult(content=[_text(mirothinker_error(str(exc)))], is_error=True)
        for note in response.notes:  # no field for them in MiroThinker's answer
            logger.info("google_search %r: %s", q, note)
        return CallToolResult(
            content=[_text(json.dumps(mirothinker_shaped(response), ensure_ascii=False))]
        )


async def sogou_pages(backend: SearchBackend, query: str, count: int) -> JSONObject:
    """``sogou_search``'s answer: the query and its pages (title, url, passage, date,
    site), without pages that publish benchmark answers. Any other engine (``local``,
    offline) fills the same fields from its results."""
    if not query.strip():
        raise SearchError("The search query is empty: give some words to search for.")
    count = max(1, min(count, 50))
    if isinstance(backend, SogouBackend):
        engine_query, found = await backend.search_pages(query.strip(), count)
        pages = [{field: plain_text(page.get(field)) for field in PAGE_FIELDS} for page in found]
    else:
        response = await run_search(backend, SearchQuery(query.strip(), num=count))
        engine_query = query.strip()
        pages = [{"title": r.title, "url": r.link, "passage": r.snippet, "date": r.date or "",
                  "site": ""} for r in response.results]  # fmt: skip
    rules = BlockedURLs.from_environment()
    kept = [page for page in pages if rules.rule_for(page["url"]) is None]
    if dropped := len(pages) - len(kept):  # no field for it in MiroThinker's answer
        logger.info("sogou_search %r: %d answer-leak result(s) dropped", query, dropped)
    return {"Query": engine_query, "Pages": kept}


def _add_sogou_tool(server: MCPServer, backend: SearchBackend) -> None:
    @server.tool(
        name="sogou_search",
        description=(
            "Search the web with Sogou (through Tencent Cloud's search API; strongest on "
            "Chinese-language pages) and get JSON: the query and its pages, each with title, "
            "url, passage (a summary), date and site."
        ),
        structured_output=False,
    )
    async def sogou_search(  # MiroThinker's capitalised argument names, as its models call
        Query: Annotated[str, Field(description="The search query.")],
        Cnt: Annotated[int, Field(description="How many results: 10, 20, 30, 40 or 50.")] = 10,
    ) -> CallToolResult:
        try:
            data = await sogou_pages(backend, Query, Cnt)
        except SearchError as exc:
            return CallToolResult(content=[_text(f"[ERROR]: {exc}")], is_error=True)
        return CallToolResult(content=[_text(json.dumps(data, ensure_ascii=False))])


def _text(text: str) -> TextContent:
    return TextContent(type="text", text=text)


def build_server(
    backend: SearchBackend, names: str = "deepledger", sogou: SearchBackend | None = None
) -> MCPServer:
    """The MCP server offering ``backend`` under the naming ``names``; in MiroThinker's,
    ``sogou_search`` too, on ``sogou`` (default: ``backend``)."""
    if names not in NAMINGS:
        raise ValueError(f"names must be one of {NAMINGS}, not {names!r}")

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await backend.aclose()
            if sogou is not None and sogou is not backend:
                await sogou.aclose()

    server = MCPServer(
        SERVER_NAMES[names],
        instructions=f"Web search ({ENGINE_LABELS.get(backend.name, backend.name)}).",
        lifespan=lifespan,
    )
    if names == "mirothinker":
        _add_mirothinker_tool(server, backend)
        _add_sogou_tool(server, sogou or backend)
    else:
        _add_deepledger_tool(server, backend)
    return server


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backend", choices=backend_names(), default="local")
    parser.add_argument("--names", choices=NAMINGS, default="deepledger")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per HTTP request")
    parser.add_argument(
        "--max-attempts", type=int, default=DEFAULT_RETRY.max_attempts,
        help="tries per search when the engine is rate-limited or failing (1: no retry)",
    )  # fmt: skip
    parser.add_argument(
        "--retry-wait", type=float, default=DEFAULT_RETRY.initial_wait_seconds,
        help="seconds before the first retry; doubled each time",
    )  # fmt: skip
    parser.add_argument(
        "--retry-max-wait", type=float, default=DEFAULT_RETRY.max_wait_seconds,
        help="the longest backoff between tries",
    )  # fmt: skip
    parser.add_argument(
        "--max-retry-after", type=float, default=DEFAULT_RETRY.max_retry_after_seconds,
        help="the longest Retry-After honoured (longer ones are cut to this)",
    )  # fmt: skip
    parser.add_argument("--corpus", type=Path, help="local backend: the corpus to search")
    parser.add_argument("--cache-dir", type=Path, help="local backend: the index folder")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Configure the backend from flags and the environment, serve over stdio."""
    args = parse_args(argv)
    retry = RetryPolicy(
        max_attempts=max(1, args.max_attempts),
        initial_wait_seconds=max(0.0, args.retry_wait),
        max_wait_seconds=max(0.0, args.retry_max_wait),
        jitter_seconds=min(DEFAULT_RETRY.jitter_seconds, max(0.0, args.retry_wait)),
        max_retry_after_seconds=max(0.0, args.max_retry_after),
    )
    options = BackendOptions(
        timeout_seconds=args.timeout, retry=retry, corpus=args.corpus, cache_dir=args.cache_dir
    )
    backend = create_backend(args.backend, options=options)
    # MiroThinker's sogou_search asks Tencent Cloud's API, unless searches run offline.
    sogou = (
        backend if args.backend in ("local", "sogou") else create_backend("sogou", options=options)
    )
    serve_stdio(build_server(backend, args.names, sogou if args.names == "mirothinker" else None))


if __name__ == "__main__":
    main()
