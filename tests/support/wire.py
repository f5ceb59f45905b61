"""Reading and writing what goes over the model's wire in end-to-end tests."""

from __future__ import annotations

import json


def xml_call(server: str, tool: str, arguments: dict) -> str:
    """One tool call in the XML protocol, laid out as MiroThinker's models write it."""
    return (
        f"<use_mcp_tool>\n<server_name>{server}</server_name>\n<tool_name>{tool}</tool_name>\n"
        f"<arguments>\n{json.dumps(arguments)}\n</arguments>\n</use_mcp_tool>"
    )


def text_of(message: dict) -> str:
    """The text of one wire message, whether its content is a string or a list of parts."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)
