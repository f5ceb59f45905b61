"""The three ways a model asks for tools, behind one interface.

- ``xml``: the system prompt lists every server and tool with its JSON schema and
  explains the ``<use_mcp_tool>`` block; calls are parsed out of the reply's text, and
  results go back as a user message. This is the format MiroThinker models are trained on.
- ``native``: tools go to the provider's function calling; calls come back typed and
  results go back as tool messages paired by id.
- ``hermes``: the format Qwen and Hermes models are trained on, for servers that do not
  parse it into function calls: the tools are JSON function signatures in
  ``<tools></tools>``, written by the model's own chat template where the client renders
  prompts with one that takes ``tools`` (``LLMCapabilities.template_tools``), else by our
  system section; calls are ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``
  blocks in the reply's text (a block may hold several calls, in a row or in a JSON
  list); results go back as ``<tool_response>`` blocks in a user message.

All produce the same :class:`ToolCall` / :class:`ToolResult`.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import json_repair

from deepledger.config import ProtocolName
from deepledger.llm.base import LLMCapabilities
from deepledger.messages import (
    JSONObject,
    LLMResponse,
    Message,
    ToolCall,
    ToolResult,
    ToolSpec,
    parse_arguments,
)
from deepledger.prompts import PromptSet
from deepledger.tools.manager import ToolInfo


@dataclass(frozen=True)
class ParsedCalls:
    calls: list[ToolCall] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # why each broken call was refused
    attempted: bool = False  # the reply tried to call a tool (markup or function calls)

    @property
    def nothing_usable(self) -> bool:
        """The reply tried to call tools and not one call can run."""
        return self.attempted and all(c.parse_error for c in self.calls)


@dataclass(frozen=True)
class ForcedCall:
    """A reply made to call one tool: it is prefilled with ``opening``, generation stops
    at ``stop``, and ``closing`` completes the call after the model's part."""

    opening: str
    stop: str
    closing: str

    def join(self, reply: str) -> str:
        # Servers leave the stop string out of the reply; one that keeps it is cut there.
        return self.opening + reply.split(self.stop, 1)[0].rstrip() + self.closing


class ToolProtocol(ABC):
    name: str
    # The templates its system section is written from (agent.prompt_profile,
    # agent.prompts_dir); set by make_protocol.
    prompts: PromptSet = PromptSet()

    @abstractmethod
    def system_section(self, tools: list[ToolInfo]) -> str: ...

    @abstractmethod
    def specs(self, tools: list[ToolInfo]) -> list[ToolSpec]: ...

    @abstractmethod
    def extract(self, response: LLMResponse, turn: int) -> ParsedCalls: ...

    @abstractmethod
    def results_message(self, results: list[ToolResult], calls: list[ToolCall]) -> Message: ...

    def record_calls(self, response: LLMResponse, parsed: ParsedCalls) -> Message:
        """The assistant message as stored in history, with the calls we will answer."""
        return replace(response.message, tool_calls=tuple(parsed.calls))

    def forced_call(self, tool: ToolInfo) -> ForcedCall | None:
        """How to make a reply call ``tool``; ``None`` when calls are not text this
        protocol can prefill."""
        return None


# -- XML ------------------------------------------------------------------------------

_OPEN = "<use_mcp_tool>"
_CLOSE = "</use_mcp_tool>"
_ARGS_OPEN, _ARGS_CLOSE = "<arguments>", "</arguments>"
_JSON = json.JSONDecoder()


def _tag(body: str, tag: str) -> str | None:
    match = re.search(rf"<{tag}>(.*?)</{tag}>", body, re.DOTALL)
    return match.group(1).strip() if match else None


def _json_at(text: str, index: int) -> tuple[Any, int] | None:
    """The JSON value starting at ``index`` (after whitespace) and where it ends, if any."""
    while index < len(text) and text[index].isspace():
        index += 1
    try:
        return _JSON.raw_decode(text, index)
    except (ValueError, RecursionError):
        return None


