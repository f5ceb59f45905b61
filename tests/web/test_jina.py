"""The Jina reader backend against its loopback fake."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from deepledger.web import jina, ssrf
from deepledger.web.jina import JinaError, JinaLimits, jina_read, parse_answer
from tests.support.doubles.fake_web_server import Failure, FakeJinaServer

KEY = "test-jina-key"
TARGET = "https://example.org/herons"
PAGES = {TARGET: ("Grey heron", "The grey heron is a *wading* bird.")}
FAST = JinaLimits(timeout_seconds=5.0, max_retries=2, max_retry_wait=0.0)


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """example.org resolves to a public address without asking DNS; no Jina settings."""

    def getaddrinfo(host, port, *args, **kwargs):
        if host != "example.org":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port))]

    monkeypatch.setattr(ssrf, "_getaddrinfo", getaddrinfo)
    monkeypatch.delenv(ssrf.ALLOW_ENV, raising=False)
    monkeypatch.delenv(jina.API_KEY_ENV, raising=False)
    monkeypatch.delenv(jina.BASE_URL_ENV, raising=False)


@pytest.fixture
def server() -> Iterator[FakeJinaServer]:
    with FakeJinaServer(PAGES, api_key=KEY) as fake:
        yield fake


async def test_a_page_comes_back_as_markdown(
    server: FakeJinaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(jina.API_KEY_ENV, KEY)
    monkeypatch.setenv(jina.BASE_URL_ENV, server.base_url)
    document = await jina_read(TARGET, limits=FAST)
    assert document.kind == "jina"
    assert document.title == "Grey heron"
    assert document.text == "# Grey heron\n\nThe grey heron is a *wading* bird.\n"
    (request,) = server.requests
    assert request.path == f"/{TARGET}"
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.headers["X-Return-Format"] == "markdown"


async def test_a_missing_key_names_the_variable() -> None:
    with pytest.raises(JinaError, match=r"set JINA_API_KEY") as caught:
        await jina_read(TARGET, base_url="http://127.0.0.1:9", limits=FAST)
    assert caught.value.kind == "missing_key"


async def test_a_wrong_key_is_an_auth_error_without_the_key(server: FakeJinaServer) -> None:
    with pytest.raises(JinaError, match=r"refused the API key") as caught:
        await jina_read(TARGET, api_key="wrong-secret", base_url=server.base_url, limits=FAST)
    assert (caught.value.kind, caught.value.status) == ("auth", 401)
    assert "wrong-secret" not in str(caught.value)
    assert len(server.requests) == 1  # not retried


async def test_rate_limits_are_retried_honouring_retry_after(server: FakeJinaServer) -> None:
    server.failures.extend([Failure(429, retry_after="0"), Failure(503)])
    document = await jina_read(TARGET, api_key=KEY, base_url=server.base_url, limits=FAST)
    assert document.title == "Grey heron"
    assert len(server.requests) == 3


async def test_persistent_rate_limits_and_server_errors_end_in_clear_errors(
    server: FakeJinaServer,
) -> None:
    server.failures.extend([Failure(429, retry_after="0")] * 3)
    with pytest.raises(
        JinaError, match=r"rate-limiting us \(HTTP 429 after 3 attempts\)"
    ) as caught:
        await jina_read(TARGET, api_key=KEY, base_url=server.base_url, limits=FAST)
    assert caught.value.kind == "rate_limited"
    server.failures.extend([Failure(502)] * 3)
    with pytest.raises(JinaError, match=r"HTTP 502 after 3 attempts") as caught:
        await jina_read(TARGET, api_key=KEY, base_url=server.base_url, limits=FAST)
    assert caught.value.kind == "server"
    assert len(server.requests) == 6


async def test_the_target_is_checked_but_the_base_url_is_not(server: FakeJinaServer) -> None:
    # The base URL is loopback (the user's choice) and works; a private target does not.
    with pytest.raises(JinaError, match=r"private address 10.0.0.5") as caught:
        await jina_read("http://10.0.0.5/admin", api_key=KEY, base_url=server.base_url)
    assert caught.value.kind == "blocked"
    assert server.requests == []


def test_plain_text_answers_are_parsed() -> None:
    body = b"Title: Herons\n\nURL Source: https://example.org/\n\nMarkdown Content:\nHerons fish."
    document = parse_answer(body, "text/plain", TARGET)
    assert (document.title, document.text) == ("Herons", "# Herons\n\nHerons fish.\n")
    with pytest.raises(JinaError, match=r"has no data.content"):
        parse_answer(b'{"code": 200, "data": {}}', "application/json", TARGET)


@pytest.mark.parametrize(
    "target",
    [
        "http://example.com/../../../admin/keys?x=1",
        "http://example.com/a/%2e%2e/%2E%2E/admin",
        "http://example.com/./x",
    ],
)
def test_a_target_cannot_steer_the_keyed_request_to_another_path_of_the_reader(target):
    from deepledger.web.jina import JinaError, reader_endpoint

    with pytest.raises(JinaError, match="dot segments") as caught:
        reader_endpoint("https://r.jina.ai", target)
    assert caught.value.kind == "invalid_url"
    assert reader_endpoint("https://r.jina.ai", "https://example.com/a/b?c=d") == (
        "https://r.jina.ai/https://example.com/a/b?c=d"
    )
