"""The one interface every model provider implements.

A provider subclasses :class:`LLMClient` and implements two things:

- ``_call(messages, tools, settings) -> LLMResponse``: convert the neutral messages to
  its wire format, make one request (with its async SDK or HTTP client), convert the
  reply back. No retries here, and an SDK's own retries must be off.
- ``classify_error(exc) -> LLMError | None``: map a client exception to the error tree in
  ``errors.py`` (transient / rate-limited / fatal). ``None`` lets it propagate as is.

It says what it can do in ``capabilities`` (:class:`LLMCapabilities`): the layers
above ask ``client.capabilities.prefill`` rather than which provider it is. Optionally
it overrides ``token_counter`` when it can count tokens exactly (a llama.cpp or vLLM
server), and ``aclose`` to release its HTTP client.

Callers use ``generate``. Retries live in one place, :class:`llm.retry.RetryingClient`,
which wraps any client; :func:`llm.factory.create_client` builds the stack from config.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx2

from deepledger.errors import LLMError
from deepledger.llm.tokens import TokenCounter, default_counter
from deepledger.messages import LLMResponse, Message, Role, ToolSpec

log = logging.getLogger(__name__)

# The Anthropic client's pool (httpx): hundreds of tasks share one client, so keep a
# connection alive for each of them rather than reopening connections past 100 idle ones.
# The cap stays at 1,000: the Anthropic API's own rate limits come long before it. (The
# OpenAI-protocol client's aiohttp pool has no cap: the runner's max_concurrent bounds
# it, and the run raises its open-file limit to match, bench/services.ensure_open_files.)
CONNECTION_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=1000)


@dataclass(frozen=True)
class LLMCapabilities:
    """What a client can do, for the layers above to ask instead of its provider."""

    # A trailing assistant message is continued (a prefill) rather than rejected.
    prefill: bool = False
    # Tools go on the wire as function calls (the native protocol); without it a model
    # sees tools only as text (the XML protocol).
    native_tools: bool = True
    # Tool specs given with a request are written into the prompt by the model's own chat
    # template (its ``tools`` argument), never sent as functions: the hermes protocol
    # then leaves the tools out of its system section (``llm/local.py``).
    template_tools: bool = False
    # Images are sent as image parts (llm.accepts_images); else they are named in a note.
    images: bool = False
    # ``token_counter`` is the model's own tokenizer, not an estimate.
    exact_counting: bool = False
    # The model's reasoning text goes back to the server on the assistant messages whose
    # tool calls it came with (DeepSeek's thinking mode refuses a tool-call turn without
    # it); False: reasoning is kept on the message and never sent (vLLM refuses it).
    send_back_reasoning: bool = False
    # Requests may run at once; False: one server answering one request at a time, so
    # concurrent tasks only interleave (and each re-reads its whole prompt).
    parallel_requests: bool = True


@dataclass(frozen=True)
class GenerationSettings:
    """Sampling settings for one call. ``None`` leaves the server's default."""

    max_tokens: int = 4096
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    reasoning_effort: str | None = None  # OpenAI reasoning models (and servers that take it)
    # openai: send prompt_cache_key (llm.prompt_cache_key; None: to api.openai.com only).
    prompt_cache_key: bool | None = None
    # The request's leading messages that later requests send unchanged (the context
    # policy's stable prefix): Anthropic puts a cache breakpoint at its end. None: unknown.
    cache_prefix: int | None = None


def connect_timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a connection that was not opened within
    ``llm.connect_timeout_seconds``: a server that is down, unreachable, or whose
    listen queue is full. Told apart from a slow reply, which has its own timeout."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 20:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    if any(isinstance(e, ConnectionError) for e in chain):  # refused or reset: not slow
        return False
    return any(type(e).__name__ in _CONNECT_TIMEOUTS for e in chain)


# httpx2's, and aiohttp's (3.10+), named so that importing this module imports neither.
_CONNECT_TIMEOUTS = {"ConnectTimeout", "ConnectionTimeoutError"}


def answered_natively(messages: Sequence[Message], index: int) -> bool:
    """Whether the assistant message at ``index`` has its calls answered by native tool
    messages. With the XML protocol the calls live in the reply's text and the results in
    a user message, so the calls must not also go on the wire as function calls."""
    following = messages[index + 1] if index + 1 < len(messages) else None
    return following is not None and following.role is Role.TOOL


class LLMClient(ABC):
    """A model behind some API. Subclasses set ``provider`` and implement ``_call``."""

    provider: str = "abstract"

    def __init__(self, model: str, capabilities: LLMCapabilities | None = None) -> None:
        self.model = model
        self._capabilities = capabilities or LLMCapabilities()

    @property
    def capabilities(self) -> LLMCapabilities:
        """What this client can do; a subclass whose answer is known only later (a
        model file read on first use) overrides this."""
        return self._capabilities

    async def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        settings: GenerationSettings | None = None,
    ) -> LLMResponse:
        """Ask the model for its next message. Raises only errors from ``errors.py``
        (or a programming error)."""
        try:
            return await self._call(
                list(messages), list(tools or ()), settings or GenerationSettings()
            )
        except LLMError:
            raise
        except Exception as exc:
            classified = self.classify_error(exc)
            if classified is None:
                raise
            raise classified from exc

    @abstractmethod
    async def _call(
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> LLMResponse: ...

    def classify_error(self, exc: Exception) -> LLMError | None:
        return None

    @property
    def token_counter(self) -> TokenCounter:
        """Counts tokens as this model does; the default is tiktoken's o200k_base."""
        return default_counter()

    def tools_prompt_tokens(self, tools: Sequence[ToolSpec]) -> int:
        """Tokens ``tools`` add to a request's prompt beyond its messages, where this
        client knows them exactly (a tools block the model's own template writes); 0
        otherwise. The window guard adds them before the first call's usage is known."""
        return 0

    async def aclose(self) -> None:  # noqa: B027 - optional hook; most clients hold nothing
        """Release connections. Safe to call twice."""

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
