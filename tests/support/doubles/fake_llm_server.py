"""A scripted loopback HTTP server speaking the OpenAI and Anthropic wire protocols.

Tests point the real SDK clients at it to exercise wire conversion, error
mapping and retry behaviour without any network access beyond 127.0.0.1::

    with FakeLLMServer([Reply(text="hi"), rate_limited(2)]) as server:
        client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="x", max_retries=0)
        ...
        server.assert_all_consumed()

Supported endpoints: ``POST /v1/chat/completions`` (OpenAI), ``POST /v1/messages``
(Anthropic) and ``POST /v1/responses`` (OpenAI's Responses API, protocol ``responses``:
its shapes and the rules it enforces are in :mod:`fake_responses`). Each request
consumes exactly one scripted step, in order; when the script is empty an optional
``responder`` is asked. Streaming is not supported.

Content given as a list (OpenAI content parts, Anthropic blocks) is checked against the
rules the real APIs enforce for images: OpenAI takes ``image_url`` parts (``data:`` or
http(s) URLs) in user messages only; Anthropic takes ``image`` blocks with a base64
source of a supported media type in user turns and inside ``tool_result`` content. A
request that breaks them is answered 400, as the real API would, and listed in
``unexpected``. :attr:`RecordedRequest.images` lists the images a request carried.

Opt-in strict modes enforce more of each API's rules (a refused request is answered 400
in the API's own error shape, listed in ``unexpected`` and in ``rejected`` with why):

- ``anthropic_thinking``: a request with ``thinking`` on gets ``thinking`` blocks (and
  a ``redacted_thinking`` one when the reply asks) with signatures; a request is refused
  when a thinking block in it is not one the server issued, unchanged, or when its last
  assistant message uses tools without starting with the blocks issued with it; so are a
  budget under 1024 or not under ``max_tokens``, and a temperature other than 1.
- ``openai_reasoning_models``: for reasoning model names (o1, o3, o4-mini, gpt-5...),
  ``max_tokens``, ``stop`` and a ``temperature``/``top_p`` other than 1 are refused.
- ``reject_reasoning_content``: a message carrying ``reasoning_content`` (or
  ``reasoning``) is refused, as vLLM does.
- ``require_reasoning_content``: DeepSeek's thinking mode. Every reply carries
  ``reasoning_content`` (the scripted ``reasoning``, else a line of its own), and a request
  is refused when an assistant message with ``tool_calls`` lacks the field, or carries
  other text than the server issued with those calls.
- ``azure``: :class:`AzureDeployment` serves ``/openai/deployments/NAME/chat/completions``
  and checks the deployment, the ``api-version`` parameter and the ``api-key`` header.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import hashlib
import hmac
import json
import os
import re
import socket
import socketserver
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from tests.support.doubles.fake_responses import RESPONSES_PATH, ResponsesLedger

if TYPE_CHECKING:  # the fake imports nothing of deepledger at run time (but its own parts)
    from deepledger.messages import JSONObject

__all__ = [
    "AzureDeployment",
    "FakeLLMServer",
    "FakeToolCall",
    "FakeUsage",
    "Fault",
    "RecordedImage",
    "RecordedRequest",
    "Reply",
    "Step",
    "malformed_body",
    "rate_limited",
    "server_error",
    "slow",
]

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
NO_STEP_LEFT = "fake server: no scripted step left"

_CONNECTION_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


# --------------------------------------------------------------------------- script


@dataclass(frozen=True)
class FakeToolCall:
    """A tool call in a scripted reply.

    ``arguments`` given as a ``str`` is sent verbatim (e.g. deliberately broken
    JSON); ``id`` is generated (``call_N`` / ``toolu_N``) when ``None``.
    """

    name: str
    arguments: JSONObject | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class FakeUsage:
    """Token usage of a reply; ``input_tokens`` is the total prompt size, cached part included."""

    input_tokens: int = 10
    output_tokens: int = 5
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class Reply:
    """A successful completion.

    ``finish_reason`` uses the OpenAI vocabulary (``stop``, ``length``,
    ``tool_calls``, ``content_filter``) and is translated for Anthropic; unknown
    values are passed through unchanged. The response is written ``delay``
    seconds after the request arrived: the server's own time reading and
    answering it counts in, as a real server's does in its latency.
    """

    text: str = ""
    tool_calls: tuple[FakeToolCall, ...] = ()
    finish_reason: str = "stop"
    usage: FakeUsage = FakeUsage()
    delay: float = 0.0
    model: str = "fake-model"
    # The model's thinking: OpenAI's `reasoning_content`; Anthropic (thinking mode) a
    # thinking block, plus a redacted_thinking block when redacted_thinking is set.
    reasoning: str = ""
    redacted_thinking: bool = False
    # The usage object sent verbatim instead of one built from `usage` (odd servers).
    raw_usage: Any = None


@dataclass(frozen=True)
class Fault:
    """An HTTP-level failure.

    ``body=None`` renders a protocol-appropriate JSON error body; a string body is
    sent verbatim with ``content-type: application/json``. ``headers`` override
    the defaults (case-insensitively).
    """

    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    delay: float = 0.0


Step = Reply | Fault


@dataclass(frozen=True)
class AzureDeployment:
    """What the ``azure`` mode checks: the deployment in the path, the ``api-version``
    query parameter, and the key in the ``api-key`` header (never a bearer token)."""

    deployment: str = "my-deployment"
    api_version: str = "2024-10-21"
    api_key: str = "azure-test-key"


def rate_limited(retry_after: float | None = 1) -> Fault:
    """A 429, with a ``retry-after`` header (seconds) unless ``retry_after`` is None."""
    headers = {} if retry_after is None else {"retry-after": _format_seconds(retry_after)}
    return Fault(status=429, headers=headers)


def server_error(status: int = 500, retry_after: float | None = None) -> Fault:
    """A 5xx fault with a protocol-appropriate error body (and optional ``retry-after``)."""
    headers = {} if retry_after is None else {"retry-after": _format_seconds(retry_after)}
    return Fault(status=status, headers=headers)


def malformed_body() -> Fault:
    """A 200 response whose JSON body is truncated."""
    return Fault(status=200, body='{"id": "x", "choices": [')


def slow(seconds: float, then: Reply | None = None) -> Reply:
    """``then`` (default ``Reply(text="late")``) delivered after ``seconds``."""
    return dataclasses.replace(then if then is not None else Reply(text="late"), delay=seconds)


def _format_seconds(value: float) -> str:
    number = float(value)
    return str(int(number)) if number.is_integer() else repr(number)


# --------------------------------------------------------------------------- recording


@dataclass(frozen=True)
class RecordedRequest:
    """A request as received: ``protocol`` is ``"openai"``, ``"anthropic"``, ``"responses"``
    or ``"unknown"``.

    ``headers`` have lower-cased keys; ``body`` is the parsed JSON object (for an
    unparsable body: ``{"_invalid_json": <raw text>}``).
    """

    protocol: str
    path: str
    headers: dict[str, str]
    body: JSONObject

    @property
    def messages(self) -> list[Any]:
        """``body["messages"]`` (empty list when absent)."""
        messages = self.body.get("messages", [])
        return messages if isinstance(messages, list) else []

    @property
    def images(self) -> list[RecordedImage]:
        """Every image in the request's messages, in order, in either protocol."""
        found: list[RecordedImage] = []
        for index, message in enumerate(self.messages):
            role = message.get("role", "") if isinstance(message, dict) else ""
            for part, tool_use_id in _content_items(message):
                image = _as_image(part)
                if image is not None:
                    found.append(RecordedImage(index, role, *image, tool_use_id))
        return found


