"""The AnswerGenerator: turning the end of the loop into a final answer — or a post-mortem.

Context management is on when ``agent.context_compress_limit > 0``: a failed attempt
will be retried, carrying its post-mortem. What happens at the end of an attempt:

===========================  ==============  =============================================
context management           the loop ended  what happens
===========================  ==============  =============================================
off                          any way         generate (boxed retries); no box -> fall back
                                             to the last intermediate \\boxed{} answer
on, not the final retry      out of turns /  skip generating (any answer would be a blind
                             window /        guess); write the post-mortem
                             looping /
                             cut or empty
on, not the final retry      model finished  generate (boxed retries), no fallback; no box
                                             -> write the post-mortem
on, the final retry          any way         generate (boxed retries); no box -> fall back
===========================  ==============  =============================================

A loop that ends going round a cycle (``looping``) is a loop out of turns that stopped
early: it takes the same branch, intermediate box or not (a box the model wrote before it
went round in circles is no surer than one written before its turns ran out), so a retry
follows; on the final retry that box is the fallback, as it is for turns exhausted.

Post-mortems are written only when ``agent.retry_with_summary`` is on. "Generate" means:
append the summarize prompt (the benchmark's format rules, no tools) and ask; when the
reply has no box (or only one that says there is no answer, ``\\boxed{unknown}``: see
``agent/boxed.py``), remove it and ask again with a note that the box was missing, up to
``max_final_answer_retries`` times; the last of these replies starts inside the box
(``\\boxed{`` as a prefill) when the provider continues prefills. Every answer records
its :class:`Provenance`.

A closing reply cut at ``llm.max_tokens`` is first asked again with more room
(``agent/cut.py``). A loop that ends on a reply cut at ``llm.max_tokens`` (even after
those larger attempts) or empty (``cut_or_empty``) ended without an answer: it takes the
branch of a loop out of turns. No summary reply cut at ``llm.max_tokens`` is taken as
the answer, box or not: it is asked again as a reply without a box is.

Under the ``mirothinker`` prompt profile a closing request ends on the model's last
reply, as MiroThinker's do: text tool results the loop left unanswered (its turns ran
out) are not sent, though the history keeps them.

A sub-agent (``boxed=False``) has no box to find: its last reply is its report, and when
its turns run out it is asked once for the report.

Every closing call goes through the window guard first (``context/guard.py``): while the
request, counted plainly with its reply budget, is over the window, the newest exchange
(tool results and the reply that asked for them) is dropped, journaled as
``window_exhausted``. A request that cannot fit even as the system prompt, the task and
the closing prompt is never sent: the call is skipped (``closing_call_skipped``), the
state's ``end_detail`` says why, and there is no answer from it. When the server refuses
a request as too long anyway (``context_overflow`` in the journal: what it said, our
count, the window it states), the newest exchange is dropped and the call is asked
again, at most ``MAX_CLOSING_CALL_REFUSALS`` times; with nothing left to drop the refusal is
raised, and the attempt ends as an error that a resume runs again. A post-mortem is the
exception: without it the attempt still has its outcome, so a refused one is simply none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from deepledger.agent.boxed import answer_box
from deepledger.agent.cut import CutRetry, generate_with_room
from deepledger.agent.state import Provenance, RunState
from deepledger.context.guard import (
    ContextWindow,
    drop_last_exchange,
    fits_window,
    request_tokens,
    smallest_closing_request,
)
from deepledger.context.policy import ContextPolicy
from deepledger.errors import ContextOverflowError, LLMError
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.endpoints import RouterEvents
from deepledger.messages import (
    EndReason,
    LLMResponse,
    Message,
    MessageKind,
    Role,
    StopReason,
    ToolSpec,
)
from deepledger.prompts import PromptSet
from deepledger.records.events import (
    AnswerSkipped,
    ClosingCall,
    ClosingCallSkipped,
    ContextOverflow,
    FinalAnswer,
    PostMortem,
    WindowExhausted,
)
from deepledger.store.journal import Journal

BOX_OPENING = "\\boxed{"
FAILURE_TYPES = ("incomplete", "blocked", "misdirected", "format_missed")
_FAILURE_TYPE = re.compile(r"failure type\W*(" + "|".join(FAILURE_TYPES) + r")", re.IGNORECASE)
_ANY_TYPE = re.compile(r"\b(" + "|".join(FAILURE_TYPES) + r")\b", re.IGNORECASE)
# Requests of one closing call the server may refuse as too long before the refusal
# stands: each retry sends one exchange less, or fits a window the server stated.
MAX_CLOSING_CALL_REFUSALS = 3


@dataclass(frozen=True)
class AnswerPolicy:
    """What the runner tells the generator about this attempt."""

    context_management: bool = False  # context_compress_limit > 0
    retry_with_summary: bool = True
    is_final_retry: bool = False
    max_final_answer_retries: int = 3

    @property
    def leaves_to_next_run(self) -> bool:
        """Whether this run may end without an answer for a later run to try: context
        management is on and this is not the attempt's last run. Such a run skips its
        answer when the loop was exhausted, never falls back to an intermediate box, and
        writes a post-mortem (with ``retry_with_summary``) when it has no answer."""
        return self.context_management and not self.is_final_retry

    @property
    def writes_post_mortem(self) -> bool:
        """Whether a run that ends without an answer writes a post-mortem."""
        return self.leaves_to_next_run and self.retry_with_summary


def summary_prompt(
    format_rules: str = "", question: str = "", prompts: PromptSet | None = None
) -> str:
    """The closing prompt: the benchmark's format rules, and (under the mirothinker
    profile, whose template has the placeholder) the task's question repeated."""
    prompts = prompts or PromptSet()
    return prompts.render("summarize.md", format_rules=format_rules.strip(), question=question)


