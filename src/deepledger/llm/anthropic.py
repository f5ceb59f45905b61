"""Anthropic messages, through the async ``anthropic`` SDK.

Wire mapping: system prompts go to ``system``; an assistant's tool calls become
``tool_use`` blocks; a native tool-results message becomes a user turn of
``tool_result`` blocks; consecutive turns of one role are merged (the API wants
alternation). Images become base64 ``image`` blocks: after the text of a user turn (a
task's attachment, XML-protocol results), inside a ``tool_result``'s content for native
results. A trailing assistant message is a prefill and loses trailing whitespace,
which the API rejects.

Prompt caching: the system prompt and the newest user turn carry
``cache_control: ephemeral``, so each call reads the previous call's prefix from cache.

Sampling: the anthropic 2.x SDK no longer takes ``temperature`` or ``top_p`` (current
Claude models fix them), so ``llm.temperature`` and ``llm.top_p`` are not sent; a
gateway or older model that still wants them can get them through ``llm.extra_body``.

Usage: Anthropic's ``input_tokens`` excludes cached tokens; we report the whole prompt
(``input + cache_creation + cache_read``) as input, with reads and writes beside it.
"""

from __future__ import annotations

from typing import Any

import anthropic

from deepledger.errors import LLMError
from deepledger.llm import classify
from deepledger.llm.base import (
    CONNECTION_LIMITS,
    GenerationSettings,
    LLMClient,
    answered_natively,
)
from deepledger.messages import (
    ImagePart,
    LLMResponse,
    Message,
    Role,
    StopReason,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)

_STOP_REASONS = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.CONTENT_FILTER,
    "model_context_window_exceeded": StopReason.CONTEXT_OVERFLOW,
}
CACHE_CONTROL = {"type": "ephemeral"}


class AnthropicClient(LLMClient):
    provider = "anthropic"
    supports_prefill = True  # without trailing whitespace, see _strip_prefill_whitespace

    def __init__(
        self, model: str, *, api_key: str, base_url: str | None, timeout_seconds: float
    ) -> None:
        super().__init__(model)
        self.timeout_seconds = timeout_seconds
        self._sdk = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout_seconds,
            max_retries=0,
            http_client=anthropic.DefaultAioHttpClient(limits=CONNECTION_LIMITS),
        )
        self.base_url = str(self._sdk.base_url)

    async def _call(
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> LLMResponse:
        system, turns = to_wire(messages)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": turns,
            "max_tokens": settings.max_tokens,
        }
        if system:
            request["system"] = system
        if tools:
            request["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        if settings.stop:
            request["stop_sequences"] = list(settings.stop)
        if settings.extra_body:
            request["extra_body"] = dict(settings.extra_body)
        reply = await self._sdk.messages.create(**request)
        return self._from_wire(reply)

    def _from_wire(self, reply: Any) -> LLMResponse:
        if not isinstance(getattr(reply, "content", None), list) or reply.usage is None:
            raise classify.malformed_response(self.provider, f"not a message: {reply!r:.200}")
        texts, calls, thoughts = [], [], []
        for block in reply.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                calls.append(ToolCall(block.id, block.name, dict(block.input or {})))
            elif block.type == "thinking":
                thoughts.append(block.thinking)
        usage = reply.usage
        cache_read = usage.cache_read_input_tokens or 0
        cache_write = usage.cache_creation_input_tokens or 0
        return LLMResponse(
            message=Message.assistant("".join(texts), calls, reasoning="\n".join(thoughts) or None),
            stop_reason=_STOP_REASONS.get(reply.stop_reason or "", StopReason.OTHER),
            usage=Usage(
                input_tokens=usage.input_tokens + cache_read + cache_write,
                output_tokens=usage.output_tokens,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
            ),
            model=reply.model or self.model,
            response_id=reply.id or "",
            raw_stop_reason=reply.stop_reason,
        )

    def classify_error(self, exc: Exception) -> LLMError | None:
        return classify.from_sdk(
            anthropic,
            exc,
            provider=self.provider,
            base_url=self.base_url,
            timeout=self.timeout_seconds,
        )

    async def aclose(self) -> None:
        await self._sdk.close()


def to_wire(messages: list[Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, alternating turns) with cache breakpoints set."""
    system = [{"type": "text", "text": m.content} for m in messages if m.role is Role.SYSTEM]
    turns: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if m.role is Role.SYSTEM:
            continue
        role = "assistant" if m.role is Role.ASSISTANT else "user"
        blocks = _blocks(m, native_calls=answered_natively(messages, i))
        if not blocks:
            continue  # the API rejects empty turns; the neighbours merge instead
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    _strip_prefill_whitespace(turns)
    if system:
        system[-1]["cache_control"] = CACHE_CONTROL
    newest_user = next((t for t in reversed(turns) if t["role"] == "user"), None)
    if newest_user and newest_user["content"]:
        newest_user["content"][-1]["cache_control"] = CACHE_CONTROL
    return system, turns


def _blocks(m: Message, native_calls: bool) -> list[dict[str, Any]]:
    if m.role is Role.TOOL:
        return [_tool_result_block(r) for r in m.tool_results]
    # Whitespace-only text blocks are rejected by the API.
    text = [{"type": "text", "text": m.content}] if m.content.strip() else []
    if m.role is Role.USER:  # a task's attachment, or the images of XML-protocol results
        return text + [_image_block(image) for image in m.all_images]
    calls = [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in m.tool_calls
    ]
    return text + calls if native_calls else text


def _tool_result_block(r: ToolResult) -> dict[str, Any]:
    content: str | list[dict[str, Any]] = r.content
    if r.images:  # a list of blocks only then: results without images go as before
        text = [{"type": "text", "text": r.content}] if r.content.strip() else []
        content = text + [_image_block(image) for image in r.images]
    return {
        "type": "tool_result",
        "tool_use_id": r.call_id,
        "content": content,
        "is_error": r.is_error,
    }


def _image_block(image: ImagePart) -> dict[str, Any]:
    source = {"type": "base64", "media_type": image.mime_type, "data": image.data}
    return {"type": "image", "source": source}


def _strip_prefill_whitespace(turns: list[dict[str, Any]]) -> None:
    if turns and turns[-1]["role"] == "assistant":
        last = turns[-1]["content"]
        if last and last[-1]["type"] == "text":
            last[-1]["text"] = last[-1]["text"].rstrip()
