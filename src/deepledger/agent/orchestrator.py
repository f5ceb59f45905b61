"""The turn loop: ask the model, run the tools it asks for, know when to stop.

Per turn: the context policy prepares the request (``context/policy.py``: compaction
when due, the window guard's verdict, the strategy's pick of the history with
``keep_tool_result`` applied), ask the model, roll the reply back if it is unusable,
keep it (recording any ``\\boxed{}`` that answers as an intermediate answer: not
``\\boxed{unknown}`` and the like, ``agent/boxed.py``), run its tool calls,
append the results. The loop ends when the model answers without tools
(``MODEL_FINISHED``; ``CUT_OR_EMPTY`` when that reply was cut at ``llm.max_tokens`` or
says nothing, see :func:`end_without_calls`), ``max_turns`` replies have been kept
(``TURNS_EXHAUSTED``), the window guard stops it (``WINDOW_EXHAUSTED``), the newest
replies go round a cycle of one to three turns again and again (``LOOPING``, see
``agent/cycles.py``), or a task limit or the run's budget is reached before a turn
(``LIMIT``, see ``limits.py``); then the state goes to finalization.

A reply cut at ``llm.max_tokens`` is first asked again with more room
(``agent/cut.py``, ``agent.recovery.cut_reply_attempts``); only the last attempt is kept.

A turn that does not fit the window (the guard's verdict, the server's refusal, a reply
the window cut) ends the loop as ``agent/overflow.py`` says; when nothing can be dropped
the refusal is raised and the attempt ends as an error. The answer generator then reads
the state the loop ended in (``agent/answer.py``).

The same class runs the main agent and every sub-agent; only its inputs differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepledger.agent.answer import AnswerGenerator
from deepledger.agent.ask import TurnAsk
from deepledger.agent.boxed import answer_box, last_boxed
from deepledger.agent.cut import CutRetry
from deepledger.agent.cycles import note_reply, reply_key
from deepledger.agent.limits import TaskBudget
from deepledger.agent.overflow import WindowEnd
from deepledger.agent.resume import CYCLE_STATE, Rebuilt, lost_state_note
from deepledger.agent.rollback import RollbackReason, review_reply
from deepledger.agent.state import RunState
from deepledger.agent.tool_turn import run_calls
from deepledger.config import MAX_CYCLE_REPEATS
from deepledger.context.policy import ContextPolicy
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.usage import UsageLedger
from deepledger.messages import (
    EndReason,
    ImagePart,
    LLMResponse,
    Message,
    StopReason,
    Usage,
)
from deepledger.records.events import (
    AssistantTurn,
    LimitReached,
    LoopEnded,
    Resumed,
    Rollback,
    RollbackCapReached,
    RollbackRepeated,
    TaskFinished,
    TaskStarted,
)
from deepledger.store.journal import Journal
from deepledger.tools.protocols import (
    ForcedCall,
    ParsedCalls,
    ToolProtocol,
    specs_digest,
    specs_json,
)
from deepledger.tools.task_tools import TaskTools


@dataclass(frozen=True)
class LoopLimits:
    """When the loop stops or stops asking again (the window and what each request
    keeps are the context policy's)."""

    max_turns: int
    max_consecutive_rollbacks: int = 5
    # A cycle of turns gone round this many more times after its first round ends the
    # loop as looping (agent.main_agent.max_cycle_repeats).
    max_cycle_repeats: int = MAX_CYCLE_REPEATS
    # Attempts in all for a reply cut at llm.max_tokens, 10 % more room each
    # (agent.recovery.cut_reply_attempts, agent/cut.py); 1: a cut reply is kept.
    cut_reply_attempts: int = 1


def end_without_calls(reply: Message, stop: StopReason) -> EndReason:
    """Why the loop ends on a kept ``reply`` that runs no tools: the model answered,
    unless the reply was cut at ``llm.max_tokens`` or holds no text. Neither is an
    answer, whatever box it holds: a cut reply may have been about to take it back.
    (Asking again with a larger reply budget would start from this verdict.)"""
    if stop is StopReason.MAX_TOKENS or not reply.content.strip():
        return EndReason.CUT_OR_EMPTY
    return EndReason.MODEL_FINISHED


class Orchestrator:
    """One agent's turn loop (the main agent's or a sub-agent's): what it asks with
    (``llm``, ``settings``, ``tools`` as ``protocol`` declares them, ``system_prompt``),
    when it stops (``limits``, ``budget``), what each request sends (``policy``), where
    it writes (``journal``, ``ledger``), and who answers after it (``finalizer``)."""

    def __init__(
        self,
        *,
        llm: LLMClient,
        tools: TaskTools,
        protocol: ToolProtocol,
        settings: GenerationSettings,
        limits: LoopLimits,
        system_prompt: str,
        finalizer: AnswerGenerator,
        journal: Journal,
        policy: ContextPolicy,
        ledger: UsageLedger,
        first_call: ForcedCall | None = None,
        budget: TaskBudget | None = None,
    ) -> None:
        """``policy``: what each request sends, the window guard and compaction; its
        guard's window is the loop's. ``ledger``: the conversation's usage, the one the
        policy's compaction notes are recorded in too."""
        if policy.guard is None:
            raise ValueError("the turn loop's context policy needs a window guard")
        self.llm = llm
        self.budget = budget  # the task's limits and the run's budget; None: no limits
        self.tools = tools
        self.protocol = protocol
        self.settings = settings
        self.limits = limits
        self.system_prompt = system_prompt
        self.finalizer = finalizer
        self.journal = journal
        self.policy = policy
        self.ledger = ledger
        # llm.max_context_length, or the smaller window the server stated (shared with
        # the task's other agents).
        self.window = policy.guard.window
        self.window_end = WindowEnd(
            window=self.window,
            policy=policy,
            llm=llm,
            reply_budget=settings.max_tokens,
            summary_prompt=finalizer.summary_prompt,
            journal=journal,
        )
        retry = CutRetry(limits.cut_reply_attempts, self.window, self._limit_hit)
        self.asking = TurnAsk(
            llm=llm,
            protocol=protocol,
            tools=tools,
            settings=settings,
            cut_retry=retry,
            window_end=self.window_end,
            journal=journal,
        )
        # The call the first kept reply makes (llm.first_call): the request ends with its
        # opening as a prefill, and the model's part is joined into a whole call.
        self.first_call = first_call
        self._rejected_reply: str | None = None  # the reply the last rollback refused
        # After a resume that lost a tool server's state: said in the next tool result.
        self._lost_state_note: str | None = None

    async def run(
        self,
        task_text: str,
        task_images: tuple[ImagePart, ...] = (),
        rebuilt: Rebuilt | None = None,
    ) -> RunState:
        """Work on the task until the loop ends, then finalize the answer. ``rebuilt``:
        the state a killed run's journal was rebuilt into (``resume.py``, made with this
        orchestrator's policy, protocol and ledger); the loop goes on at its next turn."""
        if rebuilt is None:
            state = self._start(task_text, task_images)
        else:
            state = await self._resume(rebuilt)
        while state.end_reason is None:
            await self._turn(state)
        if rebuilt is None or not rebuilt.loop_ended:  # a resumed journal holds it already
            self.journal.write(LoopEnded(end_reason=state.end_reason, turns=state.turn))
        tools = self.protocol.specs(self.tools.tools)
        await self.finalizer.finalize(
            state, self.llm, self.settings, self.journal, self.policy, tools, window=self.window
        )
        self.journal.write(
            TaskFinished(
                answer=state.final_answer,
                provenance=state.provenance,
                end_reason=state.end_reason,
                end_detail=state.end_detail,
                turns=state.turn,
                tool_calls=state.tool_calls,
                rollbacks=len(state.rollbacks),
                usage=state.ledger.total,
                cost=state.ledger.cost,
            )
        )
        return state

    def _start(self, task_text: str, task_images: tuple[ImagePart, ...]) -> RunState:
        """The state of a new run, its start journaled: with the journal, all a replay
        needs (the task's images are journaled without their data)."""
        history = [Message.system(self.system_prompt), Message.task(task_text, task_images)]
        # The offered tools are fixed for the attempt (a resume refuses others by their
        # digest): their specs are journaled once, here, not with every call.
        specs = self.protocol.specs(self.tools.tools)
        self.journal.write(
            TaskStarted(
                task=task_text,
                task_images=list(task_images),
                tools=[t.qualified_name for t in self.tools.tools],
                system_prompt=self.system_prompt,
                protocol=self.protocol.name,
                tool_specs_sha256=specs_digest(specs),
                tool_specs=specs_json(specs) or None,
            )
        )
        return RunState(history=history, ledger=self.ledger)

    async def _resume(self, rebuilt: Rebuilt) -> RunState:
        """Go on from a rebuilt state: journal where, then run again the tool calls of a
        kept reply whose results the kill cut off."""
        state = rebuilt.state
        self._rejected_reply = rebuilt.rejected_reply
        if rebuilt.lost_tool_state:
            self._lost_state_note = lost_state_note(rebuilt.lost_tool_state)
        replayed = self._calls_to_replay(state, rebuilt.pending, rebuilt.pending_stop)
        # The loop had ended (or ends before asking: out of turns): the closing is next.
        at_closing = replayed is None and (
            state.end_reason is not None or state.turn >= self.limits.max_turns
        )
        self.journal.write(
            Resumed(
                resumed_at_turn=state.turn + (replayed is None and not at_closing),
                replayed_reply=replayed is not None,
                at_closing=at_closing,
                lost_tool_state=rebuilt.lost_tool_state,
                cycle_state=CYCLE_STATE,
            )
        )
        if replayed is not None:
            await self._run_tools(state, replayed)
        return state

    def _calls_to_replay(
        self, state: RunState, pending: Message | None, stop: StopReason
    ) -> ParsedCalls | None:
        """The calls of the kept reply ``pending`` (the model stopped it for ``stop``)
        whose results the kill cut off, to run again; None when there is none, or when
        the reply had none to run: the loop ended on it (the end reason set, as
        ``_turn`` would have)."""
        if pending is None:
            return None
        response = LLMResponse(pending, StopReason.TOOL_USE, Usage())
        parsed = self.protocol.extract(response, state.turn, self.tools.tools)
        boxed = last_boxed(pending.content)  # as _keep_reply found it
        if not parsed.calls and (not parsed.malformed or boxed is not None):  # as _turn
            state.end_reason = end_without_calls(pending, stop)
            return None
        return parsed

    async def _turn(self, state: RunState) -> None:
        """One turn: the checks before asking, the request, the reply (rolled back, or
        kept and ending the loop or running its calls)."""
        if state.turn >= self.limits.max_turns:
            state.end_reason = EndReason.TURNS_EXHAUSTED
            return
        if self._over_limit(state):
            return
        prepared = await self.policy.prepare(
            state.history, state.ledger.last_usage, turn=state.turn + 1
        )
        if prepared.window is not None and not prepared.window.fits:
            verdict = prepared.window  # the guard: asking would overflow the window
            self.window_end.end(state, list(verdict.history), estimate=verdict.estimate.total)
            return
        forced = self.first_call if state.turn == 0 else None
        response = await self.asking.ask(state, prepared, forced)
        if response is None:
            return
        parsed = self.protocol.extract(response, state.turn + 1, self.tools.tools)
        if self._roll_back(state, response, parsed):
            return
        boxed = self._keep_reply(state, response, parsed)
        # No call to run: the model is done. So is a reply that answers in a box and only
        # mentions tool markup it did not mean as a call.
        if not parsed.calls and (not parsed.malformed or boxed is not None):
            state.end_reason = end_without_calls(state.history[-1], response.stop_reason)
            return
        await self._run_tools(state, parsed)

    def _over_limit(self, state: RunState) -> bool:
        """End the loop when a task limit or the run's budget is reached (checked before
        every turn, so a call in flight is never cut); the answer generator reads the
        end reason (no retry follows a limit)."""
        hit = self.budget.check() if self.budget is not None else None
        if hit is None:
            return False
        state.end_reason = EndReason.LIMIT
        state.limit = hit
        self.journal.write(
            LimitReached(turn=state.turn, kind=hit.kind, limit=hit.limit, spent=hit.recorded_spent)
        )
        return True

    def _limit_hit(self) -> bool:
        """Whether a task limit or the run's budget is reached (no state changed: the
        loop's own check before the next turn acts on it)."""
        return self.budget is not None and self.budget.check() is not None

    def _note_reply(
        self, state: RunState, reply: Message, outcome: Message | RollbackReason, turn: int
    ) -> None:
        """Note the newest reply, kept (``outcome``: its results) or rolled back; end
        the loop when the replies go round a cycle (``agent/cycles.py``)."""
        key = reply_key(reply, outcome, turn)
        looping = note_reply(
            state.replies, key, repeats=self.limits.max_cycle_repeats, turn=state.turn
        )
        if looping is not None:
            state.end_reason = EndReason.LOOPING
            self.journal.write(looping)

    def _roll_back(self, state: RunState, response: LLMResponse, parsed: ParsedCalls) -> bool:
        if state.consecutive_rollbacks >= self.limits.max_consecutive_rollbacks:
            if review_reply(response.text, parsed, state.seen_call_keys) is not None:
                self.journal.write(RollbackCapReached(turn=state.turn + 1))
            return False
        rollback = review_reply(response.text, parsed, state.seen_call_keys)
        if rollback is None:
            return False
        if state.consecutive_rollbacks and response.text == self._rejected_reply:
            # Asked again, the model said the same thing (greedy decoding does): more
            # asking will not change it, so keep it as if the cap had been reached.
            self.journal.write(RollbackRepeated(turn=state.turn + 1, reason=rollback.reason))
            return False
        self._rejected_reply = response.text
        state.rollbacks.append(rollback)
        state.consecutive_rollbacks += 1
        whole = response.message.tool_calls or response.message.thinking  # not in its text
        self.journal.write(
            Rollback(
                turn=state.turn + 1,
                reason=rollback.reason,
                detail=rollback.detail,
                reply=response.text,
                message=response.message if whole else None,
            )
        )
        # A rolled-back reply is one of the model's replies too: it counts toward a cycle.
        self._note_reply(state, response.message, rollback.reason, state.turn + 1)
        return True

    def _keep_reply(
        self, state: RunState, response: LLMResponse, parsed: ParsedCalls
    ) -> str | None:
        message = self.protocol.record_calls(response, parsed)
        state.history.append(message)
        state.turn += 1
        state.consecutive_rollbacks = 0
        boxed = last_boxed(message.content)
        # \boxed{unknown} and the like are no intermediate answer a fallback may take.
        answer = answer_box(message.content, non_answers=self.finalizer.non_answers)
        if answer is not None:
            state.intermediate_answers.append(answer)
        self.journal.write(AssistantTurn(turn=state.turn, message=message, boxed=answer))
        return boxed

    async def _run_tools(self, state: RunState, parsed: ParsedCalls) -> None:
        results = await run_calls(
            state,
            parsed,
            tools=self.tools,
            protocol=self.protocol,
            journal=self.journal,
            note=self._lost_state_note,
        )
        if results:  # the note went out with them
            self._lost_state_note = None
        reply, answered = state.history[-2:]  # the reply _keep_reply kept, these results
        self._note_reply(state, reply, answered, state.turn)
