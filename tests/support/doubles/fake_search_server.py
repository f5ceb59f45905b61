"""Scripted loopback fakes of web search APIs: Serper, SearXNG, Tavily, Brave and Tencent
Cloud's web search (Sogou).

Each speaks its engine's real wire protocol (paths, auth headers, parameters, JSON
shapes), so the real backends and the MCP server can be tested against it::

    results = {"eiffel tower height": [
        {"title": "Eiffel Tower", "link": "http://127.0.0.1:8000/eiffel",
         "snippet": "The tower is 330 metres tall."},
    ]}
    with FakeSerper(results=results, api_key="k") as serper:
        ...  # SERPER_BASE_URL=serper.base_url, SERPER_API_KEY=k
        assert serper.requests[0].body["q"] == "eiffel tower height"

Scripting
    ``results`` maps a query (matched ignoring case and extra spaces) to either a list
    of results — dicts with ``title``, ``link``, ``snippet`` and optionally ``date``,
    translated into each engine's field names — or a dict with such a list under
    ``"organic"`` plus engine-specific parts merged verbatim into the answer (Serper's
    ``knowledgeGraph``/``answerBox``/``peopleAlsoAsk``/``relatedSearches``, SearXNG's
    ``answers``/``infoboxes``/``suggestions``, Tavily's ``answer``, Brave's ``infobox``/
    ``faq``). ``default`` answers unknown queries: a list, a dict as above, or a function
    of the query returning one; without it they find nothing. Results are paged as the
    engine pages them.

Faults
    :meth:`~FakeSearchServer.fail_next` queues faults, each answering one request before
    scripted answers resume: :func:`rate_limited` (429 with ``Retry-After``),
    :func:`server_error`, :func:`unauthorized`, :func:`garbage` (a 200 whose body is not
    JSON), or any :class:`SearchFault` (with an optional delay, for timeouts). A wrong
    key gets the engine's own rejection. Every request is recorded in ``requests``.

Checks the real engines make
    SearXNG answers 400 to a ``language`` that is not a locale (``zh-cn-CN``) and, with
    its bot limiter on (``limiter=True``, the default), 429 to a request without
    ``Accept-Language``; Brave answers 422 to a ``search_lang`` or ``country`` outside
    the values it documents. Serper's scripted results are sent as given (with their
    ``position``), so ``sitelinks``, ``attributes`` and percent-encoded links reach the
    client as Serper sends them.
"""

from __future__ import annotations

import json
import re
import socketserver
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import parse_qsl, urlsplit

if TYPE_CHECKING:  # the fake imports nothing of deepledger at run time
    from deepledger.messages import JSONObject

__all__ = [
    "FakeBrave",
    "FakeSearchServer",
    "FakeSearxng",
    "FakeSerper",
    "FakeTavily",
    "RecordedSearch",
    "SearchFault",
    "garbage",
    "rate_limited",
    "server_error",
    "unauthorized",
]

Scripted = Sequence[Mapping[str, Any]] | Mapping[str, Any]
Default = Scripted | Callable[[str], Scripted] | None


# --- faults and records -------------------------------------------------------------------


@dataclass(frozen=True)
class SearchFault:
    """One scripted HTTP answer in place of results: ``body`` is sent as it is."""

    status: int = 500
    body: str = '{"message": "fake search server: internal error"}'
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    delay: float = 0.0  # seconds before answering (the server's close cuts it short)


def rate_limited(retry_after: float | None = 0) -> SearchFault:
    """A 429, with ``Retry-After`` in seconds unless ``retry_after`` is None."""
    headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
    return SearchFault(429, '{"message": "Too many requests."}', headers)


def server_error(status: int = 500) -> SearchFault:
    return SearchFault(status, '{"message": "The search engine had an internal error."}')


def unauthorized(status: int = 401) -> SearchFault:
    return SearchFault(status, '{"message": "Unauthorized."}')