def extract_post_mortem(text: str) -> str:
    """The post-mortem proper: after any ``</think>``, before any tool-call markup."""
    if "</think>" in text:
        after = text.split("</think>", 1)[1].strip()
        text = after or text.split("</think>", 1)[0].replace("<think>", "")
    return text.split("<use_mcp_tool>", 1)[0].strip()


def failure_type(post_mortem: str) -> str | None:
    """The failure type the post-mortem names: after "Failure type", else the first one
    its first line mentions; None when it names none."""
    match = _FAILURE_TYPE.search(post_mortem) or _ANY_TYPE.search(post_mortem.split("\n", 1)[0])
    return match.group(1).lower() if match else None


class AnswerGenerator:
    def __init__(
        self,
        policy: AnswerPolicy,
        *,
        summary_prompt: str,
        boxed: bool = True,
        prompts: PromptSet | None = None,
        question: str = "",
        non_answers: bool = True,
        cut_attempts: int = 1,
    ) -> None:
        self.policy = policy
        self.summary_prompt = summary_prompt
        self.boxed = boxed
        self.prompts = prompts or PromptSet()  # the post-mortem's and retries' templates
        self.question = question  # the task, as a sub-agent's closing prompt may repeat it
        # agent.recovery.boxed_non_answers: \boxed{unknown} and the like are no answer.
        self.non_answers = non_answers
        # agent.recovery.cut_reply_attempts: a closing reply cut at llm.max_tokens is
        # asked again with more room (agent/cut.py) this many times in all.
        self.cut_attempts = cut_attempts

    async def finalize(
        self,
        state: RunState,
        llm: LLMClient,
        settings: GenerationSettings,
        journal: Journal,
        context_policy: ContextPolicy,
        tools: list[ToolSpec] | None = None,
        window: ContextWindow | None = None,
    ) -> None:
        """Set the state's answer, provenance and post-mortem.

        ``context_policy``: the loop's, which makes every request (its strategy, its
        compaction notes, ``keep_tool_result``). ``tools``: what the loop offered. They
        stay declared in these last calls (the prompts forbid using them) because some
        providers refuse a history that holds tool calls unless the tools are declared.
        ``window``: the loop's window (what the server stated, if it did); without one,
        no call is checked against a window.

        Raises :class:`ContextOverflowError` when the server refuses the answer's request
        as too long and nothing more can be dropped from it.
        """
        call = _Caller(
            llm, settings, journal, tools, context_policy, state, window, self.cut_attempts
        )
        # MiroThinker closes on the model's last reply: results it never answered (its
        # turns ran out) are left out of the closing requests, not sent before them.
        call.unanswered_results_out = self.prompts.profile == "mirothinker"
        if not self.boxed:
            await self._report(state, call)
            return
        policy = self.policy_for(state)
        # Out of turns, out of window, looping (or a limit, which makes this the final
        # retry): the loop stopped the model, the model did not stop. A reply cut at
        # llm.max_tokens or empty (cut_or_empty) stopped it without an answer either.
        exhausted = state.end_reason is not EndReason.MODEL_FINISHED
        managed = policy.leaves_to_next_run
        if managed and exhausted:
            journal.write(AnswerSkipped(reason="context management on, loop exhausted"))
        else:
            await self._generate(state, call, policy.max_final_answer_retries)
            if state.final_answer is None and not managed:
                self._fall_back(state)
        journal.write(FinalAnswer(answer=state.final_answer, provenance=state.provenance))
        if state.final_answer is None and policy.writes_post_mortem:
            await self._post_mortem(state, call, llm.capabilities.prefill)

    def policy_for(self, state: RunState) -> AnswerPolicy:
        """The policy for the loop's end in ``state``. A task limit or the run's budget
        (end reason ``limit``) is followed by no retry, so no post-mortem: it is the final
        retry, and one closing call answers, falling back to the last intermediate box
        (what the final retry does, in one try)."""
        if state.end_reason is not EndReason.LIMIT:
            return self.policy
        return replace(self.policy, is_final_retry=True, max_final_answer_retries=1)

    async def _generate(self, state: RunState, call: _Caller, retries: int) -> None:
        prompts = [Message.injected(self.summary_prompt)]
        attempts = max(1, retries)
        for attempt in range(attempts):
            # The last chance, when the provider continues a prefill: the reply starts
            # inside the box, so even a model that never boxes gives an answer.
            last = attempt > 0 and attempt == attempts - 1 and call.llm.capabilities.prefill
            response = await call.ask_reply(prompts, "summary", prefill=BOX_OPENING if last else "")
            if response is None:  # it cannot fit; every later try would be longer still
                return
            text = BOX_OPENING + response.text if last else response.text
            state.final_text = text
            # A reply cut at llm.max_tokens is never the answer, even with a box in it:
            # it is asked again as a reply without one would be.
            cut = response.stop_reason is StopReason.MAX_TOKENS
            answer = None if cut else answer_box(text, non_answers=self.non_answers)
            if answer is not None:
                state.final_answer = answer
                state.provenance = Provenance.SUMMARY if attempt == 0 else Provenance.BOXED_RETRY
                return
            if attempt == 0:  # the failed reply is dropped; the note rides along from now on
                prompts.append(Message.injected(self.prompts.render("boxed_missing.md")))

    @staticmethod
    def _fall_back(state: RunState) -> None:
        if state.intermediate_answers:
            state.final_answer = state.intermediate_answers[-1]
            state.provenance = Provenance.INTERMEDIATE_FALLBACK

    async def _post_mortem(self, state: RunState, call: _Caller, prefill: bool) -> None:
        prompt = [Message.injected(self.prompts.render("post_mortem.md"))]
        # Under the mirothinker profile the prefill is a closed thinking block, as
        # MiroThinker's; the reply goes on after it.
        prefix = self.prompts.render("post_mortem_prefill.md") if prefill else ""
        try:
            text = await call.ask(prompt, purpose="post_mortem", prefill=prefix) or ""
        except ContextOverflowError:  # journaled; the attempt's outcome stands without it
            text = ""
        if not text.strip():  # the call failed or said nothing: there is no post-mortem
            call.journal.write(PostMortem(text=None, failure_type=None, prefilled=bool(prefix)))
            return
        if prefix:  # the reply continues the prefill: put the two back together
            text = prefix + (text if text[:1].isspace() else f" {text}")
        text = extract_post_mortem(text)
        state.post_mortem = text or None
        state.failure_type = failure_type(text) if text else None
        call.journal.write(
            PostMortem(
                text=state.post_mortem, failure_type=state.failure_type, prefilled=bool(prefix)
            )
        )

    async def _report(self, state: RunState, call: _Caller) -> None:
        if state.end_reason is EndReason.MODEL_FINISHED:
            text = state.history[-1].content
        else:
            report = self.prompts.render("report_summarize.md", question=self.question)
            prompt = [Message.injected(report)]
            text = await call.ask(prompt, "report") or ""
        state.final_text = text
        state.final_answer = text.strip() or None
        state.provenance = Provenance.SUMMARY if state.final_answer else Provenance.NONE