def _blocks(text: str) -> Iterator[str | None]:
    """The body of each ``<use_mcp_tool>`` block, in order; ``None`` for one never closed
    (a last block that ends the reply right after ``</arguments>`` counts as closed).

    A linear scan, not a regex: JSON arguments are stepped over as JSON, so a string in
    them may contain ``</arguments>`` or ``</use_mcp_tool>`` (code often does), and a
    reply full of unclosed tags costs one pass, not one pass per tag.
    """
    position, close = 0, 0
    while (start := text.find(_OPEN, position)) != -1:
        body_start = start + len(_OPEN)
        if close != -1 and close < body_start:
            close = text.find(_CLOSE, body_start)
        if close == -1:  # no closing tag anywhere after: every block left is unclosed...
            last = text[body_start:]
            if _OPEN not in last and last.rstrip().endswith(_ARGS_CLOSE):
                # ...except a last block whose arguments end the reply: the closing tag
                # was a stop sequence, or the model stopped one tag short.
                yield last
                return
            yield from [None] * text.count(_OPEN, start)
            return
        end = close
        arguments = text.find(_ARGS_OPEN, body_start, close)
        if arguments != -1:
            decoded = _json_at(text, arguments + len(_ARGS_OPEN))
            if decoded is not None and decoded[1] > close:  # the JSON held the closing tag
                end = text.find(_CLOSE, decoded[1])
        reopened = text.find(_OPEN, body_start, arguments if arguments != -1 else end)
        if end == -1 or reopened != -1:
            yield None
            position = reopened if reopened != -1 else len(text)
            continue
        yield text[body_start:end]
        position = end + len(_CLOSE)


class XmlProtocol(ToolProtocol):
    """Under the ``mirothinker`` profile the tool list and the results take MiroThinker's
    form: servers in MiroThinker's order, no server-description line, each schema as
    MiroThinker prints it, and each result's raw text (see :func:`_mirothinker_servers`
    and :meth:`results_message`)."""

    name = "xml"

    @property
    def mirothinker(self) -> bool:
        return self.prompts.profile == "mirothinker"

    def system_section(self, tools: list[ToolInfo]) -> str:
        if not tools:
            return self.prompts.render("xml_no_tools.md")
        listing = _mirothinker_servers(tools) if self.mirothinker else _describe_servers(tools)
        return self.prompts.render("xml_tools.md", servers=listing)

    def specs(self, tools: list[ToolInfo]) -> list[ToolSpec]:
        return []

    def forced_call(self, tool: ToolInfo) -> ForcedCall:
        """The block up to the value of the first argument: the model writes only the
        arguments, and stops where they end."""
        opening = (
            f"{_OPEN}\n<server_name>{tool.server}</server_name>\n"
            f"<tool_name>{tool.name}</tool_name>\n<arguments>\n{{"
        )
        properties = tool.input_schema.get("properties") or {}
        first = next(iter(tool.input_schema.get("required") or properties), None)
        if first is not None:
            string = (properties.get(first) or {}).get("type") == "string"
            opening += json.dumps(first) + (': "' if string else ": ")
        return ForcedCall(opening, stop="</arguments>", closing=f"\n</arguments>\n{_CLOSE}")

    def extract(self, response: LLMResponse, turn: int) -> ParsedCalls:
        text = response.message.content
        calls, malformed = [], []
        for index, body in enumerate(_blocks(text), start=1):
            if body is None:
                malformed.append(f"tool call #{index}: <use_mcp_tool> is not closed")
                continue
            call, problem = _parse_block(body, f"t{turn}c{index}")
            if call is not None:
                calls.append(call)
            else:
                malformed.append(f"tool call #{index}: {problem}")
        return ParsedCalls(calls, malformed, attempted=_OPEN in text)

    def results_message(self, results: list[ToolResult], calls: list[ToolCall]) -> Message:
        by_id = {c.id: c for c in calls}
        if self.mirothinker:
            return Message.text_tool_results(_raw_results(results, by_id), results)
        sections = []
        for result in results:
            call = by_id.get(result.call_id)
            label = f"{call.server_name}.{call.name}" if call else "tool call"
            status = "error" if result.is_error else "result"
            sections.append(f"[{label} {status}]\n{result.content}")
        return Message.text_tool_results("\n\n".join(sections), results)


def _parse_block(body: str, call_id: str) -> tuple[ToolCall | None, str]:
    server, tool = _tag(body, "server_name"), _tag(body, "tool_name")
    if not server or not tool:
        missing = [t for t, v in (("server_name", server), ("tool_name", tool)) if not v]
        return None, f"missing <{'> and <'.join(missing)}>"
    start = body.find(_ARGS_OPEN)
    if start == -1:
        return ToolCall(call_id, tool, {}, server_name=server), ""
    start += len(_ARGS_OPEN)
    decoded = _json_at(body, start)
    if decoded is not None and isinstance(decoded[0], dict):
        return ToolCall(call_id, tool, decoded[0], server, body[start : decoded[1]].strip()), ""
    end = body.rfind(_ARGS_CLOSE)
    if end < start:
        return None, "the <arguments> tag is not closed"
    call = ToolCall.from_raw(call_id, tool, body[start:end].strip() or "{}", server_name=server)
    if call.parse_error:
        return None, f"{server}.{tool}: {call.parse_error}"
    return call, ""


