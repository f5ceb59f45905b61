"""The turn loop with the scripted model and in-process tools."""

from __future__ import annotations

import json

import pytest

from deepledger.agent.answer import AnswerGenerator, AnswerPolicy
from deepledger.agent.orchestrator import LoopLimits
from deepledger.agent.rollback import RollbackReason
from deepledger.agent.state import Provenance
from deepledger.context.guard import check_window
from deepledger.context.policy import ContextPolicy
from deepledger.context.strategies.compaction import Compaction
from deepledger.context.strategies.round_window import RoundWindow
from deepledger.context.trim import OMITTED_PLACEHOLDER
from deepledger.errors import ContextOverflowError
from deepledger.llm.scripted import ScriptedLLM, reply
from deepledger.messages import EndReason, MessageKind, StopReason, ToolCall, Usage
from deepledger.records.events import (
    ClosingCall,
    Compacted,
    ContextOverflow,
    LLMCall,
    Looping,
    Rollback,
    RollbackCapReached,
    RollbackRepeated,
    WindowExhausted,
)
from deepledger.store.journal import Journal
from deepledger.tools.pool import ToolManager
from deepledger.tools.protocols import NativeProtocol, XmlProtocol
from deepledger.tools.types import LocalTool, ToolInfo
from tests.support.agent import LOOKUP_SCHEMA, CharCountingLLM, call, lookup, loop, make, restate


async def test_multi_turn_task_ends_when_the_model_answers_without_tools():
    llm = ScriptedLLM(
        responder=restate, steps=[call("paris"), call("france"), "It is \\boxed{Paris}."]
    )
    orchestrator, journal = await make(llm)
    state = await orchestrator.run("Capital of France?")
    assert (state.end_reason, state.turn, state.tool_calls) == (EndReason.MODEL_FINISHED, 3, 2)
    assert (state.final_answer, state.provenance) == ("Paris", Provenance.SUMMARY)
    results = [m for m in state.history if m.kind is MessageKind.TOOL_RESULTS]
    assert results[0].content.startswith("[kb.lookup result]\nfacts about paris")
    events = [e.event for e in journal.events]
    assert events[-4:] == ["loop_ended", "closing_call", "final_answer", "task_finished"]
    llm.assert_consumed()


async def test_native_protocol_runs_the_same_loop():
    llm = ScriptedLLM(
        responder=restate,
        steps=[reply("", [ToolCall("c1", "kb__lookup", {"query": "q"})]), "\\boxed{done}"],
    )
    orchestrator, _ = await make(llm, protocol=NativeProtocol())
    state = await orchestrator.run("task")
    assert state.final_answer == "done" and state.tool_calls == 1
    assert [s.name for s in llm.calls[0].tools] == ["kb__lookup"]
    tool_message = state.history[3]
    assert tool_message.tool_results[0].call_id == "c1"
    assert "facts about q" in tool_message.tool_results[0].content


async def test_keep_tool_result_trims_only_what_is_sent():
    llm = ScriptedLLM(responder=restate, steps=[call("a"), call("b"), call("c"), "\\boxed{x}"])
    orchestrator, journal = await make(llm, keep=1)
    state = await orchestrator.run("task")
    # the journal says how many results each request blanked: 0, 0, 1, 2 over four turns
    assert [e.blanked_tool_results for e in journal.of(LLMCall)] == [0, 0, 1, 2]
    # blanking changes an older message: the 3rd and 4th requests break the cache prefix
    assert [e.prefix_broken for e in journal.of(LLMCall)] == [False, False, True, True]
    last_request = llm.calls[-1].messages
    sent = [m.content for m in last_request if m.kind is MessageKind.TOOL_RESULTS]
    assert sent[:2] == [OMITTED_PLACEHOLDER] * 2 and "facts about c" in sent[2]
    stored = [m.content for m in state.history if m.kind is MessageKind.TOOL_RESULTS]
    assert all("facts about" in c for c in stored)
    assert state.prefix_breaks == 2


