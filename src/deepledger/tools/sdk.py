"""The MCP SDK's import: once per process, off the event loop, on first need.

The MCP SDK (and our stdio transport, built on it) is imported when a server is started,
not when deepledger is: importing it takes 0.4 s, which every command paid before its
first request, tool servers or not (`deepledger report`, a run with
agent.main_agent.tools=[]). It runs in a thread of its own, so that while servers start
in the background (their tool lists known from the last run: tools/list_cache.py) the
event loop sends the first request meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import sys
import threading

_SDK_MODULES = ("mcp", "mcp.client.stdio", "mcp.client.sse", "deepledger.tools.stdio_transport")

IMPORT_SWITCH_INTERVAL_SECONDS = 0.0002


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
