"""The messages, tool calls, results, images and usage inside journal events.

The events hold the provider-neutral dataclasses of ``messages.py`` themselves, so a
writer passes what it has and a reader gets back what the runtime uses. This module
says how each one is written (``to_jsonable``: its dataclass fields as plain JSON, an
image as its type, source, size and digest, never its data), read back (``*_from_record``)
and described in the exported schema (the ``*Record`` shapes below).

Writing is on every turn, so a field given an instance of its dataclass takes it as it
is (an ``isinstance`` check); a field read from JSON is checked and rebuilt.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NotRequired

from pydantic import PlainSerializer, PlainValidator
from typing_extensions import TypedDict

from deepledger.messages import (
    ImagePart,
    JSONObject,
    Message,
    MessageKind,
    Role,
    ThinkingBlock,
    ToolCall,
    ToolResult,
)


@dataclass(frozen=True)
class RecordedImage(ImagePart):
    """An image read back from a journal: no data (journals keep none), but the size
    and digest it was written with, so writing it again gives the same record."""

    recorded_size: int = 0
    sha256: str = ""

    @property
    def size_bytes(self) -> int:
        return self.recorded_size


# -- the shapes as written (for the schema, and checked against the dataclasses) --------
class ImageRecord(TypedDict):
    mime_type: str
    source: str
    size_bytes: int
    sha256: str


class ToolCallRecord(TypedDict):
    id: str
    name: str
    arguments: NotRequired[JSONObject]
    server_name: NotRequired[str]
    raw_arguments: NotRequired[str | None]
    parse_error: NotRequired[str | None]


class ToolResultRecord(TypedDict):
    call_id: str
    content: str
    is_error: NotRequired[bool]
    name: NotRequired[str]
    images: NotRequired[list[ImageRecord]]
    cached: NotRequired[bool]
    archived: NotRequired[str | None]


class ThinkingRecord(TypedDict):
    text: NotRequired[str]
    signature: NotRequired[str]
    redacted_data: NotRequired[str | None]


class MessageRecord(TypedDict):
    role: Role
    kind: MessageKind
    content: NotRequired[str]
    tool_calls: NotRequired[list[ToolCallRecord]]
    tool_results: NotRequired[list[ToolResultRecord]]
    reasoning: NotRequired[str | None]
    images: NotRequired[list[ImageRecord]]
    thinking: NotRequired[list[ThinkingRecord]]


class UsageRecord(TypedDict):
    input_tokens: NotRequired[int]
    output_tokens: NotRequired[int]
    cache_read_tokens: NotRequired[int]
    cache_write_tokens: NotRequired[int]


# Which record shape describes which dataclass (a test checks their fields agree).
SHAPES: dict[type, type] = {
    ToolCall: ToolCallRecord,
    ToolResult: ToolResultRecord,
    ThinkingBlock: ThinkingRecord,
    Message: MessageRecord,
}


# -- writing ----------------------------------------------------------------------------
# What goes into JSON as it is (not float: a NaN needs its wrapper).
PLAIN = (str, int, bool, type(None))


class NonFiniteFloat(float):
    """A NaN or an infinity on its way into a journal line (a model may write ``NaN`` or
    ``1e999`` in a tool call's arguments). orjson would write it as ``null``, which
    reads back as another value; a float subclass is what orjson refuses, so the line
    goes the standard library's way, which writes ``NaN``/``Infinity`` as Python's
    JSON reader reads them back (``records/codec.encode_line``)."""


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # each dataclass's fields, looked up once


def to_jsonable(value: Any) -> Any:
    """``value`` as plain JSON: dataclasses as their fields, enums as their values,
    images as :func:`image_record`. On every journal write (about 16 values a line):
    plain values go first and are not recursed into, and a dataclass's field names are
    looked up once per class."""
    kind = type(value)
    if kind in PLAIN:
        return value
    if kind is float:
        return value if math.isfinite(value) else NonFiniteFloat(value)
    if kind is list or kind is tuple:
        return [v if type(v) in PLAIN else to_jsonable(v) for v in value]
    if kind is dict:
        return {
            k if type(k) is str else str(k): v if type(v) in PLAIN else to_jsonable(v)
            for k, v in value.items()
        }
    names = _FIELD_NAMES.get(kind)
    if names is not None:
        fields = {}
        for name in names:
            field_value = getattr(value, name)
            fields[name] = field_value if type(field_value) in PLAIN else to_jsonable(field_value)
        return fields
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, ImagePart):
        return image_record(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(value))
        return to_jsonable(value)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def image_record(image: ImagePart) -> ImageRecord:
    """An image as the journal keeps it: what it was and a digest, not its base64 (one
    screenshot is megabytes, and journals are read line by line). The digest tells two
    images apart and matches the file the image came from."""
    if isinstance(image, RecordedImage):
        digest = image.sha256
    else:
        try:
            digest = hashlib.sha256(base64.b64decode(image.data, validate=True)).hexdigest()
        except (binascii.Error, ValueError):  # not valid base64: digest the text as it came
            digest = hashlib.sha256(image.data.encode("utf-8", "surrogatepass")).hexdigest()
    return {
        "mime_type": image.mime_type,
        "source": image.source,
        "size_bytes": image.size_bytes,
        "sha256": digest,
    }


# -- reading ----------------------------------------------------------------------------
def _object(data: object, what: str) -> JSONObject:
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a JSON object, not {type(data).__name__}")
    return data


def _list(data: object, what: str) -> Sequence[Any]:
    if not data:  # absent, null or empty: the common case, so checked first
        return ()
    if not isinstance(data, list | tuple):
        raise ValueError(f"{what} must be a list, not {type(data).__name__}")
    return data


def image_from_record(data: object) -> ImagePart:
    if isinstance(data, ImagePart):
        return data
    record = _object(data, "an image")
    return RecordedImage(
        mime_type=str(record.get("mime_type", "")),
        data="",
        source=str(record.get("source", "")),
        recorded_size=int(record.get("size_bytes") or 0),
        sha256=str(record.get("sha256", "")),
    )


def images_from_records(data: object) -> tuple[ImagePart, ...]:
    return tuple(map(image_from_record, _list(data, "images")))


def call_from_record(data: object) -> ToolCall:
    if isinstance(data, ToolCall):
        return data
    record = _object(data, "a tool call")
    arguments = record.get("arguments") or {}
    return ToolCall(
        id=str(record["id"]),
        name=str(record["name"]),
        arguments=_object(arguments, "a tool call's arguments"),
        server_name=str(record.get("server_name") or ""),
        raw_arguments=record.get("raw_arguments"),
        parse_error=record.get("parse_error"),
    )


def result_from_record(data: object) -> ToolResult:
    """A tool result as the journal wrote it; journals from before images load too."""
    if isinstance(data, ToolResult):
        return data
    record = _object(data, "a tool result")
    content = record["content"]
    if not isinstance(content, str):
        raise ValueError("a tool result's content must be text")
    return ToolResult(
        call_id=str(record["call_id"]),
        content=content,
        is_error=bool(record.get("is_error", False)),
        name=str(record.get("name") or ""),
        images=images_from_records(record.get("images")),
        cached=bool(record.get("cached", False)),
        archived=record.get("archived"),
    )


def message_from_record(data: object) -> Message:
    """A message as the journal wrote it, back as a Message (images as placeholders)."""
    if isinstance(data, Message):
        return data
    record = _object(data, "a message")
    content = record.get("content") or ""
    if not isinstance(content, str):
        raise ValueError("a message's content must be text")
    thinking = _list(record.get("thinking"), "thinking blocks")
    return Message(
        role=Role(record["role"]),
        kind=MessageKind(record["kind"]),
        content=content,
        tool_calls=tuple(map(call_from_record, _list(record.get("tool_calls"), "calls"))),
        tool_results=tuple(map(result_from_record, _list(record.get("tool_results"), "results"))),
        reasoning=record.get("reasoning"),
        images=images_from_records(record.get("images")),
        thinking=tuple(ThinkingBlock.from_record(_object(t, "a block")) for t in thinking),
    )


def _messages(data: object) -> list[Message]:
    return list(map(message_from_record, _list(data, "messages")))


def _calls(data: object) -> list[ToolCall]:
    return list(map(call_from_record, _list(data, "calls")))


def _results(data: object) -> list[ToolResult]:
    return list(map(result_from_record, _list(data, "results")))


def _many_jsonable(values: Sequence[object]) -> list[Any]:
    return [to_jsonable(v) for v in values]


# -- the field types events use ---------------------------------------------------------
MessageField = Annotated[
    Message,
    PlainValidator(message_from_record, json_schema_input_type=MessageRecord),
    PlainSerializer(to_jsonable, return_type=MessageRecord),
]
MessagesField = Annotated[
    list[Message],
    PlainValidator(_messages, json_schema_input_type=list[MessageRecord]),
    PlainSerializer(_many_jsonable, return_type=list[MessageRecord]),
]
ToolCallsField = Annotated[
    list[ToolCall],
    PlainValidator(_calls, json_schema_input_type=list[ToolCallRecord]),
    PlainSerializer(_many_jsonable, return_type=list[ToolCallRecord]),
]
ToolResultsField = Annotated[
    list[ToolResult],
    PlainValidator(_results, json_schema_input_type=list[ToolResultRecord]),
    PlainSerializer(_many_jsonable, return_type=list[ToolResultRecord]),
]
ImagesField = Annotated[
    list[ImagePart],
    PlainValidator(
        lambda data: list(images_from_records(data)), json_schema_input_type=list[ImageRecord]
    ),
    PlainSerializer(_many_jsonable, return_type=list[ImageRecord]),
]
