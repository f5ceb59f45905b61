"""The ``native`` protocol: tools through the provider's function calling.

Tools go out under their wire names; calls come back typed and results go back as tool
messages paired by id.
"""

from __future__ import annotations

from dataclasses import replace

from deepledger.messages import LLMResponse, Message, ToolCall, ToolResult, ToolSpec
from deepledger.tools.protocols.base import ParsedCalls, ToolProtocol, wire_name
from deepledger.tools.types import ToolInfo


class NativeProtocol(ToolProtocol):
    name = "native"

    def system_section(self, tools: list[ToolInfo]) -> str:
        return self.prompts.render("native_tools.md") if tools else ""

    def specs(self, tools: list[ToolInfo]) -> list[ToolSpec]:
        return [
            ToolSpec(name, info.description, info.input_schema or {"type": "object"})
            for name, info in _by_wire_name(tools).items()
        ]

    def extract(self, response: LLMResponse, turn: int, tools: list[ToolInfo]) -> ParsedCalls:
        by_wire_name = _by_wire_name(tools)
        calls, seen_ids = [], set()
        for index, call in enumerate(response.message.tool_calls, start=1):
            # Some servers send empty or repeated ids; results pair by id, so make them unique.
            call_id = call.id if call.id and call.id not in seen_ids else f"t{turn}c{index}"
            seen_ids.add(call_id)
            info = by_wire_name.get(call.name)
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


def _by_wire_name(tools: list[ToolInfo]) -> dict[str, ToolInfo]:
    """Each tool by the function name it is offered under (a later tool whose name
    comes out the same replaces an earlier one, in the specs and in the calls alike)."""
    return {wire_name(t): t for t in tools}
