"""Test doubles for several model endpoints (``llm/endpoints.py``): a clock the test
moves, a scripted client per URL, and a client that holds its calls until released.

In process, no HTTP: what the router decides is tested against these; the end-to-end
path runs against :class:`~tests.support.doubles.fake_llm_server.FakeLLMServer` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from deepledger.errors import LLMError, TransientLLMError
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import Responder, ScriptedLLM, Step
from deepledger.messages import LLMResponse, Message, ToolSpec


class Clock:
    """A clock that stands still until the test moves ``now`` (a cool-down passes at
    once)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def bad_gateway() -> TransientLLMError:
    """What a restarting proxy in front of a server answers."""
    return TransientLLMError("HTTP 502", provider="openai", status=502)


def failing(error: LLMError) -> Responder:
    """A responder that raises ``error`` on every call."""

    def fail(messages: list[Message], tools: list[ToolSpec]) -> str:
        raise error

    return fail


def answering(text: str = "ok") -> Responder:
    def answer(messages: list[Message], tools: list[ToolSpec]) -> str:
        return text

    return answer


def endpoint_clients(
    urls: Iterable[str], *down: str, error: LLMError | None = None
) -> dict[str, ScriptedLLM]:
    """A scripted client per URL: those in ``down`` raise ``error`` (a 502 by default) on
    every call, the others answer ``ok``."""
    return {
        url: ScriptedLLM(responder=failing(error or bad_gateway()) if url in down else answering())
        for url in urls
    }


class HeldLLM(ScriptedLLM):
    """A scripted client whose calls, while ``gate`` is set to an event, wait for it
    before answering: requests in flight together. ``in_flight`` and ``most`` count
    them (now, and at most)."""

    def __init__(
        self,
        steps: Iterable[Step] = (),
        *,
        responder: Responder | None = None,
        gate: asyncio.Event | None = None,
    ) -> None:
        super().__init__(steps, responder=responder)
        self.gate = gate
        self.in_flight = 0
        self.most = 0

    async def _call(
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> LLMResponse:
        gate = self.gate
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            if gate is not None:
                await gate.wait()
            return await super()._call(messages, tools, settings)
        finally:
            self.in_flight -= 1
