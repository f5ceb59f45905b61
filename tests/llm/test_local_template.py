"""The local model's own chat template with the hermes protocol: the real bundled
SmolLM2 file's template (which takes no ``tools``) and, over the same vocabulary, a
template that writes the tools itself. Rendering only: no server, no generation."""

from __future__ import annotations

import pytest

from deepledger.context.guard import ContextWindow
from deepledger.context.policy import ContextPolicy
from deepledger.llm.base import GenerationSettings
from deepledger.llm.local import LocalModelClient, bundled_model
from deepledger.llm.local_template import LocalTemplate
from deepledger.llm.openai import to_wire_messages, to_wire_tool
from deepledger.llm.retry import RetryingClient, RetryPolicy
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.tokens import count_messages
from deepledger.llm.usage import UsageLedger
from deepledger.messages import Message, ToolResult, ToolSpec
from deepledger.records.codec import read_journal
from deepledger.records.events import LLMCall, TaskStarted, WindowExhausted
from deepledger.store.journal import Journal
from deepledger.tools.protocols import HermesProtocol
from tests.support.hermes import TIME_CALL, call_then_answer, solve_with_hermes

# A chatml template of our own that reads `tools`, as Qwen's and Hermes' templates do:
# the tools go into the system turn; tool-role messages are wrapped in <tool_response>
# and the ones in a row go into one user turn, the way Qwen2.5's and Qwen3's do.
TOOLS_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] }}"
    "{%- if loop.first and tools %}"
    "{{- '\\n\\nFunctions you may call:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    '{{- \'\\n</tools>\\nCall one with <tool_call>{"name": ..., "arguments": ...}</tool_call>.\' }}'
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def client_with(template: LocalTemplate | None = None, **options) -> LocalModelClient:
    client = LocalModelClient(
        "m", model_path=bundled_model(), context_size=2048, timeout_seconds=10, **options
    )
    if template is not None:  # as if the file held this template
        client._template, client._template_loaded = template, True
    return client


def test_the_bundled_template_takes_no_tools_so_our_section_lists_them():
    client = client_with()
    assert client.template is not None and not client.template.renders_tools
    assert client.capabilities.prefill and not client.capabilities.template_tools


def test_a_template_that_reads_tools_writes_them_into_the_prompt():
    template = LocalTemplate(bundled_model(), template=TOOLS_TEMPLATE)
    assert template.renders_tools
    spec = ToolSpec("search__search", "Search.", {"type": "object"})
    messages = to_wire_messages([Message.system("sys"), Message.task("q?")])
    prompt = template.render(messages, [to_wire_tool(spec)])
    assert prompt.startswith("<|im_start|>system\nsys\n\nFunctions you may call:\n<tools>\n")
    assert '{"type": "function", "function": {"name": "search__search"' in prompt
    assert "<tools>" not in template.render(messages)  # no tools given: none written
    # a prefill is continued with the tools still in place
    prefilled = template.render([*messages, {"role": "assistant", "content": "<tool_call>"}])
    assert prefilled.endswith("<|im_start|>assistant\n<tool_call>")
    client = client_with(template)
    assert client.capabilities.template_tools and client.capabilities.prefill
    assert client.renders_here([Message.task("q?")], [spec])
    # native function calling goes through the chat endpoint, never into the prompt
    native = client_with(template, native_tools=True)
    assert not native.capabilities.template_tools
    assert not native.renders_here([Message.task("q?")], [spec])
    assert native.renders_here([Message.task("q?")], [])  # no tools: still rendered here


def test_tool_specs_a_template_cannot_write_go_to_the_chat_endpoint():
    client = client_with()  # SmolLM2's template reads no `tools`
    spec = ToolSpec("search__search", "Search.", {"type": "object"})
    assert client.renders_here([Message.task("q?")], [])
    assert not client.renders_here([Message.task("q?")], [spec])


async def test_a_hermes_run_renders_through_the_bundled_models_own_template(tmp_path):
    client = client_with()
    llm = ScriptedLLM(responder=call_then_answer, capabilities=client.capabilities)
    state = await solve_with_hermes(tmp_path, llm)
    assert state.final_answer == "noon"
    second = llm.calls[1]
    assert second.tools == []
    prompt = client.template.render(to_wire_messages(second.messages))
    system = prompt.split("<|im_end|>", 1)[0]
    assert system.startswith("<|im_start|>system\n")  # ours, not SmolLM's default one
    assert '<tools>\n{"type": "function", "function": {"name": "time__get_current_time"' in system
    assert f"<|im_start|>assistant\nLet me check the clock.\n{TIME_CALL}<|im_end|>" in prompt
    results = prompt.split(TIME_CALL + "<|im_end|>\n", 1)[1]
    assert results.startswith("<|im_start|>user\n<tool_response>\n")
    assert "UTC" in results.split("</tool_response><|im_end|>", 1)[0]
    assert prompt.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")


