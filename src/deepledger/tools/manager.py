"""MCP tool servers as long-lived sessions, shared where that is safe.

- One :class:`McpConnection` is one live session with one server, started on first use,
  its tools listed once. It is never a new process per call.
- :class:`ToolManager` belongs to a run. Servers with ``scope: shared`` (stateless:
  search, reader) get ``instances`` connections (default 1) for every task of the run,
  so hundreds of parallel tasks do not mean hundreds of processes; each call goes to
  the least busy instance. Servers with ``scope: task`` (stateful:
  python) get one connection per task, so state never crosses tasks.
- :class:`TaskTools` is one agent's view: the servers it names, minus its blacklist,
  plus in-process tools (sub-agents). Its ``call`` never raises for a tool's failure:
  an ``is_error`` result, a timeout, a crashed server, an unknown tool or bad arguments
  all come back as a :class:`ToolResult` with ``is_error`` the model can read.

A call that fails or times out leaves the server alone if it still answers a request; a
server that does not (it crashed, hangs, or spoke something that is not MCP) is
restarted. If it fails again before any call has succeeded since that restart (or the
restart fails), it is given up on for the run and its calls say it is unavailable: one
restart per failure, however long the run. A server given up on is an error of every
task that wanted it from then on, the one it was given up on during included
(``tools/given_up.py``): those tasks ran without its tools. A server that cannot start
is left out of the task (logged once per run; later tasks do not try a shared server
again), unless its config says ``required: true``, when the task fails. The message
says why in full: the server, its command, how it ended, the last lines of its stderr
and where its whole log is (``tool_servers/<name>.stderr.log`` in the run directory);
the model is told only that the server is unavailable.

With a :class:`~deepledger.tools.list_cache.ToolListCache`, a stdio server whose tool
list is known (from its last run, or from a session of this run) is not waited for: the
task gets that list at once and the server starts in the background. A call that comes
before it is ready waits for it; if it then fails to start, its calls get the error a
server that failed before the task gets, and its cached list is dropped; closing a
session that is still starting stops the process at once. ``required`` servers are
always waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import json
import logging
import os
import shutil
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from deepledger.config import Scope, ToolServerConfig, Transport
from deepledger.errors import DeepLedgerError, EndpointRejectedError
from deepledger.messages import JSONObject, ToolCall, ToolResult, sorted_json
from deepledger.store.layout import server_log
from deepledger.tools.given_up import note_given_up
from deepledger.tools.repair import (
    CREATE_SANDBOX,
    CallRepairs,
    Repair,
    needs_sandbox,
    rename_code,
    route,
    sandbox_ids,
    written_name,
)
from deepledger.tools.results import for_model, result_parts

if TYPE_CHECKING:
    from mcp import Client

    from deepledger.tools.archive import ResultArchive
    from deepledger.tools.list_cache import ListedTool, ToolListCache
    from deepledger.tools.stdio_transport import ServerProcess

# The MCP SDK (and our stdio transport, built on it) is imported when a server is
# started, not with this module: importing it takes 0.4 s, which every command paid
# before its first request, tool servers or not (`deepledger report`, a run with
# agent.main_agent.tools=[]). It runs in a thread of its own, so that while servers
# start in the background (their tool lists known from the last run:
# tools/list_cache.py) the event loop sends the first request meanwhile.
_SDK_MODULES = ("mcp", "mcp.client.stdio", "mcp.client.sse", "deepledger.tools.stdio_transport")

log = logging.getLogger(__name__)

IMPORT_SWITCH_INTERVAL_SECONDS = 0.0002
PING_TIMEOUT_SECONDS = 5.0  # how long a failed server gets to show it still answers
# Variables a stdio server always gets, besides those its config names.
BASE_ENV = ("PATH", "HOME")


class ToolServerStartError(DeepLedgerError):
    """A tool server could not be started or did not complete the MCP handshake."""


class _SdkImport:
    """The SDK's import, once per process, in a daemon thread: a worker of the loop's
    executor would be waited for when the command ends, and a run that is over before
    its servers finished starting must not wait for an import it no longer needs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._error: BaseException | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._thread: threading.Thread | None = None

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._done:
                future.set_result(None)
            else:
                self._waiters.append((loop, future))
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="deepledger-mcp-import", daemon=True
                    )
                    self._thread.start()
        await future
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        # The import holds the GIL for the whole switch interval (5 ms) each time the
        # event loop's thread gives it up for a write or a socket: a short interval while
        # it runs keeps the loop's work (the first request, a run's last writes) from
        # waiting behind it.
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, IMPORT_SWITCH_INTERVAL_SECONDS))
        try:
            for module in _SDK_MODULES:
                importlib.import_module(module)
        except BaseException as exc:  # handed to every waiter, not lost in the thread
            self._error = exc
        finally:
            sys.setswitchinterval(interval)
        with self._lock:
            self._done = True
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, future)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_sdk_import = _SdkImport()


