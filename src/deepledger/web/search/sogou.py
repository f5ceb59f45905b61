"""Sogou results through Tencent Cloud's web search API (wsa ``SearchPro``), as
MiroThinker's ``sogou_search`` tool asks for them.

Request: ``POST {TENCENTCLOUD_WSA_BASE_URL}/`` with a JSON body ``{"Query", "Mode": 0,
"Cnt"}`` and Tencent Cloud's API 3.0 headers: ``X-TC-Action: SearchPro``,
``X-TC-Version: 2025-05-08``, ``X-TC-Timestamp`` and an ``Authorization`` signed with
TC3-HMAC-SHA256 over the method, path, content type, host and the body's SHA-256 (the
secret key never leaves this process; only the secret id and the signature are sent).

Answer: ``{"Response": {"Query", "Pages": [<a JSON string per result: title, url,
passage, date, site, ...>], "Msg"?, "RequestId"}}``; a failure is HTTP 200 with
``Response.Error`` ``{Code, Message}``.

Environment: ``TENCENTCLOUD_SECRET_ID`` and ``TENCENTCLOUD_SECRET_KEY`` (both required,
as MiroThinker's), ``TENCENTCLOUD_WSA_BASE_URL`` (default
``https://wsa.tencentcloudapi.com``; tests point it at a loopback fake).

Limits: ``Cnt`` takes 10, 20, 30, 40 or 50 (more than 10 only on Tencent's premium plan),
so a count is rounded up to one of those and the extra results dropped; no pages beyond
the first, no region, language or time filter here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from deepledger.messages import JSONObject
from deepledger.web.search import (
    BackendOptions,
    SearchBackend,
    SearchQuery,
    SearchRejectedError,
    SearchResponse,
    SearchResult,
    SearchUnavailableError,
    plain_text,
)
from deepledger.web.search._http import JsonClient, missing_key

SECRET_ID_ENV = "TENCENTCLOUD_SECRET_ID"
SECRET_KEY_ENV = "TENCENTCLOUD_SECRET_KEY"
BASE_URL_ENV = "TENCENTCLOUD_WSA_BASE_URL"
DEFAULT_BASE_URL = "https://wsa.tencentcloudapi.com"
SERVICE, ACTION, VERSION = "wsa", "SearchPro", "2025-05-08"
CONTENT_TYPE = "application/json"  # as Tencent's own SDK sends it (signed)
COUNTS = (10, 20, 30, 40, 50)  # the values Cnt takes
PAGE_FIELDS = ("title", "url", "passage", "date", "site")  # what sogou_search shows
# Tencent's error codes that say the credentials are wrong, not that the service failed.
_AUTH_CODES = ("AuthFailure", "UnauthorizedOperation")


def tc3_authorization(
    secret_id: str, secret_key: str, host: str, payload: bytes, timestamp: int
) -> str:
    """The ``Authorization`` header of Tencent Cloud's API 3.0 (TC3-HMAC-SHA256) for a
    POST of ``payload`` to ``/`` on ``host`` at ``timestamp`` (seconds, UTC)."""
    day = datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d")
    canonical = "\n".join([
        "POST", "/", "", f"content-type:{CONTENT_TYPE}\nhost:{host}\n", "content-type;host",
        hashlib.sha256(payload).hexdigest(),
    ])  # fmt: skip
    scope = f"{day}/{SERVICE}/tc3_request"
    to_sign = "\n".join([
        "TC3-HMAC-SHA256", str(timestamp), scope,
        hashlib.sha256(canonical.encode()).hexdigest(),
    ])  # fmt: skip

    def sign(key: bytes, text: str) -> bytes:
        return hmac.new(key, text.encode(), hashlib.sha256).digest()

    signing = sign(sign(sign(f"TC3{secret_key}".encode(), day), SERVICE), "tc3_request")
    signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
    return (
        f"TC3-HMAC-SHA256 Credential={secret_id}/{scope}, SignedHeaders=content-type;host, "
        f"Signature={signature}"
    )


class SogouBackend(SearchBackend):
    """A client of Tencent Cloud's ``SearchPro`` (Sogou's index)."""

    name = "sogou"
    service = "Tencent Cloud web search (Sogou)"

    def __init__(
        self,
        secret_id: str | None,
        secret_key: str | None,
        base_url: str,
        options: BackendOptions,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.base_url = base_url
        self._secret_id, self._secret_key = secret_id, secret_key
        self._clock = clock
        self._http = JsonClient(
            self.service,
            options,
            auth_hint=f"Tencent Cloud rejected the credentials: check {SECRET_ID_ENV} and "
            f"{SECRET_KEY_ENV}.",
            secrets=[secret_key, secret_id],
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str], options: BackendOptions) -> SogouBackend:
        base_url = env.get(BASE_URL_ENV) or DEFAULT_BASE_URL
        return cls(
            env.get(SECRET_ID_ENV) or None, env.get(SECRET_KEY_ENV) or None, base_url, options
        )

    async def search_pages(self, query: str, count: int = 10) -> tuple[str, list[JSONObject]]:
        """The query as the engine read it and its results (each a dict of
        :data:`PAGE_FIELDS` and whatever else the engine sent), at most ``count``."""
        secret_id, secret_key = self._credentials()
        cnt = next((c for c in COUNTS if c >= count), COUNTS[-1])
        payload = json.dumps({"Query": query, "Mode": 0, "Cnt": cnt}).encode()
        host = httpx.URL(self.base_url).netloc.decode()
        timestamp = int(self._clock())
        headers = {
            "Content-Type": CONTENT_TYPE,
            "X-TC-Action": ACTION,
            "X-TC-Version": VERSION,
            "X-TC-Timestamp": str(timestamp),
            "Authorization": tc3_authorization(secret_id, secret_key, host, payload, timestamp),
        }
        data = await self._http.request(
            "POST", self.base_url.rstrip("/") + "/", headers=headers, content=payload
        )
        response = self._checked(data)
        pages = [page for raw in response.get("Pages") or [] if (page := _page(raw))]
        return plain_text(response.get("Query")) or query, pages[:count]

    async def search(self, query: SearchQuery) -> SearchResponse:
        _, pages = await self.search_pages(query.query, query.count)
        results = tuple(
            SearchResult(
                title=plain_text(page.get("title")) or plain_text(page.get("url")),
                link=plain_text(page.get("url")),
                snippet=plain_text(page.get("passage")),
                position=position,
                date=plain_text(page.get("date")) or None,
            )
            for position, page in enumerate(pages, start=1)
        )
        return SearchResponse(query=query, backend=self.name, results=results)

    def _credentials(self) -> tuple[str, str]:
        for variable, value in (
            (SECRET_ID_ENV, self._secret_id),
            (SECRET_KEY_ENV, self._secret_key),
        ):
            if not value:
                raise missing_key(variable, "Sogou (Tencent Cloud)", "Tencent Cloud's console, CAM")
        assert self._secret_id and self._secret_key
        return self._secret_id, self._secret_key

    def _checked(self, data: JSONObject) -> Mapping[str, Any]:
        """``Response``, or the error Tencent put in it (it answers errors with HTTP 200)."""
        response = data.get("Response")
        if not isinstance(response, dict):
            raise SearchUnavailableError(f"{self.service} sent no Response object.")
        error = response.get("Error")
        if isinstance(error, dict):
            code, message = plain_text(error.get("Code")), plain_text(error.get("Message"))
            text = self._http.redact(f"{self.service} refused the search: {code}: {message}")
            if code.startswith(_AUTH_CODES):
                raise SearchRejectedError(f"{text} {self._http.auth_hint}")
            if code.startswith(("InternalError", "RequestLimitExceeded")):
                raise SearchUnavailableError(text)
            raise SearchRejectedError(text)
        return response

    async def aclose(self) -> None:
        await self._http.aclose()


def _page(raw: Any) -> JSONObject | None:
    """One entry of ``Pages`` (a JSON string, or an object) as a dict, else None."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return None
    return raw if isinstance(raw, dict) and plain_text(raw.get("url")) else None