async def test_turns_exhausted_asks_for_a_summary_and_falls_back_to_intermediate():
    llm = ScriptedLLM(
        [
            "Maybe \\boxed{Lyon}? " + call("a"),
            call("b"),
            "I could not decide.",  # the summarize reply has no box
        ]
    )
    orchestrator, journal = await make(llm, max_turns=2)
    state = await orchestrator.run("task")
    assert state.end_reason is EndReason.TURNS_EXHAUSTED
    assert (state.final_answer, state.provenance) == ("Lyon", Provenance.INTERMEDIATE_FALLBACK)
    assert llm.calls[-1].messages[-1].content == "Answer now in \\boxed{}."
    assert llm.calls[-1].tools == []  # no tools offered for the summary
    assert journal.of(ClosingCall)[0].purpose == "summary"


async def test_window_guard_ends_the_loop_distinctly_and_drops_the_last_pair():
    big = reply(call("a"), usage=Usage(input_tokens=9_000, output_tokens=50))
    llm = ScriptedLLM(responder=restate, steps=[big, "\\boxed{from summary}"])
    orchestrator, journal = await make(llm, window=10_000)
    state = await orchestrator.run("task")
    assert state.end_reason is EndReason.WINDOW_EXHAUSTED
    assert [m.kind for m in llm.calls[-1].messages] == [
        MessageKind.SYSTEM,
        MessageKind.TASK,
        MessageKind.INJECTED,
    ]  # the pair was dropped
    assert state.final_answer == "from summary"
    assert journal.of(WindowExhausted)[0].dropped_messages == 2


async def test_provider_context_overflow_is_treated_as_window_exhausted():
    llm = ScriptedLLM(
        responder=restate,
        steps=[call("a"), ContextOverflowError("prompt is too long"), "\\boxed{ok}"],
    )
    orchestrator, _ = await make(llm)
    state = await orchestrator.run("task")
    assert state.end_reason is EndReason.WINDOW_EXHAUSTED and state.final_answer == "ok"


@pytest.mark.parametrize(
    ("bad_reply", "reason"),
    [
        ("<use_mcp_tool><server_name>kb</server_name><tool_name>lookup", RollbackReason.UNPARSABLE),
        ("I'm sorry, but I can't help with that.", RollbackReason.REFUSAL),
        ("I\u2019m sorry, but I can\u2019t help with that.", RollbackReason.REFUSAL),
    ],
)
async def test_unusable_replies_are_rolled_back_and_never_become_answers(bad_reply, reason):
    llm = ScriptedLLM(responder=restate, steps=[bad_reply, "\\boxed{real}"])
    orchestrator, journal = await make(llm)
    state = await orchestrator.run("task")
    assert [r.reason for r in state.rollbacks] == [reason]
    assert state.turn == 1 and state.intermediate_answers == ["real"]
    assert all(bad_reply not in m.content for m in state.history)
    assert journal.of(Rollback)[0].reason == reason.value


async def test_a_rejected_reply_given_again_word_for_word_is_kept():
    """Greedy decoding repeats itself: the second identical reply ends the rollbacks."""
    broken = "<use_mcp_tool><server_name>kb</server_name>"
    llm = ScriptedLLM(responder=restate, steps=[broken, broken, "\\boxed{x}"])
    orchestrator, journal = await make(llm, cap=5)
    state = await orchestrator.run("task")
    assert len(state.rollbacks) == 1 and journal.of(RollbackRepeated)
    assert not journal.of(RollbackCapReached)
    errors = [m.content for m in state.history if m.kind is MessageKind.TOOL_RESULTS]
    assert "not closed" in errors[0] and state.final_answer == "x"


