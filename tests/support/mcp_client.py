"""Driving a real MCP server over stdio from a test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from mcp import Client, StdioServerParameters


async def hold_open(params: StdioServerParameters, stop: asyncio.Event) -> AsyncIterator[Client]:
    """An MCP client kept open by a task of its own until ``stop`` is set.

    pytest-asyncio sets a fixture up and tears it down in different tasks, which the
    client's anyio cancel scopes forbid; a task that owns the client sidesteps that.
    """
    connected: asyncio.Future[Client] = asyncio.get_running_loop().create_future()

    async def own() -> None:
        async with Client(params) as client:
            connected.set_result(client)
            await stop.wait()

    owner = asyncio.create_task(own())
    await asyncio.wait({owner, connected}, return_when=asyncio.FIRST_COMPLETED)
    if owner.done():
        owner.result()  # raises why the server did not start
    yield connected.result()
    stop.set()
    await owner


async def call(client: Client, tool: str, **arguments: object) -> tuple[bool, str]:
    """Call a tool; return whether it failed and its text."""
    result = await client.call_tool(tool, arguments)
    return bool(result.is_error), "\n".join(block.text for block in result.content)
