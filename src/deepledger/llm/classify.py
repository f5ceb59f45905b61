"""Turning HTTP failures into the error tree, shared by the providers.

Each provider extracts (kind, status, headers, message) from its client's failure and
calls these functions, so the rules for what is transient live in one place. The
``openai`` and ``anthropic`` SDKs raise a connection error, a timeout error and a status
error carrying the HTTP response, differing only in class names: :func:`from_sdk` reads
either.
"""

from __future__ import annotations

import email.utils
import errno
import json
import socket
import time
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from deepledger.errors import (
    ContextOverflowError,
    EndpointRejectedError,
    FatalLLMError,
    LLMConnectionError,
    LLMError,
    LLMTimeoutError,
    RateLimitedError,
    TransientLLMError,
)

# Statuses worth retrying besides 429 and 5xx: request timeout, conflict (lock contention).
_RETRYABLE_4XX = {408, 409}
_EXHAUSTED_HINTS = ("insufficient_quota", "exceeded your current quota", "spend limit")
# Words of a refused prompt, as each server writes them: OpenAI and vLLM ("This model's
# maximum context length is N tokens. However, you requested ... Please reduce the length
# of the messages or completion."), vLLM's V1 engine ("The decoder prompt (length N) is
# longer than the maximum model length of M."), SGLang ("... the model's context
# length"), llama.cpp's llama-server ("request (N tokens) exceeds the available context
# size (M tokens), try increasing it"; older builds: "the request exceeds the available
# context size, try increasing it", "input (N tokens) is larger than the max context
# size (M tokens)"), Anthropic ("prompt is too long: N tokens > M maximum", "input length
# and `max_tokens` exceed context limit: N + K > M"), the Responses API ("Your input
# exceeds the context window of this model").
_OVERFLOW_HINTS = (
    "context length",
    "context_length",
    "maximum context",
    "too long",
    "context window",
    "context size",
    "context limit",
    "maximum model length",
    "reduce the length of the messages",
    "exceed_context_size_error",  # llama-server's error type (llm/openai.py adds it)
)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := lowered.get("retry-after-ms")) is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def from_sdk(
    sdk: ModuleType,
    exc: Exception,
    *,
    provider: str,
    base_url: str,
    timeout: float,
    secrets: Sequence[str] = (),
) -> LLMError | None:
    """Classify an exception of the ``openai`` or ``anthropic`` SDK (same class names).
    ``secrets`` (the client's key) are blanked out of whatever the server said."""
    if isinstance(exc, sdk.APITimeoutError) and not _refused(exc):
        return timeout_error(provider, base_url, timeout)
    if isinstance(exc, sdk.APIConnectionError):
        return connection_error(provider, base_url, _connection_detail(exc), cause=exc)
    if isinstance(exc, sdk.APIStatusError):
        headers = exc.response.headers
        if 300 <= exc.status_code < 400:
            return redirect_error(provider, base_url, exc.status_code, headers.get("location"))
        return status_error(provider, exc.status_code, headers, error_detail(exc), secrets=secrets)
    # A garbled JSON body escapes both SDKs as a plain JSONDecodeError.
    if isinstance(exc, sdk.APIResponseValidationError | json.JSONDecodeError):
        return malformed_response(provider, str(exc), secrets=secrets)
    return None


def without_secrets(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret's value replaced by ``***``.

    A server may quote the key it refused (``Invalid key: Bearer sk-...``); the message
    built from its words is printed, logged and stored, so the key must not survive in
    it. Replacing the bare value covers ``Bearer <key>`` and any other wrapping. Values
    shorter than 8 characters are placeholders (``EMPTY`` for a local server), not keys:
    blanking them would garble ordinary words.
    """
    for secret in sorted({s for s in secrets if len(s) >= 8}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def redirect_error(
    provider: str, base_url: str, status: int, location: str | None
) -> FatalLLMError:
    """A 3xx answer: never followed, because the key travels in a header and a redirect
    to another host would carry it there."""
    return FatalLLMError(
        f"{provider} answered HTTP {status}, a redirect to {location or '(no Location)'}. "
        "Requests to the model are not redirected, so the API key is only ever sent to "
        f"llm.base_url ({base_url}): set llm.base_url to the address the server names.",
        provider=provider,
        status=status,
    )


def _root_connection_error(exc: BaseException) -> ConnectionError | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionError):  # refused, reset, aborted
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _refused(exc: BaseException) -> bool:
    """Whether a "timeout" was really a refused connection: the aiohttp transport reports
    every failure to connect as a connect timeout, which would send users looking for a
    slow server instead of a missing one."""
    return _root_connection_error(exc) is not None


def _connection_detail(exc: BaseException) -> str:
    root = _root_connection_error(exc)
    return str(root) if root is not None else str(exc.__cause__ or exc)


def error_detail(exc: Any) -> str:
    """The server's own error message from an SDK status error (both SDKs keep the
    parsed body in ``.body`` and a fallback in ``.message``)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(getattr(exc, "message", exc))


