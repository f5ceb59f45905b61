from __future__ import annotations

import json
import re

import pytest

from deepledger.messages import LLMResponse, Message, StopReason, ToolCall, ToolResult, Usage
from deepledger.prompts import PromptSet
from deepledger.tools.protocols import NativeProtocol, XmlProtocol, make_protocol, wire_name
from deepledger.tools.types import ToolInfo

SEARCH = ToolInfo(
    "search",
    "search",
    "Search the corpus.",
    {"type": "object", "properties": {"query": {"type": "string"}}},
)
RUN = ToolInfo("python", "run_python", "Run code.", {"type": "object"})


def reply(text: str = "", calls=()) -> LLMResponse:
    return LLMResponse(Message.assistant(text, calls), StopReason.END_TURN, Usage())


def block(server: str, tool: str, arguments: str) -> str:
    return (
        f"<use_mcp_tool>\n<server_name>{server}</server_name>\n<tool_name>{tool}</tool_name>\n"
        f"<arguments>\n{arguments}\n</arguments>\n</use_mcp_tool>"
    )


def test_xml_system_section_lists_tools_with_json_schemas():
    section = XmlProtocol().system_section([SEARCH, RUN])
    assert "## Server name: search" in section and "### Tool name: run_python" in section
    assert json.dumps(SEARCH.input_schema) in section  # JSON, not a Python repr
    assert "<use_mcp_tool>" in section


def test_xml_extracts_every_well_formed_block():
    text = (
        "Let me look. "
        + block("search", "search", '{"query": "x"}')
        + " and "
        + block("python", "run_python", '{"code": "1+1"}')
    )
    parsed = XmlProtocol().extract(reply(text), turn=3, tools=[])
    assert [(c.server_name, c.name, c.arguments) for c in parsed.calls] == [
        ("search", "search", {"query": "x"}),
        ("python", "run_python", {"code": "1+1"}),
    ]
    assert [c.id for c in parsed.calls] == ["t3c1", "t3c2"]
    assert parsed.malformed == [] and not parsed.nothing_usable


def test_xml_repairs_broken_json():
    parsed = XmlProtocol().extract(
        reply(block("search", "search", '{"query": "x",')), turn=1, tools=[]
    )
    assert parsed.calls[0].arguments == {"query": "x"}


def test_xml_reports_malformed_blocks_and_unclosed_tags():
    text = (
        block("search", "", '{"query": "x"}')
        + block("search", "search", "[1, 2]")
        + "<use_mcp_tool><server_name>s</server_name>"
    )
    parsed = XmlProtocol().extract(reply(text), turn=1, tools=[])
    assert parsed.calls == []
    assert "missing <tool_name>" in parsed.malformed[0]
    assert "not a JSON object" in parsed.malformed[1]
    assert "not closed" in parsed.malformed[2]
    assert parsed.nothing_usable


def test_xml_plain_answer_attempts_nothing():
    parsed = XmlProtocol().extract(reply("The answer is \\boxed{4}."), turn=1, tools=[])
    assert parsed == parsed.__class__() and not parsed.nothing_usable


def test_xml_results_are_user_text_paired_with_calls():
    call = ToolCall("t1c1", "search", {"query": "x"}, server_name="search")
    message = XmlProtocol().results_message(
        [
            ToolResult("t1c1", "found x"),
            ToolResult("t1m1", "Tool call not run: bad", is_error=True),
        ],
        [call],
    )
    assert (
        message.content
        == "[search.search result]\nfound x\n\n[tool call error]\nTool call not run: bad"
    )
    assert [r.call_id for r in message.tool_results] == ["t1c1", "t1m1"]


def test_native_specs_and_name_resolution():
    protocol = NativeProtocol()
    offered = [SEARCH, RUN, ToolInfo("agent-browsing", "run.subtask!", "d")]
    specs = protocol.specs(offered)
    assert [s.name for s in specs] == [
        "search__search",
        "python__run_python",
        "agent-browsing__run_subtask_",
    ]
    wire = ToolCall.from_raw("call_9", "python__run_python", '{"code": "print(1)"}')
    parsed = protocol.extract(reply("", [wire]), turn=1, tools=offered)
    assert (parsed.calls[0].server_name, parsed.calls[0].name, parsed.calls[0].id) == (
        "python",
        "run_python",
        "call_9",
    )
    # The stored message keeps the wire names so the next request pairs by id.
    assert (
        protocol.record_calls(reply("", [wire]), parsed).tool_calls[0].name == "python__run_python"
    )


