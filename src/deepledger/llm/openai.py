"""OpenAI chat completions: the OpenAI API and any compatible server (vLLM, SGLang,
llama.cpp, ...), spoken over aiohttp.

Why not the ``openai`` SDK: with hundreds of concurrent tasks its request building
(URL merging, header models), its httpx layer and its response models were 60 % of the
runtime's CPU (profiled with 256 tasks against a loopback server), and every reply
waited for them on the one event loop. The protocol itself is one JSON POST, and
everything the SDK added on top is done here: the bearer key, the default base URL
(``OPENAI_BASE_URL``, else the OpenAI API), proxies from the environment, and error
classification by the rules in :mod:`llm.classify`.

Wire mapping: system/user/assistant messages map one to one; an assistant's tool calls
become ``tool_calls`` with JSON-string arguments; a native tool-results message becomes
one ``tool`` message per result (paired by ``tool_call_id``); XML-protocol results are
plain user text. Images (a task's attachment, XML results' images) make a user message's
content a list of parts, text then ``image_url`` parts with ``data:`` URLs; ``tool``
messages cannot carry images, so a turn's native results send their text there and
their images in one user message right after the turn's last tool message. Messages
without images are sent exactly as before images existed (a prompt cache depends on it).

Reasoning models (o1, o3, o4-mini, the gpt-5 family; told by the model's name, or by
``llm.reasoning_model``) take ``max_completion_tokens`` instead of ``max_tokens`` and no
sampling settings but the defaults: ``temperature``, ``top_p`` and ``stop`` are left out
(said once in the log when they were set to something else), and ``reasoning_effort``
goes through. Whatever ``extra_body`` sets is sent as is, last.

Reasoning text a server returns (``reasoning_content`` from vLLM, SGLang and DeepSeek's
reasoning parsers, ``reasoning`` from others) is kept on the message and by default never
sent back: vLLM and SGLang refuse it in a request. Servers that require it back
(DeepSeek's thinking mode answers 400 when an assistant message with tool calls comes
without it) get it with ``llm.send_back_reasoning`` (the ``send_back_reasoning``
capability): every assistant message whose native tool calls are sent carries its
``reasoning_content``, an empty string when the reply had none.

Azure OpenAI (:class:`AzureOpenAIChatClient`): the deployment's URL, the ``api-version``
query parameter, and the key in an ``api-key`` header instead of a bearer token.

Usage: ``prompt_tokens`` includes cached tokens; cache reads are
``prompt_tokens_details.cached_tokens``; OpenAI reports no cache writes. A count that
is not a non-negative integer is estimated (:func:`llm.usage.token_count`).

Timeouts: ``llm.connect_timeout_seconds`` to open the connection, ``llm.timeout_seconds``
for the whole request, reply included.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import urllib.request
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
import orjson

from deepledger import __version__
from deepledger.errors import LLMError
from deepledger.llm import classify
from deepledger.llm.base import (
    GenerationSettings,
    LLMCapabilities,
    LLMClient,
    answered_natively,
)
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
    ToolCall,
    ToolSpec,
    Usage,
    remember_wire,
    wire_memo,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
BASE_URL_ENV = "OPENAI_BASE_URL"
# The OpenAI API's reasoning models: the o-series and the gpt-5 family, but not the
# gpt-5 chat models (gpt-5-chat-latest), which take sampling settings as before.
_REASONING_MODEL = re.compile(r"(o\d+|gpt-5(?!.*-chat)[\w.-]*)($|-.*)")

STOP_REASONS = {
    "stop": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.CONTENT_FILTER,
}
# A connection that fails or drops before the reply is complete (refused, reset, closed
# by the server, a truncated body): worth another try, like any unreachable server.
_CONNECTION_FAILURES = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    ConnectionError,
)


class OpenAIChatClient(LLMClient):
    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None,
        timeout_seconds: float,
        connect_timeout_seconds: float = 10.0,
        continue_final_message: bool = False,
        reasoning_model: bool | None = None,
        accepts_images: bool = False,
        send_back_reasoning: bool = False,
    ) -> None:
        # vLLM and SGLang continue a trailing assistant message when asked to; the OpenAI
        # API does not, so prefill is opt-in (llm.assistant_prefill).
        super().__init__(
            model,
            LLMCapabilities(
                prefill=continue_final_message,
                images=accepts_images,
                send_back_reasoning=send_back_reasoning,
            ),
        )
        self.timeout_seconds = timeout_seconds
        self.connect_timeout_seconds = connect_timeout_seconds
        self.reasoning_model = (
            is_reasoning_model(model) if reasoning_model is None else reasoning_model
        )
        self.base_url = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
        self._url = f"{self.base_url}/chat/completions"
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"deepledger/{__version__}",
        }
        self._proxy = proxy_for(self._url)
        self._secrets = (api_key,)  # blanked out of what the server says back
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._said: set[str] = set()  # settings already reported as not sent
        self._wire_cache = WireCache(send_back_reasoning=send_back_reasoning)

    def _http(self) -> aiohttp.ClientSession:
        """The connection pool, made on first use: it belongs to the running event loop."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            self._session_loop = loop
            self._session = aiohttp.ClientSession(
                # No cap of the pool's own (0): the runner's max_concurrent already bounds
                # the requests in flight, and a cap under it queued them unseen (2,048
                # tasks shared 1,000 connections: at best twice the ideal wall time).
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(
                    total=self.timeout_seconds, sock_connect=self.connect_timeout_seconds
                ),
            )
        return self._session

    async def _call(
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> LLMResponse:
        # The messages are encoded apart (see WireCache); the rest of the request here.
        request: JSONObject = {"model": self.model}
        if tools:
            request["tools"] = [to_wire_tool(t) for t in tools]
        if self.reasoning_model:
            request |= self._reasoning_fields(settings)
        else:
            request["max_tokens"] = settings.max_tokens
            if settings.reasoning_effort is not None:
                request["reasoning_effort"] = settings.reasoning_effort
            request |= sampling_fields(settings)
        if self.capabilities.prefill and messages and messages[-1].role is Role.ASSISTANT:
            request |= {"continue_final_message": True, "add_generation_prompt": False}
        if sends_prompt_cache_key(settings.prompt_cache_key, self.base_url):
            request.setdefault("prompt_cache_key", prompt_cache_key(messages))  # extra_body's wins
        body = self._wire_cache.request_body(request, messages)
        return self._from_wire(await self.post_body(self._url, body), messages)

    def _reasoning_fields(self, settings: GenerationSettings) -> JSONObject:
        """What a reasoning model takes: its token cap under the newer name, the effort,
        and no sampling settings (the API refuses any but the defaults)."""
        fields: JSONObject = {"max_completion_tokens": settings.max_tokens}
        if settings.reasoning_effort is not None:
            fields["reasoning_effort"] = settings.reasoning_effort
        self.say_sampling_left_out(settings)
        return fields | dict(settings.extra_body)

    def say_sampling_left_out(self, settings: GenerationSettings) -> None:
        """Log, once per setting, the sampling settings a reasoning model is not sent."""
        left_out = {
            "llm.temperature": settings.temperature not in (None, 1, 1.0),
            "llm.top_p": settings.top_p not in (None, 1, 1.0),
            "stop sequences": bool(settings.stop),
        }
        for name, was_set in left_out.items():
            if was_set and name not in self._said:
                self._said.add(name)
                log.warning(
                    "%s is a reasoning model, which takes only the default %s: not sent "
                    "(llm.reasoning_model=false if it is not one)",
                    self.model,
                    name,
                )

    async def post(self, url: str, request: JSONObject) -> JSONObject:
        """Send one request to ``url``; the decoded completion object, or a classified
        error."""
        return await self.post_body(url, encode_json(request))

    async def post_body(self, url: str, body: bytes) -> JSONObject:
        """Send one encoded request to ``url``; the decoded completion object, or a
        classified error."""
        # Never redirected: aiohttp drops Authorization on a redirect to another host but
        # keeps custom headers such as Azure's api-key, which would reach that host.
        async with self._http().post(
            url, data=body, headers=self._headers, proxy=self._proxy, allow_redirects=False
        ) as response:
            raw = await response.read()
            if 300 <= response.status < 400:
                raise classify.redirect_error(
                    self.provider, self.base_url, response.status, response.headers.get("Location")
                )
            if response.status >= 400:
                detail = error_message(raw, response.reason or "")
                raise classify.status_error(
                    self.provider, response.status, response.headers, detail, secrets=self._secrets
                )
        return self._decode(raw)

    def _decode(self, raw: bytes) -> JSONObject:
        """The completion object, or a (retryable) error saying why it is not one."""
        try:
            completion = decode_json(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise classify.malformed_response(
                self.provider, f"{exc}: {raw[:200]!r}", secrets=self._secrets
            ) from None
        if not isinstance(completion, dict):
            raise classify.malformed_response(
                self.provider, f"not a JSON object: {raw[:200]!r}", secrets=self._secrets
            )
        if not completion.get("choices"):
            # Some gateways answer 200 with an error object instead of an HTTP error.
            detail = error_message(raw, "") if "error" in completion else ""
            raise classify.malformed_response(
                self.provider, detail or "no choices in the completion", secrets=self._secrets
            )
        return completion

    def _from_wire(self, completion: JSONObject, sent: list[Message]) -> LLMResponse:
        choice = completion["choices"][0]
        wire = choice.get("message") or {}
        calls = tuple(
            ToolCall.from_raw(call.get("id") or "", function.get("name") or "", arguments)
            for call in wire.get("tool_calls") or ()
            for function in [call.get("function") or {}]
            for arguments in [function.get("arguments")]
        )
        reasoning = wire.get("reasoning_content") or wire.get("reasoning")
        reasoning = reasoning if isinstance(reasoning, str) else None  # some send objects
        message = Message.assistant(wire.get("content") or "", calls, reasoning=reasoning)
        finish = choice.get("finish_reason")
        return LLMResponse(
            message=message,
            stop_reason=STOP_REASONS.get(finish or "", StopReason.OTHER),
            usage=self._usage(completion.get("usage"), sent, message),
            model=completion.get("model") or self.model,
            response_id=completion.get("id") or "",
            raw_stop_reason=finish,
        )

    def _usage(self, wire: Any, sent: list[Message], reply: Message) -> Usage:
        """The call's usage. Some servers omit it, or send counts that are not integers;
        the window guard still needs numbers, so what is missing is estimated."""
        if wire is not None and not isinstance(wire, dict):
            report_unreadable(self.provider, "usage", wire)
        wire = wire if isinstance(wire, dict) and wire else None
        prompt = completion = cached = None
        if wire is not None:
            prompt = token_count(wire.get("prompt_tokens"), "usage.prompt_tokens", self.provider)
            completion = token_count(
                wire.get("completion_tokens"), "usage.completion_tokens", self.provider
            )
            details = wire.get("prompt_tokens_details")
            cached = token_count(
                details.get("cached_tokens") if isinstance(details, dict) else details,
                "usage.prompt_tokens_details.cached_tokens",
                self.provider,
                required=False,
            )
        counter = self.token_counter
        if prompt is None:
            prompt = count_messages(counter, sent)
        if completion is None:
            completion = count_messages(counter, [reply])
        return Usage(prompt, completion, cache_read_tokens=min(cached or 0, prompt))

    def classify_error(self, exc: Exception) -> LLMError | None:
        if isinstance(exc, aiohttp.ConnectionTimeoutError):  # before TimeoutError: a subclass
            return classify.connect_timeout_error(
                self.provider, self.base_url, self.connect_timeout_seconds
            )
        if isinstance(exc, TimeoutError):  # aiohttp's timeouts are TimeoutErrors too
            return classify.timeout_error(self.provider, self.base_url, self.timeout_seconds)
        if (out_of_files := classify.out_of_open_files(exc, self.provider)) is not None:
            return out_of_files
        if isinstance(exc, _CONNECTION_FAILURES):
            return classify.connection_error(
                self.provider, self.base_url, _describe(exc), cause=exc
            )
        return None

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` names one of the OpenAI API's reasoning models (a gateway's
    ``openai/o3`` too): o1, o3-mini, o4-mini, gpt-5, gpt-5.1, gpt-5-mini, ..."""
    return bool(_REASONING_MODEL.fullmatch(model.rsplit("/", 1)[-1].lower()))


class AzureOpenAIChatClient(OpenAIChatClient):
    """Azure OpenAI: ``base_url`` is a deployment's URL
    (``https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT``, or the
    resource's ``.../openai/v1``), ``api_version`` its ``api-version`` query parameter,
    and the key goes in an ``api-key`` header, never as a bearer token."""

    provider = "azure_openai"

    def __init__(
        self, model: str, *, api_key: str, base_url: str, api_version: str | None, **options: Any
    ) -> None:
        super().__init__(model, api_key=api_key, base_url=base_url, **options)
        del self._headers["Authorization"]
        self._headers["api-key"] = api_key
        if api_version:
            self._url += "?" + urlencode({"api-version": api_version})


def sampling_fields(settings: GenerationSettings) -> JSONObject:
    """The request fields ``settings`` set (chat and completion requests alike); unset
    ones are left to the server, and ``extra_body`` goes last so it can override."""
    fields: JSONObject = {}
    if settings.temperature is not None:
        fields["temperature"] = settings.temperature
    if settings.top_p is not None:
        fields["top_p"] = settings.top_p
    if settings.stop:
        fields["stop"] = list(settings.stop)
    return fields | dict(settings.extra_body)


def error_message(raw: bytes, fallback: str) -> str:
    """The server's own words from an error body: OpenAI's ``{"error": {"message"}}``,
    FastAPI's ``{"detail"}`` (vLLM), a bare ``{"message"}``, else the start of the text;
    an overflow's type or code (:data:`OVERFLOW_CODES`) is added when the words lack it."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return text[:500] or fallback
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, str) and error:
            return error
        if isinstance(error, dict):
            for key in ("message", "detail"):
                if error.get(key):
                    return _with_overflow_code(str(error[key]), error)
    return text[:500] or fallback


# Error types and codes that say a prompt did not fit, whatever the message's words:
# llama.cpp's llama-server and the OpenAI API.
OVERFLOW_CODES = ("exceed_context_size_error", "context_length_exceeded")


def _with_overflow_code(said: str, error: dict[str, Any]) -> str:
    """``said``, with the overflow type or code the error carries when its words do not
    name it: the words change between a server's builds, the code does not."""
    for value in (error.get("type"), error.get("code")):
        if value in OVERFLOW_CODES and str(value) not in said:
            return f"{said} ({value})"
    return said


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``, ``NO_PROXY``, ...).

    Looked up once per client: aiohttp's ``trust_env`` looks it up again for every
    request, on a worker thread, which cost a third of a request's CPU under load.
    """
    parts = urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _describe(exc: BaseException) -> str:
    """A connection failure in words: aiohttp's own text names the address and the cause."""
    return str(exc) or type(exc).__name__


def encode_json(value: Any) -> bytes:
    """A request body's bytes: compact UTF-8 JSON.

    orjson, several times faster than the standard library: a turn encodes its new
    messages, and with 2,048 tasks that was 3 % of a turn's CPU. The bytes of a
    conversation's prefix stay what they were because each message is encoded once
    and kept (:class:`WireCache`), and one value always encodes the same way. What
    orjson refuses (a lone surrogate a model wrote, an integer beyond 64 bits, a key
    that is not a string) goes the standard library's way, its non-ASCII escaped so
    that the bytes are valid UTF-8 whatever the text holds."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def decode_json(raw: bytes) -> Any:
    """A response body decoded: orjson, else the standard library, which also reads
    what orjson refuses (``NaN``, a lone surrogate) and gives the error messages."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


class WireCache:
    """A request's body with each message encoded once, kept while the message lives.

    A task's history only grows between compactions, and every request sends all of
    it: re-encoding the whole history each turn was most of a late turn's CPU (3.5 ms
    of 5.5 at turn 300 with 5 KB tool results). Messages are immutable, so a message's
    wire form depends only on the message itself and, for an assistant message, on
    whether native tool messages follow it: its bytes are kept on the message under a
    key saying which (:func:`messages.remember_wire`), so a blanked or replaced message,
    being a new object, is encoded afresh. The body is byte for byte what encoding the
    whole request at once gives.
    """

    def __init__(self, *, send_back_reasoning: bool = False) -> None:
        # Assistant messages with native calls carry their reasoning_content: a wire
        # form of their own, kept under its own key.
        self.send_back_reasoning = send_back_reasoning
        self._native_key = _NATIVE_REASONING_KEY if send_back_reasoning else _NATIVE_KEY

    def request_body(self, request: JSONObject, messages: list[Message]) -> bytes:
        """``request`` (no messages in it; ``model`` its first key) with ``messages``
        as its second key, ``messages``, encoded."""
        if "messages" in request:  # extra_body sets them: theirs go, as they always did
            return encode_json({"model": request["model"], "messages": None} | request)
        head = {"model": request["model"]}
        rest = {k: v for k, v in request.items() if k != "model"}
        start = encode_json(head)[:-1] + b',"messages":['
        end = b"]," + encode_json(rest)[1:] if rest else b"]}"
        chunks = self._chunks(messages)
        if not chunks:
            return start + end
        # One copy of the history's bytes, not one per concatenation: at turn 300 they
        # are 1.5 MB, and each copy cost more than encoding the new messages.
        chunks[0] = start + chunks[0]
        chunks[-1] += end
        return b",".join(chunks)

    def _chunks(self, messages: list[Message]) -> list[bytes]:
        """Each message's encoded wire messages (none for an empty tool-results one).
        Run for every message of every request: kept to plain lookups."""
        chunks, last = [], len(messages) - 1
        for i, message in enumerate(messages):
            # answered_natively, inlined: this loop is the whole history every turn
            native = (
                message.role is Role.ASSISTANT and i < last and messages[i + 1].role is Role.TOOL
            )
            key = self._native_key if native else _KEY
            encoded = wire_memo(message, key)
            if encoded is None:
                wire = wire_message(message, native, reasoning=self.send_back_reasoning)
                encoded = b",".join(encode_json(w) for w in wire)
                # Kept as long as the message: copied to its length, since orjson's bytes
                # keep the buffer it grew (62.8 KB held for a 5 KB message, orjson 3.13),
                # which was most of a task's memory; a join of one returns that object.
                remember_wire(message, key, memoryview(encoded).tobytes())
            if encoded:
                chunks.append(encoded)
        return chunks


# Where a message keeps its encoded OpenAI wire form (messages.remember_wire).
_KEY, _NATIVE_KEY = "_openai_wire", "_openai_wire_native_calls"
_NATIVE_REASONING_KEY = "_openai_wire_native_calls_reasoning"


def to_wire_messages(messages: list[Message], *, reasoning: bool = False) -> list[JSONObject]:
    return [
        wire
        for i, m in enumerate(messages)
        for wire in wire_message(
            m, m.role is Role.ASSISTANT and answered_natively(messages, i), reasoning=reasoning
        )
    ]


def wire_message(m: Message, native_calls: bool, *, reasoning: bool = False) -> list[JSONObject]:
    """One message's wire messages (a native tool-results message makes several);
    ``native_calls``: an assistant message's calls are answered by native tool messages;
    ``reasoning``: such a message carries its ``reasoning_content`` back."""
    if m.role is Role.TOOL:
        wire: list[JSONObject] = [
            {"role": "tool", "tool_call_id": r.call_id, "content": r.content}
            for r in m.tool_results
        ]
        images = _tool_images_message(m)
        return wire if images is None else [*wire, images]
    if m.role is Role.ASSISTANT:
        return [_assistant_to_wire(m, native_calls=native_calls, reasoning=reasoning)]
    if m.all_images:
        return [{"role": m.role.value, "content": _content_parts(m.content, m.all_images)}]
    return [{"role": m.role.value, "content": m.content}]


def _image_part(image: ImagePart) -> JSONObject:
    return {"type": "image_url", "image_url": {"url": image.data_url}}


def _content_parts(text: str, images: tuple[ImagePart, ...]) -> list[JSONObject]:
    """A user message's text and images as content parts (text first, as it was sent
    before images existed); an empty text part is left out."""
    parts = [{"type": "text", "text": text}] if text else []
    return parts + [_image_part(image) for image in images]


def _tool_images_message(m: Message) -> JSONObject | None:
    """The images of one turn's native tool results, as ONE user message sent right
    after the turn's tool messages: the API takes images only in user messages, and a
    user message between two tool messages would break the calls' pairing. Each call's
    images are preceded by a line naming the call, so the model can tell them apart."""
    parts: list[JSONObject] = []
    for r in m.tool_results:
        if r.images:
            label = f"{r.name} " if r.name else ""
            count = f"{len(r.images)} image{'s' if len(r.images) > 1 else ''}"
            parts.append({"type": "text", "text": f"[{count} from tool call {label}{r.call_id}]"})
            parts += [_image_part(image) for image in r.images]
    return {"role": "user", "content": parts} if parts else None


def _assistant_to_wire(m: Message, native_calls: bool, reasoning: bool = False) -> JSONObject:
    if not (native_calls and m.tool_calls):
        return {"role": "assistant", "content": m.content}
    # An empty string, not null: the OpenAI API takes either, llama.cpp only a string.
    out: JSONObject = {"role": "assistant", "content": m.content}
    if reasoning:  # DeepSeek refuses a tool-call turn without the field, even empty
        out["reasoning_content"] = m.reasoning or ""
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


def to_wire_tool(spec: ToolSpec) -> JSONObject:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }
