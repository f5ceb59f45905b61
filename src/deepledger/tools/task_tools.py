"""One agent's tools in one task.

The servers it names, minus its blacklist, plus in-process tools (sub-agents, memory,
the archive).

:meth:`TaskTools.call` never raises for a tool's failure: an ``is_error`` result, a
timeout, a crashed server, an unknown tool or bad arguments all come back as a
:class:`ToolResult` with ``is_error`` the model can read. Results are held to their
tool's length limit (archived whole with a preview, or cut). A server given up on is an
error of every task that wanted it from then on, the one it was given up on during
included (``tools/given_up.py``): those tasks ran without its tools. The sessions of
``scope: task`` servers belong to this view and close with it; shared ones belong to the
run's pool (``tools/pool.py``), reached only through :class:`SessionPool`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from deepledger.config import ToolServerConfig
from deepledger.errors import EndpointRejectedError
from deepledger.messages import JSONObject, ToolCall, ToolResult
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
from deepledger.tools.results import for_model
from deepledger.tools.session import McpConnection, ToolServerStartError, headline
from deepledger.tools.types import (
    LocalTool,
    ToolInfo,
    ToolRefusal,
    encodable,
    error_result,
    schema_problem,
    truncate,
)

if TYPE_CHECKING:
    from deepledger.tools.archive import ResultArchive

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResultPolicy:
    """What one agent's tool results may hold on their way to the model."""

    accepts_images: bool = False  # the model's capabilities.images; else images become notes
    archive: ResultArchive | None = None  # long results kept whole there
    archive_callable: bool = False  # the model can call archive.read (else: cut)


class SessionPool(Protocol):
    """What one agent's view asks of the run's pool (``tools/pool.py``'s ToolManager)."""

    def config(self, name: str) -> ToolServerConfig | None: ...

    def connections(
        self, name: str, task_scoped: dict[str, McpConnection]
    ) -> list[McpConnection]: ...

    def connection(self, name: str, task_scoped: dict[str, McpConnection]) -> McpConnection: ...

    def known_tools(self, name: str) -> list[ToolInfo] | None: ...

    def report_start_failure(self, name: str, message: str) -> None: ...

    def cached(self, server: str, tool: str, arguments: JSONObject) -> ToolResult | None: ...

    def remember(
        self, server: str, tool: str, arguments: JSONObject, result: ToolResult
    ) -> None: ...


class TaskTools:
    """The tools one agent may use in one task."""

    def __init__(
        self,
        pool: SessionPool,
        server_names: list[str],
        blacklist: set[str],
        local_tools: list[LocalTool],
        policy: ResultPolicy | None = None,
    ) -> None:
        self.pool = pool
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
        pools = [self.pool.connections(n, self._task_scoped) for n in self.server_names]
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
                    self.pool.report_start_failure(
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
            known = self.pool.known_tools(pool[0].name)
            if known is not None:
                for connection in pool:
                    connection.start_in_background()
                return known
        await asyncio.gather(*(c.ensure_started() for c in pool))
        return None

    def session(self, server: str) -> McpConnection:
        """The session of ``server`` this agent's next call goes to (its own, for a
        ``scope: task`` server; the least busy of the run's, for a shared one)."""
        return self.pool.connection(server, self._task_scoped)

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
        cfg = self.pool.config(info.server) if info else None
        return (cfg.max_result_chars, cfg.preview_chars) if cfg else (0, 0)

    def take_repaired(self) -> list[Repair]:
        """The calls repaired since the last time, for the journal."""
        repaired, self.repaired = self.repaired, []
        return repaired

    async def _dispatch(self, call: ToolCall) -> ToolResult:
        if call.parse_error:
            return error_result(f"Could not read the arguments of {call.name}: {call.parse_error}")
        info = self.find(call.server_name, call.name)
        if info is None and self.repairs.unknown_server:
            info = route(call, self.tools, list(self.unavailable))
            if info is not None:
                self._note(call, "unknown_server", info, f"{written_name(call)} is no tool here")
        if info is None:
            return error_result(self._unknown_tool_message(call))
        arguments = call.arguments
        if self.repairs.python_arguments and needs_sandbox(info, self.tools):
            repaired = await self._repair_python(call, info)
            if isinstance(repaired, ToolResult):
                return repaired
            arguments = repaired
        problem = schema_problem(info, arguments)
        if problem:
            return error_result(f"Invalid arguments for {info.qualified_name}: {problem}")
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
        generation = self.session(server).generation
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
            return error_result(f"No sandbox could be created for this call: {result.content}")
        self._known_sandboxes(server).add(made[0])
        self._repair_sandbox[server] = made[0]
        return made[0]

    async def _server_call(self, info: ToolInfo, arguments: JSONObject) -> ToolResult:
        """One call to an MCP server, answered from the run's cache when the server's
        results are cacheable and the same call succeeded before."""
        connection = self.session(info.server)
        if not connection.ever_started:  # offered from the cache: it may still be starting
            try:
                await connection.ensure_started()
            except ToolServerStartError as exc:  # told as if it had failed before the task
                self.unavailable[info.server] = str(exc)
                return error_result(self._unavailable_message(info.server))
        hit = self.pool.cached(info.server, info.name, arguments)
        if hit is not None:
            return replace(hit, cached=True)
        result = await connection.call(info.name, arguments)
        if not result.is_error:
            self.pool.remember(info.server, info.name, arguments, result)
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


async def _run_local(tool: LocalTool, arguments: JSONObject) -> ToolResult:
    try:
        return ToolResult("", await tool.run(arguments), name=tool.info.name)
    except ToolRefusal as exc:  # the call was wrong, the tool is fine: no traceback
        return error_result(f"{tool.info.qualified_name}: {exc}")
    except EndpointRejectedError:  # a sub-agent's endpoint refused the run: it stops
        raise
    except Exception as exc:  # a sub-agent's failure must not end its parent's task
        log.exception("in-process tool %s failed", tool.info.qualified_name)
        return error_result(f"{tool.info.qualified_name} failed: {type(exc).__name__}: {exc}")