async def test_a_hermes_run_with_a_template_that_writes_the_tools(tmp_path):
    template = LocalTemplate(bundled_model(), template=TOOLS_TEMPLATE)
    client = client_with(template)
    llm = ScriptedLLM(responder=call_then_answer, capabilities=client.capabilities)
    state = await solve_with_hermes(tmp_path, llm)
    assert state.final_answer == "noon"
    first = llm.calls[0]
    wire_tools = [to_wire_tool(t) for t in first.tools]
    prompt = template.render(to_wire_messages(first.messages), wire_tools)
    system = prompt.split("<|im_end|>", 1)[0]
    assert system.count("<tools>") == 1  # the template's; our section does not repeat them
    assert "Functions you may call:" in system and '"name": "time__get_current_time"' in system


@pytest.mark.parametrize("broken", ["{% for %}", ""])
def test_a_template_that_cannot_be_read_writes_no_tools(broken):
    from deepledger.llm.local_template import _reads_tools

    assert not _reads_tools(broken)


def test_hermes_results_render_as_the_template_renders_tool_messages():
    """Sent as one user message, the results make the very prompt that tool-role messages
    would through a Qwen-style template: the model reads what it was trained on."""
    template = LocalTemplate(bundled_model(), template=TOOLS_TEMPLATE)
    head = to_wire_messages(
        [Message.system("sys"), Message.task("q?"), Message.assistant("two calls")]
    )
    results = HermesProtocol().results_message(
        [ToolResult("t1c1", "found A"), ToolResult("t1c2", "found B")], []
    )
    as_user = template.render([*head, *to_wire_messages([results])])
    as_tool = template.render(
        [*head, {"role": "tool", "content": "found A"}, {"role": "tool", "content": "found B"}]
    )
    assert as_user == as_tool
    assert (
        "<|im_start|>user\n<tool_response>\nfound A\n</tool_response>\n<tool_response>" in as_user
    )


SPECS = [
    ToolSpec("search__search", "Search the corpus.", {"type": "object"}),
    ToolSpec("python__run_python", "Run code.", {"type": "object"}),
]


def test_the_tools_block_a_template_writes_is_measured_once_in_its_own_tokens():
    template = LocalTemplate(bundled_model(), template=TOOLS_TEMPLATE)
    client = client_with(template)
    messages = to_wire_messages([Message.system("You are an assistant."), Message.task("A q.")])
    written = len(template.tokens(template.render(messages, [to_wire_tool(t) for t in SPECS])))
    block = written - len(template.tokens(template.render(messages)))
    assert block > 20  # two signatures and the template's own words
    assert client.tools_prompt_tokens(SPECS) == block
    assert client.tools_prompt_tokens(list(SPECS)) == block and len(client._tools_tokens) == 1
    assert client.tools_prompt_tokens([]) == 0
    # nothing is written into the prompt: SmolLM2's template, or native function calls
    assert client_with().tools_prompt_tokens(SPECS) == 0
    assert client_with(template, native_tools=True).tools_prompt_tokens(SPECS) == 0
    wrapped = RetryingClient(client, RetryPolicy())
    assert wrapped.tools_prompt_tokens(SPECS) == block


async def test_the_first_requests_estimate_counts_the_tools_block():
    template = LocalTemplate(bundled_model(), template=TOOLS_TEMPLATE)
    client = client_with(template)

    def policy(window: int, tools: list[ToolSpec]) -> ContextPolicy:
        return ContextPolicy.for_model(
            None,
            keep_tool_result=-1,
            llm=client,
            settings=GenerationSettings(max_tokens=100),
            window=ContextWindow(window),
            summary_prompt="Answer now.",
            journal=Journal(None),
            ledger=UsageLedger(None),
            tools=tools,
        )

    history = [Message.system("You are an assistant."), Message.task("What is 2+2?")]
    plain = policy(10**6, []).guard.estimate(history, None)
    counted = policy(10**6, SPECS).guard.estimate(history, None)
    block = client.tools_prompt_tokens(SPECS)
    assert plain.prior_tokens == count_messages(template, history[:1])
    assert counted.prior_tokens == plain.prior_tokens + block
    # a window the messages fit but the tools block does not: the guard ends the turn
    window = plain.total + block // 2
    assert (await policy(window, []).prepare(history)).fits
    assert not (await policy(window, SPECS).prepare(history)).fits


async def test_a_task_counts_what_its_tools_add_to_the_prompt(tmp_path):
    """The tools block reaches the window guard from a whole task, through the retry
    wrapper: a tools block larger than the window ends the loop before any call."""
    scripted = ScriptedLLM(responder=call_then_answer)
    scripted.tools_prompt_tokens = lambda tools: 50_000 if tools else 0
    llm = RetryingClient(scripted, RetryPolicy())
    scripted._capabilities = client_with(
        LocalTemplate(bundled_model(), template=TOOLS_TEMPLATE)
    ).capabilities  # template_tools: the hermes protocol sends its specs
    await solve_with_hermes(tmp_path, llm, "llm.max_context_length=40000")
    events = read_journal(tmp_path / "journal.jsonl")
    exhausted = [e for e in events if isinstance(e, WindowExhausted)]
    assert exhausted[0].turn == 0 and exhausted[0].estimate > 50_000
    assert not any(isinstance(e, LLMCall) for e in events)  # the loop asked nothing
    started = next(e for e in events if isinstance(e, TaskStarted))
    assert started.protocol == "hermes" and "<tools>" not in started.system_prompt