@dataclass(frozen=True)
class RecordedImage:
    """One image as it went on the wire: the index of its message in ``messages``, that
    message's role, the media type and base64 data, and (Anthropic) the ``tool_use_id``
    of the ``tool_result`` block holding it."""

    message: int
    role: str
    mime_type: str
    data: str
    tool_use_id: str | None = None


def _content_items(message: Any) -> Iterable[tuple[Any, str | None]]:
    """A message's list content, with Anthropic ``tool_result`` blocks opened up."""
    content = message.get("content") if isinstance(message, dict) else None
    for part in content if isinstance(content, list) else ():
        yield part, None
        inner = part.get("content") if isinstance(part, dict) else None
        if part.get("type") == "tool_result" and isinstance(inner, list):
            yield from ((block, part.get("tool_use_id")) for block in inner)


def _as_image(part: Any) -> tuple[str, str] | None:
    """(media type, base64 data) of an OpenAI data-URL part or an Anthropic image block."""
    if not isinstance(part, dict):
        return None
    if part.get("type") == "image_url":
        url = (part.get("image_url") or {}).get("url") or ""
        head, _, data = url.partition(",")
        if head.startswith("data:") and head.endswith(";base64"):
            return head[len("data:") : -len(";base64")], data
        return None
    if part.get("type") == "image":
        source = part.get("source") or {}
        return source.get("media_type", ""), source.get("data", "")
    return None


