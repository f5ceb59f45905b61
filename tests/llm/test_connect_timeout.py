"""A server whose listen queue is full: the connect fails after llm.connect_timeout_seconds
(not llm.timeout_seconds), and the retry policy tries again."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import pytest

from deepledger.config import compose
from deepledger.errors import LLMConnectionError
from deepledger.llm.anthropic import AnthropicClient
from deepledger.llm.factory import create_client
from deepledger.llm.openai import OpenAIChatClient
from deepledger.llm.retry import RetryingClient, RetryPolicy
from deepledger.messages import Message
from tests.support.config import CONF

READ_TIMEOUT = 60.0  # what a stalled connect would wait without its own timeout


@contextlib.contextmanager
def full_listen_queue() -> Iterator[int]:
    """A port whose socket listens (backlog 0) but never accepts, its queue filled by
    connections that are never served: the kernel drops further connection attempts,
    so a client's connect hangs, as against an overloaded server."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        yield port
    finally:
        for s in [*fillers, listener]:
            s.close()


def client(provider: str, port: int):
    options = {"api_key": "k", "timeout_seconds": READ_TIMEOUT, "connect_timeout_seconds": 1}
    if provider == "openai":
        return OpenAIChatClient("m", base_url=f"http://127.0.0.1:{port}/v1", **options)
    return AnthropicClient("m", base_url=f"http://127.0.0.1:{port}", **options)


async def no_wait(_seconds: float) -> None:
    """The retry policy's sleep, skipped: the waits are not what is tested."""


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_full_listen_queue_fails_the_connect_and_is_retried(provider):
    with full_listen_queue() as port:
        retrying = RetryingClient(client(provider, port), RetryPolicy(max_attempts=2), no_wait)
        async with retrying:
            with pytest.raises(LLMConnectionError) as info:
                # Far below the read timeout: a connect that waited for it fails here.
                await asyncio.wait_for(retrying.generate([Message.task("q")]), READ_TIMEOUT / 3)
    message = str(info.value)
    assert "within 1s (llm.connect_timeout_seconds)" in message
    assert f"127.0.0.1:{port}" in message
    assert retrying.retries == 1  # the first failure was retried, the second raised


@pytest.mark.parametrize("preset", ["openai_compatible", "anthropic", "azure_openai", "local"])
def test_the_connect_timeout_comes_from_the_config(preset, monkeypatch):
    if preset == "local":
        pytest.importorskip("llama_cpp", reason="llm=local needs llama-cpp-python[server]")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "k")
    overrides = [f"llm={preset}", "llm.connect_timeout_seconds=3", "llm.timeout_seconds=50"]
    if preset == "azure_openai":
        overrides.append("llm.base_url=https://r.openai.azure.com/openai/deployments/d")
    inner = create_client(compose(CONF, overrides).llm).inner
    assert (inner.connect_timeout_seconds, inner.timeout_seconds) == (3, 50)
    if preset == "anthropic":  # what the SDK was given
        timeout = inner._sdk.timeout
        assert (timeout.connect, timeout.read) == (3, 50)
