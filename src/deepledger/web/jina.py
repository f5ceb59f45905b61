"""The optional Jina reader backend: a page as Markdown, rendered by Jina's service.

``jina_read(url)`` sends ``GET {JINA_BASE_URL}/{url}`` (default base
``https://r.jina.ai``) with ``Authorization: Bearer {JINA_API_KEY}``,
``Accept: application/json`` and ``X-Return-Format: markdown``, and reads the answer's
``data.title`` and ``data.content`` (a plain-text answer is taken as the Markdown
itself, a leading ``Title:`` line as its title). The model's own headers
(``custom_headers``, filtered by ``model_input.request_headers``) go along, as they do
in MiroThinker's scraper, except in place of ``Authorization`` or ``Accept``.

Security: the base URL is the user's configuration and is not SSRF-filtered; the
*target* URL came from the model, so it is checked with the SSRF guard before it is
sent (Jina's servers would fetch it, but an internal base URL such as a self-hosted
reader would otherwise fetch internal targets for the model).

Failures are ``JinaError`` with a ``kind``: ``missing_key`` (``JINA_API_KEY`` unset or
empty), ``blocked`` (the target failed the SSRF guard), ``answer_leak`` (the target
matches a rule of ``blocked_urls.py``; Jina's own redirects cannot be seen from here),
``invalid_url`` (a target whose ``..`` segments would move the request, key and all,
to another path of the reader's host), ``auth`` (401/403),
``rate_limited`` (429 after the retries), ``http_status`` (other 4xx), ``server`` (5xx
after the retries), ``timeout``, ``connect``, ``bad_response`` (unreadable, or no
content at all). A 429 or 5xx is retried ``max_retries`` times, waiting
``Retry-After`` when the server gives one (capped at ``max_retry_wait``), else 1 s
then 2 s. The key never appears in a message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpx

from deepledger.blocked_urls import BlockedURLs, refusal
from deepledger.web import ssrf
from deepledger.web.convert import Document

API_KEY_ENV = "JINA_API_KEY"
BASE_URL_ENV = "JINA_BASE_URL"
DEFAULT_BASE_URL = "https://r.jina.ai"
_RETRIED = frozenset({429, 500, 502, 503, 504})
_OURS = frozenset({"authorization", "accept"})  # what the model's headers may not replace


@dataclass(frozen=True, slots=True)
class JinaLimits:
    """Timeouts, retries and the most of an answer that is read."""

    timeout_seconds: float = 60.0  # Jina renders the page in a browser first: slow
    max_retries: int = 2
    max_retry_wait: float = 10.0
    max_bytes: int = 10 * 1024 * 1024


class JinaError(Exception):
    """The Jina reader could not give the page; ``kind`` says why (module docstring)."""

    def __init__(self, message: str, *, kind: str, status: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.status = status


async def jina_read(
    url: str,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    limits: JinaLimits | None = None,
    allow_private: bool | None = None,
    client: httpx.AsyncClient | None = None,
    headers: Mapping[str, str] | None = None,
) -> Document:
    """``url`` as a ``Document`` of kind ``jina`` (Markdown), through the Jina reader.

    ``api_key`` and ``base_url`` default to ``JINA_API_KEY`` and ``JINA_BASE_URL``;
    ``allow_private`` is the SSRF switch for the target (see ``ssrf``). ``headers`` are
    the model's own (already passed through ``model_input.request_headers``): sent
    along, as MiroThinker's scraper sends them, but never in place of the key or of
    the answer format this client reads.
    """
    limits = limits or JinaLimits()
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV, "")
    if not key.strip():
        raise JinaError(f"The Jina reader needs an API key: set {API_KEY_ENV}.", kind="missing_key")
    if rule := BlockedURLs.from_environment().rule_for(url):
        raise JinaError(refusal(url, rule), kind="answer_leak")
    try:
        await ssrf.check_url(url, allow_private_networks=allow_private)
    except ssrf.BlockedURLError as exc:
        raise JinaError(str(exc), kind="blocked") from exc
    except OSError as exc:
        raise JinaError(f"Could not read {url}: its host does not resolve", kind="connect") from exc
    base = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
    endpoint = reader_endpoint(base, url)
    model = {name: value for name, value in (headers or {}).items() if name.lower() not in _OURS}
    asked = {name.lower() for name in model}
    sent = {} if "x-return-format" in asked else {"X-Return-Format": "markdown"}
    sent |= model | {"Authorization": f"Bearer {key.strip()}", "Accept": "application/json"}
    if client is not None:
        return await _with_retries(client, endpoint, sent, url, limits)
    async with httpx.AsyncClient(timeout=httpx.Timeout(limits.timeout_seconds)) as own:
        return await _with_retries(own, endpoint, sent, url, limits)


def reader_endpoint(base: str, url: str) -> str:
    """``{base}/{url}``, refused when the target could steer the request elsewhere on
    the reader's own host: the key goes with it, so ``..`` segments (which HTTP clients
    resolve, turning ``/https://x/../../admin`` into ``/admin``), their percent-encoded
    forms, and anything that does not stay under ``{base}/http`` are refused."""
    lowered = url.lower()
    segments = urlsplit(url).path.split("/")
    if any(s in (".", "..") for s in segments) or "%2e" in lowered or "\\" in url:
        raise JinaError(
            f"{url} has dot segments in its path; give the page's plain URL.", kind="invalid_url"
        )
    endpoint = f"{base}/{url}"
    prefix = httpx.URL(base).path.rstrip("/") + "/http"
    if not httpx.URL(endpoint).path.startswith(prefix):
        raise JinaError(f"{url} cannot be read through the Jina reader.", kind="invalid_url")
    return endpoint


async def _with_retries(
    client: httpx.AsyncClient,
    endpoint: str,
    headers: dict[str, str],
    url: str,
    limits: JinaLimits,
) -> Document:
    """One request, repeated on 429 and 5xx as the module docstring says."""
    for attempt in range(limits.max_retries + 1):
        status, retry_after, body, content_type = await _get(client, endpoint, headers, url, limits)
        if status < 400:
            return parse_answer(body, content_type, url)
        if status not in _RETRIED or attempt == limits.max_retries:
            raise _status_error(status, url, attempt + 1)
        await anyio.sleep(_wait(retry_after, attempt, limits.max_retry_wait))
    raise AssertionError("unreachable: the loop returns or raises")


async def _get(
    client: httpx.AsyncClient,
    endpoint: str,
    headers: dict[str, str],
    url: str,
    limits: JinaLimits,
) -> tuple[int, str | None, bytes, str]:
    """Status, Retry-After, body (capped) and Content-Type of one GET."""
    try:
        async with client.stream("GET", endpoint, headers=headers) as reply:
            body = bytearray()
            async for chunk in reply.aiter_bytes():
                body += chunk
                if len(body) > limits.max_bytes:
                    raise JinaError(
                        f"The Jina reader's answer for {url} passed {limits.max_bytes:,} bytes.",
                        kind="bad_response",
                    )
            return (
                reply.status_code,
                reply.headers.get("retry-after"),
                bytes(body),
                reply.headers.get("content-type", ""),
            )
    except httpx.TimeoutException as exc:
        raise JinaError(
            f"The Jina reader timed out after {limits.timeout_seconds:g} s reading {url}",
            kind="timeout",
        ) from exc
    except httpx.HTTPError as exc:
        # The exception text names the endpoint only (base URL + target), never the headers.
        raise JinaError(
            f"Could not reach the Jina reader for {url}: {exc or type(exc).__name__}",
            kind="connect",
        ) from exc


def _wait(retry_after: str | None, attempt: int, cap: float) -> float:
    """Retry-After in seconds when it is a number, else 1 s, 2 s, ...; never over ``cap``."""
    if retry_after is not None:
        try:
            return max(0.0, min(float(retry_after), cap))
        except ValueError:
            pass  # an HTTP date: fall back to the backoff below rather than parse it
    return min(float(2**attempt), cap)


def _status_error(status: int, url: str, attempts: int) -> JinaError:
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    if status in {401, 403}:
        return JinaError(
            f"The Jina reader refused the API key (HTTP {status}); check {API_KEY_ENV}.",
            kind="auth",
            status=status,
        )
    if status == 429:
        return JinaError(
            f"The Jina reader is rate-limiting us (HTTP 429{tries}) reading {url}.",
            kind="rate_limited",
            status=status,
        )
    kind = "server" if status >= 500 else "http_status"
    return JinaError(
        f"The Jina reader answered HTTP {status}{tries} for {url}.", kind=kind, status=status
    )


def parse_answer(body: bytes, content_type: str, url: str) -> Document:
    """A Jina answer as a ``Document``: JSON (``data.title``, ``data.content``) or Markdown."""
    text = body.decode("utf-8", errors="replace")
    if "json" in content_type.lower():
        try:
            data = json.loads(text).get("data") or {}
            title, content = data.get("title") or None, data.get("content")
        except (json.JSONDecodeError, AttributeError) as exc:
            raise JinaError(
                f"The Jina reader sent unreadable JSON for {url}: {exc}", kind="bad_response"
            ) from exc
        if not isinstance(content, str):
            raise JinaError(
                f"The Jina reader's answer for {url} has no data.content.", kind="bad_response"
            )
    else:
        title, content = _plain_answer(text)
    content = content.strip()
    if not content:
        # Jina answers 200 with nothing for pages it could not render: not a page.
        raise JinaError(f"The Jina reader sent no content for {url}.", kind="bad_response")
    if title and not content.startswith("#"):
        content = f"# {title}\n\n{content}"
    return Document(content + "\n", title=title, kind="jina", notes=("read by the Jina reader",))


def _plain_answer(text: str) -> tuple[str | None, str]:
    """Title and Markdown of a plain-text answer (``Title:`` ... ``Markdown Content:``)."""
    title = None
    head, marker, rest = text.partition("Markdown Content:")
    for line in head.splitlines():
        if line.startswith("Title:"):
            title = line.removeprefix("Title:").strip() or None
    return title, rest if marker else text
