"""Loopback HTTP servers for tests of the web layer: scripted pages, and a fake Jina reader.

``FakeWebServer`` serves whatever each path is scripted to serve and records every
request::

    with FakeWebServer({"/a.html": Page(b"<html>...</html>")}) as site:
        site.redirect("/old", "/a.html")
        site.add("/huge", streamed(50 * 1024 * 1024))   # generated lazily, never held
        await fetch(site.url("/old"), ...)
        site.bytes_sent("/huge")                         # what actually went out

Bodies are bytes, or a callable returning an iterator of chunks, written one at a time
(``Page.chunk_delay`` seconds apart for a slow body); a client that hangs up stops the
writing. Responses are HTTP/1.0 (one request a connection), so a body without
Content-Length ends when the connection closes.

``FakeJinaServer`` answers ``GET /<target url>`` like the Jina reader: it checks
``Authorization: Bearer <key>`` (401 otherwise), returns the Markdown scripted for the
target (JSON with ``data.title``/``data.content`` when the client accepts JSON, else
the plain ``Title:`` / ``Markdown Content:`` form), and can be scripted to fail first
(``failures=[Failure(429, retry_after="0"), Failure(401)]``).
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

__all__ = [
    "Failure",
    "FakeJinaServer",
    "FakeWebServer",
    "Page",
    "RecordedRequest",
    "slow",
    "streamed",
]

Body = bytes | Callable[[], Iterator[bytes]]


@dataclass(frozen=True)
class Page:
    """What one path serves. ``content_length=False`` leaves the header out even for
    bytes; ``declared_length`` sends a Content-Length of your choosing (a lie, maybe)."""

    body: Body = b""
    status: int = 200
    content_type: str | None = "text/html; charset=utf-8"
    headers: Mapping[str, str] = field(default_factory=dict)
    content_length: bool = True
    declared_length: int | None = None
    chunk_delay: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]


def streamed(total: int, chunk: int = 64 * 1024, content_type: str = "text/plain") -> Page:
    """A body of ``total`` bytes made chunk by chunk as it is sent (no Content-Length)."""

    def chunks() -> Iterator[bytes]:
        block = b"x" * chunk
        left = total
        while left > 0:
            yield block[: min(chunk, left)]
            left -= chunk

    return Page(chunks, content_type=content_type, content_length=False)


def slow(parts: Iterable[bytes], delay: float, content_type: str = "text/plain") -> Page:
    """A body sent a part at a time, ``delay`` seconds apart."""
    listed = list(parts)
    return Page(lambda: iter(listed), content_type=content_type, chunk_delay=delay)


class _Loopback:
    """A threaded HTTP server on 127.0.0.1 and a free port, as a context manager."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner._record(self)
                owner.respond(self)

            def do_HEAD(self) -> None:
                owner._record(self)
                owner.respond(self)

            def log_message(self, format: str, *args: object) -> None:
                """Keep test output clean."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopping.set()  # wakes slow bodies so shutdown does not wait on them
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        assert self._server is not None, "use the server as a context manager"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def url(self, path: str) -> str:
        """The absolute URL of ``path`` on this server."""
        return self.base_url + path

    def _record(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.requests.append(
                RecordedRequest(handler.command, handler.path, dict(handler.headers.items()))
            )

    def respond(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def _send(self, handler: BaseHTTPRequestHandler, page: Page) -> int:
        """Write ``page``; return the body bytes that went out before the client left."""
        handler.send_response(page.status)
        if page.content_type:
            handler.send_header("Content-Type", page.content_type)
        for name, value in page.headers.items():
            handler.send_header(name, value)
        if page.declared_length is not None:
            handler.send_header("Content-Length", str(page.declared_length))
        elif isinstance(page.body, bytes) and page.content_length:
            handler.send_header("Content-Length", str(len(page.body)))
        handler.end_headers()
        if handler.command == "HEAD":
            return 0
        chunks = iter([page.body]) if isinstance(page.body, bytes) else page.body()
        sent = 0
        try:
            for chunk in chunks:
                if page.chunk_delay and self._stopping.wait(page.chunk_delay):
                    break
                handler.wfile.write(chunk)
                sent += len(chunk)
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up: exactly what the size-cap tests provoke
        return sent


class FakeWebServer(_Loopback):
    """Scripted pages by path (query strings ignored); unknown paths are 404."""

    def __init__(self, pages: Mapping[str, Page] | None = None) -> None:
        super().__init__()
        self.pages: dict[str, Page] = dict(pages or {})
        self._sent: dict[str, int] = defaultdict(int)
        self._finished: dict[str, threading.Event] = defaultdict(threading.Event)

    def add(self, path: str, page: Page) -> str:
        """Serve ``page`` at ``path``; returns its absolute URL."""
        self.pages[path] = page
        return self.url(path) if self._server else path

    def redirect(self, path: str, location: str, status: int = 302) -> str:
        """Redirect ``path`` to ``location`` (absolute, or a path on this server)."""
        return self.add(path, Page(b"", status=status, headers={"Location": location}))

    def bytes_sent(self, path: str) -> int:
        """Body bytes written for ``path`` so far (all requests together)."""
        with self._lock:
            return self._sent[path]

    def wait_finished(self, path: str, timeout: float = 10.0) -> bool:
        """Wait until a response for ``path`` has been written out (or abandoned)."""
        return self._finished[path].wait(timeout)

    def paths_requested(self) -> list[str]:
        """The paths asked for, in order."""
        with self._lock:
            return [request.path for request in self.requests]

    def respond(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.split("?", 1)[0]
        page = self.pages.get(path) or Page(b"not found", status=404, content_type="text/plain")
        sent = self._send(handler, page)
        with self._lock:
            self._sent[path] += sent
        self._finished[path].set()


@dataclass(frozen=True)
class Failure:
    """A scripted Jina failure: the status to answer, and an optional Retry-After."""

    status: int
    retry_after: str | None = None


class FakeJinaServer(_Loopback):
    """The Jina reader's ``GET /<url>`` with Bearer auth and scriptable failures."""

    def __init__(
        self,
        pages: Mapping[str, tuple[str, str]] | None = None,
        *,
        api_key: str = "test-jina-key",
        failures: Iterable[Failure] = (),
    ) -> None:
        super().__init__()
        self.pages = dict(pages or {})  # target URL -> (title, markdown)
        self.api_key = api_key
        self.failures: deque[Failure] = deque(failures)

    def respond(self, handler: BaseHTTPRequestHandler) -> None:
        target = handler.path[1:]
        if handler.headers.get("Authorization") != f"Bearer {self.api_key}":
            self._send(handler, _json_page(401, {"code": 401, "message": "invalid API key"}))
            return
        with self._lock:
            failure = self.failures.popleft() if self.failures else None
        if failure is not None:
            headers = {"Retry-After": failure.retry_after} if failure.retry_after else {}
            body = {"code": failure.status, "message": "scripted failure"}
            self._send(handler, _json_page(failure.status, body, headers))
            return
        if target not in self.pages:
            self._send(handler, _json_page(422, {"code": 422, "message": "cannot fetch"}))
            return
        title, markdown = self.pages[target]
        if "application/json" in handler.headers.get("Accept", ""):
            data = {"title": title, "url": target, "content": markdown}
            self._send(handler, _json_page(200, {"code": 200, "status": 20000, "data": data}))
            return
        text = f"Title: {title}\n\nURL Source: {target}\n\nMarkdown Content:\n{markdown}"
        self._send(handler, Page(text.encode(), content_type="text/plain; charset=utf-8"))


def _json_page(status: int, body: object, headers: Mapping[str, str] | None = None) -> Page:
    return Page(
        json.dumps(body).encode(),
        status=status,
        content_type="application/json",
        headers=dict(headers or {}),
    )
