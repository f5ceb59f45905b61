"""When a turn is thrown away and asked again.

A reply is rolled back (removed from history, the same request sent again) when:

- ``unparsable``: it tried to call tools and not one call can run (broken markup,
  arguments that no repair can read);
- ``refusal``: it refuses the task instead of working on it (a reply with a boxed answer
  is an answer, however apologetic);
- ``duplicate``: every call in it repeats a call that already succeeded in this task
  (same tool, same arguments); a call that failed may be asked again.

After ``max_consecutive_rollbacks`` in a row the turn is kept as it is, so a model that
insists cannot stall the loop. A rolled-back reply never counts as an answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from deepledger.agent.boxed import last_boxed
from deepledger.messages import ToolCall, sorted_json
from deepledger.tools.protocols import ParsedCalls


class RollbackReason(StrEnum):
    UNPARSABLE = "unparsable"
    REFUSAL = "refusal"
    DUPLICATE = "duplicate"


_REFUSAL = re.compile(
    r"\b(I'?m sorry,? but I (can(no|')t|am unable to)|I can(no|')t (help|assist) with"
    r"|I (cannot|can't|won't) (comply|provide|do that))",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Rollback:
    reason: RollbackReason
    detail: str


def call_key(call: ToolCall) -> str | None:
    """What a call asks for: the tool and all its arguments (the next page of a document
    is a new request). Calls without arguments (``reset()``, "what time is it") are never
    repeats: asking again is how they are used."""
    if not call.arguments:
        return None
    return f"{call.server_name}.{call.name}:{sorted_json(call.arguments).decode()}"


def review_reply(text: str, parsed: ParsedCalls, seen_keys: set[str]) -> Rollback | None:
    """Why this reply should be rolled back, or None to keep it."""
    answered = last_boxed(text) is not None
    if parsed.nothing_usable and not answered:
        detail = "; ".join(parsed.malformed) or "no tool call could be read"
        return Rollback(RollbackReason.UNPARSABLE, detail)
    if not parsed.calls and not answered and _REFUSAL.search(text.replace("\u2019", "'")):
        return Rollback(RollbackReason.REFUSAL, text.strip()[:200])
    keys = [call_key(c) for c in parsed.calls]
    if keys and all(k is not None and k in seen_keys for k in keys):
        return Rollback(RollbackReason.DUPLICATE, ", ".join(k for k in keys if k)[:300])
    return None
