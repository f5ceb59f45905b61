"""An MCP server whose tool writes to stdout, as careless tool code or a child process
would: for the tests of deepledger's stdio transport."""

from __future__ import annotations

import subprocess
import sys

from mcp.server.mcpserver import MCPServer

from deepledger.tools.servers._stdio import serve_stdio

server = MCPServer("chatty")


@server.tool(name="shout", structured_output=False)
def shout(word: str) -> str:
    print(f"stray print of {word}")  # must not reach the JSON-RPC wire
    sys.stdout.flush()
    subprocess.run(["echo", "stray child output"], check=True)  # inherits fd 1
    return word.upper()


if __name__ == "__main__":
    serve_stdio(server)
