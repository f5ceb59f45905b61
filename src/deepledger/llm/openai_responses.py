"""The OpenAI Responses API (``POST {base_url}/responses``): ``llm.provider=openai_responses``.

For models served only there (o3-pro and later), and any server speaking the same
protocol. The transport, the key, proxies, timeouts and error classification are the
chat client's (:class:`llm.openai.OpenAIChatClient`, whose HTTP layer this client
reuses), so retries and errors behave the same on both.

Wire mapping (one request carries the whole history; nothing is stored on the server,
``store: false``):

- system, user and assistant text become input messages (``{"role", "content"}``); a
  user message with images gets ``input_text`` and ``input_image`` parts.
- An assistant's native tool calls become ``function_call`` items (``call_id``, ``name``,
  JSON-string ``arguments``) after its text; each native result a
  ``function_call_output`` item with the same ``call_id``. A turn's result images follow
  in one user message, as on the chat wire. XML-protocol calls and results stay text.
- Tools are flat function tools: ``{"type": "function", "name", "description",
  "parameters", "strict": false}`` (a tool server's schemas are not written for strict
  mode, which would refuse them).
- Reasoning: a reply's ``reasoning`` items are kept on its message as
  :class:`ThinkingBlock` values (the summary as ``text``, the item's id as
  ``signature``, its ``encrypted_content`` as ``redacted_data``; the journal keeps them
  as it keeps Anthropic's blocks) and sent back unchanged, before the message's other
  items, for every assistant message since the last user message: the API needs a
  tool-using turn's reasoning to go on, and ignores earlier turns'. An item without
  encrypted content is not sent: nothing is stored to look its id up by. Reasoning models
  (told as by the chat client: the model's name or ``llm.reasoning_model``) are asked
  for ``reasoning.encrypted_content``, which is what lets a request that stores nothing
  send their reasoning back; they get ``reasoning.effort`` and no sampling settings.
- Replies: ``output_text`` parts of ``message`` items are the text, ``function_call``
  items the calls. ``status: incomplete`` for ``max_output_tokens`` is ``MAX_TOKENS``,
  for ``content_filter`` ``CONTENT_FILTER``; a reply with calls is ``TOOL_USE``.
- Usage: ``input_tokens`` (cached included), ``output_tokens``, and cache reads from
  ``input_tokens_details.cached_tokens``; a count that is not a non-negative integer is
  estimated, as everywhere.
- A response whose ``status`` is ``failed`` carries an error object: classified by its
  code as the HTTP error it stands for (a server error is retried, a prompt too long is
  an overflow).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from deepledger.errors import LLMError
from deepledger.llm import classify
from deepledger.llm.base import GenerationSettings, LLMCapabilities, answered_natively
from deepledger.llm.openai import OpenAIChatClient, encode_json, sampling_fields, wire_arguments
from deepledger.llm.prompt_cache import prompt_cache_key, sends_prompt_cache_key
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
    ToolSpec,
    Usage,
)

log = logging.getLogger(__name__)

RESPONSES_PATH = "/responses"
ENCRYPTED_REASONING = "reasoning.encrypted_content"
_INCOMPLETE = {
    "max_output_tokens": StopReason.MAX_TOKENS,
    "content_filter": StopReason.CONTENT_FILTER,
}
# A failed response's error code, as the HTTP status it stands for (classify's rules).
_FAILED_STATUS = {"rate_limit_exceeded": 429, "server_error": 500, "vector_store_timeout": 500}


class OpenAIResponsesClient(OpenAIChatClient):
    provider = "openai_responses"

    def __init__(self, model: str, **options: Any) -> None:
        options.pop("send_back_reasoning", None)  # reasoning items always go back here
        options.pop("continue_final_message", None)  # the API continues no prefill
        super().__init__(model, **options)
        self._capabilities = LLMCapabilities(
            images=self.capabilities.images, send_back_reasoning=True
        )
        self._url = f"{self.base_url}{RESPONSES_PATH}"

    async def _call(
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> LLMResponse:
        request = self.request(messages, tools, settings)
        return self._from_wire(await self.post_body(self._url, encode_json(request)), messages)

    def request(
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> JSONObject:
        """The request body for ``messages``: the history as input items, the settings."""
        request: JSONObject = {
            "model": self.model,
            "input": to_input_items(messages),
            "store": False,
            "max_output_tokens": settings.max_tokens,
        }
        if tools:
            request["tools"] = [to_function_tool(t) for t in tools]
        if self.reasoning_model:
            request["include"] = [ENCRYPTED_REASONING]
            if settings.reasoning_effort is not None:
                request["reasoning"] = {"effort": settings.reasoning_effort}
            self.say_sampling_left_out(settings)
            request |= dict(settings.extra_body)
        else:
            if settings.reasoning_effort is not None:
                request["reasoning"] = {"effort": settings.reasoning_effort}
            sampling = sampling_fields(settings)
            if sampling.pop("stop", None) and "stop" not in self._said:
                self._said.add("stop")
                log.warning("the Responses API takes no stop sequences: not sent")
            request |= sampling
        if sends_prompt_cache_key(settings.prompt_cache_key, self.base_url):
            request.setdefault("prompt_cache_key", prompt_cache_key(messages))
        return request

    def _decode(self, raw: bytes) -> JSONObject:
        """The response object, or a classified error for one that failed or that is
        not one."""
        try:
            response = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise classify.malformed_response(
                self.provider, f"{exc}: {raw[:200]!r}", secrets=self._secrets
            ) from None
        if not isinstance(response, dict):
            raise classify.malformed_response(
                self.provider, f"not a JSON object: {raw[:200]!r}", secrets=self._secrets
            )
        if response.get("status") == "failed" or isinstance(response.get("error"), dict):
            raise self._failed(response.get("error"))
        if not isinstance(response.get("output"), list):
            raise classify.malformed_response(
                self.provider, "no output list in the response", secrets=self._secrets
            )
        return response

    def _failed(self, error: Any) -> LLMError:
        error = error if isinstance(error, dict) else {}
        code = str(error.get("code") or "server_error")
        status = _FAILED_STATUS.get(code, 400)
        detail = str(error.get("message") or code)
        return classify.status_error(self.provider, status, {}, detail, secrets=self._secrets)

    def _from_wire(self, response: JSONObject, sent: list[Message]) -> LLMResponse:
        text: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[ThinkingBlock] = []
        for item in response["output"]:
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "message":
                text += [
                    str(part.get("text") or "")
                    for part in item.get("content") or ()
                    if isinstance(part, dict) and part.get("type") == "output_text"
                ]
            elif kind == "function_call":
                call_id = item.get("call_id") or item.get("id") or ""
                calls.append(
                    ToolCall.from_raw(call_id, item.get("name") or "", item.get("arguments"))
                )
            elif kind == "reasoning":
                reasoning.append(reasoning_block(item))
        message = Message.assistant("".join(text), calls, thinking=reasoning)
        status = response.get("status")
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return LLMResponse(
            message=message,
            stop_reason=_stop_reason(status, reason, bool(calls)),
            usage=self._responses_usage(response.get("usage"), sent, message),
            model=response.get("model") or self.model,
            response_id=response.get("id") or "",
            raw_stop_reason=reason or status,
        )

    def _responses_usage(self, wire: Any, sent: list[Message], reply: Message) -> Usage:
        """Usage as the Responses API names it; what is missing is estimated."""
        if wire is not None and not isinstance(wire, dict):
            report_unreadable(self.provider, "usage", wire)
        wire = wire if isinstance(wire, dict) and wire else {}
        prompt = token_count(wire.get("input_tokens"), "usage.input_tokens", self.provider)
        output = token_count(wire.get("output_tokens"), "usage.output_tokens", self.provider)
        details = wire.get("input_tokens_details")
        cached = token_count(
            details.get("cached_tokens") if isinstance(details, dict) else details,
            "usage.input_tokens_details.cached_tokens",
            self.provider,
            required=False,
        )
        if prompt is None:
            prompt = count_messages(self.token_counter, sent)
        if output is None:
            output = count_messages(self.token_counter, [reply])
        return Usage(prompt, output, cache_read_tokens=min(cached or 0, prompt))


def _stop_reason(status: Any, reason: Any, called: bool) -> StopReason:
    if status == "incomplete":
        return _INCOMPLETE.get(str(reason), StopReason.OTHER)
    if called:
        return StopReason.TOOL_USE
    return StopReason.END_TURN if status in ("completed", None) else StopReason.OTHER


def reasoning_block(item: JSONObject) -> ThinkingBlock:
    """A ``reasoning`` output item as kept on its message."""
    summary = item.get("summary") or ()
    text = "\n\n".join(
        str(part.get("text") or "")
        for part in summary
        if isinstance(part, dict) and part.get("type") == "summary_text"
    )
    encrypted = item.get("encrypted_content")
    return ThinkingBlock(
        text=text,
        signature=str(item.get("id") or ""),
        redacted_data=encrypted if isinstance(encrypted, str) else None,
    )


def reasoning_item(block: ThinkingBlock) -> JSONObject:
    """A kept reasoning item as it goes back: its id, summary and encrypted content."""
    item: JSONObject = {"type": "reasoning", "id": block.signature, "summary": []}
    if block.text:
        item["summary"] = [{"type": "summary_text", "text": block.text}]
    if block.redacted_data is not None:
        item["encrypted_content"] = block.redacted_data
    return item


def to_function_tool(spec: ToolSpec) -> JSONObject:
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
        "strict": False,
    }


def to_input_items(messages: list[Message]) -> list[JSONObject]:
    """The history as Responses input items (see the module's wire mapping)."""
    turn_start = max((i for i, m in enumerate(messages) if m.role is Role.USER), default=-1)
    items: list[JSONObject] = []
    for i, m in enumerate(messages):
        if m.role is Role.TOOL:
            items += _results_items(m)
        elif m.role is Role.ASSISTANT:
            native = answered_natively(messages, i)
            items += _assistant_items(m, native=native, with_reasoning=i > turn_start)
        elif m.all_images:
            items.append({"role": m.role.value, "content": _input_parts(m.content, m.all_images)})
        else:
            items.append({"role": m.role.value, "content": m.content})
    return items


def _assistant_items(m: Message, *, native: bool, with_reasoning: bool) -> list[JSONObject]:
    items: list[JSONObject] = []
    if with_reasoning:
        # Only items with their encrypted content: with nothing stored, the API looks a
        # bare id up and answers 404 (not found), which would read as a wrong endpoint.
        items += [reasoning_item(b) for b in m.thinking if b.signature and b.redacted_data]
    if m.content or not (native and m.tool_calls):
        items.append({"role": "assistant", "content": m.content})
    if native:
        items += [
            {
                "type": "function_call",
                "call_id": c.id,
                "name": c.name,
                "arguments": wire_arguments(c),
            }
            for c in m.tool_calls
        ]
    return items


def _results_items(m: Message) -> list[JSONObject]:
    items: list[JSONObject] = [
        {"type": "function_call_output", "call_id": r.call_id, "output": r.content}
        for r in m.tool_results
    ]
    parts: list[JSONObject] = []
    for r in m.tool_results:
        if r.images:
            label = f"{r.name} " if r.name else ""
            count = f"{len(r.images)} image{'s' if len(r.images) > 1 else ''}"
            parts.append(
                {"type": "input_text", "text": f"[{count} from tool call {label}{r.call_id}]"}
            )
            parts += [_image_part(image) for image in r.images]
    if parts:
        items.append({"role": "user", "content": parts})
    return items


def _image_part(image: ImagePart) -> JSONObject:
    return {"type": "input_image", "image_url": image.data_url}


def _input_parts(text: str, images: tuple[ImagePart, ...]) -> list[JSONObject]:
    parts: list[JSONObject] = [{"type": "input_text", "text": text}] if text else []
    return parts + [_image_part(image) for image in images]
