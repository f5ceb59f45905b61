"""Child processes that die with deepledger.

Every long-lived process deepledger starts (the stdio MCP servers, the local llama.cpp
server) is started in its own session, so a terminal's Ctrl-C reaches deepledger alone
and deepledger stops them in order (stdin closed, a grace period, SIGTERM, SIGKILL to
the process group). That order needs deepledger alive: a deepledger killed with SIGKILL
(or by the OOM killer) would leave them running, a server blocked in a call for ever.
So each is also started with :func:`die_with_parent` as its ``preexec_fn``: in the child,
between fork and exec, it asks the kernel (``prctl(PR_SET_PDEATHSIG)``) for SIGKILL
when its parent dies. SIGKILL, not SIGTERM: when the signal comes nobody is left to wait
for a graceful exit, and a server that handles or ignores SIGTERM must not outlive us.

The kernel sends the signal when the *thread* that forked the child exits, not the
process: a child started from a worker thread (``asyncio.to_thread``, an executor)
would be killed when that thread ends. Start children from a thread that lives as long
as they must: the event loop's (``asyncio.create_subprocess_exec`` forks in the thread
that calls it) or the main thread.

Processes a child starts in turn are its own business: the python sandbox's worker
asks for the same signal itself (``tools/servers/_sandbox_worker.py``).
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable
from typing import Any

_PR_SET_PDEATHSIG = 1


def _find_prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: deepledger's own stop still applies
        return None


# Looked up here, not in the child: between fork and exec only the call itself is safe
# (a lookup could take a lock another thread held when the process forked).
_PRCTL = _find_prctl()


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child die when this process (its forking thread)
    does, or None where the kernel has no such request. Call it in the parent, just
    before the spawn: it notes the parent's pid for the child's check."""
    if _PRCTL is None:
        return None
    parent = os.getpid()
    prctl = _PRCTL

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork and prctl: then no signal will come
        # (the child already has a new parent), so the child ends itself.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return in_child
