"""Provider-neutral conversation types, used everywhere above the LLM layer.

A conversation is a list of :class:`Message`. Each message has a wire ``role`` and a
``kind`` saying *why* it is there; the kind is what context management reads:

- ``SYSTEM``        the system prompt
- ``TASK``          the task the agent answers; never trimmed
- ``MODEL``         an assistant reply, possibly with tool calls
- ``TOOL_RESULTS``  the results of the previous reply's tool calls. With the native
                    protocol the role is ``TOOL`` and each :class:`ToolResult` becomes one
                    wire tool message; with the XML protocol the role is ``USER`` and
                    ``content`` holds the formatted results (the results are kept too,
                    so pairing can be checked in both protocols)
- ``INJECTED``      a prompt the runtime adds (summarize, post-mortem, "the box was
                    missing"); it is not a tool result and is never blanked

Only the modules under ``llm/`` convert these to and from a provider's wire format.
Messages are immutable; trimming and guards build new lists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, TypeAlias

import json_repair
import orjson

# JSON exactly as a wire protocol carries it: a provider's request and reply bodies, MCP
# payloads, a tool's JSON schema, a task line's own fields. Kept untyped at that edge
# only; what deepledger itself writes to disk is a typed record (records/).
JSONObject: TypeAlias = dict[str, Any]


def sorted_json(value: object) -> bytes:
    """``value`` as JSON with sorted keys, for telling values apart (a call asked again,
    a turn gone round again), never for sending or storing. orjson, which is several
    times faster, on the turn loop's path; what it refuses (a lone surrogate, an integer
    beyond 64 bits, a key that is not a string) the standard library's way. One value
    always takes the same way, so equal values give equal bytes."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, sort_keys=True, default=str).encode("utf-8", "backslashreplace")


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class MessageKind(StrEnum):
    SYSTEM = "system"
    TASK = "task"
    MODEL = "model"
    TOOL_RESULTS = "tool_results"
    INJECTED = "injected"


class StopReason(StrEnum):
    """Why the model stopped writing, in one vocabulary for every provider."""

    END_TURN = "end_turn"  # it finished its reply
    TOOL_USE = "tool_use"  # it stopped to have tools run (native protocol)
    MAX_TOKENS = "max_tokens"  # cut off by llm.max_tokens; the text is incomplete
    STOP_SEQUENCE = "stop_sequence"  # a configured stop string was hit
    CONTENT_FILTER = "content_filter"  # the provider withheld or cut the output (or refused)
    CONTEXT_OVERFLOW = "context_overflow"  # the provider ran out of context window mid-reply
    OTHER = "other"  # anything a provider reports that we do not know


class EndReason(StrEnum):
    """Why an agent's turn loop ended. Kept apart because they are finalized differently."""

    MODEL_FINISHED = "model_finished"  # the model answered without asking for tools
    TURNS_EXHAUSTED = "turns_exhausted"  # max_turns was reached
    WINDOW_EXHAUSTED = "window_exhausted"  # the window guard stopped the loop
    LOOPING = "looping"  # the same reply got the same results, turn after turn
    LIMIT = "limit"  # a task limit or the run's budget (benchmark.execution.*) was reached
    # The model's last reply asked for no tools and was cut at llm.max_tokens or said
    # nothing: it stopped, but it did not answer.
    CUT_OR_EMPTY = "cut_or_empty"


@dataclass(frozen=True)
class ToolCall:
    """A request by the model to run one tool.

    ``name`` is the tool's name as the model wrote it (for the native protocol, the
    function name on the wire). ``server_name`` is filled when the protocol names the
    MCP server explicitly (XML). When the model's arguments were not valid JSON even
    after repair, ``arguments`` is empty and ``parse_error`` says why; ``raw_arguments``
    always keeps what the model wrote.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    server_name: str = ""
    raw_arguments: str | None = None
    parse_error: str | None = None

    @classmethod
    def from_raw(cls, id: str, name: str, raw: str | None, server_name: str = "") -> ToolCall:
        """Parse arguments the model wrote as JSON text, repairing what can be repaired
        (missing brace, trailing comma); keep an error, not a guess, when nothing can."""
        arguments, error = parse_arguments(raw)
        return cls(id, name, arguments, server_name, raw, error)


def parse_arguments(raw: str | None) -> tuple[dict[str, Any], str | None]:
    """(arguments, None) or ({}, why not) for a tool call's JSON argument text."""
    if raw is None or not raw.strip():
        return {}, None
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        parsed = _repair(raw)
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, absurd nesting
        return {}, f"arguments could not be read ({type(exc).__name__}): {raw[:200]!r}"
    if isinstance(parsed, dict):
        return parsed, None
    return {}, f"arguments are not a JSON object: {raw[:200]!r}"