def test_native_broken_arguments_stay_for_an_error_result():
    protocol = NativeProtocol()
    broken = ToolCall.from_raw("c1", "search__search", "garbage")
    parsed = protocol.extract(reply("", [broken]), turn=1, tools=[SEARCH])
    assert parsed.calls[0].parse_error and parsed.nothing_usable
    assert parsed.calls[0].id == "c1"  # kept, so its error result pairs with it


def test_wire_names_are_length_limited():
    assert len(wire_name(ToolInfo("s" * 50, "t" * 50, ""))) == 64


def test_xml_arguments_may_contain_closing_tags():
    code = 'print("</arguments>")\nprint("</use_mcp_tool>")'
    text = (
        block("python", "run_python", json.dumps({"code": code}))
        + " then "
        + block("search", "search", '{"query": "what does </arguments> mean"}')
    )
    parsed = XmlProtocol().extract(reply(text), turn=1, tools=[])
    assert [c.arguments for c in parsed.calls] == [
        {"code": code},
        {"query": "what does </arguments> mean"},
    ]


def test_xml_unclosed_block_before_a_good_one():
    text = "<use_mcp_tool><server_name>a</server_name> oops " + block("search", "search", "{}")
    parsed = XmlProtocol().extract(reply(text), turn=1, tools=[])
    assert [c.name for c in parsed.calls] == ["search"]
    assert parsed.malformed == ["tool call #1: <use_mcp_tool> is not closed"]


def test_xml_many_unclosed_tags_are_reported_not_stuck_on():
    parsed = XmlProtocol().extract(reply("<use_mcp_tool>x " * 20_000), turn=1, tools=[])
    assert len(parsed.malformed) == 20_000 and parsed.nothing_usable


def test_xml_absurd_arguments_are_errors_not_crashes():
    huge = block("search", "search", '{"query": ' + "1" * 5000 + "}")
    deep = block("search", "search", "[" * 100_000)
    parsed = XmlProtocol().extract(reply(huge + deep), turn=1, tools=[])
    assert parsed.calls == [] and len(parsed.malformed) == 2


def test_xml_shows_the_server_description():
    described = ToolInfo("search", "search", "d", {}, server_description="Wikipedia leads.")
    assert "Server description: Wikipedia leads." in XmlProtocol().system_section([described])


def test_native_missing_or_repeated_ids_are_made_unique_and_paired():
    protocol = NativeProtocol()
    wire = [
        ToolCall("", "search__search", {"query": "a"}),
        ToolCall("dup", "search__search", {"query": "b"}),
        ToolCall("dup", "search__search", {"query": "c"}),
    ]
    response = reply("", wire)
    parsed = protocol.extract(response, turn=4, tools=[SEARCH])
    assert [c.id for c in parsed.calls] == ["t4c1", "dup", "t4c3"]
    stored = protocol.record_calls(response, parsed)
    assert [c.id for c in stored.tool_calls] == ["t4c1", "dup", "t4c3"]
    assert {c.name for c in stored.tool_calls} == {"search__search"}


def test_xml_last_block_cut_after_its_arguments_is_a_call_but_not_one_followed_by_text():
    cut = "I will search.\n" + block("kb", "search", '{"query": "Peru"}').removesuffix(
        "</use_mcp_tool>"
    )
    parsed = XmlProtocol().extract(reply(cut + "\n  "), 1, [])
    assert [c.arguments for c in parsed.calls] == [{"query": "Peru"}] and not parsed.malformed
    invented = cut + "\n<result>Lima</result>"
    parsed = XmlProtocol().extract(reply(invented), 1, [])
    assert not parsed.calls and parsed.malformed == ["tool call #1: <use_mcp_tool> is not closed"]


def test_xml_forced_call_opens_the_first_argument_and_closes_the_block():
    protocol = XmlProtocol()
    schema = {"properties": {"k": {"type": "integer"}, "q": {"type": "string"}}, "required": ["q"]}
    forced = protocol.forced_call(ToolInfo("kb", "search", "", schema))
    assert forced.opening.endswith('<arguments>\n{"q": "') and forced.stop == "</arguments>"
    parsed = protocol.extract(reply(forced.join('Peru"}\n</arguments>ignored')), 1, [])
    assert [(c.server_name, c.name, c.arguments) for c in parsed.calls] == [
        ("kb", "search", {"q": "Peru"})
    ]
    numeric = protocol.forced_call(ToolInfo("kb", "n", "", {"properties": {"k": {}}}))
    assert numeric.opening.endswith('{"k": ')
    bare = protocol.forced_call(ToolInfo("kb", "reset", "", {}))
    assert bare.opening.endswith("<arguments>\n{")
    assert NativeProtocol().forced_call(ToolInfo("kb", "reset", "", {})) is None


