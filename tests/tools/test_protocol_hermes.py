"""The hermes tool protocol: ``<tool_call>`` JSON blocks in the text, ``<tool_response>``
results, tools in our system section or written by the model's own template."""

from __future__ import annotations

import json

import pytest

from deepledger.config import validate
from deepledger.llm.base import LLMCapabilities
from deepledger.llm.openai import OpenAIChatClient
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import LLMResponse, Message, MessageKind, StopReason, ToolResult, Usage
from deepledger.tools.protocols import HermesProtocol, make_protocol
from deepledger.tools.types import ToolInfo
from tests.support.config import composed
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply
from tests.support.hermes import TIME_CALL, call_then_answer, solve_with_hermes

SEARCH = ToolInfo(
    "search",
    "search",
    "Search the corpus.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
RUN = ToolInfo("python", "run_python", "Run code.", {"type": "object"})


def reply(text: str) -> LLMResponse:
    return LLMResponse(Message.assistant(text), StopReason.END_TURN, Usage())


def extract(text: str, turn: int = 1):
    return HermesProtocol().extract(reply(text), turn, [SEARCH, RUN])


def block(name: str, arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_one_call_maps_the_wire_name_back_to_server_and_tool():
    parsed = extract(block("search__search", {"query": "x"}), turn=4)
    assert [(c.id, c.server_name, c.name, c.arguments) for c in parsed.calls] == [
        ("t4c1", "search", "search", {"query": "x"})
    ]
    assert parsed.malformed == [] and parsed.attempted and not parsed.nothing_usable


def test_several_calls_with_text_around_them():
    text = (
        "I will look it up. "
        + block("search__search", {"query": "a </tool_call> b"})
        + " and compute.\n"
        + block("python__run_python", {"code": "1+1"})
        + "\nDone asking."
    )
    parsed = extract(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("search", {"query": "a </tool_call> b"}),  # the closing tag inside a JSON string
        ("run_python", {"code": "1+1"}),
    ]
    assert [c.id for c in parsed.calls] == ["t1c1", "t1c2"]


def test_broken_json_is_repaired_and_string_arguments_are_read():
    parsed = extract(
        '<tool_call>{"name": "search__search", "arguments": {"query": "x",}</tool_call>'
        + block("python__run_python", json.dumps({"code": "print(2)"}))
    )
    assert [c.arguments for c in parsed.calls] == [{"query": "x"}, {"code": "print(2)"}]
    assert parsed.malformed == []


def test_an_unclosed_last_block_at_the_end_of_the_reply_is_a_call():
    # cut off inside the arguments (llm.max_tokens): repaired like any broken JSON
    parsed = extract(
        'Searching. <tool_call>\n{"name": "search__search", "arguments": {"query": "Li'
    )
    assert parsed.malformed == []
    assert (parsed.calls[0].name, parsed.calls[0].arguments) == ("search", {"query": "Li"})
    parsed = extract('<tool_call>{"name": "search__search", "arguments": {"query": "y"}}')
    assert parsed.calls[0].arguments == {"query": "y"}


def test_malformed_blocks_and_unknown_tools_become_format_errors():
    parsed = extract(
        block("nope", {})
        + '<tool_call>{"name": "search__search"'  # never closed, and another follows
        + "<tool_call>[1, 2]</tool_call>"
        + "<tool_call> </tool_call>"
        + '<tool_call>{"arguments": {}}</tool_call>'
        + block("search__search", [1])
        + block("search__search", "[1, 2]")
    )
    assert parsed.calls == [] and parsed.nothing_usable
    problems = parsed.malformed
    assert len(problems) == 7
    assert "tool call #1: unknown tool 'nope'" in problems[0]
    assert "python__run_python, search__search" in problems[0]  # what it may call instead
    assert problems[1] == "tool call #2: <tool_call> is not closed"
    assert "not a JSON object" in problems[2]
    assert "empty" in problems[3]
    assert 'no "name"' in problems[4]
    assert '"arguments" must be a JSON object' in problems[5]
    assert problems[6].startswith("tool call #7: search__search: arguments")


def test_small_models_may_name_a_tool_without_its_server():
    protocol = HermesProtocol()
    same_name = ToolInfo("other", "search", "Another search.", {"type": "object"})
    parsed = protocol.extract(
        reply(
            block("run_python", {"code": "1"})
            + block("python.run_python", {"code": "2"})
            + block("search", {"query": "which?"})  # two servers have it: ambiguous
        ),
        turn=1,
        tools=[SEARCH, RUN, same_name],
    )
    assert [(c.server_name, c.arguments) for c in parsed.calls] == [
        ("python", {"code": "1"}),
        ("python", {"code": "2"}),
    ]
    assert "unknown tool 'search'" in parsed.malformed[0]


def test_a_plain_answer_attempts_nothing():
    parsed = extract("The answer is \\boxed{4}.")
    assert parsed.calls == [] and parsed.malformed == [] and not parsed.attempted


def test_results_are_tool_response_blocks_in_a_user_turn():
    message = HermesProtocol().results_message(
        [
            ToolResult("t1c1", "found x"),
            ToolResult("t1c2", "no such page", is_error=True),
            ToolResult("t1m1", "Tool call not run: bad", is_error=True),
        ],
        [],
    )
    assert message.role.value == "user" and message.kind is MessageKind.TOOL_RESULTS
    assert message.content == (
        "<tool_response>\nfound x\n</tool_response>\n"
        "<tool_response>\nError: no such page\n</tool_response>\n"
        "<tool_response>\nError: Tool call not run: bad\n</tool_response>"
    )
    assert [r.call_id for r in message.tool_results] == ["t1c1", "t1c2", "t1m1"]


def test_our_system_section_lists_json_signatures_and_no_specs_are_sent():
    protocol = HermesProtocol()
    section = protocol.system_section([SEARCH, RUN])
    inside = section.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    signatures = [json.loads(line) for line in inside.splitlines()]
    assert signatures[0] == {
        "type": "function",
        "function": {
            "name": "search__search",
            "description": "Search the corpus.",
            "parameters": SEARCH.input_schema,
        },
    }
    assert signatures[1]["function"]["name"] == "python__run_python"
    assert '<tool_call>\n{"name": ' in section
    assert protocol.specs([SEARCH, RUN]) == []  # a server without a tool parser
    assert "No tools are available" in protocol.system_section([])


def test_a_template_that_writes_tools_gets_them_as_specs_instead():
    protocol = make_protocol("hermes", LLMCapabilities(template_tools=True))
    section = protocol.system_section([SEARCH, RUN])
    assert "<tools>" not in section and "search__search" not in section
    specs = protocol.specs([SEARCH, RUN])
    assert [(s.name, s.parameters) for s in specs] == [
        ("search__search", SEARCH.input_schema),
        ("python__run_python", RUN.input_schema),
    ]
    assert make_protocol("hermes").specs([SEARCH]) == []


def test_the_forced_first_call_opens_a_block_the_parser_reads():
    protocol = HermesProtocol()
    forced = protocol.forced_call(SEARCH)
    assert forced.opening == '<tool_call>\n{"name": "search__search", "arguments": {"query": "'
    assert forced.stop == "</tool_call>"
    joined = forced.join('capital of Peru"}}\n')
    assert joined.endswith('"capital of Peru"}}\n</tool_call>')
    assert protocol.extract(reply(joined), 1, [SEARCH]).calls[0].arguments == {
        "query": "capital of Peru"
    }
    untyped = protocol.forced_call(RUN)
    assert untyped.opening.endswith('"arguments": {')


def test_hermes_is_an_allowed_protocol_value():
    validate(composed("agent.tool_protocol=hermes", "llm.tool_protocol=hermes"))
    with pytest.raises(Exception, match="hermes"):
        validate(composed("agent.tool_protocol=tool_call"))


async def test_a_run_with_hermes_runs_the_call_and_sends_the_response(tmp_path):
    llm = ScriptedLLM(responder=call_then_answer)
    state = await solve_with_hermes(tmp_path, llm)
    assert state.final_answer == "noon" and state.tool_calls == 1
    first, second = llm.calls[0], llm.calls[1]
    assert first.tools == [] and "<tools>" in first.messages[0].content
    assert '"name": "time__get_current_time"' in first.messages[0].content
    results = second.messages[-1]
    assert results.kind is MessageKind.TOOL_RESULTS and results.role.value == "user"
    assert results.content.startswith("<tool_response>\n")
    assert results.content.endswith("\n</tool_response>")
    assert "UTC" in results.content and not results.tool_results[0].is_error


async def test_a_client_whose_template_writes_tools_gets_specs_and_a_short_section(tmp_path):
    llm = ScriptedLLM(
        responder=call_then_answer,
        capabilities=LLMCapabilities(prefill=True, template_tools=True),
    )
    state = await solve_with_hermes(tmp_path, llm, "llm.first_call=time.get_current_time")
    assert state.final_answer == "noon"
    first = llm.calls[0]
    assert [t.name for t in first.tools] == ["time__get_current_time", "time__convert_time"]
    assert "<tools>" not in first.messages[0].content
    # llm.first_call: the reply is prefilled with the opening of the hermes block
    assert first.messages[-1].content.endswith(
        '{"name": "time__get_current_time", "arguments": {"timezone": "'
    )


async def test_a_remote_server_gets_our_section_and_no_tools_field(tmp_path):
    def respond(request):
        if "<tool_response>" in request.messages[-1]["content"]:
            return Reply("\\boxed{noon}")
        return Reply(TIME_CALL)

    with FakeLLMServer(responder=respond) as server:
        llm = OpenAIChatClient(
            "m", api_key="k", base_url=server.openai_base_url, timeout_seconds=10
        )
        try:
            state = await solve_with_hermes(tmp_path, llm)
        finally:
            await llm.aclose()
        requests = [r.body for r in server.requests]
        assert not server.unexpected
    assert state.final_answer == "noon"
    assert all("tools" not in body and "tool_choice" not in body for body in requests)
    assert "<tools>" in requests[0]["messages"][0]["content"]
    sent = requests[1]["messages"]
    assert [m["role"] for m in sent[-2:]] == ["assistant", "user"]
    assert "tool_calls" not in sent[-2] and sent[-2]["content"].endswith("</tool_call>")
    assert sent[-1]["content"].startswith("<tool_response>\n")


def test_parameters_is_read_as_arguments():
    # the signatures name the schema "parameters", and some models call with it
    parsed = extract(
        '<tool_call>{"name": "search__search", "parameters": {"query": "x"}}</tool_call>'
    )
    assert [(c.name, c.arguments) for c in parsed.calls] == [("search", {"query": "x"})]
    assert parsed.malformed == []


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        ({"name": "search__search", "args": {"query": "x"}}, 'no "arguments" object'),
        ({"name": "search__search", "query": "x"}, 'the call has "query"'),
        (
            {"name": "search__search", "arguments": {"query": "a"}, "parameters": {"query": "b"}},
            'both "arguments" and "parameters"',
        ),
    ],
)
def test_a_call_whose_arguments_are_elsewhere_is_refused_not_run_empty(call, problem):
    parsed = extract(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert parsed.calls == [] and parsed.nothing_usable
    assert problem in parsed.malformed[0]
    assert parsed.malformed[0].startswith("tool call #1: search__search: ")


def test_a_call_with_only_a_name_takes_no_arguments():
    parsed = extract('<tool_call>{"name": "python__run_python", "type": "function"}</tool_call>')
    assert [(c.name, c.arguments) for c in parsed.calls] == [("run_python", {})]


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "search__search", "arguments": {"query": "a"}}\n'
        '{"name": "python__run_python", "arguments": {"code": "1"}}',
        '{"name": "search__search", "arguments": {"query": "a"}},'
        ' {"name": "python__run_python", "arguments": {"code": "1"}}',
        '[{"name": "search__search", "arguments": {"query": "a"}},'
        ' {"name": "python__run_python", "arguments": {"code": "1"}}]',
        # the first one broken (a comma too many): the rest is repaired as a whole
        '{"name": "search__search", "arguments": {"query": "a",}}\n'
        '{"name": "python__run_python", "arguments": {"code": "1"}}',
    ],
)
def test_several_calls_in_one_block_are_each_a_call(body):
    parsed = extract(f"<tool_call>\n{body}\n</tool_call>" + block("search__search", {"query": "z"}))
    assert [(c.id, c.name, c.arguments) for c in parsed.calls] == [
        ("t1c1", "search", {"query": "a"}),
        ("t1c2", "run_python", {"code": "1"}),
        ("t1c3", "search", {"query": "z"}),  # numbered on across the blocks
    ]
    assert parsed.malformed == []
    message = Message.assistant(f"<tool_call>\n{body}\n</tool_call>")
    assert all(c.raw_arguments in message.content for c in parsed.calls[:2])


