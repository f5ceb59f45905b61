"""The live token count's source (``UsageLedger.on_call`` through ``TaskBudget``): what
a task reports is its whole spend so far, never a call twice — retries and attempts
kept, a sub-agent's calls counted while it runs and then in its parent's ledger — and a
count that fails costs the agent nothing."""

from __future__ import annotations

import logging

import pytest

from deepledger.agent.limits import Spending, TaskBudget
from deepledger.llm.usage import UsageLedger
from deepledger.messages import LLMResponse, Message, StopReason, Usage


def call(tokens: int) -> LLMResponse:
    return LLMResponse(Message.assistant("x"), StopReason.END_TURN, Usage(tokens, 0))


class Reports(list[int]):
    """What the budget told the display, in order."""

    def __call__(self, tokens: int) -> None:
        self.append(tokens)


def test_a_task_reports_its_whole_spend_call_by_call_counting_each_call_once():
    told = Reports()
    budget = TaskBudget(earlier=Spending(tokens=1_000), on_spend=told)  # a resumed task
    first = UsageLedger()
    with budget.watch(first, keep=True):  # attempt 1's retry
        first.record(call(10))
        first.record_aside(call(5))  # a compaction note
    second = UsageLedger()
    with budget.watch(second, keep=True):  # attempt 2 (pass@k): the first stays counted
        second.record(call(20))
        sub = UsageLedger()
        with budget.watch(sub, keep=False):  # a sub-agent, counted while it runs
            sub.record(call(7))
            sub.record_extraction(call(3))
        second.absorb(sub)  # ... then in its parent's ledger, not beside it
        second.record(call(1))
    assert told == [1_010, 1_015, 1_035, 1_042, 1_045, 1_046]
    assert told[-1] == budget.tokens_and_cost()[0] == 1_000 + 46
    assert (first.on_call, second.on_call, sub.on_call) == (None, None, None)  # unhooked


def test_a_ledger_no_budget_watches_tells_nobody():
    budget = TaskBudget()  # no display (a `deepledger run`): nothing is hooked
    ledger = UsageLedger()
    with budget.watch(ledger, keep=True):
        assert ledger.on_call is None
        ledger.record(call(1))


def test_a_count_that_fails_costs_the_agent_nothing(caplog):
    def broken(tokens: int) -> None:
        raise RuntimeError("display gone")

    budget = TaskBudget(on_spend=broken)
    ledger = UsageLedger()
    with caplog.at_level(logging.ERROR), budget.watch(ledger, keep=True):
        recorded = ledger.record(call(10))  # the call is recorded all the same
        ledger.record(call(10))  # the count is off: not tried, nor logged, again
    assert recorded.usage.input_tokens == 10 and ledger.total.input_tokens == 20
    assert [r.message for r in caplog.records].count(
        "the live usage count failed; it is off for this agent"
    ) == 1


@pytest.mark.parametrize("keep", [True, False])
def test_the_hook_a_ledger_had_is_given_back(keep):
    earlier = Reports()
    ledger = UsageLedger(on_call=lambda: earlier.append(0))
    with TaskBudget(on_spend=Reports()).watch(ledger, keep=keep):
        pass
    ledger.record(call(1))
    assert earlier == [0]