def garbage() -> SearchFault:
    """A 200 whose body is not JSON (a proxy's error page, a truncated answer)."""
    return SearchFault(200, "<html><body>Bad gateway</body></html>", content_type="text/html")


@dataclass(frozen=True)
class RecordedSearch:
    """A request as received; ``headers`` have lower-cased names, ``body`` is parsed JSON
    (``{"_invalid_json": text}`` if it was not)."""

    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: JSONObject | None
    raw: bytes = b""  # the body as sent (a signed request is checked on these bytes)


@dataclass(frozen=True)
class _Answer:
    status: int
    body: str
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    delay: float = 0.0


def _json_answer(status: int, data: Any) -> _Answer:
    return _Answer(status, json.dumps(data, ensure_ascii=False))


def normalize_query(query: str) -> str:
    return " ".join(query.lower().split())


# --- the HTTP machinery -------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeSearchServer) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        # Skip HTTPServer's reverse lookup of the host name, which can stall in sandboxes.
        socketserver.TCPServer.server_bind(self)
        host, self.server_port = self.server_address[:2]
        self.server_name = str(host)  # an AF_INET address: the host is already a str

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gives up (a timeout test) drops its connection; that is routine.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else each answer waits for a delayed ACK
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``requests`` instead."""

    def do_GET(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        answer = self.server.fake._answer(self.command, self.path, dict(self.headers), raw)
        if answer.delay and self.server.fake._stopping.wait(answer.delay):
            return
        payload = answer.body.encode("utf-8")
        try:
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            self.close_connection = True  # the client left first

    do_POST = do_GET


# --- the common fake ----------------------------------------------------------------------


class FakeSearchServer:
    """What every fake engine shares: lifecycle, scripting, faults and recording.

    Subclasses say which path and method they serve, how a key is checked, how the
    request names the query and page, and how results are rendered.
    """

    engine: ClassVar[str] = "fake"
    path: ClassVar[str] = "/search"
    method: ClassVar[str] = "GET"

    def __init__(
        self,
        results: Mapping[str, Scripted] | None = None,
        *,
        default: Default = None,
        api_key: str | None = "test-key",
    ) -> None:
        self.results = {normalize_query(q): value for q, value in (results or {}).items()}
        self.default = default
        self.api_key = api_key
        self.requests: list[RecordedSearch] = []
        self._faults: deque[SearchFault] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> Self:
        """Serve on an ephemeral 127.0.0.1 port from a daemon thread."""
        if self._httpd is None:
            self._stopping.clear()
            self._httpd = _HTTPServer(self)
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"{type(self).__name__}:{self._httpd.server_address[1]}",
                daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()  # wakes delayed answers
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: what the backend's base URL variable should say."""
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not running; call start() first")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # -- scripting

    def fail_next(self, *faults: SearchFault) -> None:
        """Answer the next requests with these faults, one each, in order."""
        with self._lock:
            self._faults.extend(faults)

    @property
    def queries(self) -> list[str]:
        """The query text of every request received, in order."""
        return [self.query_of(request) for request in self.requests]

    def scripted(self, query: str) -> tuple[list[JSONObject], JSONObject]:
        """(results, engine-specific extras) scripted for ``query``."""
        value = self.results.get(normalize_query(query))
        if value is None:
            value = self.default(query) if callable(self.default) else self.default
        if value is None:
            return [], {}
        if isinstance(value, Mapping):
            extras = {key: item for key, item in value.items() if key != "organic"}
            return [dict(item) for item in value.get("organic", [])], extras
        return [dict(item) for item in value], {}

    # -- what subclasses define

    def query_of(self, request: RecordedSearch) -> str:
        raise NotImplementedError

    def authorized(self, request: RecordedSearch) -> bool:
        return True

    def rejection(self) -> _Answer:
        return _json_answer(401, {"message": "Unauthorized."})

    def render(self, request: RecordedSearch) -> _Answer:
        raise NotImplementedError

    # -- handling (runs on handler threads)

    def _answer(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> _Answer:
        parts = urlsplit(target)
        body: JSONObject | None = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"_invalid_json": raw.decode("utf-8", "replace")}
        request = RecordedSearch(
            method=method,
            path=parts.path,
            params=dict(parse_qsl(parts.query, keep_blank_values=True)),
            headers={name.lower(): value for name, value in headers.items()},
            body=body if isinstance(body, dict) else {"_invalid_json": str(body)},
            raw=raw,
        )
        with self._lock:
            self.requests.append(request)
            fault = self._faults.popleft() if self._faults else None
        if fault is not None:
            return _Answer(fault.status, fault.body, fault.headers, fault.content_type, fault.delay)
        if parts.path.rstrip("/") != self.path or method != self.method:
            return _json_answer(404, {"message": f"No route {method} {parts.path}."})
        if not self.authorized(request):
            return self.rejection()
        return self.render(request)


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