async def load_sdk() -> None:
    """Import the MCP SDK off the event loop (0.4 s of imports would stall every task)."""
    await _sdk_import.wait()


@dataclass(frozen=True)
class ToolInfo:
    server: str
    name: str
    description: str
    input_schema: JSONObject = field(default_factory=dict)  # the server's JSON schema
    server_description: str = ""

    @property
    def qualified_name(self) -> str:
        return f"{self.server}.{self.name}"


def resolve_command(command: str) -> str:
    """``python`` is this interpreter; other bare names are looked up next to it first, so
    servers installed in the same environment are found even when it is not on PATH."""
    if command == "python":
        return sys.executable
    if os.sep in command:
        return command
    beside = Path(sys.executable).parent / command
    return str(beside) if beside.exists() else (shutil.which(command) or command)


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters with a marker the model can see."""
    if limit <= 0 or len(text) <= limit:
        return text
    return f"{text[:limit]}\n...[truncated: {len(text) - limit} more characters]"


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
            return _error(f"tool server {self.name!r} is unavailable: {headline(str(exc))}")
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
                return _error(f"{self.name}.{tool} failed: {exc.message}")
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
        return _error(problem + told)

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


def _error(text: str) -> ToolResult:
    return ToolResult("", text, is_error=True)


class ToolRefusal(Exception):
    """An in-process tool turning down a call (a bad name, a missing note): the model
    sees the message as an error result; nothing is logged as a failure."""


@dataclass(frozen=True)
class LocalTool:
    """A tool run in-process (a sub-agent, memory, the scraper), offered to the model
    like any MCP tool. Its results are held to the same length limits as a server's."""

    info: ToolInfo
    run: Callable[[JSONObject], Awaitable[str]]  # the model's arguments, as sent
    max_result_chars: int = 20_000
    preview_chars: int = 2_000


@dataclass(frozen=True)
class ResultPolicy:
    """What one agent's tool results may hold on their way to the model."""

    accepts_images: bool = False  # the model's capabilities.images; else images become notes
    archive: ResultArchive | None = None  # long results kept whole there
    archive_callable: bool = False  # the model can call archive.read (else: cut)