# -- the mirothinker profile ----------------------------------------------------------

MIRO = PromptSet("mirothinker")
PYTHON_TOOL = ToolInfo(
    "tool-python",
    "run_python_code",
    "Run code.\n",
    {"type": "object", "required": ["code_block"], "additionalProperties": False},
    server_description="Sandboxes.",
)
GOOGLE = ToolInfo("search_and_scrape_webpage", "google_search", "Search.", {"type": "object"})
SUBAGENT = ToolInfo("agent-browsing", "run_subtask", "Delegate.", {"type": "object"})
MINE = ToolInfo("kb", "lookup", "Look up.", {"type": "object"})


def mirothinker_section(tools: list[ToolInfo]) -> str:
    return make_protocol("xml", prompts=MIRO).system_section(tools)


def test_mirothinker_lists_servers_in_its_own_order_then_others_then_sub_agents():
    section = mirothinker_section([SUBAGENT, GOOGLE, MINE, PYTHON_TOOL])
    names = re.findall(r"^## Server name: (.+)$", section, re.MULTILINE)
    assert names == ["tool-python", "search_and_scrape_webpage", "kb", "agent-browsing"]


def test_mirothinker_tool_list_form():
    section = mirothinker_section([PYTHON_TOOL, GOOGLE])
    listing = section[section.index("## Server name: tool-python") :]
    assert listing == (
        "## Server name: tool-python\n"
        "### Tool name: run_python_code\n"
        "Description: Run code.\n\n"  # the description as the server gave it
        "Input JSON schema: {'type': 'object', 'required': ['code_block'], "
        # the schema as a Python dict, as MiroThinker prints it
        "'additionalProperties': False}\n\n"
        "## Server name: search_and_scrape_webpage\n"
        "### Tool name: google_search\n"
        "Description: Search.\n"
        "Input JSON schema: {'type': 'object'}"
    )
    assert "Server description" not in section  # no line MiroThinker does not have
    # Its headers, in its order, the list right after the formatting instructions.
    headers = ["# Tool-Use Formatting Instructions", "Description:", "Parameters:", "Usage:"]
    headers += ["Important Notes:", "JSONSchema format:\n\n\n## Server name: tool-python"]
    positions = [section.index(h) for h in headers]
    assert positions == sorted(positions)


def test_mirothinker_results_are_the_raw_texts():
    protocol = make_protocol("xml", prompts=MIRO)
    calls = [
        ToolCall("a", "google_search", {}, "search_and_scrape_webpage"),
        ToolCall("b", "x", {}, "kb"),
    ]
    results = [ToolResult("a", '{"organic": []}'), ToolResult("b", "no such tool", is_error=True)]
    message = protocol.results_message(results, calls)
    assert message.content == '{"organic": []}\nThe call to x on kb failed: no such tool'
    assert message.tool_results == tuple(results)


def test_the_default_profile_keeps_its_labelled_results():
    results = [ToolResult("a", "found x")]
    message = XmlProtocol().results_message(results, [ToolCall("a", "search", {}, "search")])
    assert message.content == "[search.search result]\nfound x"


@pytest.mark.parametrize("name", ["xml", "native", "hermes"])
def test_specs_and_the_system_section_change_nothing_extract_reads(name):
    """A reply's calls resolve against the tools given with it, whatever the protocol
    was asked for before: specs() of other tools leave no trace."""
    wire = ToolCall.from_raw("c1", "search__search", '{"query": "x"}')
    text = block("search", "search", '{"query": "x"}') if name == "xml" else ""
    if name == "hermes":
        text = '<tool_call>{"name": "search__search", "arguments": {"query": "x"}}</tool_call>'
    response = reply(text, [wire] if name == "native" else [])
    fresh = make_protocol(name).extract(response, 1, [SEARCH])
    used = make_protocol(name)
    used.specs([RUN])
    used.system_section([RUN])
    assert used.extract(response, 1, [SEARCH]) == fresh
    assert [(c.server_name, c.name) for c in fresh.calls] == [("search", "search")]
