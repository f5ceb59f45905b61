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


@dataclass(frozen=True)
class ReplyKey:
    """One reply of the loop as the cycle check compares it: a digest of the reply and
    what came of it (its tool results, or the reason it was rolled back), call ids
    replaced by the calls' places in the reply (see ``cycles.reply_key``)."""

    digest: bytes
    turn: int  # the turn it was kept as; a rolled-back reply: the turn it was asked for
    kept: bool


@dataclass
class RunState:
    history: list[Message]
    ledger: UsageLedger
    turn: int = 0  # turns kept (rolled-back replies do not count)
    intermediate_answers: list[str] = field(default_factory=list)  # boxes seen on the way
    rollbacks: list[Rollback] = field(default_factory=list)
    consecutive_rollbacks: int = 0
    # Every reply of the loop in order, rolled-back ones too: what the cycle check reads.
    replies: list[ReplyKey] = field(default_factory=list)
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