async def test_first_call_prefills_the_first_reply_with_the_calls_opening():
    """llm.first_call: the model writes only the argument; the call is whole and runs."""
    llm = ScriptedLLM(
        responder=restate, steps=['capital of Peru"}\n', "\\boxed{Lima}"], supports_prefill=True
    )
    orchestrator, journal = await make(llm)
    tool = ToolInfo("kb", "lookup", "Look up facts.", LOOKUP_SCHEMA)
    orchestrator.first_call = XmlProtocol().forced_call(tool)
    state = await orchestrator.run("task")
    first, second = llm.calls[0], llm.calls[1]
    assert first.messages[-1].content.endswith('<arguments>\n{"query": "')
    assert "</arguments>" in first.settings.stop
    assert second.messages[-1].content.startswith("[kb.lookup result]\nfacts about capital of Peru")
    assert second.settings.stop == () and second.messages[-2].content.endswith("</use_mcp_tool>")
    assert state.tool_calls == 1 and state.final_answer == "Lima"
    assert [c.forced_call for c in journal.of(LLMCall)] == [True, False]


async def test_a_reply_that_stops_right_after_its_arguments_is_a_call():
    """The closing tag was a stop sequence or left out: the call is still read."""
    unclosed = call("Peru").removesuffix("</use_mcp_tool>") + "\n"
    llm = ScriptedLLM(responder=restate, steps=[unclosed, "\\boxed{Lima}"])
    orchestrator, _ = await make(llm)
    state = await orchestrator.run("task")
    assert state.tool_calls == 1 and not state.rollbacks


async def test_a_repeated_query_is_rolled_back():
    llm = ScriptedLLM(
        responder=restate, steps=[call("same"), call("same"), call("other"), "\\boxed{x}"]
    )
    orchestrator, _ = await make(llm)
    state = await orchestrator.run("task")
    assert [r.reason for r in state.rollbacks] == [RollbackReason.DUPLICATE]
    assert state.tool_calls == 2


async def test_the_rollback_cap_keeps_the_turn():
    broken = [f"<use_mcp_tool><server_name>kb{i}</server_name>" for i in range(3)]
    llm = ScriptedLLM(responder=restate, steps=[*broken, "\\boxed{x}"])
    orchestrator, journal = await make(llm, cap=2)
    state = await orchestrator.run("task")
    assert len(state.rollbacks) == 2 and journal.of(RollbackCapReached)
    # The kept broken turn got an error result telling the model what was wrong.
    errors = [m.content for m in state.history if m.kind is MessageKind.TOOL_RESULTS]
    assert "not closed" in errors[0] and state.final_answer == "x"


async def test_bad_tool_calls_become_errors_the_model_sees():
    llm = ScriptedLLM(
        [
            call("x", server="nope", tool="lookup")
            + "<use_mcp_tool><server_name>kb</server_name><tool_name>lookup</tool_name>"
            '<arguments>{"query": 5}</arguments></use_mcp_tool>',
            "\\boxed{done}",
        ],
        responder=restate,
    )
    orchestrator, _ = await make(llm)
    state = await orchestrator.run("task")
    text = state.history[3].content
    assert "There is no tool nope.lookup. Available tools: kb.lookup." in text
    assert "Invalid arguments for kb.lookup: query: 5 is not of type 'string'" in text
    assert state.final_answer == "done"


async def test_an_apologetic_reply_with_a_box_is_an_answer():
    llm = ScriptedLLM(
        responder=restate, steps=["I cannot provide an exact figure, but it is \\boxed{42}."]
    )
    orchestrator, _ = await make(llm)
    state = await orchestrator.run("task")
    assert state.rollbacks == [] and state.final_answer == "42"


async def test_a_boxed_answer_that_mentions_tool_markup_finishes():
    llm = ScriptedLLM(responder=restate, steps=["No need for <use_mcp_tool> here: \\boxed{7}"])
    orchestrator, _ = await make(llm)
    state = await orchestrator.run("task")
    assert state.end_reason is EndReason.MODEL_FINISHED and state.final_answer == "7"


