"""The retry plan (agent/retry_plan.py): each config key that sets how often a task is
tried read once, with the meanings MiroThinker's command lines rely on; the runner's
attempt loop and ``policy_from_config`` read nothing else of those keys."""

from __future__ import annotations

import pytest

from deepledger.agent.retry_plan import RetryPlan
from deepledger.agent.task import policy_from_config
from deepledger.bench.backends import BACKENDS
from deepledger.config import Backend
from tests.support.config import composed


def test_context_compress_limit_is_both_the_format_retries_and_the_switch():
    off = RetryPlan.from_config(composed("agent.context_compress_limit=0"))
    on = RetryPlan.from_config(composed("agent.context_compress_limit=5"))
    assert (off.format_retries, off.context_management) == (0, False)
    assert (on.format_retries, on.context_management) == (5, True)
    assert [on.may_run(i) for i in (0, 5, 6)] == [True, True, False]
    assert [on.is_final(i) for i in (0, 4, 5)] == [False, False, True]


def test_only_the_last_run_of_a_managed_attempt_falls_back_and_only_the_others_write_post_mortems():
    plan = RetryPlan.from_config(composed("agent.context_compress_limit=2"))
    assert [plan.policy_for(i).leaves_to_next_run for i in range(3)] == [True, True, False]
    assert [plan.policy_for(i).writes_post_mortem for i in range(3)] == [True, True, False]
    unmanaged = RetryPlan.from_config(composed("agent.context_compress_limit=0")).policy_for(0)
    assert not unmanaged.leaves_to_next_run and not unmanaged.writes_post_mortem
    quiet = composed("agent.context_compress_limit=2", "agent.retry_with_summary=false")
    assert not RetryPlan.from_config(quiet).policy_for(0).writes_post_mortem


@pytest.mark.parametrize(
    ("overrides", "asks"),
    [
        (("agent.keep_tool_result=-1",), 3),  # the whole history: worth asking again
        (("agent.keep_tool_result=5",), 1),  # trimmed: asking again draws on little
        (("agent.keep_tool_result=5", "agent.max_final_answer_retries=4"), 4),
        (("agent.keep_tool_result=-1", "agent.max_final_answer_retries=1"), 1),
    ],
)
def test_final_answer_asks_follow_keep_tool_result_unless_set(overrides, asks):
    assert RetryPlan.from_config(composed(*overrides)).final_answer_asks == asks


def test_attempts_are_pass_at_k_for_a_task_with_ground_truth_and_every_one_with_avg_at_k():
    plan = RetryPlan.from_config(composed("benchmark.execution.pass_at_k=3"))
    assert plan.attempts_for(has_ground_truth=True) == 3
    assert plan.attempts_for(has_ground_truth=False) == 1
    assert not plan.every_attempt
    avg = composed("benchmark.execution.pass_at_k=3", "benchmark.metrics=[avg_at_k]")
    assert RetryPlan.from_config(avg).every_attempt


@pytest.mark.parametrize("final", [False, True])
def test_policy_from_config_is_the_plans_answer_policy(final):
    cfg = composed("agent.context_compress_limit=3", "agent.keep_tool_result=5")
    policy = policy_from_config(cfg.agent, is_final_retry=final)
    assert policy == RetryPlan.from_config(cfg).answer_policy(final=final)
    assert (policy.context_management, policy.max_final_answer_retries) == (True, 1)
    assert RetryPlan.from_config(cfg).policy_for(3).is_final_retry


def test_every_backend_value_has_a_builder():
    assert set(BACKENDS) == set(Backend)