def status_error(
    provider: str,
    status: int,
    headers: Mapping[str, str],
    detail: str,
    *,
    secrets: Sequence[str] = (),
) -> LLMError:
    """The error for an HTTP error response; ``secrets`` are blanked out of ``detail``."""
    detail = without_secrets(detail, secrets)
    message = f"{provider} returned HTTP {status}: {detail}"
    if _told_not_to_retry(headers, detail):
        return FatalLLMError(message, provider=provider, status=status)
    if status == 429:
        return RateLimitedError(
            message, retry_after=parse_retry_after(headers), provider=provider, status=status
        )
    if status >= 500 or status in _RETRYABLE_4XX:
        return TransientLLMError(message, provider=provider, status=status)
    if status in (400, 413) and any(h in detail.lower() for h in _OVERFLOW_HINTS):
        return ContextOverflowError(message, provider=provider, status=status)
    if status in (401, 403):
        message += " Check that the API key variable named by llm.api_key_env is right."
        return EndpointRejectedError(message, provider=provider, status=status)
    if status == 404:
        message += " Check llm.model_name and llm.base_url."
        return EndpointRejectedError(message, provider=provider, status=status)
    return FatalLLMError(message, provider=provider, status=status)


def _told_not_to_retry(headers: Mapping[str, str], detail: str) -> bool:
    """A spent quota or budget is also a 429, but waiting does not refill it; providers
    say so in the message or with ``x-should-retry: false``."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if lowered.get("x-should-retry", "").lower() == "false":
        return True
    return any(hint in detail.lower() for hint in _EXHAUSTED_HINTS)


_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)


def out_of_open_files(exc: BaseException, provider: str) -> FatalLLMError | None:
    """The error when opening a connection failed because this process (or the system)
    has no file descriptor left: no fault of the server, and a retry only adds to the
    pile. Looked for in ``exc`` and what it was raised from."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _OUT_OF_FILES:
            return FatalLLMError(
                f"deepledger ran out of open files ({seen.strerror}) opening a connection to "
                f"the {provider} server: each running task holds a connection and a journal. "
                "Raise the limit (ulimit -n) or lower benchmark.execution.max_concurrent.",
                provider=provider,
            )
        seen = seen.__cause__ or seen.__context__
    return None


def connection_error(
    provider: str, base_url: str, detail: str, *, cause: BaseException | None = None
) -> LLMConnectionError:
    """``cause``: what failed, to tell whether no connection was made at all."""
    error = LLMConnectionError(
        f"Could not reach the {provider} server at {base_url} ({detail}). Is it running? "
        "Set llm.base_url to the server's address.",
        provider=provider,
    )
    error.never_connected = cause is not None and never_connected(cause)
    return error


# Name look-ups that say the host does not exist (NXDOMAIN), or has no address: not a
# resolver that failed for now (EAI_AGAIN "Temporary failure in name resolution",
# EAI_FAIL), which a retry may get past.
_NO_SUCH_HOST = frozenset(
    code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) if code is not None
)


def never_connected(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) says no connection could be made:
    refused, or there is no such host. A reset or a dropped connection met a server; a
    connect timeout may be a busy one; a look-up that failed for now may succeed."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            if seen.errno in _NO_SUCH_HOST:
                return True
        elif isinstance(seen, ConnectionRefusedError):
            return True
        if isinstance(seen, OSError) and seen.errno == errno.ECONNREFUSED:
            return True  # aiohttp's ClientConnectorError carries the refusal's errno
        seen = seen.__cause__ or seen.__context__
    return False


def connect_timeout_error(provider: str, base_url: str, timeout: float) -> LLMConnectionError:
    """A connection not opened in time: worth retrying, like any unreachable server."""
    return LLMConnectionError(
        f"Could not connect to the {provider} server at {base_url} within {timeout:g}s "
        "(llm.connect_timeout_seconds): it is down, unreachable, or too busy to accept "
        "connections (its listen queue is full).",
        provider=provider,
    )


def timeout_error(provider: str, base_url: str, timeout: float) -> LLMTimeoutError:
    return LLMTimeoutError(
        f"The {provider} server at {base_url} did not answer within {timeout:g}s "
        "(llm.timeout_seconds).",
        provider=provider,
    )


def malformed_response(
    provider: str, detail: str, *, secrets: Sequence[str] = ()
) -> TransientLLMError:
    return TransientLLMError(
        f"{provider} sent a response that could not be read: {without_secrets(detail, secrets)}",
        provider=provider,
    )