def _repair(raw: str) -> Any:
    try:
        return json_repair.loads(raw)
    except (ValueError, RecursionError):
        return None


@dataclass(frozen=True)
class ImagePart:
    """An image a tool returned (or an attached image), for a model that accepts images.

    ``data`` is the image itself, base64-encoded; ``source`` says where it came from (a
    file name, a URL, a tool) so a note can name it when the model cannot see images.
    """

    mime_type: str
    data: str
    source: str = ""

    @property
    def size_bytes(self) -> int:
        """The decoded size, from the base64 length (no decoding needed)."""
        return len(self.data) * 3 // 4 - self.data[-2:].count("=")

    @property
    def data_url(self) -> str:
        """The image as a ``data:`` URL (how OpenAI-compatible servers take inline images)."""
        return f"data:{self.mime_type};base64,{self.data}"

    def note(self, why: str) -> str:
        """A short text standing in for the image where it cannot be sent."""
        size = f"{max(1, round(self.size_bytes / 1024))} KB" if self.data else "size unknown"
        return f"[image: {self.source or 'unnamed'}, {self.mime_type}, {size} — {why}]"


@dataclass(frozen=True)
class ToolResult:
    """What running one :class:`ToolCall` produced. Errors are data the model sees.

    ``images`` go to a model that accepts images (``llm.accepts_images``), else they
    are named in ``content``. ``cached``: served from the run's cache of identical calls.
    ``archived``: the file the whole result was written to when it was too long for the
    window (``content`` then holds a preview and how to read on).
    """

    call_id: str
    content: str
    is_error: bool = False
    name: str = ""
    images: tuple[ImagePart, ...] = ()
    cached: bool = False
    archived: str | None = None


