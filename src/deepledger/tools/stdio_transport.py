"""The stdio transport to an MCP server, with every message capped while it streams in.

The MCP SDK's own stdio client gathers each line the server writes in full before it
looks at it, so a tool that answers with 50 MB is read whole, held in memory several
times over (text, then JSON, then the result object) and only then cut: 30 s of CPU and
a few hundred megabytes for one call, enough to take a loaded machine down. Here the
server's stdout is read in chunks and assembled into lines by :class:`LineAssembler`,
which stops keeping a line once it passes ``max_message_bytes``: the rest is read and
thrown away as it arrives, and the oversized answer is replaced by an error result for
the same request, which the model sees like any failed call ("larger than the 16 MiB
limit"). The request id is found at the start of the line or in its last bytes (servers
put it either side of the result); a message whose id cannot be found is dropped, and
its call times out as a hung call would.

The rest follows the protocol's stdio transport: one JSON-RPC message a line on stdin
and stdout, the server's stderr to a log file, and on close: stdin closed, a grace
period, then SIGTERM and SIGKILL to the server's process group. A deepledger that dies
without that (SIGKILL, the OOM killer) takes the server with it: the kernel kills it
(``deepledger/processes.py``).

The server's stderr comes through a pipe rather than straight into the log file, so each
process's last lines are known (:class:`ServerProcess`, with its exit status): a server
that dies or hangs before the handshake is reported with what it said, not with the MCP
client's "Connection closed".
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import TextIO, TypeAlias

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.shared.message import SessionMessage

from deepledger.processes import die_with_parent

# What the server says (or a line that was not JSON-RPC), and what is said to it.
Incoming: TypeAlias = SessionMessage | Exception

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 256 * 1024
ID_WINDOW_BYTES = 4096  # how much of an oversized line's head and tail is kept to find its id
EXIT_GRACE_SECONDS = 2.0  # after stdin closes, before SIGTERM (then as long before SIGKILL)
STDERR_TAIL_LINES = 10  # of a server's stderr, kept for the message when it fails
STDERR_LINE_CHARS = 400  # longer stderr lines are cut in that message (not in the log)
_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,20})')


@dataclass(frozen=True)
class Oversized:
    """A line that passed the cap: its size, and the request id found in it (if any)."""

    size: int
    request_id: str | int | None


class LineAssembler:
    """Bytes in, whole lines (or :class:`Oversized` markers) out, never holding more
    than ``max_bytes`` of one line."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._head = b""  # of a line past the cap: its first and last bytes
        self._tail = b""

    def feed(self, chunk: bytes) -> Iterator[bytes | Oversized]:
        while chunk:
            end = chunk.find(b"\n")
            piece, chunk = (chunk, b"") if end == -1 else (chunk[:end], chunk[end + 1 :])
            self._add(piece)
            if end != -1:
                yield self._finish()

    def _add(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._head or self._size > self.max_bytes:
            if not self._head:  # the line just passed the cap: keep only its ends from now
                whole = b"".join(self._parts) + piece
                self._head, self._tail = whole[:ID_WINDOW_BYTES], whole[-ID_WINDOW_BYTES:]
                self._parts = []
            else:
                self._tail = (self._tail + piece)[-ID_WINDOW_BYTES:]
            return
        self._parts.append(piece)

    def _finish(self) -> bytes | Oversized:
        if self._head:
            outcome: bytes | Oversized = Oversized(self._size, _request_id(self._head, self._tail))
        else:
            outcome = b"".join(self._parts)
        self._parts, self._size, self._head, self._tail = [], 0, b"", b""
        return outcome


def _request_id(head: bytes, tail: bytes) -> str | int | None:
    """The JSON-RPC id of a response: the envelope's, written before its ``result`` (or
    ``error``) or as the very last member of the line; an ``"id"`` inside the result
    itself is never taken for it."""
    body = re.search(rb'"(result|error)"\s*:', head)
    before = head[: body.start()] if body else b""
    if match := _ID.search(before):
        return _json_value(match.group(1))
    last = re.search(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,20})\s*}\s*$', tail[-400:])
    return _json_value(last.group(1)) if last else None


