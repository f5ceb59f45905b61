"""The state of one agent run, as one typed object."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from deepledger.agent.limits import LimitHit
from deepledger.agent.rollback import Rollback
from deepledger.llm.usage import UsageLedger
from deepledger.messages import EndReason, Message


class Provenance(StrEnum):
    """Where a final answer came from."""

    SUMMARY = "summary"  # the model's answer (its last reply, or the summarize reply)
    BOXED_RETRY = "boxed_retry"  # a retry after a reply without a box
    INTERMEDIATE_FALLBACK = "intermediate_fallback"  # a box seen earlier in the run
    NONE = "none"  # no answer


@dataclass
class RunState:
    history: list[Message]
    ledger: UsageLedger
    turn: int = 0  # turns kept (rolled-back replies do not count)
    intermediate_answers: list[str] = field(default_factory=list)  # boxes seen on the way
    rollbacks: list[Rollback] = field(default_factory=list)
    consecutive_rollbacks: int = 0
    repeated_turns: int = 0  # kept turns in a row identical to the one before
    seen_call_keys: set[str] = field(default_factory=set)
    tool_calls: int = 0
    # Requests that did not start with the whole previous request (keep_tool_result
    # blanked an older result, or the window slid): a prompt cache misses past the change.
    prefix_breaks: int = 0
    end_reason: EndReason | None = None
    # Why, in words, when the end reason alone does not say it (the task cannot fit).
    end_detail: str | None = None
    # The system prompt, the task and a closing prompt alone are over our configured
    # window (its closing call skipped): no retry or attempt of the question could fit.
    task_does_not_fit: bool = False
    limit: LimitHit | None = None  # the limit that ended the loop (end reason LIMIT)
    final_answer: str | None = None
    final_text: str = ""  # the full text the answer was taken from
    provenance: Provenance = Provenance.NONE
    post_mortem: str | None = None  # written for the next retry when this attempt failed
    failure_type: str | None = None  # incomplete | blocked | misdirected | format_missed
