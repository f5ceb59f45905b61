"""What every tool-call protocol shares: the interface, the parsed calls, a forced call,
and the function names tools go by on the wire.

A protocol holds no state about the tools: :meth:`ToolProtocol.specs` and
:meth:`ToolProtocol.system_section` only read the tool list they are given, and
:meth:`ToolProtocol.extract` is given the same list, so what a reply's calls resolve to
never depends on which method was called before.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace

from deepledger.messages import LLMResponse, Message, ToolCall, ToolResult, ToolSpec
from deepledger.prompts import PromptSet
from deepledger.tools.types import ToolInfo


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
    def extract(self, response: LLMResponse, turn: int, tools: list[ToolInfo]) -> ParsedCalls:
        """The calls of ``response``, numbered for ``turn``; ``tools`` are those the
        request offered (what a call's name may resolve to)."""

    @abstractmethod
    def results_message(self, results: list[ToolResult], calls: list[ToolCall]) -> Message: ...

    def record_calls(self, response: LLMResponse, parsed: ParsedCalls) -> Message:
        """The assistant message as stored in history, with the calls we will answer."""
        return replace(response.message, tool_calls=tuple(parsed.calls))

    def forced_call(self, tool: ToolInfo) -> ForcedCall | None:
        """How to make a reply call ``tool``; ``None`` when calls are not text this
        protocol can prefill."""
        return None


_WIRE_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
MAX_WIRE_NAME = 64


def wire_name(tool: ToolInfo) -> str:
    """A function name providers accept (``^[a-zA-Z0-9_-]{1,64}$``) for server + tool."""
    return _WIRE_NAME_UNSAFE.sub("_", f"{tool.server}__{tool.name}")[:MAX_WIRE_NAME]