class ToolManager:
    """All tool servers of one run; shared connections live as long as the manager."""

    def __init__(
        self,
        servers: dict[str, ToolServerConfig],
        log_dir: Path | None = None,
        list_cache: ToolListCache | None = None,
    ) -> None:
        self.servers = servers
        self.log_dir = log_dir
        # With a cache, a server whose tool list is known (from its last run, or from a
        # session of this run) starts in the background: the task's first request does
        # not wait for it.
        self.list_cache = list_cache
        self._lists: dict[str, list[ListedTool]] = {}  # server -> its tools, as listed
        self._keys: dict[str, str] = {}  # server -> its cache key
        self._shared: dict[str, list[McpConnection]] = {}  # `instances` sessions each
        self._errlogs: dict[str, TextIO] = {}  # one per server, shared by its sessions
        self._reported: set[str] = set()  # servers whose start failure has been logged
        # Successful results of servers with cache_results, by (server, tool, arguments):
        # the run's cache of identical calls.
        self.cache: dict[tuple[str, str, str], ToolResult] = {}

    def connections(self, name: str, task_scoped: dict[str, McpConnection]) -> list[McpConnection]:
        """Every session of server ``name`` this task may use."""
        cfg = self.servers[name]
        if cfg.scope != Scope.SHARED:
            if name not in task_scoped:
                task_scoped[name] = self._connection(name)
            return [task_scoped[name]]
        if name not in self._shared:
            self._shared[name] = [self._connection(name) for _ in range(max(1, cfg.instances))]
        return self._shared[name]

    def _connection(self, name: str) -> McpConnection:
        connection = McpConnection(name, self.servers[name], self._errlog(name))
        connection.on_started = self._listed
        connection.on_background_failure = self._background_start_failed
        return connection

    def known_tools(self, name: str) -> list[ToolInfo] | None:
        """Server ``name``'s tools without starting it: as a session of this run listed
        them, else as its last run did (the cache). None: it must be started first —
        no cache, a server that is not stdio, or one the task cannot run without."""
        cfg = self.servers[name]
        if self.list_cache is None or cfg.transport != Transport.STDIO or cfg.required:
            return None
        if name not in self._lists:
            cached = self.list_cache.load(self._key(name))
            if cached is None:
                return None
            self._lists[name] = cached
        return [
            ToolInfo(name, t["name"], t["description"], t["input_schema"], cfg.description)
            for t in self._lists[name]
        ]

    def _key(self, name: str) -> str:
        from deepledger.tools.list_cache import server_key

        if name not in self._keys:
            cfg = self.servers[name]
            command = resolve_command(cfg.command or "")
            self._keys[name] = server_key(command, list(cfg.args), cfg)
        return self._keys[name]

    def _listed(self, connection: McpConnection) -> None:
        """A session started: keep its list for the run and for the next run."""
        name = connection.name
        listed: list[ListedTool] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in connection.tools
        ]
        if self.list_cache is None or self._lists.get(name) == listed:
            return
        if name in self._lists:
            log.warning(
                "tool server %r lists other tools than its cached list said; the cache is "
                "updated (requests sent before it started offered the old list)",
                name,
            )
        self._lists[name] = listed
        if connection.cfg.transport == Transport.STDIO:
            self.list_cache.store(self._key(name), listed)

    def _background_start_failed(self, connection: McpConnection, message: str) -> None:
        """A server offered from the cache did not start: its calls say it is
        unavailable; the cached list goes (the next run starts it before its request)."""
        name = connection.name
        self._lists.pop(name, None)
        if self.list_cache is not None and connection.cfg.transport == Transport.STDIO:
            self.list_cache.drop(self._key(name))
        self.report_start_failure(name, f"{message}\n  Its calls answer that it is unavailable.")

    def connection(self, name: str, task_scoped: dict[str, McpConnection]) -> McpConnection:
        """The session to send the next call to: the least busy one."""
        return min(self.connections(name, task_scoped), key=lambda c: c.in_flight)

    def report_start_failure(self, name: str, message: str) -> None:
        """Log why a server could not start, once a run: every task that wanted it would
        otherwise repeat the same lines."""
        if name not in self._reported:
            self._reported.add(name)
            log.warning("%s", message)

    def _errlog(self, name: str) -> TextIO | None:
        if self.log_dir is None:
            return None
        if name not in self._errlogs:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            path = server_log(self.log_dir, name)
            self._errlogs[name] = path.open("a", encoding="utf-8")
        return self._errlogs[name]

    def for_task(
        self,
        server_names: Iterable[str],
        blacklist: Iterable[str] = (),
        local_tools: Iterable[LocalTool] = (),
        policy: ResultPolicy | None = None,
        hidden_tools: Iterable[LocalTool] = (),
        repairs: CallRepairs | None = None,
    ) -> TaskTools:
        """One agent's tools. ``hidden_tools`` can be called but are not offered up
        front (the archive's reader: a result's preview says how to call it).
        ``repairs``: the calls written wrong it runs as meant (``tools/repair.py``)."""
        unknown = [n for n in server_names if n not in self.servers]
        if unknown:
            raise DeepLedgerError(f"tool server(s) not configured: {', '.join(unknown)}")
        tools = TaskTools(self, list(server_names), set(blacklist), list(local_tools), policy)
        tools.hidden = {(t.info.server, t.info.name): t for t in hidden_tools}
        tools.repairs = repairs or CallRepairs()
        return tools

    async def aclose(self) -> None:
        await asyncio.gather(*(c.close() for pool in self._shared.values() for c in pool))
        self._shared.clear()
        for handle in self._errlogs.values():
            handle.close()
        self._errlogs.clear()


