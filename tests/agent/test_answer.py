"""The four-way finalization table, boxed retries and post-mortems."""

from __future__ import annotations

import pytest

from deepledger.agent.answer import (
    AnswerGenerator,
    AnswerPolicy,
    extract_post_mortem,
    failure_type,
    summary_prompt,
)
from deepledger.agent.state import Provenance, RunState
from deepledger.context.policy import ContextPolicy
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.usage import UsageLedger
from deepledger.messages import EndReason, Message, MessageKind, Role
from deepledger.records.events import (
    AnswerSkipped,
    ClosingCall,
    ClosingCallSkipped,
    ContextOverflow,
    PostMortem,
    WindowExhausted,
)
from deepledger.store.journal import Journal
from tests.support.agent import CharCountingLLM, finalize_in

POST_MORTEM = "incomplete\nWhat happened: ran out.\nUseful findings: the tower is 330 m."
OFF = AnswerPolicy(context_management=False, max_final_answer_retries=3)
ON = AnswerPolicy(context_management=True, max_final_answer_retries=3)
FINAL = AnswerPolicy(context_management=True, is_final_retry=True, max_final_answer_retries=3)
FINISHED, OUT_OF_TURNS, OUT_OF_WINDOW = (
    EndReason.MODEL_FINISHED,
    EndReason.TURNS_EXHAUSTED,
    EndReason.WINDOW_EXHAUSTED,
)


def ended(end_reason: EndReason, intermediate: tuple[str, ...] = ("early guess",)) -> RunState:
    history = [
        Message.system("sys"),
        Message.task("How tall is the tower?"),
        Message.assistant("It might be \\boxed{early guess}."),
    ]
    return RunState(
        history=history,
        ledger=UsageLedger(),
        end_reason=end_reason,
        intermediate_answers=list(intermediate),
    )


async def finalize(policy: AnswerPolicy, state: RunState, llm: ScriptedLLM) -> Journal:
    journal = Journal(None)
    generator = AnswerGenerator(policy, summary_prompt=summary_prompt("Give metres."))
    await generator.finalize(state, llm, GenerationSettings(), journal, ContextPolicy())
    llm.assert_consumed()
    return journal


@pytest.mark.parametrize("end", [FINISHED, OUT_OF_TURNS, OUT_OF_WINDOW])
async def test_off_generates_and_boxes(end):
    state = ended(end)
    await finalize(OFF, state, ScriptedLLM(["It is \\boxed{330}."]))
    assert (state.final_answer, state.provenance, state.post_mortem) == (
        "330",
        Provenance.SUMMARY,
        None,
    )


@pytest.mark.parametrize("end", [FINISHED, OUT_OF_TURNS, OUT_OF_WINDOW])
async def test_off_falls_back_to_the_intermediate_answer(end):
    state = ended(end)
    await finalize(OFF, state, ScriptedLLM(["no box", "still none", "nope"]))
    assert (state.final_answer, state.provenance) == (
        "early guess",
        Provenance.INTERMEDIATE_FALLBACK,
    )
    assert state.post_mortem is None  # no retry follows: nothing to write it for


async def test_a_limit_read_from_the_state_makes_one_closing_call_and_no_post_mortem():
    # No retry follows a task limit or the run's budget: the generator reads that from
    # how the loop ended, whatever policy it was built with (which stays as it was).
    state = ended(EndReason.LIMIT)
    llm = ScriptedLLM(["no box"])  # one call: a second finds the script exhausted
    generator = AnswerGenerator(ON, summary_prompt=summary_prompt("Give metres."))
    journal = Journal(None)
    await generator.finalize(state, llm, GenerationSettings(), journal, ContextPolicy())
    llm.assert_consumed()
    assert (state.final_answer, state.provenance) == (
        "early guess",
        Provenance.INTERMEDIATE_FALLBACK,
    )
    assert state.post_mortem is None and not journal.of(PostMortem)
    assert generator.policy is ON


async def test_off_with_nothing_to_fall_back_on_is_none():
    state = ended(FINISHED, intermediate=())
    await finalize(OFF, state, ScriptedLLM(["no", "no", "no"]))
    assert (state.final_answer, state.provenance) == (None, Provenance.NONE)


@pytest.mark.parametrize("end", [OUT_OF_TURNS, OUT_OF_WINDOW])
async def test_on_and_exhausted_skips_the_answer_and_writes_the_post_mortem(end):
    state = ended(end)
    llm = ScriptedLLM([POST_MORTEM])
    journal = await finalize(ON, state, llm)
    assert (state.final_answer, state.provenance) == (None, Provenance.NONE)
    assert journal.of(AnswerSkipped)
    assert state.post_mortem.startswith("incomplete") and state.failure_type == "incomplete"
    assert llm.calls[0].messages[-1].content.startswith("This attempt at the task is over")
    assert journal.of(PostMortem)[0].text == state.post_mortem


