"""The turn loop's end at the window: what the loop does when a turn cannot fit.

Three ways a turn finds the window too small, one recovery for them (:class:`WindowEnd`):
the window guard's verdict before asking (``end``, with its estimate); the server
refusing the request as too long (``after_refusal``: learn the window it states, then
do what the guard would have done had it known); the window running out in the middle
of the reply (``out_mid_reply``: the reply is incomplete and not kept). Each ends the
loop as ``window_exhausted`` without the newest exchange, journaled once; a refusal
with nothing left to drop is raised and the attempt ends as an error.
"""

from __future__ import annotations

from deepledger.agent.state import RunState
from deepledger.context.guard import (
    ContextWindow,
    drop_last_exchange,
    fits_window,
    request_tokens,
    smallest_closing_request,
)
from deepledger.context.policy import ContextPolicy
from deepledger.errors import ContextOverflowError
from deepledger.llm.base import LLMClient
from deepledger.messages import EndReason, Message
from deepledger.records.events import ContextOverflow, WindowExhausted
from deepledger.store.journal import Journal

# Turns asked again after the server refused their request as too long and a compaction
# shrank it; past this, a refusal ends the loop as the guard would.
MAX_COMPACTIONS_AFTER_OVERFLOW = 2


class WindowEnd:
    """The loop's recovery when a turn does not fit ``window`` (the loop's, shared with
    its policy's guard): ``reply_budget`` tokens of reply room, counted by ``llm``'s counter;
    ``summary_prompt``: the closing prompt, which must still fit after the loop."""

    def __init__(
        self,
        *,
        window: ContextWindow,
        policy: ContextPolicy,
        llm: LLMClient,
        reply_budget: int,
        summary_prompt: str,
        journal: Journal,
    ) -> None:
        self.window = window
        self.policy = policy
        self.llm = llm
        self.reply_budget = reply_budget
        self.summary_prompt = summary_prompt
        self.journal = journal
        self._compactions = 0  # turns asked again after a refusal and a compaction

    async def after_refusal(
        self, state: RunState, request: list[Message], exc: ContextOverflowError
    ) -> None:
        """The server refused a turn's request as too long: our count was short, or the
        server's window is smaller than llm.max_context_length. Learn the window it
        states, then do what the guard would have done: compact and ask again; else end
        the loop without the newest exchange; else, when the task alone is known not to
        fit, end it for finalization to say so. With none of these, the refusal stands
        and the attempt ends as an error (raised, the server's message kept)."""
        limit = self.window.limit
        stated = self.window.learn(str(exc))
        estimated = request_tokens(
            request, reply_budget=self.reply_budget, counter=self.llm.token_counter
        )

        def overflow(action: str, dropped_messages: int = 0) -> ContextOverflow:
            return ContextOverflow(
                turn=state.turn + 1,
                purpose="turn",
                provider_said=str(exc),
                estimated_tokens=estimated,
                limit=limit,
                server_limit=stated,
                action=action,
                dropped_messages=dropped_messages,
            )

        if self.policy.compacts and self._compactions < MAX_COMPACTIONS_AFTER_OVERFLOW:
            self._compactions += 1
            if await self.policy.compact_now(state.history, turn=state.turn + 1):
                self.journal.write(overflow("compacted"))
                return  # the loop asks again, counting the compacted request
        kept, dropped = drop_last_exchange(state.history)
        if dropped or not self._task_alone_fits(state):
            self.journal.write(overflow("ended_loop", len(dropped)))
            self.end(state, list(kept), provider_said=str(exc))
            return
        self.journal.write(overflow("gave_up"))
        raise ContextOverflowError(
            f"{exc} — the request of turn {state.turn + 1} ({len(request)} messages, about "
            f"{estimated:,} tokens by our count with the reply budget) held "
            "nothing the window guard could drop",
            provider=exc.provider,
            status=exc.status,
        ) from exc

    def out_mid_reply(self, state: RunState) -> None:
        """The window ran out mid-reply: the reply is incomplete, so it is not kept."""
        kept, _ = drop_last_exchange(state.history)
        self.end(state, list(kept), provider_said="context_overflow")

    def _task_alone_fits(self, state: RunState) -> bool:
        """Whether the smallest closing request (system prompt, task, summarize prompt)
        fits the window by our plain count."""
        smallest = smallest_closing_request(state.history, [Message.injected(self.summary_prompt)])
        fits, _ = fits_window(
            smallest,
            reply_budget=self.reply_budget,
            limit=self.window.limit,
            counter=self.llm.token_counter,
        )
        return fits

    def end(
        self,
        state: RunState,
        history: list[Message],
        *,
        estimate: int | None = None,
        provider_said: str | None = None,
    ) -> None:
        """End the loop, continuing from ``history``: by the guard's ``estimate``, or
        because the provider refused the request (``provider_said``); the journal line
        holds the one given."""
        dropped = len(state.history) - len(history)
        state.history = history
        state.end_reason = EndReason.WINDOW_EXHAUSTED
        turn, limit = state.turn, self.window.limit
        if provider_said is None:
            event = WindowExhausted(
                turn=turn, limit=limit, dropped_messages=dropped, estimate=estimate
            )
        else:
            event = WindowExhausted(
                turn=turn, limit=limit, dropped_messages=dropped, provider_said=provider_said
            )
        self.journal.write(event)
