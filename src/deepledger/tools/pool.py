"""The tool servers of one run: the pool of sessions its tasks share or own.

:class:`ToolManager` belongs to a run. Servers with ``scope: shared`` (stateless:
search, reader) get ``instances`` sessions (default 1) for every task of the run, so
hundreds of parallel tasks do not mean hundreds of processes; each call goes to the
least busy instance. Servers with ``scope: task`` (stateful: python) get one session per
task, so state never crosses tasks. The pool also keeps what outlives a task: the run's
cache of identical calls, each server's stderr log (``tool_servers/<name>.stderr.log``
in the run directory), which start failures were logged, and the servers' tool lists.

A server that cannot start is left out of the task (logged once per run; later tasks do
not try a shared server again), unless its config says ``required: true``, when the task
fails; the model is told only that the server is unavailable. With a
:class:`~deepledger.tools.list_cache.ToolListCache`, a stdio server whose tool list is
known (from its last run, or from a session of this run) is not waited for: the task
gets that list at once and the server starts in the background. A call that comes before
it is ready waits for it; if it then fails to start, its calls get the error a server
that failed before the task gets, and its cached list is dropped. ``required`` servers
are always waited for.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from deepledger.config import Scope, ToolServerConfig, Transport
from deepledger.errors import DeepLedgerError
from deepledger.messages import JSONObject, ToolResult
from deepledger.store.layout import server_log
from deepledger.tools.repair import CallRepairs
from deepledger.tools.session import McpConnection, resolve_command
from deepledger.tools.spares import Spares
from deepledger.tools.task_tools import ResultPolicy, TaskTools
from deepledger.tools.types import LocalTool, ToolInfo

if TYPE_CHECKING:
    from deepledger.tools.list_cache import ListedTool, ToolListCache

log = logging.getLogger(__name__)


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
        # Task-scoped sessions started ahead of their tasks (warm_ahead): each is
        # handed to one task only. Their start failures are told once a task has one.
        self.spares = Spares(lambda name: self._connection(name, told_of_failure=False))

    def config(self, name: str) -> ToolServerConfig | None:
        """Server ``name``'s config; None for a name that is no server (a local tool's)."""
        return self.servers.get(name)

    def scopes(self) -> dict[str, str]:
        """Each server's scope, by name: what a resumed task lost with its sessions."""
        return {name: str(cfg.scope) for name, cfg in self.servers.items()}

    def cached(self, server: str, tool: str, arguments: JSONObject) -> ToolResult | None:
        """The result of the same call earlier in the run, when ``server`` has
        ``cache_results`` and that call succeeded; else None."""
        if not self.servers[server].cache_results:
            return None
        return self.cache.get(_cache_key(server, tool, arguments))

    def remember(self, server: str, tool: str, arguments: JSONObject, result: ToolResult) -> None:
        """Keep a successful result of a ``cache_results`` server for the rest of the run."""
        if self.servers[server].cache_results:
            self.cache[_cache_key(server, tool, arguments)] = result

    def connections(self, name: str, task_scoped: dict[str, McpConnection]) -> list[McpConnection]:
        """Every session of server ``name`` this task may use."""
        cfg = self.servers[name]
        if cfg.scope != Scope.SHARED:
            if name not in task_scoped:
                task_scoped[name] = self._task_session(name)
            return [task_scoped[name]]
        if name not in self._shared:
            self._shared[name] = [self._connection(name) for _ in range(max(1, cfg.instances))]
        return self._shared[name]

    def _connection(self, name: str, told_of_failure: bool = True) -> McpConnection:
        connection = McpConnection(name, self.servers[name], self._errlog(name))
        connection.on_started = self._listed
        if told_of_failure:
            connection.on_background_failure = self._background_start_failed
        return connection

    def _task_session(self, name: str) -> McpConnection:
        """A new task's own session of ``name``: a warm spare when one is up or
        starting, else a fresh one."""
        spare = self.spares.claim(name)
        if spare is None:
            return self._connection(name)
        # From now on a failed start is this task's, told as for any session: as a
        # background start's only when the task offers the server from the cache (else
        # the task waits for the start, and its own wait reports the failure).
        if self.known_tools(name) is not None:
            spare.on_background_failure = self._background_start_failed
        return spare

    def warm_ahead(self, server_names: Iterable[str], tasks: int, concurrency: int) -> None:
        """Start the ``scope: task`` servers among ``server_names`` ahead of the run's
        ``tasks`` tasks, ``concurrency`` at a time (``tools/spares.py``): the first
        wave's now, and one more each time a task takes one. Call it in the event loop
        as soon as the run's size is known, before its tasks start."""
        names = [
            n
            for n in server_names
            if n in self.servers
            and self.servers[n].scope != Scope.SHARED
            # stdio only: the start is what costs, and a remote server may expire a
            # session held idle, which nothing here would notice before a call failed.
            and self.servers[n].transport == Transport.STDIO
        ]
        self.spares.plan(names, tasks, concurrency)

    def task_began(self) -> None:
        """One of the tasks :meth:`warm_ahead` was told of has begun."""
        self.spares.task_began()

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
        await self.spares.aclose()
        await asyncio.gather(*(c.close() for pool in self._shared.values() for c in pool))
        self._shared.clear()
        for handle in self._errlogs.values():
            handle.close()
        self._errlogs.clear()


def _cache_key(server: str, tool: str, arguments: JSONObject) -> tuple[str, str, str]:
    return (server, tool, json.dumps(arguments, sort_keys=True, ensure_ascii=False))