@dataclass(frozen=True)
class ToolSpec:
    """A tool offered to the model through native function calling."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(frozen=True)
class ThinkingBlock:
    """A block of the model's thinking that must go back to the provider exactly as it
    came (Anthropic's extended thinking): the API checks ``signature`` against ``text``
    and refuses a tool-using turn whose blocks were dropped or changed.

    A redacted block (``redacted_thinking``) has no readable text: ``redacted_data``
    holds the opaque, encrypted block, returned as is.
    """

    text: str = ""
    signature: str = ""
    redacted_data: str | None = None

    @classmethod
    def redacted(cls, data: str) -> ThinkingBlock:
        return cls(redacted_data=data)

    @property
    def is_redacted(self) -> bool:
        return self.redacted_data is not None

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ThinkingBlock:
        """A block as the journal wrote it (its dataclass fields)."""
        return cls(
            text=record.get("text") or "",
            signature=record.get("signature") or "",
            redacted_data=record.get("redacted_data"),
        )


@dataclass(frozen=True)
class Message:
    role: Role
    kind: MessageKind
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    reasoning: str | None = None  # separate reasoning text some servers return (not re-sent)
    # Images attached to the message itself (a task's attachment); a tool result's images
    # stay on its ToolResult, see ``all_images``.
    images: tuple[ImagePart, ...] = ()
    # An assistant reply's thinking blocks, in the order they came, re-sent unchanged
    # where the provider requires them (llm/anthropic.py); ``reasoning`` is never re-sent.
    thinking: tuple[ThinkingBlock, ...] = ()

    def __getstate__(self) -> dict[str, object]:
        """The fields alone: a copy or a pickle (a Ray worker's return) leaves the kept
        wire bytes (:func:`remember_wire`) behind, which would double its size."""
        return {name: self.__dict__[name] for name in _MESSAGE_FIELDS}

    # -- constructors: the only sanctioned way to build each kind -------------------
    @classmethod
    def system(cls, text: str) -> Message:
        return cls(Role.SYSTEM, MessageKind.SYSTEM, text)

    @classmethod
    def task(cls, text: str, images: tuple[ImagePart, ...] | list[ImagePart] = ()) -> Message:
        return cls(Role.USER, MessageKind.TASK, text, images=tuple(images))

    @classmethod
    def injected(cls, text: str) -> Message:
        return cls(Role.USER, MessageKind.INJECTED, text)

    @classmethod
    def assistant(
        cls,
        text: str = "",
        tool_calls: tuple[ToolCall, ...] | list[ToolCall] = (),
        reasoning: str | None = None,
        thinking: tuple[ThinkingBlock, ...] | list[ThinkingBlock] = (),
    ) -> Message:
        return cls(
            Role.ASSISTANT,
            MessageKind.MODEL,
            text,
            tuple(tool_calls),
            reasoning=reasoning,
            thinking=tuple(thinking),
        )

    @classmethod
    def native_tool_results(cls, results: tuple[ToolResult, ...] | list[ToolResult]) -> Message:
        """Results for the native protocol: one wire ``tool`` message per result."""
        return cls(Role.TOOL, MessageKind.TOOL_RESULTS, "", tool_results=tuple(results))

    @classmethod
    def text_tool_results(
        cls, text: str, results: tuple[ToolResult, ...] | list[ToolResult] = ()
    ) -> Message:
        """Results for the XML protocol: a user message whose text shows the results."""
        return cls(Role.USER, MessageKind.TOOL_RESULTS, text, tool_results=tuple(results))

    @property
    def is_tool_results(self) -> bool:
        return self.kind is MessageKind.TOOL_RESULTS

    @property
    def all_images(self) -> tuple[ImagePart, ...]:
        """Every image this message carries: its own, then its tool results' in order."""
        return self.images + tuple(i for r in self.tool_results for i in r.images)

    def text_for_counting(self, with_thinking: bool = True) -> str:
        """Everything in this message that occupies the context window, as text; its
        thinking only ``with_thinking`` (see :func:`texts_for_counting`)."""
        parts = [self.content]
        parts += [
            f"{c.name} {c.raw_arguments or json.dumps(c.arguments)}"
            for c in self.tool_calls
            # XML calls are written in the content already; native ones travel beside it
            if not (c.raw_arguments and c.raw_arguments in self.content)
        ]
        if self.role is Role.TOOL:
            parts += [r.content for r in self.tool_results]
        if with_thinking:
            parts += [block.text for block in self.thinking]
        return "\n".join(p for p in parts if p)


def wire_memo(message: Message, key: str) -> bytes | None:
    """What :func:`remember_wire` kept on ``message`` under ``key`` (None: nothing yet)."""
    memo: bytes | None = message.__dict__.get(key)
    return memo


def remember_wire(message: Message, key: str, data: bytes) -> None:
    """Keep a wire encoder's bytes for ``message`` on the message itself.

    Every request re-sends the whole history, and a message never changes, so its bytes
    for one wire form can be kept as long as the message lives: on the object (not in a
    table by identity), they go when it goes, a blanked or replaced message (a new
    object) has none, and the cycle collector has nothing more to scan (bytes hold no
    references). Outside the dataclass fields: equality, hashing, ``replace()`` and the
    journal never see them."""
    object.__setattr__(message, key, data)


def forget_wire(message: Message) -> None:
    """Drop every wire encoder's bytes kept on ``message``: for a message no request will
    send again (blanked, dropped, replaced by notes), which would otherwise hold them for
    the rest of its task."""
    kept = message.__dict__
    if len(kept) == _FIELD_COUNT:  # nothing kept: a turn asks this of every old message
        return
    for key in [k for k in kept if k not in _MESSAGE_FIELDS]:
        del kept[key]


_MESSAGE_FIELDS = frozenset(f.name for f in fields(Message))
_FIELD_COUNT = len(_MESSAGE_FIELDS)


def texts_for_counting(messages: list[Message] | tuple[Message, ...]) -> list[str]:
    """Each message's :meth:`Message.text_for_counting` as a request carries it. Thinking
    goes back to the provider only within the current tool-use turn (the assistant
    messages after the last user message: the task, an injected prompt, XML-protocol
    results), so earlier thinking, and all of it in a closing call (which ends with its
    prompt), takes no room and is not counted. Messages with no user message among them
    (a reply on its own) count all their thinking."""
    turn_start = max((i for i, m in enumerate(messages) if m.role is Role.USER), default=-1)
    return [m.text_for_counting(with_thinking=i > turn_start) for i, m in enumerate(messages)]


@dataclass(frozen=True)
class Usage:
    """Tokens of one call (or a sum of calls).

    ``input_tokens`` is the whole prompt, cached parts included; ``cache_read_tokens``
    and ``cache_write_tokens`` say how much of it was read from / written to the
    provider's prompt cache. Providers report these differently; ``llm/`` normalizes.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def uncached_input_tokens(self) -> int:
        return max(0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass(frozen=True)
class EndpointMove:
    """A task attempt's calls went to another of ``llm.endpoints``, and why."""

    from_endpoint: str
    to_endpoint: str
    reason: str


@dataclass(frozen=True)
class Routing:
    """Where a reply came from with ``llm.endpoints`` (``llm/endpoints.py``), for the
    journal: the server that answered, how long it took, the servers of the HTTP
    attempts that failed before it, and the moves made on the way."""

    endpoint: str
    seconds: float
    failed_endpoints: tuple[str, ...] = ()
    moves: tuple[EndpointMove, ...] = ()


@dataclass(frozen=True)
class LLMResponse:
    """One model reply: the assistant message, why it stopped, and what it used."""

    message: Message
    stop_reason: StopReason
    usage: Usage
    model: str = ""
    response_id: str = ""
    raw_stop_reason: str | None = None  # the provider's own word, for the journal
    routing: Routing | None = None  # set by the client of several llm.endpoints

    @property
    def text(self) -> str:
        return self.message.content