class TaskTools:
    """The tools one agent may use in one task."""

    def __init__(
        self,
        manager: ToolManager,
        server_names: list[str],
        blacklist: set[str],
        local_tools: list[LocalTool],
        policy: ResultPolicy | None = None,
    ) -> None:
        self.manager = manager
        self.server_names = server_names
        self.blacklist = blacklist
        self.local = {(t.info.server, t.info.name): t for t in local_tools}
        self.hidden: dict[tuple[str, str], LocalTool] = {}
        self.policy = policy or ResultPolicy()
        self._task_scoped: dict[str, McpConnection] = {}
        self.tools: list[ToolInfo] = []
        self.unavailable: dict[str, str] = {}  # server -> why it was left out
        self.repairs = CallRepairs()
        self.repaired: list[Repair] = []  # since the caller last took them (take_repaired)
        # Per server: the sandbox ids it gave out in this task (and the session they
        # belong to), and the one a repaired call runs in.
        self._sandboxes: dict[str, tuple[int, set[str]]] = {}
        self._repair_sandbox: dict[str, str] = {}

    async def start(self) -> list[ToolInfo]:
        """Start (or join) every server; list the tools this agent may use. A server
        whose list is known already starts in the background instead."""
        pools = [self.manager.connections(n, self._task_scoped) for n in self.server_names]
        outcomes = await asyncio.gather(
            *(self._start_pool(pool) for pool in pools), return_exceptions=True
        )
        tools: list[ToolInfo] = []
        for pool, outcome in zip(pools, outcomes, strict=True):
            connection = pool[0]
            if isinstance(outcome, list):  # known ahead: the server is still starting
                tools += [t for t in outcome if not self._blacklisted(t)]
                continue
            if isinstance(outcome, BaseException):
                message = str(outcome)
                if connection.cfg.required:  # the task's error record carries it
                    raise ToolServerStartError(
                        f"{message}\n  (tools.{connection.name}.required is true: the task "
                        "cannot run without it)"
                    ) from outcome
                if lost := next((c.given_up for c in pool if c.given_up), None):
                    note_given_up(connection.name, lost)  # a task without its tools: an error
                else:  # (one given up on was logged then)
                    self.manager.report_start_failure(
                        connection.name, f"{message}\n  Tasks go on without it."
                    )
                self.unavailable[connection.name] = message
                continue
            tools += [t for t in connection.tools if not self._blacklisted(t)]
        tools += [t.info for t in self.local.values() if not self._blacklisted(t.info)]
        self.tools = tools
        return tools

    async def _start_pool(self, pool: list[McpConnection]) -> list[ToolInfo] | None:
        """The pool's tools when they are known without waiting (its sessions then start
        in the background), else None once every session has started."""
        if not any(c.alive or c.failed_reason for c in pool):
            known = self.manager.known_tools(pool[0].name)
            if known is not None:
                for connection in pool:
                    connection.start_in_background()
                return known
        await asyncio.gather(*(c.ensure_started() for c in pool))
        return None

    def _blacklisted(self, tool: ToolInfo) -> bool:
        return tool.name in self.blacklist or tool.qualified_name in self.blacklist

    def find(self, server: str, name: str) -> ToolInfo | None:
        found = next((t for t in self.tools if t.server == server and t.name == name), None)
        hidden = self.hidden.get((server, name))
        return found or (hidden.info if hidden else None)

    async def call(self, call: ToolCall) -> ToolResult:
        """Run ``call`` and pair the result with its id. Never raises for tool failures."""
        result = await self._dispatch(call)
        result = replace(result, call_id=call.id, name=call.name)
        return self._fit(for_model(result, self.policy.accepts_images), call)

    def _fit(self, result: ToolResult, call: ToolCall) -> ToolResult:
        """A result within its tool's length limit: archived whole (when the model can
        read the archive) with a preview, else cut with a visible marker."""
        limit, preview = self._limits(call)
        if limit <= 0 or len(result.content) <= limit:
            return result
        policy = self.policy
        if policy.archive is not None and policy.archive_callable:
            try:
                return policy.archive.archived(result, min(preview, limit))
            except OSError as exc:  # a full disk must not cost the task: cut instead
                log.warning("could not archive a result of %s: %s", call.name, exc)
        return replace(result, content=truncate(result.content, limit))

    def _limits(self, call: ToolCall) -> tuple[int, int]:
        info = self.find(call.server_name, call.name)
        key = (info.server, info.name) if info else None
        local = self.local.get(key) or self.hidden.get(key) if key else None
        if local is not None:
            return local.max_result_chars, local.preview_chars
        cfg = self.manager.servers.get(info.server) if info else None
        return (cfg.max_result_chars, cfg.preview_chars) if cfg else (0, 0)

    def take_repaired(self) -> list[Repair]:
        """The calls repaired since the last time, for the journal."""
        repaired, self.repaired = self.repaired, []
        return repaired

    async def _dispatch(self, call: ToolCall) -> ToolResult:
        if call.parse_error:
            return _error(f"Could not read the arguments of {call.name}: {call.parse_error}")
        info = self.find(call.server_name, call.name)
        if info is None and self.repairs.unknown_server:
            info = route(call, self.tools, list(self.unavailable))
            if info is not None:
                self._note(call, "unknown_server", info, f"{written_name(call)} is no tool here")
        if info is None:
            return _error(self._unknown_tool_message(call))
        arguments = call.arguments
        if self.repairs.python_arguments and needs_sandbox(info, self.tools):
            repaired = await self._repair_python(call, info)
            if isinstance(repaired, ToolResult):
                return repaired
            arguments = repaired
        problem = schema_problem(info, arguments)
        if problem:
            return _error(f"Invalid arguments for {info.qualified_name}: {problem}")
        local = self.local.get((info.server, info.name)) or self.hidden.get(
            (info.server, info.name)
        )
        if local is not None:
            return await _run_local(local, arguments)
        result = await self._server_call(info, encodable(arguments))
        if info.name == CREATE_SANDBOX and not result.is_error:
            self._known_sandboxes(info.server).update(sandbox_ids(result.content))
        return result

    def _note(self, call: ToolCall, kind: str, info: ToolInfo, detail: str) -> None:
        self.repaired.append(Repair(call.id, kind, written_name(call), info.qualified_name, detail))

    def _known_sandboxes(self, server: str) -> set[str]:
        """The sandbox ids ``server``'s current session gave out in this task: those of
        a session before a restart are gone with it."""
        generation = self.manager.connection(server, self._task_scoped).generation
        known = self._sandboxes.get(server)
        if known is None or known[0] != generation:
            known = (generation, set())
            self._sandboxes[server] = known
            self._repair_sandbox.pop(server, None)
        return known[1]

    async def _repair_python(self, call: ToolCall, info: ToolInfo) -> JSONObject | ToolResult:
        """``call``'s arguments with tool-python's repairs (``tools/repair.py``), each
        noted; or the error result of a sandbox that could not be created for it."""
        arguments, renamed = rename_code(info, call.arguments)
        done = [renamed] if renamed else []
        given = arguments.get("sandbox_id")
        known = self._known_sandboxes(info.server)
        if not (isinstance(given, str) and given.strip() in known):
            sandbox = await self._sandbox_for_repairs(info.server)
            if isinstance(sandbox, ToolResult):
                return sandbox
            arguments = {**arguments, "sandbox_id": sandbox}
            was = "no sandbox_id" if given is None else f"sandbox_id {given!r} unknown"
            done.append(f"{was}: ran in the task's sandbox {sandbox}")
        if done:
            self._note(call, "python_arguments", info, "; ".join(done))
        return arguments

    async def _sandbox_for_repairs(self, server: str) -> str | ToolResult:
        """The sandbox repaired calls run in on ``server``: made on first need."""
        if server in self._repair_sandbox:
            return self._repair_sandbox[server]
        create = self.find(server, CREATE_SANDBOX)
        assert create is not None, "needs_sandbox() found it"
        result = await self._server_call(create, {})
        made = sandbox_ids(result.content) if not result.is_error else []
        if not made:
            return _error(f"No sandbox could be created for this call: {result.content}")
        self._known_sandboxes(server).add(made[0])
        self._repair_sandbox[server] = made[0]
        return made[0]

    async def _server_call(self, info: ToolInfo, arguments: JSONObject) -> ToolResult:
        """One call to an MCP server, answered from the run's cache when the server's
        results are cacheable and the same call succeeded before."""
        connection = self.manager.connection(info.server, self._task_scoped)
        if not connection.ever_started:  # offered from the cache: it may still be starting
            try:
                await connection.ensure_started()
            except ToolServerStartError as exc:  # told as if it had failed before the task
                self.unavailable[info.server] = str(exc)
                return _error(self._unavailable_message(info.server))
        if not self.manager.servers[info.server].cache_results:
            return await connection.call(info.name, arguments)
        key = (info.server, info.name, json.dumps(arguments, sort_keys=True, ensure_ascii=False))
        if key in self.manager.cache:
            return replace(self.manager.cache[key], cached=True)
        result = await connection.call(info.name, arguments)
        if not result.is_error:
            self.manager.cache[key] = result
        return result

    def _unknown_tool_message(self, call: ToolCall) -> str:
        where = f"{call.server_name}.{call.name}" if call.server_name else call.name
        if call.server_name in self.unavailable:
            return self._unavailable_message(call.server_name)
        available = ", ".join(t.qualified_name for t in self.tools) or "none"
        return f"There is no tool {where}. Available tools: {available}."

    def _unavailable_message(self, server: str) -> str:
        return (
            f"Tool server {server!r} is unavailable in this task ("
            + headline(self.unavailable[server])
            + "); use the other tools."
        )

    async def aclose(self) -> None:
        await asyncio.gather(*(c.close() for c in self._task_scoped.values()))
        self._task_scoped.clear()


