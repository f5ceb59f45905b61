"""Tool failures our servers did not foresee, reported to the model with their cause.

The SDK answers an exception other than its ``ToolError`` with only "Error executing tool
NAME", keeping the cause in the server's log. For a failure that comes from the
installation rather than from the call (a converter missing a module, say) that leaves
the model and the user reading the journal with nothing to go on, so our servers turn
such an exception into a ``ToolError`` carrying its type and message (the traceback
still goes to the server's log, which is its stderr).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

log = logging.getLogger(__name__)


@contextmanager
def causes_reported(tool: str) -> Iterator[None]:
    """Within this block, an unforeseen exception becomes a ToolError naming its cause."""
    try:
        yield
    except (ToolError, MCPError):
        raise
    except Exception as exc:
        log.exception("the %s tool failed", tool)
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc
