"""Asking the model for one turn's reply: the request as sent, the call, its lines.

:class:`TurnAsk` takes the request the context policy prepared and, in named steps:
sets the cache breakpoint where the stable prefix ends and any forced first call's
prefill (:meth:`~TurnAsk._request`); counts a broken prefix and journals pairing repairs
(:meth:`~TurnAsk._note_request`); calls the model, a reply cut at its budget asked again
with more room (``agent/cut.py``), a refusal as too long handed to the window's recovery
(``agent/overflow.py``), a failure's router lines journaled (:meth:`~TurnAsk._call_model`);
records the reply, joins a forced call whole, hands a reply the window cut to the
recovery; and journals the call with where the router sent it (``llm/endpoints.py``).
"""

from __future__ import annotations

from dataclasses import replace

from deepledger.agent.cut import CutRetry, generate_with_room
from deepledger.agent.overflow import WindowEnd
from deepledger.agent.state import RunState
from deepledger.context.policy import Request
from deepledger.errors import ContextOverflowError, LLMError
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.endpoints import RouterEvents
from deepledger.messages import LLMResponse, Message, StopReason
from deepledger.records.events import LLMCall, PairingProblem, PairingRepaired
from deepledger.store.journal import Journal
from deepledger.tools.protocols import ForcedCall, ToolProtocol
from deepledger.tools.task_tools import TaskTools


class TurnAsk:
    """One agent's way of asking for a turn's reply: ``llm`` with ``settings`` and the
    ``tools`` as ``protocol`` declares them; ``cut_retry``: how a cut reply is asked
    again; ``window_end``: the recovery when the request or reply does not fit."""

    def __init__(
        self,
        *,
        llm: LLMClient,
        protocol: ToolProtocol,
        tools: TaskTools,
        settings: GenerationSettings,
        cut_retry: CutRetry,
        window_end: WindowEnd,
        journal: Journal,
    ) -> None:
        self.llm = llm
        self.protocol = protocol
        self.tools = tools
        self.settings = settings
        self._settings_for_prefix = (settings, settings)  # see _request
        self.cut_retry = cut_retry
        self.window_end = window_end
        self.journal = journal
        self.router = RouterEvents(journal.write)  # llm.endpoints: the servers' moves

    async def ask(
        self, state: RunState, prepared: Request, forced: ForcedCall | None = None
    ) -> LLMResponse | None:
        """The model's reply to the turn's request, recorded and journaled; None when
        the window ended the loop instead. ``forced``: the call the reply makes."""
        request, settings = self._request(prepared, forced)
        self._note_request(state, prepared)
        response = await self._call_model(state, request, settings)
        if response is None:
            return None
        state.ledger.record(response)
        if forced:
            joined = replace(response.message, content=forced.join(response.message.content))
            response = replace(response, message=joined)
        if response.stop_reason is StopReason.CONTEXT_OVERFLOW:
            self.window_end.out_mid_reply(state)
            return None
        self._journal_call(state, prepared, len(request), response, forced=forced is not None)
        return response

    def _request(
        self, prepared: Request, forced: ForcedCall | None
    ) -> tuple[list[Message], GenerationSettings]:
        """The messages and settings sent: the cache breakpoint where the policy's stable
        prefix ends, and the forced first call's opening as a prefill."""
        request = prepared.messages
        # Where a provider's cache breakpoint pays off longest (llm/anthropic.py); the
        # settings made for the last call serve again while it stays where it was.
        base, settings = self._settings_for_prefix
        if settings.cache_prefix != prepared.stable_prefix or base is not self.settings:
            settings = replace(self.settings, cache_prefix=prepared.stable_prefix)
            self._settings_for_prefix = (self.settings, settings)
        if forced:
            request = [*request, Message.assistant(forced.opening)]
            settings = replace(settings, stop=(*settings.stop, forced.stop))
        return request, settings

    def _note_request(self, state: RunState, prepared: Request) -> None:
        """What building the request did to the history: a broken cache prefix, counted;
        pairing problems repaired, journaled."""
        state.prefix_breaks += prepared.prefix_broken
        if prepared.repairs:
            problems = [
                PairingProblem(index=p.index, kind=p.kind, call_id=p.call_id)
                for p in prepared.repairs
            ]
            self.journal.write(PairingRepaired(turn=state.turn + 1, problems=problems))

    async def _call_model(
        self, state: RunState, request: list[Message], settings: GenerationSettings
    ) -> LLMResponse | None:
        """The call, a reply cut at its budget asked again with more room; None when the
        server refused the request as too long and the window's recovery took over."""
        self.journal.flush()  # what the turn did so far is on file before the wait
        try:
            return await generate_with_room(
                self.llm,
                request,
                self.protocol.specs(self.tools.tools),
                settings,
                retry=self.cut_retry,
                journal=self.journal,
                ledger=state.ledger,
                turn=state.turn + 1,
            )
        except ContextOverflowError as exc:
            await self.window_end.after_refusal(state, request, exc)
            return None
        except LLMError as exc:  # the servers it failed at, for their counts
            self.router.failed(state.turn + 1, exc)
            raise

    def _journal_call(
        self,
        state: RunState,
        prepared: Request,
        messages: int,
        response: LLMResponse,
        *,
        forced: bool,
    ) -> None:
        """The call's line, after the router's moves on its way (``llm.endpoints``)."""
        call = LLMCall(
            turn=state.turn + 1,
            messages=messages,
            left_out_messages=prepared.left_out,
            prefix_kept_messages=prepared.prefix_kept,
            prefix_broken=prepared.prefix_broken,
            prefix_broken_by=prepared.prefix_broken_by,
            blanked_tool_results=prepared.blanked,  # known to the trimmer: no second pass
            forced_call=forced,
            usage=response.usage,
            stop_reason=response.stop_reason,
        )
        self.router.answered(call, response.routing)