def _json_value(raw: bytes) -> str | int | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    # The patterns match only a JSON string or integer, so nothing else can come back.
    return value if isinstance(value, str | int) else None


def oversized_reply(oversized: Oversized, limit: int, server: str) -> SessionMessage:
    """The error result that stands in for an answer too large to read."""
    text = (
        f"The result from {server} was {_size(oversized.size)}, larger than the "
        f"{_size(limit)} a tool result may be (tools.{server}.max_message_bytes); "
        "it was dropped unread. Ask for less: a page, a range, a summary."
    )
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], is_error=True
    ).model_dump(by_alias=True, exclude_none=True)
    message = {"jsonrpc": "2.0", "id": oversized.request_id, "result": result}
    return SessionMessage(types.jsonrpc_message_adapter.validate_python(message))


def _size(count: int) -> str:
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 1024:.0f} KiB"


@dataclass
class ServerProcess:
    """What one server process showed of itself: the command, the end of its stderr and
    how it ended. Filled in by :func:`capped_stdio_client`; read when the server fails."""

    argv: list[str]
    log_path: str | None = None  # where its whole stderr is written, if a file
    pid: int | None = None  # None: the command could not be run at all
    returncode: int | None = None
    signalled: str | None = None  # the signal deepledger had to send to stop it
    # Set when the session is closed while the server is still starting (nothing asked
    # it anything yet, so it has nothing to finish): it gets SIGTERM at once instead of
    # EXIT_GRACE_SECONDS after its stdin closes.
    hurry: bool = False
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))
    _partial: str = ""
    _os_process: asyncio.subprocess.Process | None = None

    @property
    def exited(self) -> bool:
        """The process has ended (the event loop saw it), whether or not its session
        has noticed yet: a session asks nothing of an idle server."""
        return self._os_process is not None and self._os_process.returncode is not None

    def take(self, text: str) -> None:
        """Another piece of stderr: whole lines go to the tail, the rest waits."""
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()[:STDERR_LINE_CHARS]
        self.tail.extend(line.rstrip()[:STDERR_LINE_CHARS] for line in lines if line.strip())

    def finish(self) -> None:
        if self._partial.strip():
            self.tail.append(self._partial.rstrip())
        self._partial = ""

    @property
    def command(self) -> str:
        text = shlex.join(self.argv).replace("\n", "\\n")  # a `python -c` script: one line
        return text if len(text) <= 300 else text[:300] + " ..."

    def ending(self) -> str | None:
        """How the process ended, when it did: by itself or stopped by deepledger."""
        code = self.returncode
        if code is None:
            return None
        if self.signalled:
            return f"it was stopped ({self.signalled})"
        if code < 0:
            return f"it was killed by {_signal_name(-code)}"
        return f"it exited with status {code}"

    def details(self) -> str:
        """The command, the stderr tail and the log's path, as indented lines."""
        lines = [f"  command: {self.command}"]
        if self.pid is None:
            return lines[0]
        if self.tail:
            lines.append(f"  its last {len(self.tail)} stderr lines:")
            lines += [f"    | {line}" for line in self.tail]
        else:
            lines.append("  it wrote nothing to stderr")
        if self.log_path:
            lines.append(f"  full log: {self.log_path}")
        return "\n".join(lines)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@contextlib.asynccontextmanager
