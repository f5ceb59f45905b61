"""Wiring a whole task from config: sub-agents, attached files, the journal."""

from __future__ import annotations

import pytest

from deepledger.agent.task import task_message
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import MessageKind
from deepledger.records.events import FirstCallSkipped, SubagentFinished
from tests.support.agents import solve
from tests.support.config import composed

SUBTASK_CALL = (
    "<use_mcp_tool><server_name>agent-browsing</server_name><tool_name>run_subtask</tool_name>"
    '<arguments>{"subtask": "Find the current UTC time."}</arguments></use_mcp_tool>'
)
TIME_CALL = (
    "<use_mcp_tool><server_name>time</server_name><tool_name>get_current_time</tool_name>"
    '<arguments>{"timezone": "UTC"}</arguments></use_mcp_tool>'
)


def is_subagent(messages) -> bool:
    return messages[1].content == "Find the current UTC time."  # its task is the subtask


async def test_a_sub_agent_runs_the_same_loop_and_reports_back(tmp_path):
    cfg = composed(
        "agent=multi_agent",
        "agent.main_agent.tools=[agent-browsing]",
        "agent.sub_agents.browsing.tools=[time]",
        "agent.sub_agents.browsing.max_turns=3",
    )

    def respond(messages, tools):
        if is_subagent(messages):
            done = any(m.kind is MessageKind.TOOL_RESULTS for m in messages)
            return "Report: the time tool says it is noon UTC." if done else TIME_CALL
        if any(m.kind is MessageKind.TOOL_RESULTS for m in messages):
            return "The sub-agent found it: \\boxed{noon}"
        return SUBTASK_CALL

    llm = ScriptedLLM(responder=respond)
    state, journal = await solve(cfg, llm, tmp_path)
    assert state.final_answer == "noon"
    main_system = llm.calls[0].messages[0].content
    assert "Server name: agent-browsing" in main_system and "A browsing agent" in main_system
    tool_result = next(m for m in state.history if m.kind is MessageKind.TOOL_RESULTS)
    assert "Report: the time tool says it is noon UTC." in tool_result.content
    sub_journal = tmp_path / "journal.subagents" / "browsing-1.jsonl"
    assert sub_journal.exists() and "get_current_time" in sub_journal.read_text()
    assert journal.of(SubagentFinished)[0].agent == "browsing"
    # The task's usage includes the sub-agent's calls; its window figures do not.
    # main: the call, the final turn, the summary; sub-agent: the call and its report
    assert len(state.ledger.calls) == 3 and len(state.ledger.delegated) == 2
    own = sum(c.usage.input_tokens for c in state.ledger.calls)
    assert state.ledger.total.input_tokens > own
    assert state.ledger.last_usage == state.ledger.calls[-1].usage


async def test_an_attached_file_is_named_in_the_task(tmp_path):
    attached = tmp_path / "data.csv"
    attached.write_text("a,b\n")
    text, _ = await task_message(composed(), "Sum column b.", str(attached))
    assert text.startswith("Sum column b.") and str(attached.resolve()) in text
    assert "reader" in text and "a,b" not in text
    assert await task_message(composed(), "Plain question.") == ("Plain question.", ())


async def solve_with(tmp_path, *overrides, prefill=True):
    cfg = composed("agent.tool_protocol=xml", "agent.main_agent.tools=[time]", *overrides)
    llm = ScriptedLLM(responder=lambda messages, tools: "\\boxed{noon}", supports_prefill=prefill)
    _, journal = await solve(cfg, llm, tmp_path)
    return llm, journal


async def test_a_model_profile_sets_the_protocol_and_adds_its_worked_example(tmp_path):
    """llm.tool_protocol overrides the agent's; llm.worked_example joins the prompt."""
    llm, _ = await solve_with(
        tmp_path,
        "llm.tool_protocol=native",
        "llm.worked_example=example_small_model.md",
        prefill=False,
    )
    first = llm.calls[0]
    assert first.tools  # native: the tools go on the wire as functions
    assert "# A worked example" in first.messages[0].content


def test_a_model_profile_is_checked():
    from deepledger.config import validate
    from deepledger.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        validate(composed("llm.tool_protocol=json", "llm.worked_example=missing.md"))
    message = str(refused.value)
    assert "llm.tool_protocol='json'" in message and "llm.worked_example='missing.md'" in message


async def test_first_call_prefills_the_named_tool_where_it_can(tmp_path):
    llm, journal = await solve_with(tmp_path, "llm.first_call=time.get_current_time")
    opening = llm.calls[0].messages[-1].content
    assert opening.endswith('<tool_name>get_current_time</tool_name>\n<arguments>\n{"timezone": "')
    assert not journal.of(FirstCallSkipped)


async def test_first_call_is_skipped_with_the_reason_where_it_cannot(tmp_path):
    cases = [
        (("llm.first_call=search",), True, "this agent has no tool search"),
        (("llm.first_call=get_current_time", "llm.tool_protocol=native"), True, "native protocol"),
        (("llm.first_call=get_current_time",), False, "cannot continue a prefill"),
    ]
    for overrides, prefill, reason in cases:
        llm, journal = await solve_with(tmp_path, *overrides, prefill=prefill)
        assert reason in journal.of(FirstCallSkipped)[0].reason
        assert llm.calls[0].messages[-1].role.value != "assistant"


async def test_a_model_profile_caps_the_turns_and_hides_tools_from_every_agent(tmp_path):
    """llm.max_turns lowers the agent's own cap (never raises it); llm.tool_blacklist
    hides its tools beside the agent's blacklist."""
    cfg = composed(
        "agent.tool_protocol=xml",
        "agent.main_agent.tools=[time]",
        "agent.main_agent.max_turns=9",
        "llm.max_turns=2",
        "llm.tool_blacklist=[time.convert_time]",
    )
    llm = ScriptedLLM(responder=lambda messages, tools: TIME_CALL)  # never answers
    state, _ = await solve(cfg, llm, tmp_path)
    system = llm.calls[0].messages[0].content
    assert "get_current_time" in system and "convert_time" not in system
    assert state.turn == 2  # stopped by the model's cap, not the agent's 9


def test_a_model_profiles_turn_cap_and_hidden_tools_are_checked():
    from deepledger.config import validate
    from deepledger.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        validate(composed("llm.max_turns=0", "llm.tool_blacklist=[a.b.c]"))
    message = str(refused.value)
    assert "llm.max_turns=0" in message and "llm.tool_blacklist: 'a.b.c'" in message
