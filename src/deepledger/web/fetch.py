"""Fetching one URL the model chose: redirects checked hop by hop, the body capped as it streams.

``fetch`` GETs a URL and follows up to ``FetchLimits.max_redirects`` redirects itself,
checking every hop with the SSRF guard (``ssrf.check_url`` before the request, and the
guarded transport at connect time when ``fetch`` builds its own client) and with the
answer-leak rules of ``blocked_urls`` (a hop to a page that publishes benchmark answers
is a ``FetchError`` of kind ``answer_leak`` naming the rule). Only http and https are fetched.

The body is read in chunks and never held past ``max_bytes``:

- textual content (``text/*``, HTML, JSON, XML, or no Content-Type at all) is kept up to
  ``max_bytes`` and the rest dropped: ``Fetched.truncated`` says so. Half a long page
  is still worth reading.
- anything else (PDF, office files, archives, images) is refused as soon as it passes
  ``max_bytes`` (or at once when its Content-Length says it will): a truncated PDF or
  zip cannot be converted anyway.

Every failure (HTTP status ≥ 400, timeouts, refused or reset connections, a refused
address, too large, too many redirects, a malformed URL) is one exception,
``FetchError``, whose ``kind`` says which. Messages name the URL and the cause, never a
request header's value (custom headers from the model may carry tokens).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import anyio
import httpx

from deepledger.blocked_urls import BlockedURLs, refusal
from deepledger.web import ssrf

USER_AGENT = "deepledger/0.1 (+https://pypi.org/project/deepledger/)"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_TEXTUAL_SUBTYPES = ("html", "xml", "json", "csv", "javascript", "markdown")


@dataclass(frozen=True, slots=True)
class FetchLimits:
    """How much one fetch may take. ``timeout_seconds`` bounds each network operation
    (connect, each read); ``total_seconds`` bounds the whole fetch, redirects included,
    so a server trickling a byte at a time cannot hold it forever."""

    max_bytes: int = 10 * 1024 * 1024
    timeout_seconds: float = 20.0
    total_seconds: float = 60.0
    max_redirects: int = 10
    truncate_text: bool = True  # keep the first max_bytes of textual bodies (else refuse)


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetched body and what the server said about it (after all redirects)."""

    final_url: str
    status: int
    content_type: str | None
    charset: str | None
    data: bytes
    truncated: bool = False
    redirects: tuple[str, ...] = ()  # the URLs that redirected, in order

    @property
    def name(self) -> str:
        """The final URL's path, whose suffix can hint at the content's kind."""
        return httpx.URL(self.final_url).path


