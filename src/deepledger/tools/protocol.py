"""The two ways a model asks for tools, behind one interface.

- ``xml``: the system prompt lists every server and tool with its JSON schema and
  explains the ``<use_mcp_tool>`` block; calls are parsed out of the reply's text, and
  results go back as a user message. This is the format MiroThinker models are trained on.
- ``native``: tools go to the provider's function calling; calls come back typed and
  results go back as tool messages paired by id.

Both produce the same :class:`ToolCall` / :class:`ToolResult`.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace

from deepledger.messages import LLMResponse, Message, ToolCall, ToolResult, ToolSpec
from deepledger.prompts import render
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


class ToolProtocol(ABC):
    name: str

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


# -- XML ------------------------------------------------------------------------------

_BLOCK = re.compile(r"<use_mcp_tool>(.*?)</use_mcp_tool>", re.DOTALL)
_OPEN_TAG = "<use_mcp_tool>"


def _tag(body: str, tag: str) -> str | None:
    match = re.search(rf"<{tag}>(.*?)</{tag}>", body, re.DOTALL)
    return match.group(1).strip() if match else None


class XmlProtocol(ToolProtocol):
    name = "xml"

    def system_section(self, tools: list[ToolInfo]) -> str:
        if not tools:
            return render("xml_no_tools.md")
        return render("xml_tools.md", servers=_describe_servers(tools))

    def specs(self, tools: list[ToolInfo]) -> list[ToolSpec]:
        return []

    def extract(self, response: LLMResponse, turn: int) -> ParsedCalls:
        text = response.message.content
        calls, malformed = [], []
        for index, match in enumerate(_BLOCK.finditer(text), start=1):
            call, problem = _parse_block(match.group(1), f"t{turn}c{index}")
            if call is not None:
                calls.append(call)
            else:
                malformed.append(f"tool call #{index}: {problem}")
        closed = len(_BLOCK.findall(text))
        if text.count(_OPEN_TAG) > closed:
            malformed.append("a <use_mcp_tool> block is not closed with </use_mcp_tool>")
        return ParsedCalls(calls, malformed, attempted=_OPEN_TAG in text)

    def results_message(self, results: list[ToolResult], calls: list[ToolCall]) -> Message:
        by_id = {c.id: c for c in calls}
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
    raw = _tag(body, "arguments")
    if raw is None and "<arguments>" in body:
        return None, "the <arguments> tag is not closed"
    call = ToolCall.from_raw(call_id, tool, raw or "{}", server_name=server)
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
        for tool in server_tools:
            lines.append(f"### Tool name: {tool.name}")
            lines.append(f"Description: {tool.description.strip()}")
            lines.append(f"Input JSON schema: {json.dumps(tool.input_schema, ensure_ascii=False)}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


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
        return render("native_tools.md") if tools else ""

    def specs(self, tools: list[ToolInfo]) -> list[ToolSpec]:
        self._by_wire_name = {wire_name(t): t for t in tools}
        return [
            ToolSpec(name, info.description, info.input_schema or {"type": "object"})
            for name, info in self._by_wire_name.items()
        ]

    def extract(self, response: LLMResponse, turn: int) -> ParsedCalls:
        calls = []
        for call in response.message.tool_calls:
            info = self._by_wire_name.get(call.name)
            if info is not None:
                call = replace(call, server_name=info.server, name=info.name)
            calls.append(call)
        # Calls with unreadable arguments stay: each native call needs a result paired by
        # id, and the tool layer answers those with an error saying what was wrong.
        return ParsedCalls(calls, [], attempted=bool(calls))

    def record_calls(self, response: LLMResponse, parsed: ParsedCalls) -> Message:
        # Every native call must keep its id on the wire, usable or not, so each one
        # gets a result; the stored message keeps them all.
        return response.message

    def results_message(self, results: list[ToolResult], calls: list[ToolCall]) -> Message:
        return Message.native_tool_results(results)


def make_protocol(name: str) -> ToolProtocol:
    protocols: dict[str, type[ToolProtocol]] = {"xml": XmlProtocol, "native": NativeProtocol}
    return protocols[name]()