@dataclass
class _Caller:
    """One closing call: the (trimmed) history plus the given prompts, which are not added
    to the history; fitted to the window first, usage recorded."""

    llm: LLMClient
    settings: GenerationSettings
    journal: Journal
    tools: list[ToolSpec] | None
    context: ContextPolicy  # the loop's: its strategy and keep_tool_result
    state: RunState
    window: ContextWindow | None = None
    cut_attempts: int = 1  # agent/cut.py: a reply cut at llm.max_tokens asked again
    unanswered_results_out: bool = False  # see AnswerGenerator.finalize
    _refusals: int = field(default=0, init=False)  # context overflows, all calls together

    async def ask(self, prompts: list[Message], purpose: str, prefill: str = "") -> str | None:
        """The reply's text; None when the request cannot fit the window (not sent).
        With ``prefill`` the request ends with it as the start of the reply, and the text
        returned is the model's continuation only."""
        response = await self.ask_reply(prompts, purpose, prefill)
        return None if response is None else response.text

    async def ask_reply(
        self, prompts: list[Message], purpose: str, prefill: str = ""
    ) -> LLMResponse | None:
        """:meth:`ask`'s reply whole: its text and why the model stopped writing it."""
        if prefill:
            prompts = [*prompts, Message.assistant(prefill)]
        while True:
            request = await self._fitted_request(prompts, purpose)
            if request is None:
                return None
            self.journal.flush()  # what the task did so far is on file before the wait
            try:
                response = await generate_with_room(
                    self.llm,
                    request,
                    self.tools,
                    self.settings,
                    retry=CutRetry(self.cut_attempts, self.window),
                    journal=self.journal,
                    ledger=self.state.ledger,
                    purpose=purpose,
                )
            except ContextOverflowError as exc:
                self._after_refusal(exc, request, purpose)
                continue
            except LLMError as exc:  # llm.endpoints: its servers' errors, not the next call's
                RouterEvents(self.journal.write).failed(None, exc, purpose)
                raise
            break
        self.state.ledger.record(response)
        closing = ClosingCall(
            purpose=purpose,
            prompts=prompts,
            message=response.message,
            prefill=prefill or None,
            usage=response.usage,
            stop_reason=response.stop_reason,
        )
        RouterEvents(self.journal.write).answered(closing, response.routing)
        return response

    def _fits(self, messages: list[Message]) -> tuple[bool, int]:
        if self.window is None:
            return True, 0
        return fits_window(
            messages,
            reply_budget=self.settings.max_tokens,
            limit=self.window.limit,
            counter=self.llm.token_counter,
        )

    async def _fitted_request(self, prompts: list[Message], purpose: str) -> list[Message] | None:
        """The request, the newest exchanges dropped until it fits; None (journaled) when
        even the smallest one does not."""
        fits, tokens = self._fits(smallest_closing_request(self.state.history, prompts))
        if not fits:
            self._refuse_if_server_window(purpose, tokens)
            self._skip(purpose, tokens, task_alone=True)
            self.state.task_does_not_fit = True
            return None
        while True:
            prepared = await self.context.prepare(self.state.history, closing=prompts)
            request = self._without_unanswered_results(prepared.messages, len(prompts))
            fits, tokens = self._fits(request)
            if fits:
                return request
            if not self._drop_exchange(purpose, estimate=tokens):
                self._skip(purpose, tokens, task_alone=False)
                return None

    def _without_unanswered_results(self, request: list[Message], closing: int) -> list[Message]:
        """``request`` without the text tool results just before its ``closing`` prompts,
        when asked to leave them out."""
        if not self.unanswered_results_out:
            return request
        return without_unanswered_results(request, closing)

    def _drop_exchange(
        self, purpose: str, *, estimate: int | None = None, provider_said: str | None = None
    ) -> int:
        """Drop the newest tool results and the reply that asked for them, as the loop's
        guard does (and journals, so a replay drops them too); how many messages went.
        Why: our ``estimate`` of the request, or what the provider said refusing it."""
        kept, dropped = drop_last_exchange(self.state.history)
        if not dropped:
            return 0
        self.state.history = list(kept)
        turn, count = self.state.turn, len(dropped)
        limit = self.window.limit if self.window else None
        if provider_said is None:
            event = WindowExhausted(
                turn=turn, purpose=purpose, limit=limit, dropped_messages=count, estimate=estimate
            )
        else:
            event = WindowExhausted(
                turn=turn,
                purpose=purpose,
                limit=limit,
                dropped_messages=count,
                provider_said=provider_said,
            )
        self.journal.write(event)
        return count

    def _after_refusal(
        self, exc: ContextOverflowError, request: list[Message], purpose: str
    ) -> None:
        """The server refused ``request`` as too long: learn the window it states, drop
        the newest exchange unless that window already shrinks the next request, and
        raise when nothing can be dropped or the retries are spent."""
        self._refusals += 1
        limit = self.window.limit if self.window else None
        stated = self.window.learn(str(exc)) if self.window else None
        counted = request_tokens(
            request, reply_budget=self.settings.max_tokens, counter=self.llm.token_counter
        )
        # Our count of this request under the window now known: when it fits, the same
        # request would go out again, so something has to be dropped by hand.
        refits = stated is None or counted <= stated
        _, dropped = drop_last_exchange(self.state.history)
        gave_up = self._refusals > MAX_CLOSING_CALL_REFUSALS or (refits and not dropped)
        self.journal.write(
            ContextOverflow(
                turn=self.state.turn,
                purpose=purpose,
                provider_said=str(exc),
                estimated_tokens=counted,
                limit=limit,
                server_limit=stated,
                dropped_messages=len(dropped) if refits and not gave_up else 0,
                action="gave_up" if gave_up else "retry",
            )
        )
        if gave_up:
            raise ContextOverflowError(
                f"{exc} — the {purpose} request ({len(request)} messages, about "
                f"{counted:,} tokens by our count with the reply budget) could not be "
                f"shrunk further after {self._refusals} refusal(s)",
                provider=exc.provider,
                status=exc.status,
            ) from exc
        if refits:
            self._drop_exchange(purpose, provider_said=str(exc))

    def _refuse_if_server_window(self, purpose: str, tokens: int) -> None:
        """The task alone is over a window the server stated when it refused a request:
        that is the server's setup (its window below, or too close to, llm.max_tokens),
        not the question's size, so the attempt ends as an error a resume retries once
        the config is fixed, never as a finished task without an answer."""
        window = self.window
        if window is None or window.stated is None or window.stated >= window.configured:
            return
        self.journal.write(
            ClosingCallSkipped(
                purpose=purpose,
                reason="the server's stated window is too small for the reply budget",
                task_alone=True,
                estimated_tokens=tokens,
                limit=window.limit,
            )
        )
        reply_budget = self.settings.max_tokens
        what = f"the system prompt, the task and the {purpose.replace('_', '-')} prompt"
        if tokens - reply_budget < window.stated:  # the reply budget is what overflows
            why = (
                f"is below or too close to llm.max_tokens={reply_budget:,}: {what} come to "
                f"about {tokens:,} tokens with that reply budget. Lower llm.max_tokens, or "
                f"set llm.max_context_length to the server's real window ({window.stated})"
            )
        else:
            why = (
                f"is smaller than {what} alone (about {tokens - reply_budget:,} tokens). Use "
                "a model with a larger window, or set llm.max_context_length to the "
                f"server's real window ({window.stated}) so the task is known not to fit"
            )
        raise ContextOverflowError(
            f"the server's window of {window.stated:,} tokens (stated in its refusal) {why}; "
            "then run the same command again to resume"
        )

    def _skip(self, purpose: str, tokens: int, *, task_alone: bool) -> None:
        """Journal why a closing call is not sent; the first reason is the state's
        ``end_detail`` (printed by ``deepledger run``, logged by the runner)."""
        window = self.window
        assert window is not None  # only a known window can rule a request out
        name = purpose.replace("_", "-")
        what = (
            f"the task alone does not fit: the system prompt, the task and the {name} prompt come"
            if task_alone
            else f"the {name} request does not fit, with nothing more to drop: it comes"
        )
        reason = (
            f"{what} to about {tokens:,} tokens with the {self.settings.max_tokens:,}-"
            f"token reply budget (llm.max_tokens), over the {window.limit:,}-token window "
            f"({window.source}); no request was sent"
        )
        self.journal.write(
            ClosingCallSkipped(
                purpose=purpose,
                reason=reason,
                task_alone=task_alone,
                estimated_tokens=tokens,
                limit=window.limit,
            )
        )
        if self.state.end_detail is None:  # said once, however many calls are skipped
            self.state.end_detail = reason


def without_unanswered_results(request: list[Message], closing: int) -> list[Message]:
    """``request`` without the text tool results just before its ``closing`` prompts (the
    mirothinker profile's closing request; a training export rebuilds it the same way).
    Native results stay: each pairs with its call."""
    index = len(request) - closing - 1
    if index < 2:
        return request
    last = request[index]
    if last.kind is not MessageKind.TOOL_RESULTS or last.role is not Role.USER:
        return request
    return request[:index] + request[index + 1 :]
