"""The tool-call protocols, one module each behind one interface (``base.py``).

``xml`` (``<use_mcp_tool>`` blocks, MiroThinker's format), ``native`` (the provider's
function calling) and ``hermes`` (``<tool_call>`` blocks, Qwen's and Hermes' format).
All produce the same :class:`ToolCall` / :class:`ToolResult`. A new protocol is a module
here with a :class:`ToolProtocol` subclass and a line in :data:`PROTOCOLS`.
"""

from __future__ import annotations

import hashlib
import json

from deepledger.config import ProtocolName
from deepledger.llm.base import LLMCapabilities
from deepledger.messages import JSONObject, ToolSpec
from deepledger.prompts import PromptSet
from deepledger.tools.protocols.base import ForcedCall, ParsedCalls, ToolProtocol, wire_name
from deepledger.tools.protocols.hermes import HermesProtocol
from deepledger.tools.protocols.native import NativeProtocol
from deepledger.tools.protocols.xml import XmlProtocol

__all__ = [
    "PROTOCOLS",
    "ForcedCall",
    "HermesProtocol",
    "NativeProtocol",
    "ParsedCalls",
    "ToolProtocol",
    "XmlProtocol",
    "make_protocol",
    "specs_digest",
    "specs_json",
    "wire_name",
]

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


def specs_json(specs: list[ToolSpec]) -> list[JSONObject]:
    """The specs as ``task_started`` journals them and their digest is taken of."""
    return [
        {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
        for spec in specs
    ]


def specs_digest(specs: list[ToolSpec]) -> str:
    """A sha256 of the tool specs a conversation's requests carry, the same for the same
    tools in the same order (a resumed run compares it with the journaled one)."""
    canonical = specs_json(specs)
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
