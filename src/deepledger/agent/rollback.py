"""When a turn is thrown away and asked again.

A reply is rolled back (removed from history, the same request sent again) when:

- ``unparsable``: it tried to call tools and not one call can run (broken markup,
  arguments that no repair can read);
- ``refusal``: it refuses the task instead of working on it;
- ``duplicate``: it repeats a query this task already made (same tool, same key argument).

After ``max_consecutive_rollbacks`` in a row the turn is kept as it is, so a model that
insists cannot stall the loop. A rolled-back reply never counts as an answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum

from deepledger.messages import ToolCall
from deepledger.tools.protocol import ParsedCalls


class RollbackReason(StrEnum):
    UNPARSABLE = "unparsable"
    REFUSAL = "refusal"
    DUPLICATE = "duplicate"


# Arguments that identify what a call asks for; the first one present is the key.
KEY_ARGUMENTS = ("query", "q", "url", "source", "path", "doc", "code", "subtask")
_REFUSAL = re.compile(
    r"\b(I'?m sorry,? but I (can(no|')t|am unable to)|I can(no|')t (help|assist) with"
    r"|I (cannot|can't|won't) (comply|provide|do that))",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Rollback:
    reason: RollbackReason
    detail: str


def call_key(call: ToolCall) -> str:
    """What a call asks for: tool plus its key argument (or all arguments)."""
    for name in KEY_ARGUMENTS:
        if name in call.arguments:
            value = call.arguments[name]
            return f"{call.server_name}.{call.name}:{json.dumps(value, sort_keys=True)}"
    return f"{call.server_name}.{call.name}:{json.dumps(call.arguments, sort_keys=True)}"


def review_reply(text: str, parsed: ParsedCalls, seen_keys: set[str]) -> Rollback | None:
    """Why this reply should be rolled back, or None to keep it."""
    if parsed.nothing_usable:
        detail = "; ".join(parsed.malformed) or "no tool call could be read"
        return Rollback(RollbackReason.UNPARSABLE, detail)
    if not parsed.calls and _REFUSAL.search(text):
        return Rollback(RollbackReason.REFUSAL, text.strip()[:200])
    repeated = [call_key(c) for c in parsed.calls if call_key(c) in seen_keys]
    if parsed.calls and len(repeated) == len(parsed.calls):
        return Rollback(RollbackReason.DUPLICATE, ", ".join(repeated)[:300])
    return None
