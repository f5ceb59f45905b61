"""The mirothinker prompt profile: the requests a MiroThinker preset's model is sent have
the layout MiroThinker's models are trained on, rule by rule; a user's own template
file is sent as written; a task's attached file reaches a model that has no reader."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from deepledger.agent.attachment import MAX_ATTACHMENT_CHARS
from deepledger.agent.task import AgentFactory, task_message
from deepledger.bench.experience import retry_task_text
from deepledger.config import tool_servers, validate
from deepledger.errors import ConfigError
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import MessageKind, Role
from deepledger.prompts import AGENT_TEMPLATES, PromptSet
from deepledger.store.journal import Journal
from deepledger.tools.pool import ToolManager
from tests.support.agents import solve
from tests.support.cli import deepledger
from tests.support.config import composed

QUESTION = "What time is it in UTC?"
TIME_CALL = (
    "Let me check.\n<use_mcp_tool>\n<server_name>time</server_name>\n"
    "<tool_name>get_current_time</tool_name>\n<arguments>\n"
    '{"timezone": "UTC"}\n</arguments>\n</use_mcp_tool>'
)
# A MiroThinker preset, with a fast tool server named after the page reader in the
# preset's list: MiroThinker lists jina_scrape_llm_summary first all the same.
PRESET = (
    "agent=mirothinker_v1.5_keep5_max400",
    "agent.main_agent.tools=[time,jina_scrape_llm_summary]",
    "agent.main_agent.tool_blacklist=[]",
    "llm.worked_example=null",
)


async def run_preset(tmp_path, *overrides, reply=TIME_CALL, prefill=True):
    """A preset task whose model calls the time tool on its first turn, then ``reply``."""

    def respond(messages, tools):
        if messages[-1].kind is MessageKind.TASK:
            return TIME_CALL
        return reply

    llm = ScriptedLLM(responder=respond, supports_prefill=prefill)
    state, _ = await solve(composed(*PRESET, *overrides), llm, tmp_path, question=QUESTION)
    return llm, state


async def test_a_mirothinker_preset_request_has_mirothinkers_layout(tmp_path):
    llm, state = await run_preset(tmp_path, reply="It is noon. \\boxed{12:00}")
    assert state.final_answer == "12:00"
    system, task = llm.calls[0].messages
    # The boxed-answer instruction follows the question in the task, not the system prompt.
    assert task.content.startswith(QUESTION + "\n") and task.content.endswith("\\boxed{}.")
    assert "boxed" not in system.content
    # One tool call per message, at the end of the reply, and its result comes next.
    assert "at most one tool per message" in system.content
    assert "comes back to you in the user's next message" in system.content
    assert "**at the end** of your reply" in system.content
    # The sections in MiroThinker's order, the date at the end of the opening paragraph.
    sections = ["Today is: ", "# Tool-Use Formatting Instructions", "## Server name: "]
    sections += ["# General Objective", "# Agent Specific Objective"]
    positions = [system.content.index(s) for s in sections]
    assert positions == sorted(positions)
    intro = system.content.split("\n\n# Tool-Use", 1)[0]
    assert intro.endswith(f"Today is: {datetime.now(UTC).date().isoformat()}")
    # The tool list: MiroThinker's server order, schemas as it prints them.
    servers = re.findall(r"^## Server name: (.+)$", system.content, re.MULTILINE)
    assert servers == ["jina_scrape_llm_summary", "time"]
    assert "Input JSON schema: {'type': 'object'" in system.content
    assert "Server description" not in system.content
    # The second turn: the tool's raw text, nothing around it.
    result = llm.calls[1].messages[-1]
    assert result.kind is MessageKind.TOOL_RESULTS
    assert result.content == state.history[3].tool_results[0].content
    assert (
        result.content.lstrip().startswith("{") and "[time.get_current_time" not in result.content
    )
    # The closing prompt repeats the question.
    summary = llm.calls[-1].messages[-1]
    assert summary.kind is MessageKind.INJECTED and f'"{QUESTION}"' in summary.content


async def test_the_post_mortem_prefill_is_a_thinking_block(tmp_path):
    # One turn, spent on a tool call: the loop runs out, and with context management
    # on a post-mortem is asked for, its reply started with MiroThinker's think block.
    llm, state = await run_preset(tmp_path, "agent.main_agent.max_turns=1")
    assert state.final_answer is None
    prompt, prefill = llm.calls[-1].messages[-2:]
    assert prompt.content.startswith("The task was not finished. Do NOT call any tool.")
    assert "Failure type: [incomplete / blocked / misdirected / format_missed]" in prompt.content
    assert prefill.role is Role.ASSISTANT
    assert prefill.content.startswith("<think>\n") and prefill.content.endswith("\n</think>")
    assert "**Failure type**" in prefill.content
    # As MiroThinker's, the request closes on the model's last reply: the results of the
    # call its turns left unanswered are not sent.
    request = llm.calls[-1].messages
    assert request[-3].role is Role.ASSISTANT and "<use_mcp_tool>" in request[-3].content
    assert not any(m.kind is MessageKind.TOOL_RESULTS for m in request)
    assert state.history[-1].kind is MessageKind.TOOL_RESULTS  # kept in the history


async def test_a_template_in_prompts_dir_is_sent_byte_for_byte(tmp_path):
    folder = tmp_path / "prompts"
    folder.mkdir()
    own = "  My own training prompt, dated $date.\n\n$tools_section\n\nThe end.\n\n"
    (folder / "system.md").write_text(own)
    closing = "Answer now, $$5 says in \\boxed{}: $question\n$format_rules\n"
    (folder / "summarize.md").write_text(closing)
    llm, _ = await run_preset(tmp_path, f"agent.prompts_dir={folder}", reply="\\boxed{noon}")
    system = llm.calls[0].messages[0].content
    date = datetime.now(UTC).date().isoformat()
    assert system.startswith(f"  My own training prompt, dated {date}.\n\n# Tool-Use")
    assert system.endswith("\n\nThe end.\n\n")  # not a byte trimmed
    assert (
        llm.calls[-1].messages[-1].content == f"Answer now, $5 says in \\boxed{{}}: {QUESTION}\n\n"
    )


@pytest.mark.parametrize(
    ("name", "text", "named"),
    [
        ("summarize.md", "Answer in a box.\n$format_rules", "lacks the placeholder $question"),
        ("system.md", "$date $tools_section $when", "has the placeholder $when"),
        ("task.md", "$question costs $5 $attachment", "'$' that is no placeholder"),
        ("sytem.md", "$date", "replaces no template of an agent's"),
        ("judge.md", "$question", "replaces no template of an agent's"),
    ],
)
def test_a_template_in_prompts_dir_that_does_not_fit_is_refused(tmp_path, name, text, named):
    (tmp_path / name).write_text(text)
    cfg = composed("agent=mirothinker_1.7_keep5_max200", f"agent.prompts_dir={tmp_path}")
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    assert str(tmp_path / name) in str(refused.value) and named in str(refused.value)


def test_an_unknown_profile_and_a_missing_folder_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"agent\.prompt_profile='miro'"):
        validate(composed("agent.prompt_profile=miro"))
    with pytest.raises(ConfigError, match="no such folder"):
        validate(composed(f"agent.prompts_dir={tmp_path / 'none'}"))


def test_every_mirothinker_preset_selects_the_profile():
    for preset in ("mirothinker_1.7_keep5_max200", "mirothinker_v1.5_keep5_max400", "multi_agent"):
        assert composed(f"agent={preset}").agent.prompt_profile == "mirothinker"
    assert composed().agent.prompt_profile is None  # deepledger's own layout


# -- attachments ----------------------------------------------------------------------


async def test_without_a_reader_the_attachments_content_is_in_the_task(tmp_path):
    table = tmp_path / "sales.csv"
    table.write_text("region,total\nnorth,12\nsouth,30\n")
    cfg = composed("agent=mirothinker_1.7_keep5_max200")
    text, images = await task_message(cfg, "Sum the totals.", str(table))
    boxed = "Sum the totals.\nFollow the format the request asks for exactly, and put the"
    assert text.startswith(boxed) and images == ()
    part = text.split("\\boxed{}.", 1)[1]
    assert part.startswith(f"\n\nNote: a CSV file '{table}' comes with this task")
    assert part.endswith(
        f"## CSV File\nFile: {table}\n\n```\nregion,total\nnorth,12\nsouth,30\n```"
    )


async def test_with_a_reader_the_task_names_the_file_as_today(tmp_path):
    table = tmp_path / "sales.csv"
    table.write_text("region,total\n")
    text, _ = await task_message(composed(), "Sum the totals.", str(table))
    assert text.startswith("Sum the totals.\n\nA file is attached to this task: ")
    assert "reader tool" in text and "region,total" not in text


async def test_a_large_attachment_is_cut_and_says_so(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("a" * MAX_ATTACHMENT_CHARS + "b" * 1234)
    cfg = composed("agent=mirothinker_1.7_keep5_max200")
    text, _ = await task_message(cfg, "Count.", str(notes))
    assert "## Text File" in text and "b" not in text.split("```")[1]
    assert "its last 1,234 characters are left out" in text


async def test_an_unreadable_attachment_is_named_with_the_reason(tmp_path):
    old = tmp_path / "report.doc"
    old.write_bytes(b"\xd0\xcf\x11\xe0 not a docx")
    cfg = composed("agent=mirothinker_1.7_keep5_max200")
    text, _ = await task_message(cfg, "Summarize.", str(old))
    assert f"A file is attached to this task: {old}. It could not be read: " in text
    assert "Word .doc files are not supported" in text


async def test_an_image_attachment_goes_to_a_vision_model_as_an_image(tmp_path):
    image = tmp_path / "chart.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 32)
    cfg = composed("agent=mirothinker_1.7_keep5_max200")
    text, images = await task_message(cfg, "Read the chart.", str(image), sees_images=True)
    assert len(images) == 1 and "## Image Content" in text and "attached to this message" in text
    text, images = await task_message(cfg, "Read the chart.", str(image))
    assert images == () and "does not see images" in text


def test_a_retry_carries_the_post_mortems_in_mirothinkers_frame():
    text = retry_task_text("Q?", ["Failure type: blocked"], PromptSet("mirothinker"))
    assert text.startswith("Q?\n\n=== Previous Attempts Analysis ===\n")
    assert "\n\n[Attempt 1]\nFailure type: blocked\n\n=== End of Analysis ===\n\n" in text
    assert "boxed" not in text  # the task message asks for the box after it


def test_the_command_refuses_a_template_without_a_placeholder_with_exit_2(tmp_path):
    (tmp_path / "summarize.md").write_text("Box the answer.\n")
    run = deepledger(
        "run",
        "What is 2 + 2?",
        "agent=mirothinker_1.7_keep5_max200",
        f"agent.prompts_dir={tmp_path}",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"{tmp_path / 'summarize.md'} lacks the placeholder $question" in run.stderr


async def test_a_sub_agent_out_of_turns_is_asked_for_its_report_with_its_subtask(tmp_path):
    subtask = "Find the current UTC time."
    delegate = (
        "<use_mcp_tool>\n<server_name>agent-browsing</server_name>\n<tool_name>run_subtask"
        f'</tool_name>\n<arguments>\n{{"subtask": "{subtask}"}}\n</arguments>\n</use_mcp_tool>'
    )

    def respond(messages, tools):
        if messages[1].content == subtask:  # the sub-agent: always one more look
            return TIME_CALL
        done = messages[-1].kind is MessageKind.TOOL_RESULTS
        return "\\boxed{noon}" if done else delegate

    cfg = composed(
        "agent=multi_agent",
        "agent.main_agent.tools=[agent-browsing]",
        "agent.sub_agents.browsing.tools=[time]",
        "agent.sub_agents.browsing.max_turns=1",
        "llm.worked_example=null",
    )
    llm = ScriptedLLM(responder=respond)
    state, _ = await solve(cfg, llm, tmp_path)
    assert state.final_answer == "noon"
    sub_calls = [c for c in llm.calls if c.messages[1].content == subtask]
    system = sub_calls[0].messages[0].content
    assert "# Agent Specific Objective\n\nA browsing agent" in system
    report_prompt = sub_calls[-1].messages[-1]
    assert report_prompt.kind is MessageKind.INJECTED
    assert f'"{subtask}"' in report_prompt.content and "FINAL RESPONSE" in report_prompt.content


async def test_a_preset_task_with_a_file_sends_its_content_in_the_first_request(tmp_path):
    table = tmp_path / "sales.csv"
    table.write_text("region,total\nnorth,12\n")
    cfg = composed(*PRESET)
    llm = ScriptedLLM(responder=lambda messages, tools: "\\boxed{12}")
    manager = ToolManager(tool_servers(cfg))
    journal = Journal(tmp_path / "journal.jsonl")
    try:
        factory = AgentFactory(cfg, llm, manager)
        state = await factory.solve("Total of north?", journal, file_path=str(table))
    finally:
        journal.close()
        await manager.aclose()
    assert state.final_answer == "12"
    task = llm.calls[0].messages[1].content
    assert task.startswith("Total of north?\nFollow the format")
    assert task.endswith(f"## CSV File\nFile: {table}\n\n```\nregion,total\nnorth,12\n```")
    assert "reader" not in task


def test_every_replaceable_template_is_one_of_ours():
    for name in AGENT_TEMPLATES:
        assert PromptSet().exists(name) or PromptSet("mirothinker").exists(name), name
