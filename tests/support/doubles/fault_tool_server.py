"""An MCP tool server that fails on request, for fault-injection tests and benchmarks.

Run it by its file (it is not in the installed package):
``python tests/support/doubles/fault_tool_server.py [--fail-start] [--huge-bytes N]``.
Its one tool, ``lookup(key, fault="none")``, answers ``code-<key>``; ``fault`` makes that
call misbehave the way real servers do:

- ``crash``: the process dies in the middle of the call (after half a reply went out);
- ``hang``: the call never returns (the server still answers other requests);
- ``freeze``: the whole server blocks, so it cannot even answer a ping;
- ``garbage``: lines that are not JSON-RPC go out on the protocol channel, then the answer;
- ``huge``: the answer is ``--huge-bytes`` characters long (default 4 MiB);
- ``error``: the tool reports a failure (``is_error``), the server stays healthy.

``--fail-start`` writes a reason to stderr and exits before the MCP handshake, as a
server with a missing dependency does; ``--fail-start-while PATH`` does so only while
PATH exists, so a test can "fix" the server between two runs of one command.

When ``DEEPLEDGER_FAULT_TOOL_LOG`` names a file, every call appends one JSON line to it
(``key``, ``fault``, ``pid``) before misbehaving, so a test can count the calls that
reached a server across crashes, restarts and runs.

The server runs on the SDK's own stdio transport (``MCPServer.run``), not on
``deepledger.tools.servers._stdio``: there ``sys.stdout`` is the protocol channel, which
is what ``garbage`` and ``crash`` need to write on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TypedDict

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

LOG_ENV = "DEEPLEDGER_FAULT_TOOL_LOG"
FAULTS = ("none", "crash", "hang", "freeze", "garbage", "huge", "error")
DEFAULT_HUGE_BYTES = 4 * 1024 * 1024
START_FAILURE = "fault_tool_server: cannot start: the index file is missing (on purpose)"

server = MCPServer("faulty")
_settings = {"huge_bytes": DEFAULT_HUGE_BYTES}


def answer_for(key: str) -> str:
    """What ``lookup(key)`` answers when nothing goes wrong."""
    return f"code-{key}"


class LoggedCall(TypedDict):
    """A line of the call log (``DEEPLEDGER_FAULT_TOOL_LOG``)."""

    key: str
    fault: str
    pid: int


def _log_call(key: str, fault: str) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    logged: LoggedCall = {"key": key, "fault": fault, "pid": os.getpid()}
    line = json.dumps(logged) + "\n"
    # One write of a short line to an O_APPEND file: whole, whatever else appends.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@server.tool()
async def lookup(key: str, fault: str = "none") -> str:
    """Look up the code word for a key."""
    if fault not in FAULTS:
        raise ToolError(f"unknown fault {fault!r}; use one of {', '.join(FAULTS)}")
    _log_call(key, fault)
    if fault == "crash":
        sys.stdout.write('{"jsonrpc": "2.0", "id": ')  # half a reply, then nothing
        sys.stdout.flush()
        os._exit(3)
    if fault == "hang":
        await _sleep_forever()
    if fault == "freeze":
        time.sleep(3600)  # noqa: ASYNC251 - blocking the loop is the fault
    if fault == "garbage":
        sys.stdout.write('this is not json-rpc\n{broken\n{"jsonrpc": "2.0", "id": "nobody"}\n')
        sys.stdout.flush()
    if fault == "huge":
        return "y" * _settings["huge_bytes"]
    if fault == "error":
        raise ToolError(f"lookup of {key!r} failed (on purpose)")
    return answer_for(key)


async def _sleep_forever() -> None:
    import anyio

    await anyio.sleep(3600)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fail-start", action="store_true", help="exit before the handshake")
    parser.add_argument("--fail-start-while", metavar="PATH", help="exit while PATH exists")
    parser.add_argument("--huge-bytes", type=int, default=DEFAULT_HUGE_BYTES)
    args = parser.parse_args(argv)
    if args.fail_start or (args.fail_start_while and os.path.exists(args.fail_start_while)):
        print(START_FAILURE, file=sys.stderr, flush=True)
        sys.exit(1)
    _settings["huge_bytes"] = args.huge_bytes
    server.run()


if __name__ == "__main__":
    main()
