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
:func:`find_cycle`), or a task limit or the run's budget is reached before a turn
(``LIMIT``, see ``limits.py``); then the state goes to finalization.

A reply cut at ``llm.max_tokens`` is first asked again with more room
(``agent/cut.py``, ``agent.recovery.cut_reply_attempts``); only the last attempt is kept.

A request the server refuses as too long is handled as the guard would have handled it,
had it known (:meth:`Orchestrator._after_overflow`); when nothing can be dropped the
refusal is raised and the attempt ends as an error.

The same class runs the main agent and every sub-agent; only its inputs differ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from deepledger.agent.answer import AnswerGenerator
from deepledger.agent.boxed import answer_box, last_boxed
from deepledger.agent.cut import CutRetry, generate_with_room
from deepledger.agent.limits import TaskBudget
from deepledger.agent.rollback import RollbackReason, call_key, review_reply
from deepledger.agent.state import ReplyKey, RunState
from deepledger.config import MAX_CYCLE_REPEATS
from deepledger.context.guard import (
    ContextWindow,
    drop_last_exchange,
    fits_window,
    request_tokens,
    smallest_closing_request,
)
from deepledger.context.policy import ContextPolicy, Request
from deepledger.context.strategy import ContextStrategy
from deepledger.errors import ContextOverflowError, LLMError
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.endpoints import failed_call, routed_events
from deepledger.llm.usage import Price, UsageLedger
from deepledger.messages import (
    EndReason,
    ImagePart,
    LLMResponse,
    Message,
    StopReason,
    ToolResult,
    Usage,
    sorted_json,
)
from deepledger.records.events import (
    AssistantTurn,
    ContextOverflow,
    LimitReached,
    LLMCall,
    LoopEnded,
    Looping,
    PairingProblem,
    PairingRepaired,
    Resumed,
    Rollback,
    RollbackCapReached,
    RollbackRepeated,
    TaskFinished,
    TaskStarted,
    ToolCallRepaired,
    ToolResults,
    WindowExhausted,
)
from deepledger.store.journal import Journal
from deepledger.tools.protocols import ForcedCall, ParsedCalls, ToolProtocol, specs_digest
from deepledger.tools.task_tools import TaskTools

if TYPE_CHECKING:  # resume.py reads the loop's reply keys from here: no import cycle
    from deepledger.agent.resume import Rebuilt

# The longest cycle of turns the loop check looks for: A-A-A, A-B-A-B-A-B, A-B-C-A-B-C-...
MAX_CYCLE_LENGTH = 3
# Turns asked again after the server refused their request as too long and a compaction
# shrank it; past this, a refusal ends the loop as the guard would.
MAX_COMPACTIONS_AFTER_OVERFLOW = 2


@dataclass(frozen=True)
class LoopLimits:
    max_turns: int
    max_context_length: int
    keep_tool_result: int = -1
    max_consecutive_rollbacks: int = 5
    # A cycle of turns gone round this many more times after its first round ends the
    # loop as looping (agent.main_agent.max_cycle_repeats).
    max_cycle_repeats: int = MAX_CYCLE_REPEATS
    # Attempts in all for a reply cut at llm.max_tokens, 10 % more room each
    # (agent.recovery.cut_reply_attempts, agent/cut.py); 1: a cut reply is kept.
    cut_reply_attempts: int = 1


@dataclass(frozen=True)
class Cycle:
    """What the loop check found: ``length`` replies a round, the round repeated
    ``repeats`` times after its first, which began at ``since_turn``."""

    length: int
    repeats: int
    since_turn: int
    with_rollbacks: bool  # found among all replies, rolled-back ones included


def reply_key(reply: Message, outcome: Message | RollbackReason, turn: int) -> ReplyKey:
    """``reply`` and what came of it (its tool results message, or why it was rolled
    back) as the cycle check compares them: the reply's text, thinking and calls, then
    the results. Call ids change from turn to turn when nothing else does (the protocols
    and the orchestrator number them by turn, providers make up their own), so each id
    is replaced by its place among the ids this reply and its results use: which result
    answers which call still counts, the id's spelling does not."""
    places: dict[str, int] = {}

    def place(call_id: str) -> int:
        return places.setdefault(call_id, len(places))

    calls = [
        [place(c.id), c.server_name, c.name, c.raw_arguments, c.arguments, c.parse_error]
        for c in reply.tool_calls
    ]
    said = [reply.content, [block.text for block in reply.thinking], calls]
    came: list[object]
    if isinstance(outcome, RollbackReason):
        came = ["rolled back", outcome.value]
    else:
        results = [
            [
                place(r.call_id),
                r.name,
                r.content,
                r.is_error,
                [[i.mime_type, i.data] for i in r.images],
            ]
            for r in outcome.tool_results
        ]
        came = [outcome.content, results]
    kept = not isinstance(outcome, RollbackReason)
    return ReplyKey(hashlib.sha256(sorted_json([said, came])).digest(), turn, kept)