def _describe_servers(tools: list[ToolInfo]) -> str:
    by_server: dict[str, list[ToolInfo]] = {}
    for tool in tools:
        by_server.setdefault(tool.server, []).append(tool)
    blocks = []
    for server, server_tools in by_server.items():
        lines = [f"## Server name: {server}"]
        if server_tools[0].server_description:
            lines.append(f"Server description: {server_tools[0].server_description.strip()}")
        for tool in server_tools:
            lines.append(f"### Tool name: {tool.name}")
            lines.append(f"Description: {tool.description.strip()}")
            lines.append(f"Input JSON schema: {json.dumps(tool.input_schema, ensure_ascii=False)}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


# The order MiroThinker lists its tool servers in, whatever order a preset names them
# in (its settings build the server list in this order); servers it does not have
# follow in the preset's order, then sub-agents.
MIROTHINKER_SERVER_ORDER = (
    "tool-google-search",
    "tool-sogou-search",
    "tool-python",
    "tool-vqa",
    "tool-vqa-os",
    "tool-transcribe",
    "tool-transcribe-os",
    "tool-reasoning",
    "tool-reasoning-os",
    "tool-reader",
    "tool-reading",
    "search_and_scrape_webpage",
    "jina_scrape_llm_summary",
    "stateless_python",
    "task_planner",
)


def _mirothinker_servers(tools: list[ToolInfo]) -> str:
    """The tool list as MiroThinker writes it: a ``## Server name:`` line per server and,
    per tool, its name, its description as the server gave it, and its input schema
    printed as a Python dict (MiroThinker formats the schema object itself, not JSON)."""
    by_server: dict[str, list[ToolInfo]] = {}
    for tool in tools:
        by_server.setdefault(tool.server, []).append(tool)

    def rank(server: str) -> int:
        if server in MIROTHINKER_SERVER_ORDER:
            return MIROTHINKER_SERVER_ORDER.index(server)
        return len(MIROTHINKER_SERVER_ORDER) + server.startswith("agent-")

    blocks = []
    for server in sorted(by_server, key=rank):  # a stable sort keeps the preset's order
        lines = [f"## Server name: {server}"]
        for tool in by_server[server]:
            lines.append(f"### Tool name: {tool.name}")
            lines.append(f"Description: {tool.description}")
            lines.append(f"Input JSON schema: {tool.input_schema!s}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _raw_results(results: list[ToolResult], by_id: dict[str, ToolCall]) -> str:
    """The results of one turn as MiroThinker sends them: each result's own text, one
    after another on separate lines, no label; a failed call says which tool failed."""
    texts = []
    for result in results:
        call = by_id.get(result.call_id)
        if not result.is_error:
            texts.append(result.content)
        elif call is not None:
            texts.append(f"The call to {call.name} on {call.server_name} failed: {result.content}")
        else:
            texts.append(f"The tool call failed: {result.content}")
    return "\n".join(texts)


# -- native ---------------------------------------------------------------------------

_WIRE_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
MAX_WIRE_NAME = 64


def wire_name(tool: ToolInfo) -> str:
    """A function name providers accept (``^[a-zA-Z0-9_-]{1,64}$``) for server + tool."""
    return _WIRE_NAME_UNSAFE.sub("_", f"{tool.server}__{tool.name}")[:MAX_WIRE_NAME]


class NativeProtocol(ToolProtocol):
    name = "native"

    def __init__(self) -> None:
        self._by_wire_name: dict[str, ToolInfo] = {}

    def system_section(self, tools: list[ToolInfo]) -> str:
        return self.prompts.render("native_tools.md") if tools else ""

    def specs(self, tools: list[ToolInfo]) -> list[ToolSpec]:
        self._by_wire_name = {wire_name(t): t for t in tools}
        return [
            ToolSpec(name, info.description, info.input_schema or {"type": "object"})
            for name, info in self._by_wire_name.items()
        ]

    def extract(self, response: LLMResponse, turn: int) -> ParsedCalls:
        calls, seen_ids = [], set()
        for index, call in enumerate(response.message.tool_calls, start=1):
            # Some servers send empty or repeated ids; results pair by id, so make them unique.
            call_id = call.id if call.id and call.id not in seen_ids else f"t{turn}c{index}"
            seen_ids.add(call_id)
            info = self._by_wire_name.get(call.name)
            if info is not None:
                call = replace(call, server_name=info.server, name=info.name)
            calls.append(replace(call, id=call_id))
        # Calls with unreadable arguments stay: each native call needs a result paired by
        # id, and the tool layer answers those with an error saying what was wrong.
        return ParsedCalls(calls, [], attempted=bool(calls))

    def record_calls(self, response: LLMResponse, parsed: ParsedCalls) -> Message:
        # Every native call stays on the wire under its function name, with the id its
        # result will carry.
        wire_calls = response.message.tool_calls
        fixed = tuple(replace(w, id=p.id) for w, p in zip(wire_calls, parsed.calls, strict=True))
        return replace(response.message, tool_calls=fixed)

    def results_message(self, results: list[ToolResult], calls: list[ToolCall]) -> Message:
        return Message.native_tool_results(results)


# -- hermes ---------------------------------------------------------------------------

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
        self._by_name: dict[str, ToolInfo] = {}

    def system_section(self, tools: list[ToolInfo]) -> str:
        self._learn(tools)
        if not tools:
            return self.prompts.render("xml_no_tools.md")
        if self.template_tools:
            return self.prompts.render("hermes_template_tools.md")
        signatures = "\n".join(json.dumps(_function(t), ensure_ascii=False) for t in tools)
        return self.prompts.render("hermes_tools.md", tools=signatures)

    def specs(self, tools: list[ToolInfo]) -> list[ToolSpec]:
        self._learn(tools)
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

    def extract(self, response: LLMResponse, turn: int) -> ParsedCalls:
        """Every call of every block, numbered in order across the reply (a block may
        hold several); each unreadable one is a format error, never a call with ``{}``."""
        text = response.message.content
        blocks = list(_call_blocks(text))
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
            call, problem = self._parse_call(call_text, f"t{turn}c{number}")
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

    def _learn(self, tools: list[ToolInfo]) -> None:
        """The names a call may use for each tool: its wire name (the one we show), and
        ``server.tool`` or a tool name no other server shares (small models shorten)."""
        names: dict[str, ToolInfo] = {}
        bare = [t.name for t in tools]
        for tool in tools:
            if bare.count(tool.name) == 1:
                names[tool.name] = tool
            names[tool.qualified_name] = tool
        self._by_name = names | {wire_name(t): t for t in tools}

    def _parse_call(self, written: _Written, call_id: str) -> tuple[ToolCall | None, str]:
        call = written.value
        if not isinstance(call, dict):
            return None, written.problem
        name = call.get("name")
        if not isinstance(name, str) or not name:
            return None, 'the JSON object has no "name" of a tool'
        tool = self._by_name.get(name)
        if tool is None:
            known = ", ".join(sorted({wire_name(t) for t in self._by_name.values()}))
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


# The one registry of tool-call protocols: agent.tool_protocol / llm.tool_protocol's
# value -> the protocol's class.
PROTOCOLS: dict[ProtocolName, type[ToolProtocol]] = {
    ProtocolName.XML: XmlProtocol,
    ProtocolName.NATIVE: NativeProtocol,
    ProtocolName.HERMES: HermesProtocol,
}


def make_protocol(
    name: str, capabilities: LLMCapabilities | None = None, prompts: PromptSet | None = None
) -> ToolProtocol:
    """The protocol ``name`` names (validate() has refused any other name), for a client
    that can do ``capabilities`` (whether its template writes the tools, for hermes),
    its system section written from ``prompts``."""
    kind = ProtocolName(name)
    protocol: ToolProtocol
    if kind is ProtocolName.HERMES:
        protocol = HermesProtocol(template_tools=bool(capabilities and capabilities.template_tools))
    else:
        protocol = PROTOCOLS[kind]()
    if prompts is not None:
        protocol.prompts = prompts
    return protocol


def specs_digest(specs: list[ToolSpec]) -> str:
    """A sha256 of the tool specs a conversation's requests carry, the same for the same
    tools in the same order (a resumed run compares it with the journaled one)."""
    canonical = [
        {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
        for spec in specs
    ]
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
