"""Real MCP servers over stdio for the tool manager's tests: the misbehaving one from
``tests.support.doubles`` and two that never get as far as a handshake."""

from __future__ import annotations

import sys

from deepledger.config import ToolServerConfig
from deepledger.messages import ToolCall
from tests.support.doubles import chatty_tool_server, flaky_tool_server

FLAKY = flaky_tool_server.__file__
CHATTY = chatty_tool_server.__file__
CRASH_ON_START = (
    "import sys\n"
    "for n in range(1, 16):\n"
    "    print(f'boot line {n}', file=sys.stderr)\n"
    "print('ImportError: no module named frobnicate', file=sys.stderr)\n"
    "sys.exit(3)\n"
)
HANG_BEFORE_HANDSHAKE = (
    "import sys, time\n"
    "print('loading a huge index...', file=sys.stderr, flush=True)\n"
    "time.sleep(600)\n"
)


def flaky(**overrides) -> ToolServerConfig:
    settings = {
        "command": sys.executable,
        "args": [FLAKY],
        "call_timeout_seconds": 10.0,
        "max_result_chars": 1000,
    } | overrides
    return ToolServerConfig(**settings)


def call(tool: str, server: str = "flaky", **arguments) -> ToolCall:
    return ToolCall(f"id-{tool}", tool, arguments, server_name=server)