# --------------------------------------------------------------------------- wire checks

_OPENAI_PART_TYPES = {
    # What each role's list content may hold on the chat-completions API.
    "user": {"text", "image_url", "input_audio", "file"},
    "system": {"text"},
    "developer": {"text"},
    "assistant": {"text", "refusal"},
    "tool": {"text"},
}
_ANTHROPIC_MEDIA_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}


def wire_problem(protocol: str, body: JSONObject) -> str | None:
    """Why the real API would refuse the request's list content, or ``None``."""
    messages = body.get("messages")
    if protocol == "anthropic" and _cache_breakpoints(body) > ANTHROPIC_MAX_BREAKPOINTS:
        return (
            f"A maximum of {ANTHROPIC_MAX_BREAKPOINTS} blocks with cache_control may be "
            f"provided. Found {_cache_breakpoints(body)}."
        )
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            continue
        check = _openai_message_problem if protocol == "openai" else _anthropic_message_problem
        problem = check(message)
        if problem:
            return f"messages[{index}]: {problem}"
    return None


ANTHROPIC_MAX_BREAKPOINTS = 4


def _cache_breakpoints(body: JSONObject) -> int:
    """The blocks of an Anthropic request (tools, system, messages) with cache_control."""
    blocks: list[Any] = list(body.get("tools") or [])
    system = body.get("system")
    blocks += system if isinstance(system, list) else []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        blocks += content if isinstance(content, list) else []
    return sum(isinstance(b, dict) and "cache_control" in b for b in blocks)


def _openai_message_problem(message: JSONObject) -> str | None:
    role = message.get("role", "")
    allowed = _OPENAI_PART_TYPES.get(role, set())
    for part in message["content"]:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            if kind == "image_url":
                return f"image URLs are only allowed for messages with role 'user', not {role!r}"
            return f"content part of type {kind!r} is not allowed in a {role!r} message"
        if kind == "text" and not isinstance(part.get("text"), str):
            return "a text part needs a string 'text'"
        if kind == "image_url":
            url = (part.get("image_url") or {}).get("url")
            problem = _url_problem(url) if isinstance(url, str) else "image_url.url is missing"
            if problem:
                return problem
    return None


def _url_problem(url: str) -> str | None:
    if url.startswith(("http://", "https://")):
        return None
    image = _as_image({"type": "image_url", "image_url": {"url": url}})
    if image is None or not image[0].startswith("image/"):
        return f"invalid image URL (not a base64 data URL of an image): {url[:60]!r}"
    return _base64_problem(image[1])


def _anthropic_message_problem(message: JSONObject) -> str | None:
    role = message.get("role", "")
    for part, tool_use_id in _content_items(message):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and not (isinstance(part.get("text"), str) and part["text"].strip()):
            return "text content blocks must contain non-whitespace text"
        if tool_use_id is not None and kind not in ("text", "image"):
            return f"a tool_result's content cannot hold a {kind!r} block"
        if kind == "image":
            if role != "user":
                return f"image blocks are only allowed in user turns, not {role!r}"
            problem = _anthropic_image_problem(part.get("source"))
            if problem:
                return problem
    return None


def _anthropic_image_problem(source: Any) -> str | None:
    if not isinstance(source, dict) or source.get("type") != "base64":
        return "an image block needs a source of type 'base64'"
    if source.get("media_type") not in _ANTHROPIC_MEDIA_TYPES:
        return f"image media type {source.get('media_type')!r} is not supported"
    return _base64_problem(source.get("data"))


def _base64_problem(data: Any) -> str | None:
    refused = "image data is not valid base64"
    if not (isinstance(data, str) and data):
        return refused
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return refused
    return None


