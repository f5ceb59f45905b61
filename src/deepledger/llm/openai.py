"""OpenAI chat completions: the OpenAI API and any compatible server (vLLM, SGLang,
llama.cpp, ...), through the async ``openai`` SDK.

Wire mapping: system/user/assistant messages map one to one; an assistant's tool calls
become ``tool_calls`` with JSON-string arguments; a native tool-results message becomes
one ``tool`` message per result (paired by ``tool_call_id``); XML-protocol results are
plain user text. Usage: ``prompt_tokens`` includes cached tokens; cache reads are
``prompt_tokens_details.cached_tokens``; OpenAI reports no cache writes.
"""

from __future__ import annotations

import json
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from deepledger.context.tokens import count_messages
from deepledger.errors import LLMError
from deepledger.llm import classify
from deepledger.llm.base import (
    CONNECTION_LIMITS,
    GenerationSettings,
    LLMClient,
    answered_natively,
)
from deepledger.messages import (
    LLMResponse,
    Message,
    Role,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
)

_STOP_REASONS = {
    "stop": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.CONTENT_FILTER,
}


class OpenAIChatClient(LLMClient):
    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None,
        timeout_seconds: float,
        continue_final_message: bool = False,
    ) -> None:
        super().__init__(model)
        # vLLM and SGLang continue a trailing assistant message when asked to; the OpenAI
        # API does not, so prefill is opt-in (llm.assistant_prefill).
        self.supports_prefill = continue_final_message
        self.timeout_seconds = timeout_seconds
        self._sdk = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout_seconds,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(limits=CONNECTION_LIMITS),
        )
        self.base_url = str(self._sdk.base_url)

    async def _call(
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> LLMResponse:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": to_wire_messages(messages),
            "max_tokens": settings.max_tokens,
        }
        if tools:
            request["tools"] = [to_wire_tool(t) for t in tools]
        if settings.temperature is not None:
            request["temperature"] = settings.temperature
        if settings.top_p is not None:
            request["top_p"] = settings.top_p
        if settings.stop:
            request["stop"] = list(settings.stop)
        request |= settings.extra_body
        if self.supports_prefill and messages and messages[-1].role is Role.ASSISTANT:
            request |= {"continue_final_message": True, "add_generation_prompt": False}
        # The body is plain JSON already. chat.completions.create() would first walk it
        # against its TypedDicts and then encode it with a pydantic-aware encoder; with
        # hundreds of concurrent long histories that was a third of the runtime's CPU.
        # post() with ready bytes sends it as it is, with the same error handling and
        # response parsing.
        completion = await self._sdk.post(
            "/chat/completions",
            cast_to=ChatCompletion,
            content=json.dumps(request, ensure_ascii=False).encode("utf-8"),
            options={"headers": {"Content-Type": "application/json"}},
        )
        return self._from_wire(completion, messages)

    def _from_wire(self, completion: Any, sent: list[Message]) -> LLMResponse:
        if not getattr(completion, "choices", None):
            raise classify.malformed_response(self.provider, "no choices in the completion")
        choice = completion.choices[0]
        wire = choice.message
        calls = tuple(
            ToolCall.from_raw(c.id, c.function.name, c.function.arguments)
            for c in (wire.tool_calls or ())
        )
        extra = wire.model_extra or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        message = Message.assistant(wire.content or "", calls, reasoning=reasoning)
        return LLMResponse(
            message=message,
            stop_reason=_STOP_REASONS.get(choice.finish_reason or "", StopReason.OTHER),
            usage=self._usage(completion.usage, sent, message),
            model=completion.model or self.model,
            response_id=completion.id or "",
            raw_stop_reason=choice.finish_reason,
        )

    def _usage(self, wire: Any, sent: list[Message], reply: Message) -> Usage:
        if wire is None:
            # Some servers omit usage; the window guard still needs numbers, so estimate.
            counter = self.token_counter
            return Usage(count_messages(counter, sent), count_messages(counter, [reply]))
        details = wire.prompt_tokens_details
        cached = (details.cached_tokens or 0) if details else 0
        return Usage(wire.prompt_tokens or 0, wire.completion_tokens or 0, cache_read_tokens=cached)

    def classify_error(self, exc: Exception) -> LLMError | None:
        return classify.from_sdk(
            openai,
            exc,
            provider=self.provider,
            base_url=self.base_url,
            timeout=self.timeout_seconds,
        )

    async def aclose(self) -> None:
        await self._sdk.close()


def to_wire_messages(messages: list[Message]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if m.role is Role.TOOL:
            wire += [
                {"role": "tool", "tool_call_id": r.call_id, "content": r.content}
                for r in m.tool_results
            ]
        elif m.role is Role.ASSISTANT:
            wire.append(_assistant_to_wire(m, native_calls=answered_natively(messages, i)))
        else:
            wire.append({"role": m.role.value, "content": m.content})
    return wire


def _assistant_to_wire(m: Message, native_calls: bool) -> dict[str, Any]:
    if not (native_calls and m.tool_calls):
        return {"role": "assistant", "content": m.content}
    out: dict[str, Any] = {"role": "assistant", "content": m.content or None}
    if m.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": wire_arguments(c),
                },
            }
            for c in m.tool_calls
        ]
    return out


def wire_arguments(call: ToolCall) -> str:
    """What the model wrote if it was valid JSON, else our parse of it: servers such as
    vLLM json-decode past arguments, and one broken call would fail every later request."""
    if call.raw_arguments is not None and call.parse_error is None:
        try:
            json.loads(call.raw_arguments)
            return call.raw_arguments
        except json.JSONDecodeError:
            pass
    return json.dumps(call.arguments)


def to_wire_tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }
