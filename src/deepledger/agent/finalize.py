"""Turning the end of the loop into a final answer.

STAND-IN: this is the minimal finalizer the agent loop needs until the AnswerGenerator
(four-way finalization, boxed retries, post-mortems) replaces it. What it does:

- the model finished on its own: its last reply is the answer (its last real
  ``\\boxed{}``, else the last intermediate box, else no answer);
- turns or window exhausted: the model is asked once, without tools, to answer from the
  history (the summarize prompt); its box, else the last intermediate box, else none.

A sub-agent (``boxed=False``) returns its report text instead of a box.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepledger.agent.boxed import last_boxed
from deepledger.agent.state import Provenance, RunState
from deepledger.context.trim import trim_tool_results
from deepledger.errors import ContextOverflowError
from deepledger.journal import Journal
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.messages import EndReason, Message, ToolSpec


@dataclass(frozen=True)
class Finalizer:
    summary_prompt: str
    keep_tool_result: int = -1
    boxed: bool = True  # False: a sub-agent, whose whole reply is its report

    async def finalize(
        self,
        state: RunState,
        llm: LLMClient,
        settings: GenerationSettings,
        journal: Journal,
        tools: list[ToolSpec] | None = None,
    ) -> None:
        """``tools``: what the loop offered; a provider may refuse a history with tool
        calls in it unless the tools are still declared (the prompt forbids using them)."""
        if state.end_reason is EndReason.MODEL_FINISHED:
            text = state.history[-1].content
        else:
            text = await self._summarize(state, llm, settings, journal, tools)
        state.final_text = text
        if not self.boxed:
            state.final_answer = text.strip() or None
            state.provenance = Provenance.SUMMARY if state.final_answer else Provenance.NONE
            return
        answer = last_boxed(text)
        if answer is not None:
            state.final_answer, state.provenance = answer, Provenance.SUMMARY
        elif state.intermediate_answers:
            state.final_answer = state.intermediate_answers[-1]
            state.provenance = Provenance.INTERMEDIATE_FALLBACK
        else:
            state.final_answer, state.provenance = None, Provenance.NONE

    async def _summarize(
        self,
        state: RunState,
        llm: LLMClient,
        settings: GenerationSettings,
        journal: Journal,
        tools: list[ToolSpec] | None,
    ) -> str:
        history = [*state.history, Message.injected(self.summary_prompt)]
        request = trim_tool_results(history, self.keep_tool_result)
        try:
            response = await llm.generate(request, tools, settings)
        except ContextOverflowError as exc:
            journal.write("summary_failed", reason=str(exc))
            return ""  # the intermediate answers are still there to fall back on
        state.ledger.record(response)
        state.history = [*history, response.message]
        journal.write("summary", message=response.message, usage=response.usage)
        return response.text