def encodable(value: Any) -> Any:
    """``value`` with lone surrogates (which models do emit) replaced, so it can be sent
    as UTF-8: one bad character must not break a session other tasks share."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {encodable(k): encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [encodable(v) for v in value]
    return value


@functools.lru_cache(maxsize=1024)
def _cached_validator(schema_json: bytes) -> Any:
    import jsonschema  # on the first call, not on the way to the first request

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _validator(info: ToolInfo) -> Any:
    """Building a validator checks the schema itself; do it once per schema, not per call."""
    return _cached_validator(sorted_json(info.input_schema))


def schema_problem(info: ToolInfo, arguments: JSONObject) -> str | None:
    """Why ``arguments`` fail the tool's JSON schema, or None. Servers check too; checking
    here gives the model one clear message whatever the server would have said."""
    if not info.input_schema:
        return None
    import jsonschema

    try:
        error = jsonschema.exceptions.best_match(_validator(info).iter_errors(arguments))
        if error is not None:
            raise error
    except jsonschema.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path)
        return f"{path + ': ' if path else ''}{exc.message}"
    except Exception:  # a broken schema (bad $ref, invalid keyword) is not the model's fault
        return None  # let the server judge the arguments
    return None


async def _run_local(tool: LocalTool, arguments: JSONObject) -> ToolResult:
    try:
        return ToolResult("", await tool.run(arguments), name=tool.info.name)
    except ToolRefusal as exc:  # the call was wrong, the tool is fine: no traceback
        return _error(f"{tool.info.qualified_name}: {exc}")
    except EndpointRejectedError:  # a sub-agent's endpoint refused the run: it stops
        raise
    except Exception as exc:  # a sub-agent's failure must not end its parent's task
        log.exception("in-process tool %s failed", tool.info.qualified_name)
        return _error(f"{tool.info.qualified_name} failed: {type(exc).__name__}: {exc}")
