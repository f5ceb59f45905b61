"""A misbehaving MCP server for tests: crashes, hangs, garbage, errors, big results."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("flaky")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return f"echo: {text} (pid {os.getpid()})"


@server.tool()
def crash() -> str:
    """Kill the server process."""
    os._exit(3)


@server.tool()
def hang() -> str:
    """Never answer."""
    time.sleep(3600)
    return "unreachable"


@server.tool()
async def freeze() -> str:
    """Block the whole server (its event loop), so it cannot even answer a ping."""
    time.sleep(3600)  # noqa: ASYNC251 - blocking the loop is the point
    return "unreachable"


@server.tool()
def garbage() -> str:
    """Write garbage on the protocol channel, then answer."""
    sys.stdout.write("this is not json-rpc\n{broken\n")
    sys.stdout.flush()
    return "answered after garbage"


@server.tool()
def fail() -> str:
    """Raise an error."""
    raise ToolError("the tool failed on purpose")


@server.tool()
def big(size: int = 50_000) -> str:
    """Return a long text."""
    return "y" * size


@server.tool()
def env() -> str:
    """The names of the environment variables the server sees."""
    return " ".join(sorted(os.environ))


CALLS = {"count": 0}
PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
    "AAAABJRU5ErkJggg=="
)


@server.tool()
def counted(query: str) -> str:
    """Answer with how many times any counted call reached this process."""
    CALLS["count"] += 1
    return f"{query}: call {CALLS['count']}"


@server.tool()
def picture() -> list[Any]:  # MCP content blocks
    """A caption and a one-pixel PNG, and a link to a resource."""
    from mcp.types import ImageContent, ResourceLink, TextContent

    return [
        TextContent(type="text", text="a chart"),
        ImageContent(type="image", data=PIXEL, mime_type="image/png"),
        ResourceLink(type="resource_link", uri="file:///data/chart.csv", name="chart data"),
    ]


if __name__ == "__main__":
    server.run()
