"""Serving our MCP servers over stdio on the event loop, without a thread per message.

The SDK's ``MCPServer.run()`` reads stdin and writes stdout through anyio's file wrapper,
which hands every line read, every write and every flush to a worker thread. For a server
answering thousands of calls (the search server in a large run) those hand-offs cost
about a quarter of its CPU and serialize behind the GIL. Here the two pipes are read and
written by asyncio directly, and the SDK's own ``stdio_server`` does the rest (framing,
JSON-RPC parsing, the session), so the protocol handling stays the SDK's.

While serving, fd 0 reads from the null device and fd 1 goes to stderr, as with the SDK's
transport: a library that prints, or a child process that inherits the descriptors,
cannot corrupt the wire. When stdin or stdout is not a pipe or a socket (a terminal or
a regular file, say), the SDK's threaded transport is used instead.
"""

from __future__ import annotations

import asyncio
import gc
import io
import os
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import cast

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

# A JSON-RPC message is one line; python tool code or a document can make it long.
MAX_LINE_BYTES = 64 * 1024 * 1024


class _PipeLines:
    """stdin as the SDK's transport reads it: an async iterator of text lines."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while line := await self._reader.readline():
            yield line.decode("utf-8", errors="replace")


class _PipeWriter:
    """stdout as the SDK's transport writes it: ``write`` a line, then ``flush``."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()  # waits only while the pipe is full


def serve_stdio(server: MCPServer) -> None:
    """Run ``server`` over this process's stdin and stdout until stdin closes."""
    try:
        if not (_is_watchable(0) and _is_watchable(1)):
            server.run()
            return
        anyio.run(_serve, server)
    finally:
        # The client waits for this process to exit; the interpreter's last garbage
        # collection over the SDK's many objects took 0.1-0.2 s of that. Clean-up code
        # after serving still runs: only the collector stops looking.
        gc.freeze()


async def _serve(server: MCPServer) -> None:
    # The SDK offers no public way to run an MCPServer on streams of our choosing; the
    # low-level server it wraps is what its own run_stdio_async() runs (mcp 2.3).
    lowlevel = server._lowlevel_server
    loop = asyncio.get_running_loop()
    with _claimed_stdio() as (wire_in, wire_out):
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), wire_in
        )
        write_transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, wire_out
        )
        writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
        # Safe: stdio_server only iterates its stdin's lines and calls its stdout's write
        # and flush, which these provide; its annotation names anyio's file wrapper.
        lines = cast("anyio.AsyncFile[str]", _PipeLines(reader))
        out = cast("anyio.AsyncFile[str]", _PipeWriter(writer))
        try:
            async with stdio_server(lines, out) as (read, write):
                await lowlevel.run(read, write, lowlevel.create_initialization_options())
        finally:
            read_transport.close()
            write_transport.close()


@contextmanager
def _claimed_stdio() -> Iterator[tuple[io.FileIO, io.FileIO]]:
    """The wire as private file objects, with fd 0 and 1 pointed away from it meanwhile."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved = {0: os.dup(0), 1: os.dup(1)}
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
        os.dup2(2, 1)
        yield open(wire_in, "rb", buffering=0), open(wire_out, "wb", buffering=0)  # noqa: SIM115
    finally:
        for fd, original in saved.items():
            os.dup2(original, fd)
            os.close(original)
        os.close(devnull)


def _is_watchable(fd: int) -> bool:
    """Whether ``fd`` is a pipe or a socket, which asyncio can watch (files and devices
    it may not)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
