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
So does the end of the stable prefix, when the caller knows it
(``GenerationSettings.cache_prefix``: the messages no later cut of the context policy
changes): a cut blanks results or drops rounds after it, and the next call still reads
everything before it from cache, where the newest turn's breakpoint alone would leave
only the system prompt (the API looks for an earlier entry at most 20 blocks back).
Three breakpoints at most, of the API's four.

Thinking (``llm.thinking``): a reply's ``thinking`` and ``redacted_thinking`` blocks are
kept on the message (:class:`~deepledger.messages.ThinkingBlock`, signature and all) and
sent back unchanged, first in their assistant turn, for every assistant message of the
current turn (since the last user message that is not tool results): the API refuses a
tool-using turn whose blocks are missing or changed, and ignores those of earlier turns,
which are left out. With thinking on no prefill is sent (the API refuses one), and a call
that asks for no more tokens than the thinking budget (a compaction note, a page
extraction) gets the budget added to its ``max_tokens``, so thinking cannot use up the
whole reply.

Sampling: the anthropic 2.x SDK no longer takes ``temperature`` or ``top_p`` (current
Claude models fix them), so ``llm.temperature`` and ``llm.top_p`` are not sent; a
gateway or older model that still wants them can get them through ``llm.extra_body``.

Usage: Anthropic's ``input_tokens`` excludes cached tokens; we report the whole prompt
(``input + cache_creation + cache_read``) as input, with reads and writes beside it. A
count that is not a non-negative integer is estimated (:func:`llm.usage.token_count`).

Timeouts: ``llm.connect_timeout_seconds`` to open a connection, ``llm.timeout_seconds``
for the rest (the SDK applies it to each read of the reply).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anthropic
import httpx2