class FetchError(Exception):
    """A URL could not be fetched. ``kind`` is one of ``blocked``, ``http_status``,
    ``timeout``, ``connect``, ``too_large``, ``redirects``, ``invalid_url``,
    ``answer_leak`` (``blocked_urls.py``), ``not_found`` (``corpus://`` documents);
    ``status`` is the HTTP status when there is one."""

    def __init__(self, message: str, *, kind: str, url: str, status: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.url = url
        self.status = status


def guarded_client(limits: FetchLimits, allow_private: bool | None = None) -> httpx.AsyncClient:
    """An httpx client for model-chosen URLs: the guarded transport, no automatic
    redirects, no environment proxies, the per-operation timeout."""
    return httpx.AsyncClient(
        transport=ssrf.guarded_transport(allow_private),
        timeout=httpx.Timeout(limits.timeout_seconds),
        follow_redirects=False,
        trust_env=False,
    )


async def fetch(
    url: str,
    *,
    limits: FetchLimits,
    allow_private: bool | None = None,
    headers: Mapping[str, str] | None = None,
    client: httpx.AsyncClient | None = None,
) -> Fetched:
    """GET ``url`` within ``limits``; see the module docstring for what is checked.

    ``allow_private`` overrides ``DEEPLEDGER_ALLOW_PRIVATE_NETWORKS``. ``headers`` are
    sent on every hop to the same host and dropped on a redirect to another host.
    ``client`` (optional) is used as given: build it with ``guarded_client`` to keep
    the connect-time check; every hop is still checked with ``ssrf.check_url``.
    """
    allowed = ssrf.private_networks_allowed(allow_private)
    try:
        with anyio.fail_after(limits.total_seconds):
            if client is not None:
                return await _follow(client, url, limits, allowed, headers)
            async with guarded_client(limits, allowed) as own:
                return await _follow(own, url, limits, allowed, headers)
    except TimeoutError as exc:
        raise FetchError(
            f"Timed out: fetching {url} took more than {limits.total_seconds:g} s in all",
            kind="timeout",
            url=url,
        ) from exc


async def _follow(
    client: httpx.AsyncClient,
    url: str,
    limits: FetchLimits,
    allowed: bool,
    headers: Mapping[str, str] | None,
) -> Fetched:
    """The redirect loop: check, request, and either return the body or move on."""
    chain: list[str] = []
    current, origin = url, _origin(url)
    leaks = BlockedURLs.from_environment()
    for _ in range(limits.max_redirects + 1):
        if rule := leaks.rule_for(current):
            # Checked on every hop: a shortener or a mirror may redirect to the answers.
            raise FetchError(refusal(current, rule), kind="answer_leak", url=current)
        await _check(current, allowed)
        sent = dict(headers or {}) if _origin(current) == origin else {}
        sent.setdefault("User-Agent", USER_AGENT)
        target = await _request_once(client, current, sent, limits)
        if isinstance(target, Fetched):
            return dataclasses.replace(target, redirects=tuple(chain))
        chain.append(current)
        current = target
    raise FetchError(
        f"Too many redirects (more than {limits.max_redirects}) starting at {url}",
        kind="redirects",
        url=url,
    )


async def _check(url: str, allowed: bool) -> None:
    """The SSRF check of one hop, as a ``FetchError``."""
    try:
        await ssrf.check_url(url, allow_private_networks=allowed)
    except ssrf.BlockedURLError as exc:
        raise FetchError(str(exc), kind="blocked", url=url) from exc
    except OSError as exc:
        host = httpx.URL(url).host
        raise FetchError(
            f"Could not fetch {url}: {host} does not resolve", kind="connect", url=url
        ) from exc


async def _request_once(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], limits: FetchLimits
) -> Fetched | str:
    """Send one GET: the body as ``Fetched``, or the next URL of a redirect."""
    try:
        async with client.stream("GET", url, headers=headers) as reply:
            if reply.status_code in REDIRECT_STATUSES and "location" in reply.headers:
                return _next_hop(reply, url)
            if reply.status_code >= 400:
                raise FetchError(
                    f"HTTP {reply.status_code} {reply.reason_phrase} for {url}",
                    kind="http_status",
                    url=url,
                    status=reply.status_code,
                )
            data, truncated = await _read_capped(reply, limits, url)
            return Fetched(
                final_url=str(reply.url),
                status=reply.status_code,
                content_type=reply.headers.get("content-type"),
                charset=reply.charset_encoding,
                data=data,
                truncated=truncated,
            )
    except ssrf.BlockedURLError as exc:  # raised by the guarded transport at connect time
        raise FetchError(f"Refused {url}: {_after_colon(exc)}", kind="blocked", url=url) from exc
    except httpx.TimeoutException as exc:
        raise FetchError(
            f"Timed out after {limits.timeout_seconds:g} s fetching {url}", kind="timeout", url=url
        ) from exc
    except httpx.InvalidURL as exc:
        raise FetchError(f"Not a valid URL: {url} ({exc})", kind="invalid_url", url=url) from exc
    except (UnicodeEncodeError, ValueError) as exc:  # a header httpx cannot send (non-ASCII)
        raise FetchError(
            f"Could not send the request for {url}: a custom header is not valid HTTP "
            "(names and values must be ASCII text)",
            kind="invalid_header",
            url=url,
        ) from exc
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise FetchError(f"Could not fetch {url}: {reason}", kind="connect", url=url) from exc


def _next_hop(reply: httpx.Response, url: str) -> str:
    """The absolute URL a redirect points to."""
    location = reply.headers["location"]
    try:
        return str(reply.url.join(location))
    except httpx.InvalidURL as exc:
        raise FetchError(
            f"{url} redirected to an invalid URL ({exc})", kind="invalid_url", url=url
        ) from exc


async def _read_capped(reply: httpx.Response, limits: FetchLimits, url: str) -> tuple[bytes, bool]:
    """The body, never more than ``max_bytes`` of it (see the module docstring)."""
    cap = limits.max_bytes
    keep_prefix = limits.truncate_text and _is_textual(reply.headers.get("content-type"))
    too_big = FetchError(
        f"{url} is larger than the limit of {_mib(cap)}", kind="too_large", url=url
    )
    declared = reply.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap and not keep_prefix:
        raise too_big
    body = bytearray()
    async for chunk in reply.aiter_bytes():
        body += chunk
        if len(body) > cap:
            if not keep_prefix:
                raise too_big
            return bytes(body[:cap]), True
    return bytes(body), False


def _is_textual(content_type: str | None) -> bool:
    """Whether a Content-Type is text that survives being cut (a missing one counts)."""
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if not mime or mime.startswith("text/"):
        return True
    return mime.startswith("application/") and any(subtype in mime for subtype in _TEXTUAL_SUBTYPES)


def _origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port: where custom headers may go."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return ("", url, None)
    return (parsed.scheme, parsed.host, parsed.port)


def _after_colon(exc: Exception) -> str:
    """A guard message without its leading "Refused <what>:" (the URL is named instead)."""
    return str(exc).split(": ", 1)[-1]


def _mib(size: int) -> str:
    """A byte count for people."""
    return f"{size / (1024 * 1024):.1f} MiB"
