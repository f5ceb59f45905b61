from __future__ import annotations

import math

import pytest

from deepledger.context.guard import (
    SLACK_TOKENS,
    ContextWindow,
    check_window,
    drop_last_exchange,
    estimate_final_request,
    fits_window,
    request_tokens,
    smallest_closing_request,
    stated_limit,
)
from deepledger.llm.tokens import PER_MESSAGE_OVERHEAD, CharCounter
from deepledger.messages import EndReason, Message, ToolCall, ToolResult, Usage

COUNTER = CharCounter()  # 4 chars = 1 token: makes the arithmetic checkable by hand


def history_with_result(result_chars: int) -> list[Message]:
    return [
        Message.system("s" * 40),
        Message.task("t" * 40),
        Message.assistant("", [ToolCall("c1", "read", {"url": "u"})]),
        Message.native_tool_results([ToolResult("c1", "r" * result_chars)]),
    ]


def test_estimate_follows_the_formula():
    history = history_with_result(400)  # 100 tokens + framing
    estimate = estimate_final_request(
        history,
        last_usage=Usage(input_tokens=1000, output_tokens=50),
        summary_prompt="p" * 80,
        max_tokens=2000,
        counter=COUNTER,
    )
    newest = 100 + PER_MESSAGE_OVERHEAD
    expected = 1000 + 50 + math.ceil(1.5 * newest) + math.ceil(1.5 * 20) + 2000 + SLACK_TOKENS
    assert estimate.total == expected
    verdict = check_window(
        history,
        last_usage=Usage(1000, 50),
        summary_prompt="p" * 80,
        max_context_length=100_000,
        max_tokens=2000,
        counter=COUNTER,
    )
    assert verdict.fits and verdict.end_reason is None
    assert verdict.history == tuple(history) and verdict.dropped == ()


class CountingCounter(CharCounter):
    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return super().count(text)


def test_the_tokenizer_runs_only_near_the_edge_and_decides_the_same():
    history = history_with_result(4000)
    terms = {"last_usage": Usage(1000, 50), "summary_prompt": "p" * 80, "max_tokens": 2000}
    exact = estimate_final_request(history, counter=COUNTER, **terms).total
    far, near = CountingCounter(), CountingCounter()
    assert check_window(history, max_context_length=100_000, counter=far, **terms).fits
    assert far.calls == 0  # far from the limit: the byte bound was enough
    for limit in (exact, exact + 1, exact + 3000):
        verdict = check_window(history, max_context_length=limit, counter=near, **terms)
        assert verdict.fits is (exact < limit)
    assert near.calls > 0


def test_at_the_limit_drops_the_last_pair_and_reports_window_exhausted():
    history = history_with_result(400)
    limit = estimate_final_request(
        history,
        last_usage=Usage(1000, 50),
        summary_prompt="p" * 80,
        max_tokens=2000,
        counter=COUNTER,
    ).total  # exactly at the limit counts as over
    verdict = check_window(
        history,
        last_usage=Usage(1000, 50),
        summary_prompt="p" * 80,
        max_context_length=limit,
        max_tokens=2000,
        counter=COUNTER,
    )
    assert not verdict.fits
    assert verdict.end_reason is EndReason.WINDOW_EXHAUSTED
    assert verdict.end_reason is not EndReason.TURNS_EXHAUSTED
    assert verdict.history == tuple(history[:2])
    assert verdict.dropped == tuple(history[2:])
    one_below = check_window(
        history,
        last_usage=Usage(1000, 50),
        summary_prompt="p" * 80,
        max_context_length=limit + 1,
        max_tokens=2000,
        counter=COUNTER,
    )
    assert one_below.fits


def test_a_huge_newest_result_trips_the_guard_even_when_last_call_was_small():
    verdict = check_window(
        history_with_result(40_000),
        last_usage=Usage(500, 20),
        summary_prompt="sum",
        max_context_length=16_000,
        max_tokens=1000,
        counter=COUNTER,
    )
    assert not verdict.fits  # 10k tokens x 1.5 alone is 15k


def test_first_turn_estimates_the_whole_history():
    history = [Message.system("s" * 4000), Message.task("t" * 400)]
    estimate = estimate_final_request(
        history, last_usage=None, summary_prompt="", max_tokens=100, counter=COUNTER
    )
    assert estimate.prior_tokens == 1000 + PER_MESSAGE_OVERHEAD
    assert estimate.newest_message_tokens == 100 + PER_MESSAGE_OVERHEAD


