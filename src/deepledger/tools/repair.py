"""Tool calls a model writes slightly wrong, run as it meant them (agent.recovery).

MiroThinker's runtime mends a few mistakes its models make rather than failing the
call; a model trained alongside those repairs scores with them. Each repair is
journaled (``tool_call_repaired``) and the model sees the tool's result as usual.

- **python arguments** (``agent.recovery.repair_python_calls``): on a server that
  offers ``create_sandbox`` (``tool-python``), ``run_python_code`` given ``code`` and no
  ``code_block`` gets it as ``code_block``; ``run_python_code`` and ``run_command``
  without a ``sandbox_id``, or with one this server never gave out in this task (made
  up, like ``default`` or ``sandbox1``, or from before the server restarted), run in a
  sandbox of the task's: one :class:`~deepledger.tools.task_tools.TaskTools` creates the
  first time, then reuses (MiroThinker runs such code in a throwaway sandbox; one kept
  for the task also keeps the variables of one repaired call for the next).
- **unknown server** (``agent.recovery.route_unknown_server``): a call naming a
  server the agent does not have, or one without that tool, goes to the agent's one
  tool of that name, when exactly one of its servers offers it (MiroThinker rewrites
  the server's name the same way). A server that is only down is not routed around.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from deepledger.messages import JSONObject, ToolCall
from deepledger.tools.types import ToolInfo

PYTHON_CODE_TOOLS = ("run_python_code", "run_command")  # what runs in a sandbox
CREATE_SANDBOX = "create_sandbox"
_SANDBOX_ID = re.compile(r"sandbox_id\W{0,3}\s*([A-Za-z0-9][\w.-]*)")


@dataclass(frozen=True)
class CallRepairs:
    """Which repairs a task's tools make (agent.recovery); off unless said."""

    python_arguments: bool = False
    unknown_server: bool = False


@dataclass(frozen=True)
class Repair:
    """One repaired call, as journaled."""

    call_id: str
    kind: str  # python_arguments | unknown_server
    written: str
    ran: str
    detail: str


def written_name(call: ToolCall) -> str:
    return f"{call.server_name}.{call.name}" if call.server_name else call.name


def route(call: ToolCall, tools: Sequence[ToolInfo], down: Sequence[str]) -> ToolInfo | None:
    """The one tool ``call`` meant when the server it names does not offer it: the
    only tool of that name among ``tools``; None when there is none, several, or the
    named server is one of ``down`` (unavailable in this task)."""
    if call.server_name in down:
        return None
    named = [t for t in tools if t.name == call.name]
    return named[0] if len(named) == 1 else None


def sandbox_ids(result_text: str) -> list[str]:
    """The sandbox ids a ``create_sandbox`` result gives out."""
    return _SANDBOX_ID.findall(result_text)


def needs_sandbox(info: ToolInfo, tools: Sequence[ToolInfo]) -> bool:
    """Whether ``info`` runs code in a sandbox of a server that can create one."""
    takes_id = "sandbox_id" in (info.input_schema.get("properties") or {})
    creates = any(t.server == info.server and t.name == CREATE_SANDBOX for t in tools)
    return info.name in PYTHON_CODE_TOOLS and takes_id and creates


def rename_code(info: ToolInfo, arguments: JSONObject) -> tuple[JSONObject, str | None]:
    """``run_python_code``'s ``code`` as ``code_block`` (when it has none), and what
    was done; the arguments unchanged and None otherwise."""
    properties = info.input_schema.get("properties") or {}
    if info.name != "run_python_code" or "code_block" not in properties:
        return arguments, None
    if "code_block" in arguments or "code" not in arguments or "code" in properties:
        return arguments, None
    fixed = {k: v for k, v in arguments.items() if k != "code"}
    fixed["code_block"] = arguments["code"]
    return fixed, "code read as code_block"
