"""JSON over HTTP for the search backends: one client, one retry loop, one error vocabulary.

Every backend sends its requests through :class:`JsonClient`, so what counts as transient,
how long to wait and how failures read are decided here, once:

- 429 and 5xx (and 408), timeouts, refused or dropped connections and bodies that are not
  JSON are retried with the project's :class:`~deepledger.llm.retry.RetryPolicy`
  (exponential backoff with jitter; a ``Retry-After`` is waited exactly, up to the
  policy's cap), then reported as :class:`SearchUnavailableError`.
- 401 and 403 are :class:`SearchRejectedError` naming the variable to check; other 4xx
  are rejections quoting the engine's own message.
- Redirects are not followed: keys travel in headers, and httpx forwards custom headers
  such as ``X-API-KEY`` to whatever host a redirect names. A redirect is reported with
  its target so the user can fix the base URL.

Secrets: every message passes through :meth:`JsonClient.redact`, which blanks the
backend's keys wherever they appear (an engine may echo a key in its error body), and
base URLs are shown without any user:password part.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from deepledger.llm.classify import parse_retry_after
from deepledger.messages import JSONObject
from deepledger.web.search import (
    BackendOptions,
    SearchBackend,
    SearchConfigError,
    SearchError,
    SearchRateLimitedError,
    SearchRejectedError,
    SearchUnavailableError,
)

log = logging.getLogger(__name__)

USER_AGENT = "deepledger-web-search/0.1"
MAX_DETAIL_CHARS = 300  # of an engine's error body quoted in a message
_RETRYABLE_STATUSES = {408, 425}


def missing_key(variable: str, service: str, where: str) -> SearchConfigError:
    """The error for an unset API key variable."""
    return SearchConfigError(
        f"{variable} is not set: the {service} search backend needs an API key ({where}). "
        f"Export {variable} (or put it in .env) and start the search server again."
    )


def display_url(url: str) -> str:
    """``url`` fit to show: without user:password, query or fragment."""
    try:
        parsed = httpx.URL(url)
        return str(parsed.copy_with(username=None, password=None, query=None, fragment=None))
    except (httpx.InvalidURL, TypeError, ValueError):
        return "<an unreadable URL>"


def join_url(base_url: str, path: str) -> str:
    """``base_url`` with ``path`` appended, keeping any path the base already has."""
    return base_url.rstrip("/") + "/" + path.lstrip("/")


class JsonClient:
    """Sends requests to one search service and returns their parsed JSON bodies.

    ``auth_hint`` finishes the message for a 401/403 (which variable to check);
    ``secrets`` are the values never to show.
    """

    def __init__(
        self,
        service: str,
        options: BackendOptions,
        *,
        auth_hint: str,
        secrets: Sequence[str | None] = (),
    ) -> None:
        self.service = service
        self.options = options
        self.auth_hint = auth_hint
        self._secrets = [secret for secret in secrets if secret and len(secret) >= 4]
        self._client: httpx.AsyncClient | None = None
        self.retries = 0  # retries made over this client's life

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content: bytes | None = None,
    ) -> JSONObject:
        """The JSON object a successful response holds; :class:`SearchError` otherwise
        (every engine answers with an object: anything else is a broken answer).
        ``body`` is sent as JSON; ``content`` as these exact bytes (a signed body)."""
        policy = self.options.retry
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(SearchUnavailableError),
            stop=stop_after_attempt(max(1, policy.max_attempts)),
            wait=self._wait_seconds,
            before_sleep=self._note_retry,
            sleep=self.options.sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                data = await self._attempt(method, url, headers, params, body, content)
                if not isinstance(data, dict):
                    raise SearchUnavailableError(
                        f"{self.service} sent a JSON {type(data).__name__}, not an object."
                    )
                return data
        raise AssertionError("unreachable: tenacity either returns or reraises")

    async def _attempt(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        params: Mapping[str, Any] | None,
        body: Any,
        content: bytes | None = None,
    ) -> Any:
        try:
            if content is not None:
                response = await self._http().request(
                    method, url, headers=headers, params=params, content=content
                )
            else:
                response = await self._http().request(
                    method, url, headers=headers, params=params, json=body
                )
        except httpx.UnsupportedProtocol as exc:
            raise SearchConfigError(
                f"The {self.service} base URL {display_url(url)} is not an http(s) URL."
            ) from exc
        except httpx.InvalidURL as exc:
            raise SearchConfigError(
                f"The {self.service} base URL is malformed: {self.redact(str(exc))}"
            ) from exc
        except httpx.TimeoutException as exc:
            raise SearchUnavailableError(
                f"{self.service} at {display_url(url)} did not answer within "
                f"{self.options.timeout_seconds:g} s."
            ) from exc
        except httpx.TransportError as exc:
            detail = self.redact(str(exc) or type(exc).__name__)
            raise SearchUnavailableError(
                f"Could not reach {self.service} at {display_url(url)} ({detail})."
            ) from exc
        if not response.is_success:
            raise self._status_error(response)
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SearchUnavailableError(
                f"{self.service} sent a response that is not JSON "
                f"({self._snippet(response.text)!r})."
            ) from exc

    def _status_error(self, response: httpx.Response) -> SearchError:
        status = response.status_code
        detail = self._detail(response)
        message = f"{self.service} answered HTTP {status} {response.reason_phrase}"
        message += f": {detail}" if detail else "."
        if status == 429:
            retry_after = parse_retry_after(response.headers)
            return SearchRateLimitedError(message, retry_after=retry_after)
        if status >= 500 or status in _RETRYABLE_STATUSES:
            return SearchUnavailableError(message)
        if status in (401, 403):
            return SearchRejectedError(f"{message} {self.auth_hint}", status=status)
        if 300 <= status < 400:
            target = display_url(response.headers.get("location", "")) or "elsewhere"
            return SearchRejectedError(
                f"{message} It redirects to {target}; set the base URL to the final address.",
                status=status,
            )
        return SearchRejectedError(message, status=status)

    def _detail(self, response: httpx.Response) -> str:
        """The engine's own reason from an error body (its message field, else the text)."""
        try:
            data = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._snippet(response.text)
        if isinstance(data, dict):
            for key in ("message", "error", "detail", "description"):
                value = data.get(key)
                if isinstance(value, dict):
                    value = value.get("message") or value.get("detail") or json.dumps(value)
                if isinstance(value, str) and value.strip():
                    return self._snippet(value)
        return self._snippet(json.dumps(data))

    def _snippet(self, text: str) -> str:
        text = self.redact(" ".join(text.split()))
        return text if len(text) <= MAX_DETAIL_CHARS else text[:MAX_DETAIL_CHARS] + "…"

    def _wait_seconds(self, state: RetryCallState) -> float:
        """The policy's backoff, or exactly the engine's Retry-After (capped)."""
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, SearchRateLimitedError) and error.retry_after is not None:
            return min(max(error.retry_after, 0.0), self.options.retry.max_retry_after_seconds)
        return self.options.retry.wait_seconds(state)

    def _note_retry(self, state: RetryCallState) -> None:
        self.retries += 1
        error = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s search failed (attempt %d of %d): %s; retrying in %.1f s",
            self.service,
            state.attempt_number,
            self.options.retry.max_attempts,
            error,
            wait,
        )

    def _http(self) -> httpx.AsyncClient:
        # Made on first use, inside the event loop that will use it.
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.options.timeout_seconds),
                follow_redirects=False,
                headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class KeyedBackend(SearchBackend):
    """An engine reached with an API key from ``key_env`` at a base URL from
    ``base_url_env`` (else ``default_base_url``): the key is checked at each search (a
    missing one is an error result naming the variable, never a failed start), sent only
    in the engine's auth header, and redacted from every message."""

    service: ClassVar[str]  # the engine's name in messages
    key_env: ClassVar[str]
    base_url_env: ClassVar[str]
    default_base_url: ClassVar[str]
    key_where: ClassVar[str]  # where a user gets a key

    def __init__(self, api_key: str | None, base_url: str, options: BackendOptions) -> None:
        self.base_url = base_url
        self._api_key = api_key
        self._http = JsonClient(
            self.service,
            options,
            auth_hint=f"{self.service} rejected the API key: check {self.key_env}.",
            secrets=[api_key],
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str], options: BackendOptions) -> KeyedBackend:
        base_url = env.get(cls.base_url_env) or cls.default_base_url
        return cls(env.get(cls.key_env) or None, base_url, options)

    def api_key(self) -> str:
        """The key, or the error saying which variable to set."""
        if not self._api_key:
            raise missing_key(self.key_env, self.service, self.key_where)
        return self._api_key

    async def aclose(self) -> None:
        await self._http.aclose()
