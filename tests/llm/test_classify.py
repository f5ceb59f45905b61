"""How an HTTP failure becomes a member of the error tree (llm/classify.py): what is
retried, what waits, what is fatal, and that no key survives in a message."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import openai
import pytest

from deepledger.errors import (
    ContextOverflowError,
    EndpointRejectedError,
    FatalLLMError,
    LLMConnectionError,
    LLMTimeoutError,
    RateLimitedError,
    TransientLLMError,
)
from deepledger.llm.classify import (
    error_detail,
    from_sdk,
    parse_retry_after,
    status_error,
    without_secrets,
)

KEY = "sk-test-0123456789abcdef"
URL = "http://127.0.0.1:9/v1"


def test_retry_after_reads_milliseconds_seconds_and_dates():
    assert parse_retry_after({"Retry-After-Ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    soon = datetime.now(UTC) + timedelta(seconds=30)
    assert 25 < parse_retry_after({"retry-after": format_datetime(soon, usegmt=True)}) <= 30
    past = datetime.now(UTC) - timedelta(hours=1)
    assert parse_retry_after({"retry-after": format_datetime(past, usegmt=True)}) == 0.0
    assert parse_retry_after({"retry-after-ms": "soon", "retry-after": "2"}) == 2.0
    assert parse_retry_after({}) is None


@pytest.mark.parametrize(
    ("status", "detail", "expected"),
    [
        (500, "boom", TransientLLMError),
        (503, "overloaded", TransientLLMError),
        (408, "request timeout", TransientLLMError),
        (409, "lock contention", TransientLLMError),
        (429, "slow down", RateLimitedError),
        (429, "You exceeded your current quota", FatalLLMError),  # waiting refills nothing
        (400, "This model's maximum context length is 8192 tokens", ContextOverflowError),
        (413, "prompt is too long", ContextOverflowError),
        (400, "bad parameter", FatalLLMError),
        (401, "invalid key", EndpointRejectedError),
        (403, "forbidden", EndpointRejectedError),
        (404, "no such model", EndpointRejectedError),
        (422, "unprocessable", FatalLLMError),
    ],
)
def test_each_status_lands_on_its_branch_of_the_tree(status, detail, expected):
    error = status_error("openai", status, {}, detail)
    assert type(error) is expected
    assert error.status == status and str(error).startswith(f"openai returned HTTP {status}")


def test_a_rate_limit_carries_its_wait_and_a_server_may_forbid_the_retry():
    limited = status_error("anthropic", 429, {"retry-after": "3"}, "slow down")
    assert isinstance(limited, RateLimitedError) and limited.retry_after == 3.0
    assert type(status_error("openai", 503, {"x-should-retry": "false"}, "no")) is FatalLLMError


def test_the_hints_name_the_setting_to_check():
    assert "llm.api_key_env" in str(status_error("openai", 401, {}, "bad key"))
    assert "llm.model_name and llm.base_url" in str(status_error("openai", 404, {}, "gone"))


def test_keys_are_blanked_and_placeholders_are_not():
    quoted = f"Invalid key: Bearer {KEY} (also {KEY[:-4]})"
    assert without_secrets(quoted, [KEY[:-4], KEY]) == "Invalid key: Bearer *** (also ***)"
    assert without_secrets("EMPTY key for EMPTY", ["EMPTY"]) == "EMPTY key for EMPTY"
    assert KEY not in str(status_error("openai", 401, {}, f"bad {KEY}", secrets=[KEY]))


def status_exception(status: int, body: dict, headers: dict | None = None) -> openai.APIStatusError:
    request = httpx.Request("POST", f"{URL}/chat/completions")
    response = httpx.Response(status, headers=headers, json=body, request=request)
    return openai.APIStatusError("failed", response=response, body=body)


def classify(exc: Exception):
    return from_sdk(openai, exc, provider="openai", base_url=URL, timeout=5, secrets=[KEY])


def test_sdk_failures_are_read_whatever_the_sdk_calls_them():
    request = httpx.Request("POST", URL)
    overflow = status_exception(400, {"error": {"message": "context_length_exceeded"}})
    assert isinstance(classify(overflow), ContextOverflowError)
    assert error_detail(overflow) == "context_length_exceeded"
    refused = openai.APIConnectionError(request=request)
    refused.__cause__ = ConnectionRefusedError("connection refused")
    assert isinstance(classify(refused), LLMConnectionError)
    assert "connection refused" in str(classify(refused))
    slow = openai.APITimeoutError(request=request)
    assert isinstance(classify(slow), LLMTimeoutError)
    assert isinstance(classify(json.JSONDecodeError("bad", "{", 0)), TransientLLMError)
    assert classify(ValueError("not the SDK's")) is None


def test_a_redirect_is_never_followed():
    moved = status_exception(307, {}, headers={"location": "https://elsewhere.example/v1"})
    error = classify(moved)
    assert isinstance(error, FatalLLMError)
    assert "https://elsewhere.example/v1" in str(error) and "llm.base_url" in str(error)


def test_a_timeout_that_was_a_refused_connection_says_so():
    request = httpx.Request("POST", URL)
    refused = openai.APITimeoutError(request=request)
    refused.__context__ = ConnectionRefusedError("refused")
    assert isinstance(classify(refused), LLMConnectionError)


def test_running_out_of_open_files_is_fatal_and_says_what_to_do():
    import errno

    import aiohttp

    from deepledger.errors import FatalLLMError
    from deepledger.llm.classify import out_of_open_files

    refused = OSError(errno.EMFILE, "Too many open files")
    try:
        raise aiohttp.ClientConnectionError("cannot connect") from refused
    except aiohttp.ClientConnectionError as exc:
        error = out_of_open_files(exc, "openai")
    assert isinstance(error, FatalLLMError)
    assert "ulimit -n" in str(error) and "benchmark.execution.max_concurrent" in str(error)
    assert out_of_open_files(OSError(errno.ECONNREFUSED, "refused"), "openai") is None
