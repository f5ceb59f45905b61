"""The ``hermes`` protocol: ``<tool_call>`` blocks in the reply's text.

The format Qwen and Hermes models are trained on, for servers that do not parse it into
function calls.

The tools are JSON function signatures in ``<tools></tools>``, written by the model's own
chat template where the client renders prompts with one that takes ``tools``
(``LLMCapabilities.template_tools``), else by our system section; calls are
``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks in the reply's text (a
block may hold several calls, in a row or in a JSON list); results go back as
``<tool_response>`` blocks in a user message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import json_repair

from deepledger.messages import (
    JSONObject,
    LLMResponse,
    Message,
    ToolCall,
    ToolResult,
    ToolSpec,
    parse_arguments,
)
from deepledger.tools.protocols.base import ForcedCall, ParsedCalls, ToolProtocol, wire_name
from deepledger.tools.types import ToolInfo

_JSON = json.JSONDecoder()
_CALL_OPEN, _CALL_CLOSE = "<tool_call>", "</tool_call>"


def _call_blocks(text: str) -> Iterator[tuple[str, bool]]:
    """The body of each ``<tool_call>`` block, in order, and whether it was closed. A
    block's JSON is stepped over as JSON, so a string in it may hold ``</tool_call>`` or
    ``<tool_call>`` (code often does); a block never closed runs to the next opening tag
    outside its JSON, or the end of the reply. JSON that does not decode (broken, to be
    repaired) is not stepped over: its block ends at the first tag after it opens.

    One pass for any reply, but for copies: the JSON is decoded from the text up to the
    next opening tag, and from the rest of the reply (a copy) only when a string was
    still open there; the next closing tag is searched for again only once passed.
    (Measured: 8,000 blocks whose strings all run into the next tag, 220 kB, in 0.05 s.)
    """
    position, close = 0, 0
    while (start := text.find(_CALL_OPEN, position)) != -1:
        body_start = start + len(_CALL_OPEN)
        reopened = text.find(_CALL_OPEN, body_start)
        json_end = body_start + _json_length(text, body_start, reopened)
        if reopened != -1 and reopened < json_end:  # the tag was inside a JSON string
            reopened = text.find(_CALL_OPEN, json_end)
        if close != -1 and close < json_end:
            close = text.find(_CALL_CLOSE, json_end)
        if close == -1 or (reopened != -1 and reopened < close):
            end = reopened if reopened != -1 else len(text)
            yield text[body_start:end], False
            position = end
            continue
        yield text[body_start:close], True
        position = close + len(_CALL_CLOSE)


def _json_length(text: str, start: int, stop: int) -> int:
    """How far the JSON value(s) at ``start`` run, written one after another (0 if none
    decodes): first in the text up to ``stop`` (the next opening tag, -1 for none), then,
    when a string was still open there, in the rest of the text."""
    # Decoded from slices, not in place: a decoding error counts the lines before its
    # position, which in place would be every line of the reply before the block.
    length, unterminated = _values_length(text[start : stop if stop != -1 else len(text)])
    if unterminated and stop != -1:
        length, _ = _values_length(text[start:])
    return length


def _values_length(body: str) -> tuple[int, bool]:
    """(where the JSON values at the start of ``body`` end, 0 if none decodes; whether
    decoding stopped at a string never closed)."""
    end = index = 0
    while True:
        index = _skip_separators(body, index, after_value=end > 0)
        try:
            _, index = _JSON.raw_decode(body, index)
        except json.JSONDecodeError as error:
            return end, error.msg.startswith("Unterminated string")
        except (ValueError, RecursionError):
            return end, False
        end = index


def _skip_separators(text: str, index: int, *, after_value: bool) -> int:
    """Past the whitespace before a JSON value, and one comma after a value before it
    (two values written in a row)."""
    while index < len(text) and text[index].isspace():
        index += 1
    if after_value and index < len(text) and text[index] == ",":
        index += 1
        while index < len(text) and text[index].isspace():
            index += 1
    return index


@dataclass(frozen=True)
class _Written:
    """One call as a block holds it: the decoded JSON (``None``: unreadable, ``problem``
    says why) and the text it was decoded from."""

    value: object
    text: str
    problem: str = ""


def _written_calls(body: str) -> list[_Written]:
    """The calls in one block's body: one JSON object (the format), several in a row, or
    a list of them (models do both). Whatever is left that does not decode is repaired
    as one value (a comma too many, a brace too few, a reply cut off), unless it follows
    a call and is no JSON at all: then it is words, not a call."""
    written: list[_Written] = []
    index = 0
    while (index := _skip_separators(body, index, after_value=bool(written))) < len(body):
        try:
            value, end = _JSON.raw_decode(body, index)
        except (ValueError, RecursionError):
            rest = body[index:].strip()
            if not written or rest[:1] in ("{", "["):
                written += _unpacked(_repaired(rest), rest)
            # else: words after the calls, not another call (json-repair drops them too)
            break
        written += _unpacked(value, body[index:end])
        index = end
    return written


def _unpacked(value: object, text: str) -> list[_Written]:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [_Written(v, text) for v in value]
    if isinstance(value, dict) and value:
        return [_Written(value, text)]
    shown = text[:200]
    return [
        _Written(None, text, f'not a JSON object {{"name": ..., "arguments": {{...}}}}: {shown!r}')
    ]


def _repaired(text: str) -> object:
    try:
        return json_repair.loads(text)
    except (ValueError, RecursionError):
        return None


def _arguments(call: JSONObject, name: str) -> tuple[object, str | None]:
    """The arguments object of a call: ``arguments``, or ``parameters`` (the same thing,
    as some models write it, after the signatures' field). A call with neither but with
    other fields meant them as arguments: refused, never run with ``{}``."""
    given = [key for key in _ARGUMENT_KEYS if key in call]
    if len(given) == 2 and call["arguments"] != call["parameters"]:
        return None, f'{name}: both "arguments" and "parameters", which differ; write one'
    if given:
        return call[given[0]], None
    others = sorted(set(call) - _HARMLESS_KEYS)
    if others:
        fields = ", ".join(json.dumps(k) for k in others)
        return None, (
            f'{name}: no "arguments" object (the call has {fields}); write '
            f'{{"name": {json.dumps(name)}, "arguments": {{...}}}}'
        )
    return {}, None  # {"name": ...} alone: a tool that takes no arguments


_ARGUMENT_KEYS = ("arguments", "parameters")
_HARMLESS_KEYS = {"name", "type", "id"}  # fields OpenAI's function-call shape adds


class HermesProtocol(ToolProtocol):
    """``<tool_call>`` blocks in the text. ``template_tools``: the client writes the tools
    into the prompt with the model's own template, from the specs given with each request;
    otherwise our system section lists them and no request carries specs (a server
    without a tool parser must not be asked for function calls)."""

    name = "hermes"

    def __init__(self, template_tools: bool = False) -> None:
        self.template_tools = template_tools

    def system_section(self, tools: list[ToolInfo]) -> str:
        if not tools:
            return self.prompts.render("xml_no_tools.md")
        if self.template_tools:
            return self.prompts.render("hermes_template_tools.md")
        signatures = "\n".join(json.dumps(_function(t), ensure_ascii=False) for t in tools)
        return self.prompts.render("hermes_tools.md", tools=signatures)

    def specs(self, tools: list[ToolInfo]) -> list[ToolSpec]:
        if not self.template_tools:
            return []
        return [ToolSpec(wire_name(t), t.description, t.input_schema or _EMPTY) for t in tools]

    def forced_call(self, tool: ToolInfo) -> ForcedCall:
        """The block up to the value of the first argument, as in the XML protocol."""
        opening = f'{_CALL_OPEN}\n{{"name": {json.dumps(wire_name(tool))}, "arguments": {{'
        properties = tool.input_schema.get("properties") or {}
        first = next(iter(tool.input_schema.get("required") or properties), None)
        if first is not None:
            string = (properties.get(first) or {}).get("type") == "string"
            opening += json.dumps(first) + (': "' if string else ": ")
        return ForcedCall(opening, stop=_CALL_CLOSE, closing=f"\n{_CALL_CLOSE}")

    def extract(self, response: LLMResponse, turn: int, tools: list[ToolInfo]) -> ParsedCalls:
        """Every call of every block, numbered in order across the reply (a block may
        hold several); each unreadable one is a format error, never a call with ``{}``."""
        text = response.message.content
        blocks = list(_call_blocks(text))
        by_name = _names(tools)
        calls, malformed = [], []
        written: list[_Written] = []
        for index, (body, closed) in enumerate(blocks, start=1):
            if not closed and index < len(blocks):
                written.append(_Written(None, body, "<tool_call> is not closed"))
            elif not body.strip():
                written.append(_Written(None, body, "the <tool_call> block is empty"))
            else:
                written += _written_calls(body)
        for number, call_text in enumerate(written, start=1):
            call, problem = _parse_call(call_text, f"t{turn}c{number}", by_name)
            if call is not None:
                calls.append(call)
            else:
                malformed.append(f"tool call #{number}: {problem}")
        return ParsedCalls(calls, malformed, attempted=bool(blocks))

    def results_message(self, results: list[ToolResult], calls: list[ToolCall]) -> Message:
        # One block per result, in call order (format errors last), joined as Qwen's own
        # template joins the tool messages of one turn: a template that renders tool
        # messages into a user turn renders exactly this text.
        blocks = [
            f"{_RESPONSE_OPEN}\n{'Error: ' if r.is_error else ''}{r.content}\n{_RESPONSE_CLOSE}"
            for r in results
        ]
        return Message.text_tool_results("\n".join(blocks), results)


def _names(tools: list[ToolInfo]) -> dict[str, ToolInfo]:
    """The names a call may use for each tool: its wire name (the one we show), and
    ``server.tool`` or a tool name no other server shares (small models shorten)."""
    names: dict[str, ToolInfo] = {}
    bare = [t.name for t in tools]
    for tool in tools:
        if bare.count(tool.name) == 1:
            names[tool.name] = tool
        names[tool.qualified_name] = tool
    return names | {wire_name(t): t for t in tools}


def _parse_call(
    written: _Written, call_id: str, by_name: dict[str, ToolInfo]
) -> tuple[ToolCall | None, str]:
    call = written.value
    if not isinstance(call, dict):
        return None, written.problem
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return None, 'the JSON object has no "name" of a tool'
    tool = by_name.get(name)
    if tool is None:
        known = ", ".join(sorted({wire_name(t) for t in by_name.values()}))
        return None, f"unknown tool {name!r} (the tools are: {known or 'none'})"
    arguments, problem = _arguments(call, name)
    if problem is not None:
        return None, problem
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        arguments, problem = parse_arguments(arguments)
        if problem is not None:
            return None, f"{name}: {problem}"
    if not isinstance(arguments, dict):
        return None, f'{name}: "arguments" must be a JSON object, not {arguments!r:.100}'
    # raw_arguments: the JSON the call was read from, as the reply's text holds it (so
    # the window's count does not add it twice).
    return ToolCall(call_id, tool.name, arguments, tool.server, written.text.strip()), ""


_RESPONSE_OPEN, _RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
_EMPTY: JSONObject = {"type": "object", "properties": {}}


def _function(tool: ToolInfo) -> JSONObject:
    """A tool as the JSON function signature hermes-format models are trained to read."""
    return {
        "type": "function",
        "function": {
            "name": wire_name(tool),
            "description": tool.description.strip(),
            "parameters": tool.input_schema or _EMPTY,
        },
    }
