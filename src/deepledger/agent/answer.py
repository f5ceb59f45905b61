"""The AnswerGenerator: turning the end of the loop into a final answer — or a post-mortem.

Context management is on when ``agent.context_compress_limit > 0``: a failed attempt
will be retried, carrying its post-mortem. What happens at the end of an attempt:

===========================  ==============  =============================================
context management           the loop ended  what happens
===========================  ==============  =============================================
off                          any way         generate (boxed retries); no box -> fall back
                                             to the last intermediate \\boxed{} answer
on, not the final retry      out of turns /  skip generating (any answer would be a blind
                             window          guess); write the post-mortem
on, not the final retry      model finished  generate (boxed retries), no fallback; no box
                                             -> write the post-mortem
on, the final retry          any way         generate (boxed retries); no box -> fall back
===========================  ==============  =============================================

Post-mortems are written only when ``agent.retry_with_summary`` is on. "Generate" means:
append the summarize prompt (the benchmark's format rules, no tools) and ask; when the
reply has no box, remove it and ask again with a note that the box was missing, up to
``max_final_answer_retries`` times; the last of these replies starts inside the box
(``\\boxed{`` as a prefill) when the provider continues prefills. Every answer records
its :class:`Provenance`.

A sub-agent (``boxed=False``) has no box to find: its last reply is its report, and when
its turns run out it is asked once for the report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deepledger.agent.boxed import last_boxed
from deepledger.agent.state import Provenance, RunState
from deepledger.context.strategy import ContextStrategy, KeepToolResults, RequestBuilder
from deepledger.errors import ContextOverflowError
from deepledger.journal import Journal
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.messages import EndReason, Message, ToolSpec
from deepledger.prompts import render

BOX_OPENING = "\\boxed{"
FAILURE_TYPES = ("incomplete", "blocked", "misdirected", "format_missed")
_FAILURE_TYPE = re.compile(r"failure type\W*(" + "|".join(FAILURE_TYPES) + r")", re.IGNORECASE)
_ANY_TYPE = re.compile(r"\b(" + "|".join(FAILURE_TYPES) + r")\b", re.IGNORECASE)


@dataclass(frozen=True)
class AnswerPolicy:
    """What the runner tells the generator about this attempt."""

    context_management: bool = False  # context_compress_limit > 0
    retry_with_summary: bool = True
    is_final_retry: bool = False
    max_final_answer_retries: int = 3


def summary_prompt(format_rules: str = "") -> str:
    return render("summarize.md", format_rules=format_rules.strip())


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
        keep_tool_result: int = -1,
        boxed: bool = True,
        context: ContextStrategy | None = None,
    ) -> None:
        self.policy = policy
        self.summary_prompt = summary_prompt
        self.keep_tool_result = keep_tool_result
        self.boxed = boxed
        self.context = context or KeepToolResults()

    async def finalize(
        self,
        state: RunState,
        llm: LLMClient,
        settings: GenerationSettings,
        journal: Journal,
        tools: list[ToolSpec] | None = None,
    ) -> None:
        """Set the state's answer, provenance and post-mortem.

        ``tools``: what the loop offered. They stay declared in these last calls (the
        prompts forbid using them) because some providers refuse a history that holds
        tool calls unless the tools are declared.
        """
        requests = RequestBuilder(self.context, self.keep_tool_result)
        call = _Caller(llm, settings, journal, tools, requests, state)
        if not self.boxed:
            await self._report(state, call)
            return
        policy = self.policy
        exhausted = state.end_reason is not EndReason.MODEL_FINISHED
        managed = policy.context_management and not policy.is_final_retry
        if managed and exhausted:
            journal.write("answer_skipped", reason="context management on, loop exhausted")
        else:
            await self._generate(state, call)
            if state.final_answer is None and not managed:
                self._fall_back(state)
        journal.write("final_answer", answer=state.final_answer, provenance=state.provenance)
        if state.final_answer is None and managed and policy.retry_with_summary:
            await self._post_mortem(state, call, llm.supports_prefill)

    async def _generate(self, state: RunState, call: _Caller) -> None:
        prompts = [Message.injected(self.summary_prompt)]
        attempts = max(1, self.policy.max_final_answer_retries)
        for attempt in range(attempts):
            # The last chance, when the provider continues a prefill: the reply starts
            # inside the box, so even a model that never boxes gives an answer.
            last = attempt > 0 and attempt == attempts - 1 and call.llm.supports_prefill
            if last:
                text = BOX_OPENING + await call.ask(prompts, "summary", prefill=BOX_OPENING)
            else:
                text = await call.ask(prompts, purpose="summary")
            state.final_text = text
            answer = last_boxed(text)
            if answer is not None:
                state.final_answer = answer
                state.provenance = Provenance.SUMMARY if attempt == 0 else Provenance.BOXED_RETRY
                return
            if attempt == 0:  # the failed reply is dropped; the note rides along from now on
                prompts.append(Message.injected(render("boxed_missing.md")))

    @staticmethod
    def _fall_back(state: RunState) -> None:
        if state.intermediate_answers:
            state.final_answer = state.intermediate_answers[-1]
            state.provenance = Provenance.INTERMEDIATE_FALLBACK

    async def _post_mortem(self, state: RunState, call: _Caller, prefill: bool) -> None:
        prompt = [Message.injected(render("post_mortem.md"))]
        prefix = render("post_mortem_prefill.md") if prefill else ""
        text = await call.ask(prompt, purpose="post_mortem", prefill=prefix)
        if not text.strip():  # the call failed or said nothing: there is no post-mortem
            call.journal.write("post_mortem", text=None, failure_type=None, prefilled=bool(prefix))
            return
        if prefix:  # the reply continues the prefill: put the two back together
            text = prefix + (text if text[:1].isspace() else f" {text}")
        text = extract_post_mortem(text)
        state.post_mortem = text or None
        state.failure_type = failure_type(text) if text else None
        call.journal.write(
            "post_mortem",
            text=state.post_mortem,
            failure_type=state.failure_type,
            prefilled=bool(prefix),
        )

    async def _report(self, state: RunState, call: _Caller) -> None:
        if state.end_reason is EndReason.MODEL_FINISHED:
            text = state.history[-1].content
        else:
            text = await call.ask([Message.injected(render("report_summarize.md"))], "report")
        state.final_text = text
        state.final_answer = text.strip() or None
        state.provenance = Provenance.SUMMARY if state.final_answer else Provenance.NONE


@dataclass
class _Caller:
    """One closing call: the (trimmed) history plus the given prompts, which are not added
    to the history; usage recorded; a context overflow is an empty reply, not a crash."""

    llm: LLMClient
    settings: GenerationSettings
    journal: Journal
    tools: list[ToolSpec] | None
    requests: RequestBuilder  # the loop's context strategy and keep_tool_result
    state: RunState

    async def ask(self, prompts: list[Message], purpose: str, prefill: str = "") -> str:
        """The reply's text. With ``prefill`` the request ends with it as the start of
        the reply, and the text returned is the model's continuation only."""
        if prefill:
            prompts = [*prompts, Message.assistant(prefill)]
        request = self.requests(self.state.history, closing=prompts)
        try:
            response = await self.llm.generate(request, self.tools, self.settings)
        except ContextOverflowError as exc:
            self.journal.write("closing_call_failed", purpose=purpose, reason=str(exc))
            return ""
        self.state.ledger.record(response)
        self.journal.write(
            "closing_call",
            purpose=purpose,
            prompts=prompts,
            message=response.message,
            prefill=prefill or None,
            usage=response.usage,
            stop_reason=response.stop_reason,
        )
        return response.text
