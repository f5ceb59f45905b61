"""What a model hands the scraper, made fit to send (web/model_input.py)."""

from __future__ import annotations

import pytest

from deepledger.web.model_input import page_url, request_headers


@pytest.mark.parametrize(
    ("given", "read"),
    [
        ("example.com", "https://example.com"),
        ("  www.example.org/a?b=1#c ", "https://www.example.org/a?b=1#c"),
        ("en.wikipedia.org/wiki/北京", "https://en.wikipedia.org/wiki/北京"),
        ("example.com:8443/x", "https://example.com:8443/x"),
        ("//cdn.example.net/x.pdf", "https://cdn.example.net/x.pdf"),
        ("http://example.com/a", "http://example.com/a"),
        ("https://r.jina.ai/https://example.com/a", "https://example.com/a"),
        ("http://R.JINA.AI/http://example.com/a", "http://example.com/a"),
        ("r.jina.ai/example.com/a", "https://example.com/a"),
        ("https://r.jina.ai/", "https://r.jina.ai/"),  # nothing behind it: left as given
        ("corpus://eiffel", "corpus://eiffel"),
        # Not a host: left for the reader to refuse, never read from the disk.
        (".env", ".env"),
        ("/etc/passwd", "/etc/passwd"),
        ("file:///etc/passwd", "file:///etc/passwd"),
        ("mailto:someone@example.com", "mailto:someone@example.com"),
        ("localhost/x", "localhost/x"),
    ],
)
def test_page_url(given: str, read: str) -> None:
    assert page_url(given) == read


def test_request_headers_keep_what_a_model_may_choose() -> None:
    kept, dropped = request_headers(
        {
            "User-Agent": "Mozilla/5.0",
            " Accept-Language ": "zh-CN,zh;q=0.9",
            "Referer": "https://example.com/",
            "X-Requested-With": "XMLHttpRequest",
            "authorization": "Bearer x",
            "COOKIE": "a=b",
            "Set-Cookie": "a=b",
            "Proxy-Authorization": "Basic x",
            "Proxy-Connection": "keep-alive",
            "Keep-Alive": "300",
            "Transfer-Encoding": "chunked",
            "Content-Length": "0",
            "Host": "internal",
            "Upgrade": "websocket",
            "TE": "trailers",
            "X-Set-Cookie": "a=b",
            "X-Proxy-Url": "http://proxy",
            "X-Split": "a\r\nX-Injected: 1",
            "Bad Name": "x",
            "X-Unicode": "é",
        }
    )
    assert kept == {
        "User-Agent": "Mozilla/5.0",
        "Accept-Language": "zh-CN,zh;q=0.9",
        "Referer": "https://example.com/",
        "X-Requested-With": "XMLHttpRequest",
    }
    assert len(dropped) == 16 and "authorization" in dropped and "X-Split" in dropped
    assert request_headers(None) == ({}, [])