async def test_next_pages_and_retries_after_errors_are_not_repeats():
    calls = [
        call("a"),
        call("a").replace('"query": "a"', '"query": "a", "page": 2'),
        call("x", server="kb", tool="lookup").replace('"query": "x"', '"query": 5'),  # error
        call("x", server="kb", tool="lookup").replace('"query": "x"', '"query": 5'),
        "\\boxed{done}",
    ]
    llm = ScriptedLLM(calls, responder=restate)
    orchestrator, _ = await make(llm)
    state = await orchestrator.run("task")
    assert state.rollbacks == [] and state.tool_calls == 4


async def test_an_overflow_in_the_summary_falls_back_to_the_intermediate_answer():
    llm = ScriptedLLM(
        responder=restate, steps=["\\boxed{7} " + call("a"), ContextOverflowError("too long")]
    )
    orchestrator, journal = await make(llm, max_turns=1)
    state = await orchestrator.run("task")
    assert (state.final_answer, state.provenance) == ("7", Provenance.INTERMEDIATE_FALLBACK)
    # The refused summary was asked again without the newest exchange.
    assert journal.of(ContextOverflow)[0].action == "retry"
    assert [m.kind for m in llm.calls[-1].messages] == [
        MessageKind.SYSTEM,
        MessageKind.TASK,
        MessageKind.INJECTED,
    ]


async def test_a_reply_cut_by_the_context_window_is_not_kept():
    cut = reply("half a thou", stop_reason=StopReason.CONTEXT_OVERFLOW)
    llm = ScriptedLLM(responder=restate, steps=[call("a"), cut, "\\boxed{s}"])
    orchestrator, _ = await make(llm)
    state = await orchestrator.run("task")
    assert state.end_reason is EndReason.WINDOW_EXHAUSTED
    assert all("half a thou" not in m.content for m in state.history)


async def test_the_journal_survives_what_models_write(tmp_path):
    llm = ScriptedLLM(responder=restate, steps=[call("\\ud800 lone surrogate"), "\\boxed{ok}"])
    tools = ToolManager({}).for_task(
        [], local_tools=[LocalTool(ToolInfo("kb", "lookup", "", LOOKUP_SCHEMA), lookup)]
    )
    await tools.start()
    journal = Journal(tmp_path / "j.jsonl")
    orchestrator = loop(
        llm,
        tools,
        XmlProtocol(),
        LoopLimits(5),
        AnswerGenerator(AnswerPolicy(), summary_prompt="sum"),
        journal,
        system_prompt="s",
    )
    state = await orchestrator.run("task")
    journal.close()
    assert state.final_answer == "ok"
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines][-1] == "task_finished"


async def test_round_window_sends_the_task_and_the_last_rounds_only():
    llm = ScriptedLLM(responder=restate, steps=[call("a"), call("b"), call("c"), "\\boxed{x}"])
    orchestrator, journal = await make(llm, context=RoundWindow(2))
    state = await orchestrator.run("task")
    last_request = llm.calls[3].messages  # the 4th turn: rounds a, b, c are in history
    assert [m.kind for m in last_request[:2]] == [MessageKind.SYSTEM, MessageKind.TASK]
    sent = [m.content for m in last_request if m.kind is MessageKind.TOOL_RESULTS]
    assert len(sent) == 2 and "facts about b" in sent[0] and "facts about c" in sent[1]
    assert [e.left_out_messages for e in journal.of(LLMCall)] == [0, 0, 0, 2]
    assert len(state.history) == 9  # the stored history keeps everything
    closing = llm.calls[-1].messages  # the same window, then the summary prompt
    kinds = [m.kind for m in closing]
    M = MessageKind
    assert kinds == [M.SYSTEM, M.TASK, M.MODEL, M.TOOL_RESULTS, M.MODEL, M.INJECTED]


