"""One live session with one MCP server: its start, its calls, its restart.

An :class:`McpConnection` is started on first use (or in the background, when its tool
list is known ahead), lists its tools once, and is never a new process per call. A call
that fails or times out leaves the server alone if it still answers a request; a server
that does not (it crashed, hangs, or spoke something that is not MCP) is restarted. If
it fails again before any call has succeeded since that restart (or the restart fails),
it is given up on for the run and its calls say it is unavailable: one restart per
failure, however long the run. A start failure says why in full: the server, its
command, how it ended, the last lines of its stderr and where its whole log is.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from deepledger.config import ToolServerConfig, Transport
from deepledger.errors import DeepLedgerError
from deepledger.messages import JSONObject, ToolResult
from deepledger.tools.given_up import note_given_up
from deepledger.tools.results import result_parts
from deepledger.tools.sdk import load_sdk
from deepledger.tools.types import ToolInfo, error_result

if TYPE_CHECKING:
    from mcp import Client

    from deepledger.tools.stdio_transport import ServerProcess

log = logging.getLogger(__name__)

PING_TIMEOUT_SECONDS = 5.0  # how long a failed server gets to show it still answers
# Variables a stdio server always gets, besides those its config names.
BASE_ENV = ("PATH", "HOME")


class ToolServerStartError(DeepLedgerError):
    """A tool server could not be started or did not complete the MCP handshake."""


def resolve_command(command: str) -> str:
    """``python`` is this interpreter; other bare names are looked up next to it first, so
    servers installed in the same environment are found even when it is not on PATH."""
    if command == "python":
        return sys.executable
    if os.sep in command:
        return command
    beside = Path(sys.executable).parent / command
    return str(beside) if beside.exists() else (shutil.which(command) or command)


class McpConnection:
    """One session with one MCP server, owned by a background task.

    The MCP client's context (its task group, the subprocess) must be entered and left in
    one task, so a dedicated owner task holds it open until :meth:`close`; calls from any
    task go through the open client.
    """

    def __init__(self, name: str, cfg: ToolServerConfig, errlog: TextIO | None = None) -> None:
        self.name = name
        self.cfg = cfg
        self.errlog = errlog or sys.stderr
        self.tools: list[ToolInfo] = []
        self.restarts = 0
        self.restarted_since_success = False
        self.failed_reason: str | None = None
        # Why it was given up on for the run, after it had run (see _restart_after_failure):
        # every task that wants it from then on is an error (tools/given_up.py).
        self.given_up: str | None = None
        self.in_flight = 0  # calls under way, for spreading calls over a server's instances
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._generation = 0
        self._process: ServerProcess | None = None  # the stdio process of the last start
        self._background: asyncio.Task[None] | None = None  # a start no caller waits for
        # Told of each successful start (the manager keeps the tool list) and of a
        # background start that failed (the manager drops the cached list).
        self.on_started: Callable[[McpConnection], None] | None = None
        self.on_background_failure: Callable[[McpConnection, str], None] | None = None

    @property
    def ever_started(self) -> bool:
        return self._generation > 0

    @property
    def generation(self) -> int:
        """The session's number: one more at each (re)start; state dies with a session."""
        return self._generation

    @property
    def starting(self) -> bool:
        """A start nobody waits for is under way (:meth:`start_in_background`)."""
        return self._background is not None and not self._background.done()

    @property
    def exited(self) -> bool:
        """Its stdio server process has ended, noticed or not (an idle session does not)."""
        return self._process is not None and self._process.exited

    @property
    def alive(self) -> bool:
        return self._client is not None and self._owner is not None and not self._owner.done()

    async def ensure_started(self) -> None:
        async with self._lock:
            if self.failed_reason:
                raise ToolServerStartError(self.failed_reason)
            if not self.alive:
                try:
                    await self._start()
                except ToolServerStartError as exc:
                    self.failed_reason = str(exc)  # later tasks skip it at once
                    raise

    def start_in_background(self) -> None:
        """Start the server without waiting for it: a call waits for the start (the
        lock), and :meth:`close` cancels a start still under way."""
        if self.alive or self.failed_reason or self._background is not None:
            return
        self._background = asyncio.create_task(
            self._start_unwatched(), name=f"mcp-start:{self.name}"
        )

    async def wait_started(self) -> None:
        """Wait until a background start under way has ended, however it ended."""
        background = self._background
        if background is not None:
            await asyncio.wait({background})

    async def _start_unwatched(self) -> None:
        try:
            await self.ensure_started()
        except ToolServerStartError as exc:  # its calls say it is unavailable
            if self.on_background_failure is not None:
                self.on_background_failure(self, str(exc))

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp:{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.cfg.startup_timeout_seconds)
        except asyncio.CancelledError:  # closed while starting: no grace for a bare start
            if self._process is not None:
                self._process.hurry = True
            await self._stop_owner(grace=0)
            raise
        except TimeoutError:
            await self._stop_owner(grace=0)
            raise ToolServerStartError(
                self._start_failure(
                    f"did not complete the MCP handshake within "
                    f"{self.cfg.startup_timeout_seconds:g}s "
                    f"(tools.{self.name}.startup_timeout_seconds)",
                    timed_out=True,
                )
            ) from None
        self._generation += 1
        if self.on_started is not None:
            self.on_started(self)

    async def _own(self, ready: asyncio.Future[None]) -> None:
        try:
            await load_sdk()
            from mcp import Client

            async with Client(self._target()) as client:
                listed = await client.list_tools()
                self.tools = [
                    ToolInfo(
                        self.name,
                        t.name,
                        t.description or "",
                        dict(t.input_schema or {}),
                        self.cfg.description,
                    )
                    for t in listed.tools
                ]
                self._client = client
                ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(ToolServerStartError(self._start_failure(_cause(exc))))
            else:
                log.warning("tool server %r stopped: %s", self.name, _cause(exc))
        finally:
            self._client = None

    def _target(self) -> Any:
        """What the MCP client connects through, by ``tools.<name>.transport``."""
        return TRANSPORTS[Transport(self.cfg.transport)](self)

    def _stdio_target(self) -> Any:
        from mcp.client.stdio import get_default_environment

        from deepledger.tools.stdio_transport import ServerProcess, capped_stdio_client

        command = resolve_command(self.cfg.command or "")  # validate() refuses an empty one
        self._process = ServerProcess([command, *self.cfg.args], _log_path(self.errlog))
        return capped_stdio_client(
            command,
            list(self.cfg.args),
            get_default_environment() | self._env(),
            name=self.name,
            max_message_bytes=self.cfg.max_message_bytes,
            errlog=self.errlog,
            watch=self._process,
        )

    def _sse_target(self) -> Any:
        from mcp.client.sse import sse_client

        return sse_client(self.cfg.url or "")  # validate() refuses an empty one

    def _streamable_http_target(self) -> Any:
        return self.cfg.url  # the client takes the URL itself

    def _start_failure(self, cause: str, timed_out: bool = False) -> str:
        """The whole story of a failed start: what went wrong first (how the process
        ended says more than the client's "Connection closed"), then the details."""
        process = self._process if self.cfg.transport == Transport.STDIO else None
        if process is None:
            where = f"\n  url: {self.cfg.url}" if self.cfg.url else ""
            return f"tool server {self.name!r} failed to start: {cause}{where}"
        ending = process.ending()
        if timed_out:
            first = f"tool server {self.name!r} {cause}" + (f"; {ending}" if ending else "")
        elif ending and not process.signalled:
            first = f"tool server {self.name!r} failed to start: {ending} before the handshake"
        else:
            first = f"tool server {self.name!r} failed to start: {cause}"
        return f"{first}\n{process.details()}"

    def _stopped_answering(self, then: str) -> str:
        """Why the server is being restarted (or given up on), with what its process
        showed: a crash's traceback is in its stderr."""
        process = self._process if self.cfg.transport == Transport.STDIO else None
        ending = process.ending() if process else None
        text = f"tool server {self.name!r} stopped answering" + (f" ({ending})" if ending else "")
        return f"{text}; {then}" + (f"\n{process.details()}" if process else "")

    def _env(self) -> dict[str, str]:
        """Only what the config names (plus PATH/HOME); a missing optional one is skipped."""
        env = {k: os.environ[k] for k in (*BASE_ENV, *self.cfg.env_from) if k in os.environ}
        env.update({k: str(v) for k, v in self.cfg.env.items()})
        return env

    async def call(self, tool: str, arguments: JSONObject) -> ToolResult:
        """Run one tool. Failures come back as error results, never as exceptions."""
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        try:
            await self.ensure_started()
        except ToolServerStartError as exc:
            self._note_if_given_up()
            return error_result(f"tool server {self.name!r} is unavailable: {headline(str(exc))}")
        client, generation = self._client, self._generation
        timeout = self.cfg.call_timeout_seconds
        self.in_flight += 1
        try:
            # asyncio.timeout rather than wait_for: no extra task per call (hundreds of
            # tasks call tools at once).
            async with asyncio.timeout(timeout):
                if client is None:  # the session ended between its start and this call
                    raise ConnectionError("the session is closed")
                result = await client.call_tool(tool, arguments)
        except TimeoutError:
            problem = f"{self.name}.{tool} timed out after {timeout:g}s."
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:  # the server answered with a protocol error
                return error_result(f"{self.name}.{tool} failed: {exc.message}")
            problem = f"{self.name}.{tool} failed: the server closed the connection."
        except Exception as exc:  # a client-side check failed, or the process died
            problem = f"{self.name}.{tool} failed: {_cause(exc)}"
        else:
            self.restarted_since_success = False
            text, images = result_parts(result, f"{self.name}.{tool}")
            return ToolResult("", text, bool(result.is_error), tool, images=images)
        finally:
            self.in_flight -= 1
        told = await self._recover(client, generation)
        self._note_if_given_up()  # given up on during this call, or by a concurrent one
        return error_result(problem + told)

    def _note_if_given_up(self) -> None:
        if self.given_up is not None:
            note_given_up(self.name, self.given_up)

    async def _recover(self, client: Client | None, generation: int) -> str:
        """After a failed call: keep a server that still answers, else restart it (once per
        failure). The returned sentence tells the model what happened."""
        if client is None:  # no session to ask
            return await self._restart_after_failure(generation)
        try:
            # MCP's ping is gone from the current protocol; an uncached tools/list is the
            # cheapest request every server must still answer.
            await asyncio.wait_for(client.list_tools(cache_mode="bypass"), PING_TIMEOUT_SECONDS)
            return ""
        except Exception:  # any failure to answer a ping means the session is gone
            return await self._restart_after_failure(generation)

    async def _restart_after_failure(self, generation: int) -> str:
        async with self._lock:
            if generation != self._generation:  # another call already restarted it
                return " The server has been restarted; try again."
            await self._stop_owner()
            if self.restarted_since_success:
                reason = self._stopped_answering(
                    "it failed again right after a restart, so it is given up on for the run"
                )
                log.warning("%s", reason)
                self.failed_reason = self.given_up = reason
                return " The server has failed repeatedly and is now unavailable."
            log.warning("%s", self._stopped_answering("restarting it"))
            self.restarts += 1
            self.restarted_since_success = True
            try:
                await self._start()
            except ToolServerStartError as exc:
                # It had run: losing it now is losing tools the run was counting on.
                self.failed_reason = self.given_up = (
                    f"{headline(str(exc))} (restarting it after it stopped answering), so "
                    f"it is given up on for the run{_details(str(exc))}"
                )
                return " Restarting the server failed; it is now unavailable."
        return " The server was restarted (any state it held is lost)."

    async def _stop_owner(self, grace: float = 10.0) -> None:
        """Let the owner task close the session; cancel it if that takes over ``grace``."""
        self._stop.set()
        owner = self._owner
        if owner is not None and not owner.done():
            done, _ = await asyncio.wait({owner}, timeout=grace)
            if not done:
                owner.cancel()
                # gather with return_exceptions: the owner's own CancelledError is data
                # here, while a cancellation of *this* task still propagates.
                await asyncio.gather(owner, return_exceptions=True)
        self._client = None

    async def close(self) -> None:
        background, self._background = self._background, None
        if background is not None and not background.done():
            # A start nobody waited for is cut short, not waited out (up to
            # startup_timeout_seconds): the server has served nothing yet.
            background.cancel()
            await asyncio.gather(background, return_exceptions=True)
        async with self._lock:
            await self._stop_owner()


