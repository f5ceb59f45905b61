"""The ``xml`` protocol: ``<use_mcp_tool>`` blocks in the reply's text.

The system prompt lists every server and tool with its JSON schema and explains the
block; calls are parsed out of the reply's text, and results go back as a user message.
This is the format MiroThinker models are trained on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from deepledger.messages import LLMResponse, Message, ToolCall, ToolResult, ToolSpec
from deepledger.tools.protocols.base import ForcedCall, ParsedCalls, ToolProtocol
from deepledger.tools.types import ToolInfo

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

    def extract(self, response: LLMResponse, turn: int, tools: list[ToolInfo]) -> ParsedCalls:
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