# --------------------------------------------------------------------------- strict modes

# The OpenAI API's reasoning models, by name (a gateway's "openai/o3" too); the gpt-5 chat
# models take sampling settings like the older models.
_REASONING_MODEL_NAMES = re.compile(r"(o[1-9]|gpt-5(?!.*-chat))([\w.-]*)")
_THINKING_TYPES = ("thinking", "redacted_thinking")


def openai_reasoning_problem(body: JSONObject) -> str | None:
    """What the chat-completions API refuses from a reasoning model's request."""
    model = str(body.get("model", "")).rsplit("/", 1)[-1].lower()
    if not _REASONING_MODEL_NAMES.fullmatch(model):
        return None
    if "max_tokens" in body:
        return (
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead."
        )
    for name in ("temperature", "top_p"):
        if name in body and body[name] != 1:
            return (
                f"Unsupported value: '{name}' does not support {body[name]!r} with this "
                "model. Only the default (1) value is supported."
            )
    if "stop" in body:
        return "Unsupported parameter: 'stop' is not supported with this model."
    return None


def reasoning_content_problem(body: JSONObject) -> str | None:
    """A message carrying the model's reasoning back, which DeepSeek and vLLM refuse."""
    messages = body.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        if isinstance(message, dict) and ({"reasoning_content", "reasoning"} & message.keys()):
            return f"messages[{index}]: reasoning_content is not allowed in input messages"
    return None


def reasoning_missing_problem(body: JSONObject, issued: dict[str, str]) -> str | None:
    """What DeepSeek's thinking mode refuses: an assistant message with tool calls that
    does not carry back the reasoning it came with (``issued``: by tool call id)."""
    messages = body.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else ()):
        if not (isinstance(message, dict) and message.get("role") == "assistant"):
            continue
        calls = message.get("tool_calls") or []
        if not calls:
            continue
        if not isinstance(message.get("reasoning_content"), str):
            return (
                "Missing `reasoning_content` field in the assistant message at message "
                f"index {index}."
            )
        ids = [call.get("id") for call in calls if isinstance(call, dict)]
        expected = {issued[i] for i in ids if i in issued}
        if expected and message["reasoning_content"] not in expected:
            return (
                f"messages[{index}]: The reasoning_content in the thinking mode must be "
                "passed back to the API."
            )
    return None


def azure_problem(
    azure: AzureDeployment, path: str, query: str, headers: dict[str, str]
) -> tuple[int, str]:
    """(status, why) Azure OpenAI answers a request that is not right for ``azure``, or
    (0, "") when it is."""
    deployment = path.removeprefix("/openai/deployments/").removesuffix("/chat/completions")
    if headers.get("api-key") != azure.api_key or "authorization" in headers:
        return 401, (
            "Access denied due to invalid subscription key or wrong API endpoint "
            "(the key goes in the api-key header)."
        )
    if deployment != azure.deployment:
        return 404, f"DeploymentNotFound: the deployment {deployment!r} does not exist."
    versions = parse_qs(query).get("api-version")
    if versions != [azure.api_version]:
        return 404, f"Resource not found (api-version {versions} is not {azure.api_version!r})."
    return 0, ""


