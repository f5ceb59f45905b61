"""What the OpenAI provider's own HTTP layer adds: key header, base URL, proxies."""

from __future__ import annotations

import pytest

from deepledger.llm.openai import DEFAULT_BASE_URL, OpenAIChatClient, proxy_for
from deepledger.messages import Message
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply


async def test_sends_the_key_as_a_bearer_token_and_json():
    with FakeLLMServer([Reply(text="ok")]) as server:
        async with OpenAIChatClient(
            "m", api_key="sk-test", base_url=server.openai_base_url + "/", timeout_seconds=5
        ) as client:
            assert (await client.generate([Message.task("q")])).text == "ok"
        headers = server.requests[0].headers
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"].startswith("deepledger/")


def test_base_url_falls_back_to_the_environment_then_the_openai_api(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert OpenAIChatClient("m", api_key="k", base_url=None, timeout_seconds=1).base_url == (
        DEFAULT_BASE_URL
    )
    monkeypatch.setenv("OPENAI_BASE_URL", "http://gateway.internal/v1/")
    client = OpenAIChatClient("m", api_key="k", base_url=None, timeout_seconds=1)
    assert client.base_url == "http://gateway.internal/v1"


@pytest.mark.parametrize(
    ("url", "no_proxy", "expected"),
    [
        ("https://api.openai.com/v1/chat/completions", "", "http://proxy.corp:3128"),
        ("https://api.openai.com/v1/chat/completions", "openai.com", None),
        ("http://10.0.0.5:8000/v1/chat/completions", "", None),  # only HTTPS_PROXY is set
    ],
)
def test_proxy_comes_from_the_environment(monkeypatch, url, no_proxy, expected):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    assert proxy_for(url) == expected


async def test_one_client_serves_two_event_loops_in_turn():
    """A client made once and used by two asyncio.run() calls (as scripts do) must not
    carry a connection pool over to a loop it does not belong to."""
    import asyncio

    with FakeLLMServer([Reply(text="one"), Reply(text="two")]) as server:
        client = OpenAIChatClient(
            "m", api_key="k", base_url=server.openai_base_url, timeout_seconds=5
        )
        first = await client.generate([Message.task("q")])

        def in_another_loop() -> str:
            async def call() -> str:
                try:
                    return (await client.generate([Message.task("q")])).text
                finally:
                    await client.aclose()

            return asyncio.run(call())

        second = await asyncio.to_thread(in_another_loop)
    assert (first.text, second) == ("one", "two")