# --- the engines --------------------------------------------------------------------------


class FakeSerper(FakeSearchServer):
    """``POST /search`` with ``X-API-KEY``; pages of ``num`` (default 10) results."""

    engine = "serper"
    method = "POST"

    def query_of(self, request: RecordedSearch) -> str:
        return str((request.body or {}).get("q", ""))

    def authorized(self, request: RecordedSearch) -> bool:
        return self.api_key is None or request.headers.get("x-api-key") == self.api_key

    def rejection(self) -> _Answer:
        return _json_answer(403, {"message": "Unauthorized.", "statusCode": 403})

    def render(self, request: RecordedSearch) -> _Answer:
        body = request.body or {}
        query = self.query_of(request)
        if not query or "_invalid_json" in body:
            return _json_answer(400, {"message": "Missing query parameter", "statusCode": 400})
        num, page = _int(body.get("num"), 10), max(1, _int(body.get("page"), 1))
        results, extras = self.scripted(query)
        start = (page - 1) * num
        organic = [
            {**item, "position": start + offset + 1}
            for offset, item in enumerate(results[start : start + num])
        ]
        parameters = {"q": query, "gl": body.get("gl", "us"), "hl": body.get("hl", "en"),
                      "type": "search", "num": num, "page": page, "engine": "google"}  # fmt: skip
        return _json_answer(
            200, {"searchParameters": parameters, **extras, "organic": organic, "credits": 1}
        )


# SearXNG's check of the language parameter (a locale, or all/auto); else HTTP 400.
_SEARXNG_LANGUAGE = re.compile(r"^(?:all|auto|[a-z]{2,3}(?:-[a-zA-Z]{2})?)$")


class FakeSearxng(FakeSearchServer):
    """``GET /search?format=json``; pages of ten; 403 unless ``json_enabled``; 400 for a
    ``language`` that is not a locale; with ``limiter`` (its bot detection, on by
    default as on public instances), 429 for a request without ``Accept-Language``."""

    engine = "searxng"
    page_size = 10

    def __init__(
        self, *args: Any, json_enabled: bool = True, limiter: bool = True, **kwargs: Any
    ) -> None:
        kwargs.setdefault("api_key", None)
        super().__init__(*args, **kwargs)
        self.json_enabled = json_enabled
        self.limiter = limiter

    def query_of(self, request: RecordedSearch) -> str:
        return request.params.get("q", "")

    def render(self, request: RecordedSearch) -> _Answer:
        if request.params.get("format") != "json" or not self.json_enabled:
            # What SearXNG does when the format is not enabled in its settings.
            return _Answer(403, "<html><body>403 Forbidden</body></html>",
                           content_type="text/html")  # fmt: skip
        if self.limiter and not request.headers.get("accept-language", "").strip():
            return _Answer(429, "Too Many Requests", content_type="text/plain")
        language = request.params.get("language")
        if language is not None and not _SEARXNG_LANGUAGE.match(language):
            error = f'Invalid value "{language}" for parameter language'
            return _json_answer(400, {"error": error})
        query = self.query_of(request)
        page = max(1, _int(request.params.get("pageno"), 1))
        results, extras = self.scripted(query)
        start = (page - 1) * self.page_size
        items = [
            {"url": item.get("link", ""), "title": item.get("title", ""),
             "content": item.get("snippet", ""), "engine": "fake", "engines": ["fake"],
             "score": 1.0 / (start + offset + 1), "category": "general",
             "publishedDate": item.get("date")}
            for offset, item in enumerate(results[start : start + self.page_size])
        ]  # fmt: skip
        answer = {"query": query, "number_of_results": len(results), "results": items,
                  "answers": [], "corrections": [], "infoboxes": [], "suggestions": [],
                  "unresponsive_engines": []}  # fmt: skip
        return _json_answer(200, {**answer, **extras})