async def test_on_and_finished_generates_without_fallback_then_writes_the_post_mortem():
    state = ended(FINISHED)
    llm = ScriptedLLM(["no box", "none", "still none", "format_missed: I found 330 but"])
    await finalize(ON, state, llm)
    assert (state.final_answer, state.provenance) == (None, Provenance.NONE)  # no fallback
    assert state.failure_type == "format_missed"


async def test_on_and_finished_with_a_box_needs_no_post_mortem():
    state = ended(FINISHED)
    await finalize(ON, state, ScriptedLLM(["\\boxed{330}"]))
    assert (state.final_answer, state.post_mortem) == ("330", None)


@pytest.mark.parametrize("end", [FINISHED, OUT_OF_TURNS, OUT_OF_WINDOW])
async def test_the_final_retry_generates_and_falls_back(end):
    state = ended(end)
    await finalize(FINAL, state, ScriptedLLM(["x", "y", "z"]))
    assert (state.final_answer, state.provenance) == (
        "early guess",
        Provenance.INTERMEDIATE_FALLBACK,
    )
    assert state.post_mortem is None


async def test_no_post_mortem_when_retry_with_summary_is_off():
    policy = AnswerPolicy(context_management=True, retry_with_summary=False)
    state = ended(OUT_OF_TURNS)
    await finalize(policy, state, ScriptedLLM([]))
    assert state.final_answer is None and state.post_mortem is None


async def test_boxed_retry_removes_the_failed_reply_and_notes_the_missing_box():
    state = ended(FINISHED)
    llm = ScriptedLLM(["The answer is 330.", "\\boxed{330}"])
    await finalize(OFF, state, llm)
    assert (state.final_answer, state.provenance) == ("330", Provenance.BOXED_RETRY)
    retry = llm.calls[1].messages
    assert all("The answer is 330." not in m.content for m in retry)  # failed reply removed
    assert retry[-2].content.startswith("The work on this task is over")
    assert retry[-1].content.startswith("Your previous reply had no \\boxed{} answer")
    assert all(m.kind is MessageKind.INJECTED for m in retry[-2:])


async def test_the_number_of_boxed_retries_is_configurable():
    state = ended(FINISHED, intermediate=())
    await finalize(AnswerPolicy(max_final_answer_retries=1), state, ScriptedLLM(["none"]))
    assert state.final_answer is None


async def test_the_last_boxed_retry_starts_inside_the_box_where_prefill_works():
    state = ended(FINISHED)
    llm = ScriptedLLM(["no box", "still none", "330} metres"], supports_prefill=True)
    journal = await finalize(OFF, state, llm)
    assert [c.messages[-1].role for c in llm.calls] == [Role.USER, Role.USER, Role.ASSISTANT]
    assert llm.calls[2].messages[-1].content == "\\boxed{"
    assert (state.final_answer, state.provenance) == ("330", Provenance.BOXED_RETRY)
    assert [c.prefill for c in journal.of(ClosingCall)] == [None, None, "\\boxed{"]


async def test_the_summarize_prompt_carries_format_rules_and_forbids_tools():
    llm = ScriptedLLM(["\\boxed{330}"])
    await finalize(OFF, ended(FINISHED), llm)
    prompt = llm.calls[0].messages[-1].content
    assert "do not call any tool" in prompt and "Give metres." in prompt and "\\boxed" in prompt


async def test_post_mortem_is_prefilled_where_the_provider_continues_it():
    state = ended(OUT_OF_TURNS)
    llm = ScriptedLLM([" blocked\nWhat happened: the search tool was down."], supports_prefill=True)
    await finalize(ON, state, llm)
    sent = llm.calls[0].messages
    assert sent[-1].role is Role.ASSISTANT and sent[-1].content.endswith("Failure type:")
    assert state.post_mortem.startswith("Post-mortem of this attempt.\n\nFailure type: blocked")
    assert state.failure_type == "blocked"


async def test_post_mortem_is_an_instruction_where_prefill_is_not_supported():
    state = ended(OUT_OF_TURNS)
    llm = ScriptedLLM(["Failure type: misdirected\nWhat happened: wrong tower."])
    await finalize(ON, state, llm)
    assert llm.calls[0].messages[-1].role is Role.USER
    assert state.failure_type == "misdirected"


def test_post_mortem_extraction():
    assert extract_post_mortem("<think>plan</think>Failure type: blocked") == (
        "Failure type: blocked"
    )
    assert extract_post_mortem("<think>only thoughts</think>") == "only thoughts"
    assert extract_post_mortem("Findings: x <use_mcp_tool>...") == "Findings: x"
    assert failure_type("Failure type: **format_missed**") == "format_missed"
    assert failure_type("no idea") is None


async def test_a_sub_agent_reports_instead_of_boxing():
    state = ended(OUT_OF_TURNS)
    generator = AnswerGenerator(AnswerPolicy(), summary_prompt="unused", boxed=False)
    llm = ScriptedLLM(["Found: 330 m (source: page 12)."])
    await generator.finalize(state, llm, GenerationSettings(), Journal(None), ContextPolicy())
    assert state.final_answer == "Found: 330 m (source: page 12)."