def test_the_task_and_system_prompt_are_never_dropped():
    history = [Message.system("s"), Message.task("t" * 100_000)]
    verdict = check_window(
        history,
        last_usage=None,
        summary_prompt="",
        max_context_length=1000,
        max_tokens=100,
        counter=COUNTER,
    )
    assert not verdict.fits
    assert verdict.history == tuple(history) and verdict.dropped == ()


def test_drop_last_exchange_with_xml_results():
    history = [
        Message.task("t"),
        Message.assistant("<use_mcp_tool>..</use_mcp_tool>"),
        Message.text_tool_results("results"),
    ]
    kept, dropped = drop_last_exchange(history)
    assert kept == (history[0],) and dropped == tuple(history[1:])


def test_a_final_answer_at_the_end_is_not_dropped():
    history = [Message.task("t"), Message.assistant("The answer is \\boxed{4}.")]
    kept, dropped = drop_last_exchange(history)
    assert kept == tuple(history) and dropped == ()


def test_an_injected_prompt_at_the_end_is_not_dropped():
    history = [Message.task("t"), Message.assistant("a"), Message.injected("summarize")]
    kept, dropped = drop_last_exchange(history)
    assert kept == tuple(history) and dropped == ()


def test_empty_history_is_a_programming_error():
    with pytest.raises(ValueError):
        check_window(
            [],
            last_usage=None,
            summary_prompt="",
            max_context_length=10,
            max_tokens=1,
            counter=COUNTER,
        )


# -- what the server says, and requests that cannot fit --------------------------------

SERVER_MESSAGES = [
    # vLLM (and OpenAI) before and after vLLM 0.10; SGLang; Anthropic, two wordings.
    (
        "This model's maximum context length is 32768 tokens. However, you requested "
        "33000 tokens (32000 in the messages, 1000 in the completion).",
        32768,
    ),
    (
        "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum "
        "context length is 8,192 tokens and your request has 7800 input tokens",
        8192,
    ),
    ("Requested token count exceeds the model's maximum context length of 4096 tokens.", 4096),
    ("prompt is too long: 210000 tokens > 200000 maximum", 200000),
    ("input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000", 200000),
    ("the request exceeds the available context size, try increasing it", None),
    ("Prompt is too long", None),
]


@pytest.mark.parametrize(("said", "limit"), SERVER_MESSAGES)
def test_the_window_a_server_states_is_read_from_its_message(said, limit):
    assert stated_limit(f"openai returned HTTP 400: {said}") == limit


def test_a_stated_window_only_ever_lowers_the_limit():
    window = ContextWindow(10_000)
    assert (window.limit, window.source) == (10_000, "llm.max_context_length")
    assert window.learn("maximum context length is 20000 tokens") is None  # not smaller
    assert window.learn("no number here") is None
    assert window.learn("maximum context length is 4000 tokens") == 4000
    assert (window.limit, window.source) == (4000, "the window the server stated")
    assert window.learn("maximum context length is 6000 tokens") is None
    assert window.limit == 4000


def test_fits_window_counts_the_request_and_its_reply_budget_plainly():
    messages = [Message.system("s" * 40), Message.task("t" * 400)]
    tokens = 10 + 100 + 2 * PER_MESSAGE_OVERHEAD  # chars / 4, no safety factor, no slack
    assert request_tokens(messages, reply_budget=50, counter=COUNTER) == tokens + 50
    assert fits_window(messages, reply_budget=50, limit=tokens + 50, counter=COUNTER) == (
        True,
        tokens + 50,
    )
    # Far from the edge nothing is tokenized: the byte bound settles it, and is reported.
    assert fits_window(messages, reply_budget=50, limit=10_000, counter=COUNTER) == (
        True,
        440 + 2 * PER_MESSAGE_OVERHEAD + 50,
    )
    assert fits_window(messages, reply_budget=50, limit=tokens + 49, counter=COUNTER) == (
        False,
        tokens + 50,
    )


def test_the_smallest_closing_request_keeps_the_system_prompt_the_task_and_the_prompts():
    history = [*history_with_result(40), Message.assistant("more"), Message.injected("note")]
    prompt = Message.injected("summarize")
    smallest = smallest_closing_request(history, [prompt])
    assert smallest == [history[0], history[1], prompt]