class FakeTavily(FakeSearchServer):
    """``POST /search`` with ``Authorization: Bearer``; the first ``max_results`` (5)."""

    engine = "tavily"
    method = "POST"

    def query_of(self, request: RecordedSearch) -> str:
        return str((request.body or {}).get("query", ""))

    def authorized(self, request: RecordedSearch) -> bool:
        expected = f"Bearer {self.api_key}"
        return self.api_key is None or request.headers.get("authorization") == expected

    def rejection(self) -> _Answer:
        return _json_answer(401, {"detail": {"error": "Unauthorized: missing or invalid API key."}})

    def render(self, request: RecordedSearch) -> _Answer:
        body = request.body or {}
        query = self.query_of(request)
        results, extras = self.scripted(query)
        count = max(0, min(20, _int(body.get("max_results"), 5)))
        items = [
            {"url": item.get("link", ""), "title": item.get("title", ""),
             "content": item.get("snippet", ""), "score": round(1.0 / (offset + 1), 3),
             "raw_content": None, **({"published_date": item["date"]} if "date" in item else {})}
            for offset, item in enumerate(results[:count])
        ]  # fmt: skip
        answer = {"query": query, "follow_up_questions": None, "answer": None, "images": [],
                  "results": items, "response_time": 0.01}  # fmt: skip
        return _json_answer(200, {**answer, **extras})


class FakeBrave(FakeSearchServer):
    """``GET /res/v1/web/search`` with ``X-Subscription-Token``; ``count``/``offset`` pages."""

    engine = "brave"
    path = "/res/v1/web/search"

    def query_of(self, request: RecordedSearch) -> str:
        return request.params.get("q", "")

    def authorized(self, request: RecordedSearch) -> bool:
        return self.api_key is None or request.headers.get("x-subscription-token") == self.api_key

    def rejection(self) -> _Answer:
        error = {"code": "SUBSCRIPTION_TOKEN_INVALID", "status": 422,
                 "detail": "The provided subscription token is invalid."}  # fmt: skip
        return _json_answer(422, {"type": "ErrorResponse", "error": error})

    def render(self, request: RecordedSearch) -> _Answer:
        for name, allowed in (("search_lang", BRAVE_SEARCH_LANGS), ("country", BRAVE_COUNTRIES)):
            value = request.params.get(name)
            if value is not None and value not in allowed:
                return _brave_invalid(name, value)
        query = self.query_of(request)
        count = max(1, min(20, _int(request.params.get("count"), 20)))
        offset = max(0, _int(request.params.get("offset"), 0))
        results, extras = self.scripted(query)
        start = offset * count
        items = [
            {"type": "search_result", "url": item.get("link", ""), "title": item.get("title", ""),
             "description": item.get("snippet", ""), **({"age": item["date"]} if "date" in item
                                                          else {})}
            for item in results[start : start + count]
        ]  # fmt: skip
        answer = {"type": "search", "query": {"original": query},
                  "web": {"type": "search", "results": items}}  # fmt: skip
        return _json_answer(200, {**answer, **extras})