from deepledger.errors import LLMError
from deepledger.llm import classify
from deepledger.llm.base import (
    CONNECTION_LIMITS,
    GenerationSettings,
    LLMCapabilities,
    LLMClient,
    answered_natively,
    connect_timed_out,
)
from deepledger.llm.tokens import count_messages
from deepledger.llm.usage import report_unreadable, token_count
from deepledger.messages import (
    ImagePart,
    JSONObject,
    LLMResponse,
    Message,
    Role,
    StopReason,
    ThinkingBlock,
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

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None,
        timeout_seconds: float,
        connect_timeout_seconds: float = 10.0,
        thinking: Mapping[str, Any] | None = None,
        accepts_images: bool = False,
    ) -> None:
        self.thinking = dict(thinking) if thinking else None
        # A prefill is continued without trailing whitespace (see _strip_prefill_whitespace),
        # but not at all while thinking is on: the API refuses it then.
        prefill = not thinking_on(self.thinking)
        super().__init__(model, LLMCapabilities(prefill=prefill, images=accepts_images))
        self.timeout_seconds = timeout_seconds
        self.connect_timeout_seconds = connect_timeout_seconds
        self._sdk = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            timeout=httpx2.Timeout(timeout_seconds, connect=connect_timeout_seconds),
            max_retries=0,
            # Never redirected: httpx drops Authorization on a redirect to another host
            # but keeps x-api-key, which would reach that host.
            http_client=anthropic.DefaultAioHttpClient(
                limits=CONNECTION_LIMITS, follow_redirects=False
            ),
        )
        self._secrets = (api_key,)  # blanked out of what the server says back
        self.base_url = str(self._sdk.base_url)

    async def _call(
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> LLMResponse:
        system, turns = to_wire(messages, settings.cache_prefix)
        request: JSONObject = {
            "model": self.model,
            "messages": turns,
            "max_tokens": settings.max_tokens,
        }
        if self.thinking:
            request["thinking"] = self.thinking
            request["max_tokens"] = with_thinking_room(settings.max_tokens, self.thinking)
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
        return self._from_wire(reply, messages)

    def _from_wire(self, reply: Any, sent: list[Message]) -> LLMResponse:
        if not isinstance(getattr(reply, "content", None), list):
            raise classify.malformed_response(self.provider, f"not a message: {reply!r:.200}")
        texts, calls, thinking = [], [], []
        for block in reply.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                calls.append(ToolCall(block.id, block.name, dict(block.input or {})))
            elif block.type == "thinking":
                thinking.append(ThinkingBlock(block.thinking or "", block.signature or ""))
            elif block.type == "redacted_thinking":
                thinking.append(ThinkingBlock.redacted(block.data or ""))
        message = Message.assistant("".join(texts), calls, thinking=thinking)
        return LLMResponse(
            message=message,
            stop_reason=_STOP_REASONS.get(reply.stop_reason or "", StopReason.OTHER),
            usage=self._usage(getattr(reply, "usage", None), sent, message),
            model=reply.model or self.model,
            response_id=reply.id or "",
            raw_stop_reason=reply.stop_reason,
        )

    def _usage(self, wire: Any, sent: list[Message], reply: Message) -> Usage:
        """The call's usage; counts that are missing or not integers are estimated."""
        if wire is None or isinstance(wire, str | int | float | list):
            report_unreadable(self.provider, "usage", wire)
            wire = None

        def read(name: str, required: bool) -> int | None:
            return token_count(
                getattr(wire, name, None), f"usage.{name}", self.provider, required=required
            )

        uncached = read("input_tokens", True)
        output = read("output_tokens", True)
        cache_read = read("cache_read_input_tokens", False) or 0
        cache_write = read("cache_creation_input_tokens", False) or 0
        counter = self.token_counter
        if uncached is None:
            uncached = max(0, count_messages(counter, sent) - cache_read - cache_write)
        if output is None:
            output = count_messages(counter, [reply])
        return Usage(
            input_tokens=uncached + cache_read + cache_write,
            output_tokens=output,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
        )

    def classify_error(self, exc: Exception) -> LLMError | None:
        if connect_timed_out(exc):
            return classify.connect_timeout_error(
                self.provider, self.base_url, self.connect_timeout_seconds
            )
        return classify.from_sdk(
            anthropic,
            exc,
            provider=self.provider,
            base_url=self.base_url,
            timeout=self.timeout_seconds,
            secrets=self._secrets,
        )

    async def aclose(self) -> None:
        await self._sdk.close()


def thinking_on(thinking: Mapping[str, Any] | None) -> bool:
    """Whether a ``thinking`` setting turns thinking on (``disabled`` does not)."""
    if not thinking:
        return False
    return thinking.get("type") != "disabled"


def with_thinking_room(max_tokens: int, thinking: Mapping[str, Any]) -> int:
    """``max_tokens`` for a call with a thinking budget: the API wants the budget below
    it, and thinking counts toward it, so a call that asks for no more than the budget
    gets the budget added rather than a reply that thinking could use up."""
    budget = thinking.get("budget_tokens")
    if thinking.get("type") == "enabled" and isinstance(budget, int) and max_tokens <= budget:
        return max_tokens + budget
    return max_tokens


def to_wire(
    messages: list[Message], stable_prefix: int | None = None
) -> tuple[list[JSONObject], list[JSONObject]]:
    """(system blocks, alternating turns) with cache breakpoints set: the system prompt,
    the end of the first ``stable_prefix`` messages (None: not known), the newest user
    turn."""
    system: list[JSONObject] = [
        {"type": "text", "text": m.content} for m in messages if m.role is Role.SYSTEM
    ]
    turns: list[JSONObject] = []
    turn_start = current_turn_start(messages)
    stable_end: JSONObject | None = None  # the last block of the stable prefix
    for i, m in enumerate(messages):
        if m.role is Role.SYSTEM:
            continue
        role = "assistant" if m.role is Role.ASSISTANT else "user"
        blocks = _blocks(m, native_calls=answered_natively(messages, i))
        if m.thinking and i > turn_start:
            blocks = [_thinking_block(t) for t in m.thinking] + blocks
        if not blocks:
            continue  # the API rejects empty turns; the neighbours merge instead
        if stable_prefix is not None and i < min(stable_prefix, len(messages) - 1):
            stable_end = blocks[-1]  # never a thinking block: those come first
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    _strip_prefill_whitespace(turns)
    if system:
        system[-1]["cache_control"] = CACHE_CONTROL
    if stable_end is not None:
        stable_end["cache_control"] = CACHE_CONTROL
    newest_user = next((t for t in reversed(turns) if t["role"] == "user"), None)
    if newest_user and newest_user["content"]:
        newest_user["content"][-1]["cache_control"] = CACHE_CONTROL
    return system, turns


def current_turn_start(messages: list[Message]) -> int:
    """The index of the last user message that is not native tool results (the task, an
    injected prompt, XML-protocol results): the assistant messages after it make up the
    turn whose thinking blocks the API requires back; -1 if there is none."""
    return max((i for i, m in enumerate(messages) if m.role is Role.USER), default=-1)


def _thinking_block(block: ThinkingBlock) -> JSONObject:
    """A thinking block exactly as it came: the signature covers its text."""
    if block.is_redacted:
        return {"type": "redacted_thinking", "data": block.redacted_data}
    return {"type": "thinking", "thinking": block.text, "signature": block.signature}


def _blocks(m: Message, native_calls: bool) -> list[JSONObject]:
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


def _tool_result_block(r: ToolResult) -> JSONObject:
    content: str | list[JSONObject] = r.content
    if r.images:  # a list of blocks only then: results without images go as before
        text = [{"type": "text", "text": r.content}] if r.content.strip() else []
        content = text + [_image_block(image) for image in r.images]
    return {
        "type": "tool_result",
        "tool_use_id": r.call_id,
        "content": content,
        "is_error": r.is_error,
    }


def _image_block(image: ImagePart) -> JSONObject:
    source = {"type": "base64", "media_type": image.mime_type, "data": image.data}
    return {"type": "image", "source": source}


def _strip_prefill_whitespace(turns: list[JSONObject]) -> None:
    if turns and turns[-1]["role"] == "assistant":
        last = turns[-1]["content"]
        if last and last[-1]["type"] == "text":
            last[-1]["text"] = last[-1]["text"].rstrip()