async def capped_stdio_client(
    command: str,
    args: list[str],
    env: dict[str, str],
    *,
    name: str,
    max_message_bytes: int,
    errlog: TextIO | None = None,
    watch: ServerProcess | None = None,
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[Incoming], MemoryObjectSendStream[SessionMessage]]
]:
    """Start the server and yield the (read, write) streams an MCP ``Client`` takes.
    ``watch`` (else a private one) records its stderr tail and how it ended."""
    watch = watch if watch is not None else ServerProcess([command, *args])
    process = await asyncio.create_subprocess_exec(
        command,
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        # Its own session: a terminal's Ctrl-C reaches deepledger alone, which stops the
        # server in order (_stop); and one killpg ends all it started.
        start_new_session=True,
        # And killed by the kernel should deepledger die without stopping it. This forks
        # in the event loop's thread, which lives as long as the server (processes.py).
        preexec_fn=die_with_parent(),
    )
    watch.pid, watch._os_process = process.pid, process
    incoming_writer, incoming = anyio.create_memory_object_stream[Incoming](0)
    outgoing, outgoing_reader = anyio.create_memory_object_stream[SessionMessage](0)
    pipes = _Pipes(process, name, max_message_bytes)
    stderr_read = anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(pipes.read, incoming_writer)
        tasks.start_soon(pipes.write, outgoing_reader)
        tasks.start_soon(pipes.copy_stderr, errlog, watch, stderr_read)
        try:
            yield incoming, outgoing
        finally:
            with anyio.CancelScope(shield=True):
                await outgoing.aclose()
                watch.signalled = await _stop(process, patient=not watch.hurry)
                watch.returncode = process.returncode
                with anyio.move_on_after(EXIT_GRACE_SECONDS):  # a child may hold the pipe
                    await stderr_read.wait()
                await incoming.aclose()
            tasks.cancel_scope.cancel()


@dataclass
class _Pipes:
    process: asyncio.subprocess.Process
    name: str
    max_message_bytes: int

    async def read(self, sink: MemoryObjectSendStream[Incoming]) -> None:
        """stdout → messages, each line capped; ends when the server closes stdout."""
        stdout = self.process.stdout
        assert stdout is not None
        assembler = LineAssembler(self.max_message_bytes)
        async with sink:
            try:
                while chunk := await stdout.read(READ_CHUNK_BYTES):
                    for line in assembler.feed(chunk):
                        message = self._message(line)
                        if message is not None:
                            await sink.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # the session is gone; the process is being stopped

    def _message(self, line: bytes | Oversized) -> Incoming | None:
        if isinstance(line, Oversized):
            if line.request_id is None:
                log.warning("%s sent a %d-byte message with no id; dropped", self.name, line.size)
                return None
            log.warning("%s sent a %d-byte result; replaced by an error", self.name, line.size)
            return oversized_reply(line, self.max_message_bytes, self.name)
        if not line.strip():
            return None
        try:
            return SessionMessage(types.jsonrpc_message_adapter.validate_json(line))
        except ValueError as exc:  # not JSON-RPC: the session reports it, as the SDK's does
            return exc

    async def copy_stderr(
        self, errlog: TextIO | None, watch: ServerProcess, done: anyio.Event
    ) -> None:
        """stderr → the log (ours when there is none) and the watch's tail, until EOF."""
        stderr = self.process.stderr
        assert stderr is not None
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while chunk := await stderr.read(READ_CHUNK_BYTES):
                text = decoder.decode(chunk)
                watch.take(text)
                _append(errlog if errlog is not None else sys.stderr, text)
        finally:
            watch.finish()
            done.set()

    async def write(self, source: MemoryObjectReceiveStream[SessionMessage]) -> None:
        """Messages → stdin, one line each."""
        stdin = self.process.stdin
        assert stdin is not None
        async with source:
            try:
                async for message in source:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    stdin.write(data.encode("utf-8") + b"\n")
                    await stdin.drain()
            except (ConnectionError, OSError, anyio.ClosedResourceError):
                return  # the server is gone; its calls fail through the read side


async def _stop(process: asyncio.subprocess.Process, patient: bool = True) -> str | None:
    """Close stdin, let the server exit (when ``patient``), then signal its process
    group. The signal it took to stop it, or None when it exited by itself."""
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    sent = None
    steps = (None, signal.SIGTERM, signal.SIGKILL) if patient else (signal.SIGTERM, signal.SIGKILL)
    for signum in steps:
        if signum is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signum)
                sent = signum.name
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), EXIT_GRACE_SECONDS)
            return sent
    return sent


def _append(log_file: TextIO, text: str) -> None:
    """A server's stderr into its log: a log that cannot be written must not stop the
    server (its stderr would fill and block it), so a failed write is dropped."""
    try:
        log_file.write(text)
        log_file.flush()
    except (OSError, ValueError):  # a full disk, a closed log
        pass
