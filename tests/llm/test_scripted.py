from __future__ import annotations

from pathlib import Path

import pytest

from deepledger.errors import RateLimitedError
from deepledger.llm.retry import RetryingClient, RetryPolicy
from deepledger.llm.scripted import ScriptedLLM, ScriptExhaustedError, reply
from deepledger.messages import Message, StopReason, ToolCall, Usage


async def test_steps_are_consumed_in_order_and_calls_recorded():
    llm = ScriptedLLM(["first", reply("second", [ToolCall("c", "search", {"q": "x"})])])
    a = await llm.generate([Message.task("one")])
    b = await llm.generate([Message.task("two")])
    assert (a.text, a.stop_reason) == ("first", StopReason.END_TURN)
    assert b.stop_reason is StopReason.TOOL_USE and b.message.tool_calls[0].name == "search"
    assert [c.messages[0].content for c in llm.calls] == ["one", "two"]
    llm.assert_consumed()


async def test_a_function_step_sees_the_messages():
    llm = ScriptedLLM(responder=lambda messages, tools: f"echo {messages[-1].content}")
    assert (await llm.generate([Message.task("hi")])).text == "echo hi"
    assert (await llm.generate([Message.task("again")])).text == "echo again"


async def test_unexpected_call_fails_loudly():
    llm = ScriptedLLM(["only"])
    await llm.generate([Message.task("a")])
    with pytest.raises(ScriptExhaustedError, match="unexpected model call #2"):
        await llm.generate([Message.task("b")])


def test_unconsumed_steps_fail_loudly():
    llm = ScriptedLLM(["a", "b"])
    with pytest.raises(AssertionError, match="2 scripted step"):
        llm.assert_consumed()


async def test_scripted_errors_go_through_the_retry_policy():
    waits = []

    async def no_sleep(seconds):
        waits.append(seconds)

    llm = ScriptedLLM([RateLimitedError("slow down", retry_after=3), "ok"])
    client = RetryingClient(llm, RetryPolicy(max_attempts=2), sleep=no_sleep)
    assert (await client.generate([Message.task("q")])).text == "ok"
    assert waits == [3]


async def test_usage_is_estimated_when_the_script_gives_none():
    llm = ScriptedLLM(["answer", reply("x", usage=Usage(7, 3))])
    first = await llm.generate([Message.task("a question of some length")])
    assert first.usage.input_tokens > 0 and first.usage.output_tokens > 0
    assert (await llm.generate([Message.task("q")])).usage == Usage(7, 3)


def test_the_users_example_in_the_testing_docs_passes():
    """docs/testing.md shows a user's own test written with ScriptedLLM: it runs as shown."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text("utf-8")
    section = page.split("## Test doubles\n", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    exec(compile(example, "docs/testing.md", "exec"), namespace)
    test = namespace["test_title_for"]
    assert callable(test)
    test()