def end_without_calls(reply: Message, stop: StopReason) -> EndReason:
    """Why the loop ends on a kept ``reply`` that runs no tools: the model answered,
    unless the reply was cut at ``llm.max_tokens`` or holds no text. Neither is an
    answer, whatever box it holds: a cut reply may have been about to take it back.
    (Asking again with a larger reply budget would start from this verdict.)"""
    if stop is StopReason.MAX_TOKENS or not reply.content.strip():
        return EndReason.CUT_OR_EMPTY
    return EndReason.MODEL_FINISHED


def find_cycle(replies: Sequence[ReplyKey], repeats: int) -> Cycle | None:
    """The cycle the newest ``replies`` go round ``repeats`` times after its first round,
    if any: among the kept turns (what the conversation holds, so a rolled-back reply
    between two of them hides nothing), else among all replies (a model going round
    replies that are all rolled back). The shortest cycle wins: A-A-A is a cycle of one."""
    views: list[tuple[Sequence[ReplyKey], bool]] = [(replies, True)]
    if replies and replies[-1].kept:  # else the kept turns are as they were last time
        views.insert(0, ([r for r in replies if r.kept], False))
    for keys, with_rollbacks in views:
        length = _cycle_length(keys, repeats)
        if length is not None:
            first = keys[-length * (repeats + 1)]
            return Cycle(length, repeats, first.turn, with_rollbacks)
    return None


def _cycle_length(keys: Sequence[ReplyKey], repeats: int) -> int | None:
    """The length of the shortest cycle (1 to ``MAX_CYCLE_LENGTH``) the newest ``keys``
    repeat ``repeats`` times after its first round; None when they do not."""
    for length in range(1, MAX_CYCLE_LENGTH + 1):
        span = length * (repeats + 1)
        if len(keys) < span:
            return None
        tail = keys[-span:]
        if all(a.digest == b.digest for a, b in zip(tail, tail[length:], strict=False)):
            return length
    return None


