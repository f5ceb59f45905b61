"""A reply cut at its reply budget, asked again with more room.

A model stopped by ``llm.max_tokens`` in the middle of its thinking or of a tool call
has said nothing usable. MiroThinker's client asks the same request again with 10 %
more room each time (the budget grows as ``int(budget * 1.1)``), up to 10 attempts in
all; so does :func:`generate_with_room`, up to ``agent.recovery.cut_reply_attempts``
(null: 10; 1: off). The room never goes past the window: the prompt, as the server
counted it in the cut reply's usage, plus the reply budget stays within the window the
loop works against; when no more room is left the cut reply is what the call returns.

Each cut attempt is journaled (``reply_cut``: the reply, its usage, the budget it was
cut at and the next one) and counted in the task's totals (``record_aside``: in the
totals, not in ``last_usage``, which describes the request the loop keeps). The call
that ends the loop is the last attempt's; if that one is cut too, the caller treats it
as any cut reply (the loop ends ``cut_or_empty``, a closing reply is asked again as a
reply without a box is).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from deepledger.context.guard import ContextWindow
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.usage import UsageLedger
from deepledger.messages import LLMResponse, Message, StopReason, ToolSpec
from deepledger.records.events import ReplyCut
from deepledger.store.journal import Journal

GROWTH = 1.1  # MiroThinker's: each attempt's budget is 10 % above the last one's


@dataclass(frozen=True)
class CutRetry:
    """How a call cut at its budget is asked again: ``attempts`` in all, within
    ``window`` (None: no window known, the budget grows unchecked), and not once
    ``over_limit`` says a task limit or the run's budget is reached by the calls
    counted so far (the loop's check before its next turn then ends it)."""

    attempts: int
    window: ContextWindow | None = None
    over_limit: Callable[[], bool] | None = None

    def next_budget(self, budget: int, cut: LLMResponse) -> int | None:
        """The next attempt's reply budget, or None when there is no more room."""
        larger = int(budget * GROWTH)
        if self.window is not None:
            larger = min(larger, self.window.limit - cut.usage.input_tokens)
        return larger if larger > budget else None


async def generate_with_room(
    llm: LLMClient,
    request: Sequence[Message],
    tools: Sequence[ToolSpec] | None,
    settings: GenerationSettings,
    *,
    retry: CutRetry,
    journal: Journal,
    ledger: UsageLedger,
    turn: int | None = None,
    purpose: str | None = None,
) -> LLMResponse:
    """``llm.generate``, asked again with more room while the reply is cut at its
    budget (see the module's docstring). The returned reply is not in ``ledger``: the
    caller records it, as it records any call."""
    budget = settings.max_tokens
    for attempt in range(1, retry.attempts + 1):
        asked = settings if budget == settings.max_tokens else replace(settings, max_tokens=budget)
        response = await llm.generate(request, tools, asked)
        if response.stop_reason is not StopReason.MAX_TOKENS or attempt == retry.attempts:
            return response
        larger = retry.next_budget(budget, response)
        # The limits see the calls counted so far: the caller counts this one.
        if larger is None or (retry.over_limit is not None and retry.over_limit()):
            return response
        ledger.record_aside(response)
        journal.write(
            ReplyCut(
                turn=turn,
                purpose=purpose,
                attempt=attempt,
                max_tokens=budget,
                next_max_tokens=larger,
                message=response.message,
                usage=response.usage,
            )
        )
        budget = larger
    raise AssertionError("unreachable: the last attempt returns")
