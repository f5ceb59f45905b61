"""Our servers' stdio transport: pipes served on the event loop, stray output kept off
the wire, and the SDK's transport when stdin is not a pipe."""

from __future__ import annotations

import json
import subprocess
import sys

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support.tool_servers import CHATTY

SERVER = CHATTY


async def test_stray_stdout_of_a_tool_and_its_children_goes_to_stderr(tmp_path):
    errlog = (tmp_path / "stderr.txt").open("w+")
    params = StdioServerParameters(command=sys.executable, args=[SERVER])
    async with Client(stdio_client(params, errlog=errlog)) as client:
        first = await client.call_tool("shout", {"word": "hi"})
        second = await client.call_tool("shout", {"word": "again"})
    assert [r.content[0].text for r in (first, second)] == ["HI", "AGAIN"]
    errlog.seek(0)
    stderr = errlog.read()
    assert "stray print of hi" in stderr and "stray child output" in stderr


def test_a_regular_file_as_stdin_is_served_by_the_sdk_transport(tmp_path):
    """asyncio cannot watch a regular file; such a server still answers."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps(initialize) + "\n")
    with requests.open() as stdin:
        done = subprocess.run(
            [sys.executable, SERVER], stdin=stdin, capture_output=True, text=True, timeout=60
        )
    reply = json.loads(done.stdout.splitlines()[0])
    assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "chatty"