class Orchestrator:
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
        price: Price | None = None,
        context: ContextStrategy | None = None,
        first_call: ForcedCall | None = None,
        budget: TaskBudget | None = None,
        window: ContextWindow | None = None,
        policy: ContextPolicy | None = None,
    ) -> None:
        """``policy``: what each request sends, the window guard and compaction (its
        guard's window is the loop's). Without one, the policy is made when the run
        starts from ``context`` (default: keep every message), ``limits`` and ``window``,
        with notes, if it compacts, from this agent's own model."""
        self.llm = llm
        self.budget = budget  # the task's limits and the run's budget; None: no limits
        self.tools = tools
        self.protocol = protocol
        self.settings = settings
        self._settings_for_prefix = (settings, settings)  # see _ask
        self.limits = limits
        self.system_prompt = system_prompt
        self.finalizer = finalizer
        self.journal = journal
        self.price = price
        if policy is not None and policy.guard is None:
            raise ValueError("the turn loop's context policy needs a window guard")
        self._policy = policy
        self._context = context  # for the policy made at the start of the run
        # The call the first kept reply makes (llm.first_call): the request ends with its
        # opening as a prefill, and the model's part is joined into a whole call.
        self.first_call = first_call
        self._rejected_reply: str | None = None  # the reply the last rollback refused
        # llm.max_context_length, or the smaller window the server stated (shared with
        # the task's other agents when given).
        self.window = window or ContextWindow(limits.max_context_length)
        if policy is not None and policy.guard is not None:
            self.window = policy.guard.window
        self._overflow_retries = 0
        # After a resume that lost a tool server's state: said in the next tool result.
        self._lost_state_note: str | None = None

    @property
    def policy(self) -> ContextPolicy:
        """The conversation's context policy (made when the run starts, if not given)."""
        if self._policy is None:
            raise RuntimeError("the context policy is made when the run starts")
        return self._policy

    def _own_policy(self, ledger: UsageLedger) -> ContextPolicy:
        return ContextPolicy.for_model(
            self._context,
            keep_tool_result=self.limits.keep_tool_result,
            llm=self.llm,
            settings=self.settings,
            window=self.window,
            summary_prompt=self.finalizer.summary_prompt,
            journal=self.journal,
            ledger=ledger,
        )

    async def run(
        self,
        task_text: str,
        ledger: UsageLedger | None = None,
        task_images: tuple[ImagePart, ...] = (),
        rebuilt: Rebuilt | None = None,
    ) -> RunState:
        """Work on the task until the loop ends, then finalize the answer. ``rebuilt``:
        the state a killed run's journal was rebuilt into (``resume.py``, made with this
        orchestrator's policy and protocol); the loop goes on at its next turn."""
        if rebuilt is None:
            state = RunState(
                history=[Message.system(self.system_prompt), Message.task(task_text, task_images)],
                ledger=ledger if ledger is not None else UsageLedger(self.price),
            )
            if self._policy is None:
                self._policy = self._own_policy(state.ledger)
            self.journal.write(
                TaskStarted(
                    task=task_text,
                    task_images=list(task_images),  # journaled without their data
                    tools=[t.qualified_name for t in self.tools.tools],
                    system_prompt=self.system_prompt,  # with the journal, all a replay needs
                    protocol=self.protocol.name,
                    tool_specs_sha256=specs_digest(self.protocol.specs(self.tools.tools)),
                )
            )
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

    async def _resume(self, rebuilt: Rebuilt) -> RunState:
        """Go on from a rebuilt state: journal where, then run again the tool calls of a
        kept reply whose results the kill cut off."""
        from deepledger.agent.resume import CYCLE_STATE, lost_state_note

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
            reply, results = state.history[-2:]
            self._stop_if_looping(state, reply_key(reply, results, state.turn))
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
            self._end_on_window(state, list(verdict.history), estimate=verdict.estimate.total)
            return
        response = await self._ask(state, prepared)
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
        reply, results = state.history[-2:]  # what _keep_reply and _run_tools appended
        self._stop_if_looping(state, reply_key(reply, results, state.turn))

    def _over_limit(self, state: RunState) -> bool:
        """End the loop when a task limit or the run's budget is reached (checked before
        every turn, so a call in flight is never cut)."""
        hit = self.budget.check() if self.budget is not None else None
        if hit is None:
            return False
        state.end_reason = EndReason.LIMIT
        state.limit = hit
        self.journal.write(
            LimitReached(turn=state.turn, kind=hit.kind, limit=hit.limit, spent=hit.recorded_spent)
        )
        # No retry follows a limit, so no post-mortem: one closing call answers, falling
        # back to the last intermediate box (what the final retry does, in one try).
        self.finalizer.policy = replace(
            self.finalizer.policy, is_final_retry=True, max_final_answer_retries=1
        )
        return True

    def _limit_hit(self) -> bool:
        """Whether a task limit or the run's budget is reached (no state changed: the
        loop's own check before the next turn acts on it)."""
        return self.budget is not None and self.budget.check() is not None

    def _stop_if_looping(self, state: RunState, reply: ReplyKey) -> None:
        """Note the newest reply (kept or rolled back); end the loop when the replies go
        round a cycle for the ``max_cycle_repeats``-th time after its first round
        (:func:`find_cycle`): nothing new will come of another round."""
        state.replies.append(reply)
        cycle = find_cycle(state.replies, self.limits.max_cycle_repeats)
        if cycle is None:
            return
        state.end_reason = EndReason.LOOPING
        self.journal.write(
            Looping(
                turn=state.turn,
                repeats=cycle.repeats,
                cycle_length=cycle.length,
                since_turn=cycle.since_turn,
                with_rollbacks=cycle.with_rollbacks,
            )
        )

    async def _after_overflow(
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
            request, reply_budget=self.settings.max_tokens, counter=self.llm.token_counter
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

        compactions_left = self._overflow_retries < MAX_COMPACTIONS_AFTER_OVERFLOW
        if self.policy.compacts and compactions_left:
            self._overflow_retries += 1
            if await self.policy.compact_now(state.history, turn=state.turn + 1):
                self.journal.write(overflow("compacted"))
                return  # the loop asks again, counting the compacted request
        kept, dropped = drop_last_exchange(state.history)
        if dropped or not self._task_alone_fits(state):
            self.journal.write(overflow("ended_loop", len(dropped)))
            self._end_on_window(state, list(kept), provider_said=str(exc))
            return
        self.journal.write(overflow("gave_up"))
        raise ContextOverflowError(
            f"{exc} — the request of turn {state.turn + 1} ({len(request)} messages, about "
            f"{estimated:,} tokens by our count with the reply budget) held "
            "nothing the window guard could drop",
            provider=exc.provider,
            status=exc.status,
        ) from exc

    def _task_alone_fits(self, state: RunState) -> bool:
        """Whether the smallest closing request (system prompt, task, summarize prompt)
        fits the window by our plain count."""
        smallest = smallest_closing_request(
            state.history, [Message.injected(self.finalizer.summary_prompt)]
        )
        fits, _ = fits_window(
            smallest,
            reply_budget=self.settings.max_tokens,
            limit=self.window.limit,
            counter=self.llm.token_counter,
        )
        return fits

    def _end_on_window(
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

    async def _ask(self, state: RunState, prepared: Request) -> LLMResponse | None:
        request = prepared.messages
        forced = self.first_call if state.turn == 0 else None
        # Where a provider's cache breakpoint pays off longest (llm/anthropic.py); the
        # settings made for the last call serve again while it stays where it was.
        base, settings = self._settings_for_prefix
        if settings.cache_prefix != prepared.stable_prefix or base is not self.settings:
            settings = replace(self.settings, cache_prefix=prepared.stable_prefix)
            self._settings_for_prefix = (self.settings, settings)
        if forced:
            request = [*request, Message.assistant(forced.opening)]
            settings = replace(settings, stop=(*settings.stop, forced.stop))
        state.prefix_breaks += prepared.prefix_broken
        if prepared.repairs:
            problems = [
                PairingProblem(index=p.index, kind=p.kind, call_id=p.call_id)
                for p in prepared.repairs
            ]
            self.journal.write(PairingRepaired(turn=state.turn + 1, problems=problems))
        self.journal.flush()  # what the turn did so far is on file before the wait
        try:
            response = await generate_with_room(
                self.llm,
                request,
                self.protocol.specs(self.tools.tools),
                settings,
                retry=CutRetry(self.limits.cut_reply_attempts, self.window, self._limit_hit),
                journal=self.journal,
                ledger=state.ledger,
                turn=state.turn + 1,
            )
        except ContextOverflowError as exc:
            await self._after_overflow(state, request, exc)
            return None
        except LLMError as exc:  # llm.endpoints: the servers it failed at, for their counts
            for failed in failed_call(state.turn + 1, exc):
                self.journal.write(failed)
            raise
        state.ledger.record(response)
        if forced:
            joined = replace(response.message, content=forced.join(response.message.content))
            response = replace(response, message=joined)
        if response.stop_reason is StopReason.CONTEXT_OVERFLOW:
            # The window ran out mid-reply: the reply is incomplete, so it is not kept.
            kept, _ = drop_last_exchange(state.history)
            self._end_on_window(state, list(kept), provider_said="context_overflow")
            return None
        blanked = prepared.blanked  # known to the trimmer: no second pass
        call = LLMCall(
            turn=state.turn + 1,
            messages=len(request),
            left_out_messages=prepared.left_out,
            prefix_kept_messages=prepared.prefix_kept,
            prefix_broken=prepared.prefix_broken,
            prefix_broken_by=prepared.prefix_broken_by,
            blanked_tool_results=blanked,
            forced_call=forced is not None,
            usage=response.usage,
            stop_reason=response.stop_reason,
        )
        if response.routing is None:
            self.journal.write(call)
        else:  # llm.endpoints: the server that answered, and the moves on the way
            for event in routed_events(call, response.routing):
                self.journal.write(event)
        return response

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
        self._stop_if_looping(state, reply_key(response.message, rollback.reason, state.turn + 1))
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
        # The reply that asks for the calls, and its usage, on file before they act.
        self.journal.flush()
        # One after another: a stateful tool (python) must see its calls in order.
        results = [await self.tools.call(call) for call in parsed.calls]
        for repair in self.tools.take_repaired():  # run as meant (tools/repair.py)
            self.journal.write(
                ToolCallRepaired(
                    turn=state.turn,
                    call_id=repair.call_id,
                    kind=repair.kind,
                    written=repair.written,
                    ran=repair.ran,
                    detail=repair.detail,
                )
            )
        results += [
            ToolResult(f"t{state.turn}m{i}", f"Tool call not run: {why}", is_error=True)
            for i, why in enumerate(parsed.malformed, start=1)
        ]
        if self._lost_state_note is not None and results:
            last = results[-1]
            results[-1] = replace(last, content=f"{last.content}\n\n{self._lost_state_note}")
            self._lost_state_note = None
        for call, result in zip(parsed.calls, results, strict=False):
            key = call_key(call)
            if key is not None and not result.is_error:  # a failed call may be retried
                state.seen_call_keys.add(key)
        state.tool_calls += len(parsed.calls)
        state.history.append(self.protocol.results_message(results, list(parsed.calls)))
        self.journal.write(ToolResults(turn=state.turn, calls=parsed.calls, results=results))