async def test_the_guard_decides_on_the_history_and_last_usage_as_the_loop_always_has(
    monkeypatch,
):
    """A model that reports no usage (the scripted one then estimates it, as providers
    do), a round window: each turn's verdict is the one the loop made before the context
    policy, on the whole history with the last call's usage (none before the first)."""
    turns = []
    prepare = ContextPolicy.prepare

    async def recording(policy, history, last_usage=None, **kwargs):
        request = await prepare(policy, history, last_usage, **kwargs)
        if kwargs.get("closing") is None:
            turns.append((list(history), last_usage, request.window))
        return request

    monkeypatch.setattr(ContextPolicy, "prepare", recording)
    steps = [call(q * 20 * n) for n, q in enumerate("abcdef", start=1)]
    llm = CharCountingLLM(responder=restate, steps=steps)
    orchestrator, _ = await make(llm, window=1400, context=RoundWindow(1))
    state = await orchestrator.run("task")
    assert state.end_reason is EndReason.WINDOW_EXHAUSTED
    assert turns[0][1] is None and not turns[-1][2].fits
    for history, last_usage, verdict in turns:
        old = check_window(
            history,
            last_usage=last_usage,
            summary_prompt="Answer now in \\boxed{}.",
            max_context_length=1400,
            max_tokens=100,
            counter=llm.token_counter,
        )
        assert verdict == old


async def test_compaction_near_the_window_end_lets_a_long_task_finish():
    """Replies keep calling the tool; near the window's end the older rounds become
    notes, the guard then counts the compacted request, and the task ends answered."""

    def model(messages, tools):
        if messages[-1].content.startswith("You keep the notes"):
            return "Task goal: the task. Confirmed facts: q1 to q3 looked up."
        done = sum(m.kind is MessageKind.TOOL_RESULTS for m in messages)
        notes = any("Notes on the earlier work" in m.content for m in messages)
        return "\\boxed{done}" if notes and done >= 2 else call(f"q{len(messages)}")

    llm = ScriptedLLM(responder=model)
    strategy = Compaction(2, compact_at=0.8, min_saving=0.1)
    orchestrator, journal = await make(llm, window=1900, context=strategy)
    state = await orchestrator.run("task")
    assert state.end_reason is EndReason.MODEL_FINISHED and state.final_answer == "done"
    compacted = journal.of(Compacted)
    assert compacted and compacted[0].tokens_after < compacted[0].tokens_before
    after = next(c.messages for c in llm.calls if any("Notes on" in m.content for m in c.messages))
    assert after[2].kind is MessageKind.INJECTED and len(after) < len(state.history)
    broken = [c for c in journal.of(LLMCall) if c.prefix_broken]
    assert len(broken) == len(compacted)  # the cache restarts once per compaction only
    assert any(c.purpose == "compaction" for c in journal.of(ClosingCall))
    # Without it, the same model runs out of window.
    orchestrator, _ = await make(ScriptedLLM(responder=model), window=1900, max_turns=30)
    assert (await orchestrator.run("task")).end_reason is EndReason.WINDOW_EXHAUSTED


async def test_the_same_turn_over_and_over_ends_the_loop_as_looping():
    stuck = "I will look it up: <use_mcp_tool><server_name>kb</server_name>"
    llm = ScriptedLLM(responder=lambda messages, tools: stuck)
    orchestrator, journal = await make(llm, max_turns=50, cap=0)
    state = await orchestrator.run("task")
    assert state.end_reason is EndReason.LOOPING and state.turn == 3
    assert journal.of(Looping)[0].repeats == 2


async def test_the_same_reply_with_new_results_is_not_a_loop():
    counter = iter(range(100))

    async def changing(arguments):
        return f"reading {next(counter)}"

    llm = ScriptedLLM(responder=lambda messages, tools: call("news"))
    orchestrator, _ = await make(llm, max_turns=6, cap=0)
    info = orchestrator.tools.tools[0]  # kb.lookup, made to answer differently each time
    orchestrator.tools.local[(info.server, info.name)] = LocalTool(info, changing)
    state = await orchestrator.run("task")
    assert state.end_reason is EndReason.TURNS_EXHAUSTED and state.turn == 6