# The values Brave's web search documents for search_lang and country ("codes" page).
BRAVE_SEARCH_LANGS = frozenset(
    {"ar", "eu", "bn", "bg", "ca", "zh-hans", "zh-hant", "hr", "cs", "da", "nl", "en",
     "en-gb", "et", "fi", "fr", "gl", "de", "gu", "he", "hi", "hu", "is", "it", "jp", "kn",
     "ko", "lv", "lt", "ms", "ml", "mr", "nb", "pl", "pt-br", "pt-pt", "pa", "ro", "ru",
     "sr", "sk", "sl", "es", "sv", "ta", "te", "th", "tr", "uk", "vi"}
)  # fmt: skip
BRAVE_COUNTRIES = frozenset(
    {"ALL", "AR", "AU", "AT", "BE", "BR", "CA", "CL", "DK", "FI", "FR", "DE", "HK", "IN",
     "ID", "IT", "JP", "KR", "MY", "MX", "NL", "NZ", "NO", "CN", "PL", "PT", "PH", "RU",
     "SA", "ZA", "ES", "SE", "CH", "TW", "TR", "GB", "US"}
)  # fmt: skip


def _brave_invalid(name: str, value: str) -> _Answer:
    """Brave's 422 for a parameter outside its documented values."""
    problem = {"type": "enum", "loc": ["query", name], "input": value,
               "msg": f"Input should be one of the documented {name} values"}  # fmt: skip
    error = {"id": "fake", "status": 422, "code": "VALIDATION",
             "detail": "Unable to validate request parameter(s)",
             "meta": {"errors": [problem]}}  # fmt: skip
    return _json_answer(422, {"type": "ErrorResponse", "error": error})


class FakeTencentSearch(FakeSearchServer):
    """Tencent Cloud's web search API (wsa ``SearchPro``, Sogou's index): ``POST /`` with
    the API 3.0 headers, signed with TC3-HMAC-SHA256 by ``secret_id``/``secret_key`` over
    the exact body; the first ``Cnt`` results, each a JSON string in ``Pages``. Errors
    come as Tencent sends them: HTTP 200 with ``Response.Error``."""

    engine = "sogou"
    path = ""  # the service's root
    method = "POST"

    def __init__(
        self, *args: Any, secret_id: str = "AKIDtest", secret_key: str = "test-secret", **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        self.secret_id, self.secret_key = secret_id, secret_key

    def query_of(self, request: RecordedSearch) -> str:
        return str((request.body or {}).get("Query", ""))

    def authorized(self, request: RecordedSearch) -> bool:
        from deepledger.web.search.sogou import tc3_authorization

        headers = request.headers
        if headers.get("x-tc-action") != "SearchPro" or headers.get("x-tc-version") != "2025-05-08":
            return False
        timestamp = _int(headers.get("x-tc-timestamp"), 0)
        expected = tc3_authorization(
            self.secret_id, self.secret_key, headers.get("host", ""), request.raw, timestamp
        )
        return headers.get("authorization") == expected

    def rejection(self) -> _Answer:
        error = {"Code": "AuthFailure.SignatureFailure",
                 "Message": "The provided credentials could not be validated."}  # fmt: skip
        return _json_answer(200, {"Response": {"Error": error, "RequestId": "fake-request"}})

    def render(self, request: RecordedSearch) -> _Answer:
        query = self.query_of(request)
        count = _int((request.body or {}).get("Cnt"), 10)
        results, _ = self.scripted(query)
        pages = [
            json.dumps({"title": item.get("title", ""), "url": item.get("link", ""),
                        "passage": item.get("snippet", ""), "date": item.get("date", ""),
                        "site": item.get("site", ""), "favicon": "", "score": 0.9,
                        "images": []}, ensure_ascii=False)
            for item in results[:count]
        ]  # fmt: skip
        return _json_answer(
            200, {"Response": {"Query": query, "Pages": pages, "RequestId": "fake-request"}}
        )