async def test_a_failed_post_mortem_call_is_no_post_mortem_even_with_prefill():
    from deepledger.errors import ContextOverflowError

    state = ended(OUT_OF_WINDOW)
    llm = ScriptedLLM([ContextOverflowError("too long")], supports_prefill=True)
    await finalize(ON, state, llm)
    assert state.post_mortem is None and state.failure_type is None


# -- closing calls and the window ------------------------------------------------------


def researched(turns: int, result_chars: int, task: str = "How tall is the tower?") -> RunState:
    """A state after ``turns`` tool-using turns, each with a result of ``result_chars``."""
    from deepledger.messages import ToolCall, ToolResult

    history = [Message.system("sys"), Message.task(task)]
    for turn in range(1, turns + 1):
        history.append(Message.assistant(f"step {turn}", [ToolCall(f"c{turn}", "read")]))
        history.append(Message.native_tool_results([ToolResult(f"c{turn}", "r" * result_chars)]))
    return RunState(history=history, ledger=UsageLedger(), end_reason=OUT_OF_TURNS)


async def test_a_closing_request_over_the_window_loses_its_newest_exchanges_unsent():
    state = researched(turns=3, result_chars=1200)  # 300 tokens a result
    llm = CharCountingLLM(["\\boxed{330}"])
    journal = await finalize_in(500, OFF, state, llm)
    assert state.final_answer == "330"
    sent = llm.calls[0].messages
    assert [m.kind for m in sent].count(MessageKind.TOOL_RESULTS) == 1  # two exchanges went
    assert len(state.history) == 4
    dropped = journal.of(WindowExhausted)
    assert [(e.purpose, e.dropped_messages) for e in dropped] == [("summary", 2)] * 2
    assert not journal.of(ContextOverflow)  # nothing was refused: nothing too long was sent


@pytest.mark.parametrize("policy", [OFF, ON, FINAL])
async def test_a_task_that_cannot_fit_the_window_is_never_sent(policy):
    state = researched(turns=0, result_chars=0, task="How tall? " * 400)  # 1,000 tokens
    state.end_reason = OUT_OF_WINDOW
    llm = CharCountingLLM([])
    journal = await finalize_in(1000, policy, state, llm)
    assert llm.calls == []
    assert (state.final_answer, state.provenance) == (None, Provenance.NONE)
    assert state.end_detail.startswith("the task alone does not fit")
    assert "1,000-token window (llm.max_context_length)" in state.end_detail
    skipped = journal.of(ClosingCallSkipped)
    assert skipped and all(e.task_alone for e in skipped)


async def test_a_refused_closing_call_with_nothing_left_to_drop_ends_the_attempt_in_error():
    from deepledger.errors import ContextOverflowError

    state = ended(FINISHED)
    said = "This model's maximum context length is 64000 tokens. However, you requested 70000"
    llm = CharCountingLLM([ContextOverflowError(f"openai returned HTTP 400: {said}")])
    with pytest.raises(ContextOverflowError, match="maximum context length is 64000") as raised:
        await finalize_in(100_000, OFF, state, llm)
    assert "could not be shrunk further" in str(raised.value)
    assert state.final_answer is None  # no fallback to the early guess: it is an error


async def test_refused_closing_calls_are_retried_a_bounded_number_of_times():
    from deepledger.agent.answer import MAX_CLOSING_CALL_REFUSALS
    from deepledger.errors import ContextOverflowError

    def always_refuse(messages, tools):
        raise ContextOverflowError("prompt is too long")

    state = researched(turns=10, result_chars=40)
    llm = CharCountingLLM(responder=always_refuse)
    with pytest.raises(ContextOverflowError, match="after 4 refusal"):
        await finalize_in(100_000, OFF, state, llm)
    assert len(llm.calls) == MAX_CLOSING_CALL_REFUSALS + 1
    sizes = [len(c.messages) for c in llm.calls]  # each retry one exchange shorter
    assert sizes == [sizes[0] - 2 * i for i in range(len(sizes))]


async def test_a_stated_window_shrinks_the_retry_to_fit_it_at_once():
    from deepledger.errors import ContextOverflowError

    state = researched(turns=6, result_chars=400)  # 100 tokens a result
    said = "maximum context length is 500 tokens"
    llm = CharCountingLLM([ContextOverflowError(said), "\\boxed{330}"])
    journal = await finalize_in(100_000, OFF, state, llm)
    assert state.final_answer == "330" and len(llm.calls) == 2
    overflow = journal.of(ContextOverflow)[0]
    assert (overflow.server_limit, overflow.limit, overflow.action) == (
        500,
        100_000,
        "retry",
    )
    retried = llm.calls[1].messages
    assert request_size(retried) <= 500  # with the 100-token reply budget
    assert all(e.limit == 500 for e in journal.of(WindowExhausted))


def request_size(messages) -> int:
    from deepledger.context.guard import request_tokens
    from deepledger.llm.tokens import CharCounter

    return request_tokens(messages, reply_budget=100, counter=CharCounter())