# The one registry of transports: tools.<name>.transport -> how a session connects.
TRANSPORTS: dict[Transport, Callable[[McpConnection], Any]] = {
    Transport.STDIO: McpConnection._stdio_target,
    Transport.SSE: McpConnection._sse_target,
    Transport.STREAMABLE_HTTP: McpConnection._streamable_http_target,
}


def _cause(exc: BaseException) -> str:
    """What went wrong, out of the task groups the MCP client wraps failures in (their
    own message, "unhandled errors in a TaskGroup (1 sub-exception)", says nothing):
    every distinct failure inside, cancellations left out."""
    seen: dict[str, None] = {}
    for leaf in _leaves(exc):
        seen[_describe(leaf)] = None
    return "; ".join(seen) or type(exc).__name__


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        leaves = [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
        return [e for e in leaves if not isinstance(e, asyncio.CancelledError)] or leaves
    return [exc]


def _describe(exc: BaseException) -> str:
    from mcp import MCPError
    from mcp.types import CONNECTION_CLOSED

    if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
        return "the server closed the connection before the handshake"
    if isinstance(exc, OSError) and exc.filename:  # the command could not be run
        return f"cannot run {exc.filename}: {exc.strerror or exc}"
    return str(exc) or type(exc).__name__


def _details(message: str) -> str:
    """The lines of a failure after its headline (the command, stderr), if any."""
    _, newline, rest = message.partition("\n")
    return newline + rest


def headline(message: str) -> str:
    """The first line of a start failure: what the model is told (the stderr, the
    command and the log's path are for the person running the suite)."""
    return message.split("\n", 1)[0]


def _log_path(errlog: TextIO | None) -> str | None:
    """The file a server's stderr goes to, when it is a named file (not our stderr)."""
    name = getattr(errlog, "name", None)
    return name if isinstance(name, str) and not name.startswith("<") else None