class ThinkingLedger:
    """The thinking blocks the fake issued, so a follow-up can be checked against them:
    signatures are an HMAC of the block's text under a key of this server's own."""

    def __init__(self) -> None:
        self._key = os.urandom(16)
        self._redacted: set[str] = set()
        self._by_tool_use: dict[str, list[JSONObject]] = {}
        self._lock = threading.Lock()

    def _sign(self, text: str) -> str:
        digest = hmac.new(self._key, text.encode("utf-8"), hashlib.sha256).digest()
        return base64.b64encode(digest * 4).decode()  # long and opaque, as real ones are

    def issue(self, reply: Reply, request_no: int) -> list[JSONObject]:
        text = reply.reasoning or f"Thinking about request {request_no}."
        blocks: list[JSONObject] = [
            {"type": "thinking", "thinking": text, "signature": self._sign(text)}
        ]
        if reply.redacted_thinking:
            data = self._sign(f"redacted {request_no}")
            with self._lock:
                self._redacted.add(data)
            blocks.append({"type": "redacted_thinking", "data": data})
        return blocks

    def remember(self, content: list[JSONObject]) -> None:
        """Note which blocks came with which tool calls of a rendered reply."""
        thinking = [b for b in content if b.get("type") in _THINKING_TYPES]
        with self._lock:
            for block in content:
                if block.get("type") == "tool_use":
                    self._by_tool_use[block["id"]] = thinking

    def genuine(self, block: JSONObject) -> bool:
        if block.get("type") == "redacted_thinking":
            with self._lock:
                return block.get("data") in self._redacted
        text, signature = block.get("thinking"), block.get("signature")
        if not (isinstance(text, str) and isinstance(signature, str)):
            return False
        return hmac.compare_digest(self._sign(text), signature)

    def problem(self, body: JSONObject) -> str | None:
        """Why Anthropic would refuse this request's thinking, or ``None``."""
        on = thinking_requested(body)
        if on:
            problem = _thinking_settings_problem(body)
            if problem:
                return problem
        messages = body.get("messages")
        last_assistant = None
        for i, message in enumerate(messages if isinstance(messages, list) else []):
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            content = message.get("content")
            blocks = (
                [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
            )
            last_assistant = (i, blocks)
            for j, block in enumerate(blocks):
                if block.get("type") in _THINKING_TYPES and not self.genuine(block):
                    return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
        if on and last_assistant is not None and last_assistant[1]:
            return self._turn_problem(*last_assistant)
        return None

    def _turn_problem(self, index: int, content: list[JSONObject]) -> str | None:
        """The final assistant message of a tool-using turn must start with the thinking
        blocks issued with it, all of them, unchanged and in order."""
        calls = [b for b in content if b.get("type") == "tool_use"]
        if not calls:
            return None
        if content[0].get("type") not in _THINKING_TYPES:
            return (
                f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                f"but found `{content[0].get('type')}`. When `thinking` is enabled, a final "
                "`assistant` message must start with a thinking block (preceding the lastmost "
                "set of `tool_use` and `tool_result` blocks)."
            )
        with self._lock:
            issued = self._by_tool_use.get(calls[0].get("id", ""))
        leading = []
        for block in content:
            if block.get("type") not in _THINKING_TYPES:
                break
            leading.append(block)
        if issued is not None and leading != issued:
            return (
                f"messages.{index}.content: the thinking blocks of this assistant turn must be "
                "passed back complete and unmodified."
            )
        return None


def thinking_requested(body: JSONObject) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _thinking_settings_problem(body: JSONObject) -> str | None:
    thinking, max_tokens = body["thinking"], body.get("max_tokens")
    budget = thinking.get("budget_tokens")
    if thinking["type"] == "enabled":
        if not isinstance(budget, int) or budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if not isinstance(max_tokens, int) or budget >= max_tokens:
            return "`max_tokens` must be greater than `thinking.budget_tokens`."
    if body.get("temperature", 1) != 1:
        return "`temperature` may only be set to 1 when thinking is enabled."
    if "top_k" in body:
        return "`top_k` is not supported when thinking is enabled."
    return None


# --------------------------------------------------------------------------- rendering

_ANTHROPIC_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}

_OPENAI_ERROR_TYPES = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "permission_denied"),
    404: ("invalid_request_error", "not_found"),
    429: ("requests", "rate_limit_exceeded"),
}

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _finish_reason(reply: Reply) -> str:
    if reply.tool_calls and reply.finish_reason == "stop":
        return "tool_calls"
    return reply.finish_reason


def _render_openai(reply: Reply, request_no: int, new_id: Callable[[str], str]) -> JSONObject:
    message: JSONObject = {
        "role": "assistant",
        "content": None if (not reply.text and reply.tool_calls) else reply.text,
        "refusal": None,
    }
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id or new_id("call"),
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": call.arguments
                    if isinstance(call.arguments, str)
                    else json.dumps(call.arguments),
                },
            }
            for call in reply.tool_calls
        ]
    usage = reply.usage
    return {
        "id": f"chatcmpl-fake-{request_no}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _finish_reason(reply),
                "logprobs": None,
            }
        ],
        "usage": reply.raw_usage
        if reply.raw_usage is not None
        else {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        },
    }