def test_a_list_with_something_else_than_calls_is_one_format_error():
    parsed = extract('<tool_call>[{"name": "search__search", "arguments": {}}, 3]</tool_call>')
    assert parsed.calls == [] and len(parsed.malformed) == 1
    assert "not a JSON object" in parsed.malformed[0]


def test_an_opening_tag_inside_a_json_string_stays_in_the_arguments():
    code = 'text = "<tool_call>{}</tool_call>"\nprint(text.count("<tool_call>"))'
    text = (
        "Counting tags. "
        + block("python__run_python", {"code": code})
        + " then "
        + block("search__search", {"query": "<tool_call>"})
    )
    parsed = extract(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("run_python", {"code": code}),
        ("search", {"query": "<tool_call>"}),
    ]
    assert parsed.malformed == []
    # unclosed, with a tag in a string: the block still runs to the next real tag
    unclosed = '<tool_call>{"name": "search__search", "arguments": {"query": "<tool_call>"}}'
    parsed = extract(unclosed + " " + block("python__run_python", {"code": "2"}))
    assert parsed.malformed == ["tool call #1: <tool_call> is not closed"]
    assert [c.arguments for c in parsed.calls] == [{"code": "2"}]


def test_words_after_a_call_inside_its_block_are_not_a_call():
    parsed = extract(
        '<tool_call>{"name": "search__search", "arguments": {"query": "a"}}\n'
        "I hope this helps.</tool_call>"
    )
    assert [c.arguments for c in parsed.calls] == [{"query": "a"}] and parsed.malformed == []
    parsed = extract("<tool_call>I will search now.</tool_call>")
    assert parsed.calls == [] and "not a JSON object" in parsed.malformed[0]
