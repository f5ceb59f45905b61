"""Thinking is counted where it is sent: within the current tool-use turn, never in a
closing call (which ends with its prompt), so long thinking does not make a closing
request look far larger than it is."""

from __future__ import annotations

from deepledger.agent.answer import AnswerPolicy
from deepledger.llm.tokens import CharCounter, count_messages
from deepledger.messages import (
    EndReason,
    Message,
    MessageKind,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    texts_for_counting,
)
from deepledger.records.events import WindowExhausted
from tests.support.agent import CharCountingLLM, finalize_in

THINKING_CHARS = 40_000
COUNTER = CharCounter()  # 4 characters a token


def thought_through(turns: int) -> list[Message]:
    """The task and ``turns`` native tool turns, each with long thinking."""
    history = [Message.system("sys"), Message.task("How tall is the tower?")]
    for turn in range(1, turns + 1):
        thinking = [ThinkingBlock("t" * THINKING_CHARS, signature=f"s{turn}")]
        history.append(
            Message.assistant(f"step {turn}", [ToolCall(f"c{turn}", "read")], None, thinking)
        )
        history.append(Message.native_tool_results([ToolResult(f"c{turn}", "r" * 200)]))
    return history


def test_a_tool_use_turn_counts_its_thinking_which_is_sent_back():
    history = thought_through(turns=10)
    assert count_messages(COUNTER, history) > 10 * THINKING_CHARS // 4


def test_a_closing_request_counts_no_thinking():
    request = [*thought_through(turns=10), Message.injected("Answer in \\boxed{}.")]
    assert count_messages(COUNTER, request) < 2_000  # 10 x 200 chars of results and steps


def test_only_the_turn_after_the_last_user_message_keeps_its_thinking():
    history = thought_through(turns=2)
    history.insert(4, Message.injected("Go on."))  # after the first turn
    texts = texts_for_counting(history)
    assert "t" * THINKING_CHARS not in texts[2]  # the first turn's: not sent any more
    assert "t" * THINKING_CHARS in texts[5]  # the second's: sent back


def test_a_reply_alone_counts_its_thinking():
    reply = thought_through(turns=1)[2]
    assert count_messages(COUNTER, [reply]) > THINKING_CHARS // 4


async def test_the_closing_call_keeps_every_exchange_when_only_thinking_is_large():
    from deepledger.agent.state import RunState
    from deepledger.llm.usage import UsageLedger

    state = RunState(
        history=thought_through(turns=10),
        ledger=UsageLedger(),
        end_reason=EndReason.TURNS_EXHAUSTED,
    )
    llm = CharCountingLLM(["\\boxed{330}"])
    policy = AnswerPolicy(context_management=False, max_final_answer_retries=3)
    journal = await finalize_in(20_000, policy, state, llm)  # far below 400k chars / 4
    assert state.final_answer == "330"
    assert not journal.of(WindowExhausted)
    assert [m.kind for m in llm.calls[0].messages].count(MessageKind.TOOL_RESULTS) == 10