def _anthropic_input(arguments: JSONObject | str) -> JSONObject:
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments)
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"_raw": arguments}


def _render_anthropic(
    reply: Reply,
    request_no: int,
    new_id: Callable[[str], str],
    thinking: list[JSONObject] | None = None,
) -> JSONObject:
    content: list[JSONObject] = list(thinking or ())
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        content.append(
            {
                "type": "tool_use",
                "id": call.id or new_id("toolu"),
                "name": call.name,
                "input": _anthropic_input(call.arguments),
            }
        )
    finish = _finish_reason(reply)
    usage = reply.usage
    return {
        "id": f"msg_fake_{request_no}",
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": _ANTHROPIC_STOP_REASONS.get(finish, finish),
        "stop_sequence": None,
        "usage": reply.raw_usage
        if reply.raw_usage is not None
        else {
            "input_tokens": usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
        },
    }


def _error_body(protocol: str, status: int, message: str) -> JSONObject:
    if protocol in ("openai", "responses"):
        error_type, code = _OPENAI_ERROR_TYPES.get(status, ("server_error", None))
        return {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    error_type = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    body: JSONObject = {"type": "error", "error": {"type": error_type, "message": message}}
    if protocol != "anthropic":  # unknown path: make the body readable by both SDKs
        body["error"]["code"] = None
    return body


# --------------------------------------------------------------------------- server


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # hundreds of clients connect at once in load benchmarks

    def __init__(self, fake: FakeLLMServer) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)

    def server_bind(self) -> None:
        # Skip HTTPServer's socket.getfqdn() reverse lookup, which can stall in sandboxes.
        socketserver.TCPServer.server_bind(self)
        host, self.server_port = self.server_address[:2]
        self.server_name = str(host)  # an AF_INET address: the host is already a str

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Client disconnects (timeouts, close()) are routine here; stay quiet about them.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle's algorithm on, the body waited
    # for the client's delayed ACK of the headers, 40 ms a reply. Real servers set
    # TCP_NODELAY too.
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.fake._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging."""

    def do_POST(self) -> None:
        arrived = time.monotonic()
        fake = self.server.fake
        fake._count_in_flight(+1)
        try:
            fake._handle(self, self._read_body(), arrived)
        finally:
            fake._count_in_flight(-1)

    do_GET = do_PUT = do_PATCH = do_DELETE = do_POST  # answered with 404, recorded as unexpected

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""


class FakeLLMServer:
    """Scripted fake of the OpenAI chat-completions and Anthropic messages APIs.

    ``steps`` are consumed one per request, in order; once they run out,
    ``responder`` (if given) computes the step from the request. Requests with
    nothing to answer get a 500 (``"fake server: no scripted step left"``) and
    land in ``unexpected``, as do requests to unknown paths (404) and with
    unparsable JSON bodies (400).
    """

    def __init__(
        self,
        steps: Iterable[Step] = (),
        responder: Callable[[RecordedRequest], Step] | None = None,
        *,
        anthropic_thinking: bool = False,
        openai_reasoning_models: bool = False,
        reject_reasoning_content: bool = False,
        require_reasoning_content: bool = False,
        azure: AzureDeployment | None = None,
    ) -> None:
        self.responder = responder
        self.thinking = ThinkingLedger() if anthropic_thinking else None
        self.openai_reasoning_models = openai_reasoning_models
        self.reject_reasoning_content = reject_reasoning_content
        # require_reasoning_content: the reasoning issued with each tool call, by its id
        self.reasoning_issued: dict[str, str] | None = {} if require_reasoning_content else None
        self.azure = azure
        self.responses = ResponsesLedger()
        self.requests: list[RecordedRequest] = []
        self.unexpected: list[RecordedRequest] = []
        # Requests a strict mode refused, with why (they are in ``unexpected`` too).
        self.rejected: list[tuple[RecordedRequest, str]] = []
        self.responder_errors: list[BaseException] = []
        # Requests being answered now, and the most there ever were at once (a client's
        # concurrency cap, checked from the server's side).
        self.in_flight = 0
        self.max_in_flight = 0
        self._steps: deque[Step] = deque()
        self._lock = threading.Lock()
        self._id_counters: dict[str, int] = {}
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.enqueue(*steps)

    # -- lifecycle

    def start(self) -> FakeLLMServer:
        """Bind to an ephemeral 127.0.0.1 port and serve in a daemon thread."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"FakeLLMServer:{self._httpd.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; sleeping handlers are woken and open connections dropped."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> FakeLLMServer:
        return self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` — the Anthropic SDK ``base_url``."""
        if self._httpd is None:
            raise RuntimeError("FakeLLMServer is not running; call start() first")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def openai_base_url(self) -> str:
        """``base_url + "/v1"`` — the OpenAI SDK ``base_url``."""
        return self.base_url + "/v1"

    @property
    def azure_base_url(self) -> str:
        """The ``azure`` deployment's URL, as ``llm.base_url`` takes it."""
        deployment = self.azure.deployment if self.azure else "my-deployment"
        return f"{self.base_url}/openai/deployments/{deployment}"

    # -- scripting

    def enqueue(self, *steps: Step) -> None:
        """Append steps to the script."""
        for step in steps:
            if not isinstance(step, (Reply, Fault)):
                raise TypeError(f"expected Reply or Fault, got {step!r}")
        with self._lock:
            self._steps.extend(steps)

    @property
    def pending(self) -> list[Step]:
        """Scripted steps not consumed yet."""
        with self._lock:
            return list(self._steps)

    def assert_all_consumed(self) -> None:
        """Raise AssertionError if steps remain or anything unexpected happened."""
        problems = []
        with self._lock:
            if self._steps:
                listed = "\n".join(f"  - {step!r}" for step in self._steps)
                problems.append(f"{len(self._steps)} scripted step(s) not consumed:\n{listed}")
            if self.unexpected:
                listed = "\n".join(
                    f"  - {req.protocol} {req.path}: {json.dumps(req.body)[:200]}"
                    for req in self.unexpected
                )
                problems.append(f"{len(self.unexpected)} unexpected request(s):\n{listed}")
            if self.responder_errors:
                listed = "\n".join(f"  - {err!r}" for err in self.responder_errors)
                problems.append(f"responder raised:\n{listed}")
        if problems:
            raise AssertionError("FakeLLMServer: " + "\n".join(problems))

    # -- request handling (runs in handler threads)

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _count_in_flight(self, change: int) -> None:
        with self._lock:
            self.in_flight += change
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _new_id(self, prefix: str) -> str:
        with self._lock:
            number = self._id_counters[prefix] = self._id_counters.get(prefix, 0) + 1
        return f"{prefix}_{number}"

    def _protocol(self, command: str, path: str) -> str:
        if command != "POST":
            return "unknown"
        if self.azure is not None and re.fullmatch(
            r"/openai/deployments/[^/]+/chat/completions", path
        ):
            return "openai"
        paths = {OPENAI_PATH: "openai", ANTHROPIC_PATH: "anthropic", RESPONSES_PATH: "responses"}
        return paths.get(path, "unknown")

    def _refusal(
        self, protocol: str, path: str, query: str, headers: dict[str, str], body: JSONObject
    ) -> tuple[int, str]:
        """(status, why) for a request the APIs' rules refuse, else (0, "")."""
        if path.startswith("/openai/deployments/") and self.azure is not None:
            status, denied = azure_problem(self.azure, path, query, headers)
            if status:
                return status, denied
        why = wire_problem(protocol, body)
        if not why and protocol == "openai":
            if self.openai_reasoning_models:
                why = openai_reasoning_problem(body)
            if not why and self.reject_reasoning_content:
                why = reasoning_content_problem(body)
            if not why and self.reasoning_issued is not None:
                with self._lock:
                    why = reasoning_missing_problem(body, self.reasoning_issued)
        if not why and protocol == "anthropic" and self.thinking is not None:
            why = self.thinking.problem(body)
        if not why and protocol == "responses":
            why = self.responses.problem(body)
        return (400, why) if why else (0, "")

    def _handle(self, handler: _Handler, raw: bytes, arrived: float) -> None:
        path, _, query = handler.path.partition("?")
        protocol = self._protocol(handler.command, path)
        headers = {key.lower(): value for key, value in handler.headers.items()}
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = None
        valid = isinstance(parsed, dict)
        body: JSONObject = (
            parsed
            if isinstance(parsed, dict)
            else {"_invalid_json": raw.decode("utf-8", "replace")}
        )
        request = RecordedRequest(protocol=protocol, path=path, headers=headers, body=body)
        status, refused = (
            self._refusal(protocol, path, query, headers, body)
            if valid and protocol != "unknown"
            else (0, "")
        )

        step: Step | None = None
        with self._lock:
            self.requests.append(request)
            request_no = len(self.requests)
            if protocol == "unknown" or not valid or refused:
                self.unexpected.append(request)
                if refused:
                    self.rejected.append((request, refused))
            elif self._steps:
                step = self._steps.popleft()
        if protocol == "unknown":
            message = f"fake server: unknown endpoint {handler.command} {path}"
            return self._send_json(
                handler, 404, _error_body(protocol, 404, message), protocol, request_no
            )
        if not valid or refused:
            why = refused or "invalid JSON body"
            body = _error_body(protocol, status or 400, f"fake server: {why}")
            return self._send_json(handler, status or 400, body, protocol, request_no)
        if step is None and self.responder is not None:
            try:
                step = self.responder(request)
                if not isinstance(step, (Reply, Fault)):
                    raise TypeError(f"responder returned {step!r}, expected Reply or Fault")
            except Exception as exc:  # reported via assert_all_consumed
                with self._lock:
                    self.responder_errors.append(exc)
                message = f"fake server: responder raised {exc!r}"
                return self._send_json(
                    handler, 500, _error_body(protocol, 500, message), protocol, request_no
                )
        if step is None:
            with self._lock:
                self.unexpected.append(request)
            return self._send_json(
                handler, 500, _error_body(protocol, 500, NO_STEP_LEFT), protocol, request_no
            )

        wait = step.delay - (time.monotonic() - arrived)
        if wait > 0 and self._stopping.wait(wait):
            handler.close_connection = True  # server is closing: drop the request silently
            return
        if isinstance(step, Fault):
            payload = (
                step.body.encode()
                if step.body is not None
                else json.dumps(
                    _error_body(protocol, step.status, f"fake fault {step.status}")
                ).encode()
            )
            return self._send(handler, step.status, payload, step.headers, protocol, request_no)
        return self._send_json(
            handler, 200, self._render(protocol, step, request, request_no), protocol, request_no
        )

    def _render(
        self, protocol: str, reply: Reply, request: RecordedRequest, request_no: int
    ) -> JSONObject:
        if protocol == "responses":
            return self.responses.render(reply, request.body, request_no, self._new_id)
        if protocol == "openai" and self.reasoning_issued is not None:
            text = reply.reasoning or f"Thinking about request {request_no}."
            rendered = _render_openai(
                dataclasses.replace(reply, reasoning=text), request_no, self._new_id
            )
            with self._lock:
                for call in rendered["choices"][0]["message"].get("tool_calls") or ():
                    self.reasoning_issued[call["id"]] = text
            return rendered
        if protocol == "openai":
            return _render_openai(reply, request_no, self._new_id)
        if self.thinking is None or not thinking_requested(request.body):
            return _render_anthropic(reply, request_no, self._new_id)
        blocks = self.thinking.issue(reply, request_no)
        rendered = _render_anthropic(reply, request_no, self._new_id, blocks)
        self.thinking.remember(rendered["content"])
        return rendered

    def _send_json(
        self, handler: _Handler, status: int, data: JSONObject, protocol: str, request_no: int
    ) -> None:
        self._send(handler, status, json.dumps(data).encode(), {}, protocol, request_no)

    @staticmethod
    def _send(
        handler: _Handler,
        status: int,
        payload: bytes,
        extra_headers: dict[str, str],
        protocol: str,
        request_no: int,
    ) -> None:
        headers = {"content-type": "application/json"}
        if request_no:
            request_id = f"req_fake_{request_no}"
            openai = protocol in ("openai", "responses")
            headers["x-request-id" if openai else "request-id"] = request_id
        headers.update({key.lower(): value for key, value in extra_headers.items()})
        headers["content-length"] = str(len(payload))
        try:
            handler.send_response(status)
            for key, value in headers.items():
                handler.send_header(key, value)
            handler.end_headers()
            handler.wfile.write(payload)
            handler.wfile.flush()
        except _CONNECTION_ERRORS:
            handler.close_connection = True
