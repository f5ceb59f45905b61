"""Which settings count for a resume, and how runs with other settings are counted."""

from __future__ import annotations

import json

from deepledger.store.run_config import config_differences, config_id, resume_changes


def test_which_differences_count_for_a_resume():
    before = {
        "agent": {"keep_tool_result": 5},
        "llm": {"model_name": "m", "base_url": "http://a/v1", "timeout_seconds": 60},
        "benchmark": {
            "judge": {"name": "normalized"},
            "execution": {"max_concurrent": 5, "max_cost_usd": 1.0, "pass_at_k": 1},
        },
    }
    harmless = json.loads(json.dumps(before))
    harmless["llm"] |= {"base_url": "http://b/v1", "timeout_seconds": 5}
    harmless["benchmark"]["execution"] |= {"max_concurrent": 1, "max_cost_usd": 9.0}
    harmless["benchmark"]["execution"]["max_tokens"] = None  # a key a newer version added
    # A preset that came to choose its published metrics: the results mean the same.
    harmless["benchmark"] |= {"metrics": ["simpleqa"], "breakdown": ["Level"]}
    assert resume_changes(before, harmless) == ([], [])
    assert config_id(before) == config_id(harmless)
    counted = json.loads(json.dumps(before))
    counted["benchmark"]["judge"]["name"] = "exact"
    counted["benchmark"]["execution"]["pass_at_k"] = 3
    changes, judge = resume_changes(before, counted)
    assert changes == [
        "benchmark.execution.pass_at_k: 1 -> 3",
        "benchmark.judge.name: 'normalized' -> 'exact'",
    ]
    assert judge == ["benchmark.judge.name: 'normalized' -> 'exact'"]
    assert config_id(before) != config_id(counted)


def test_a_judge_s_stated_protocol_and_its_asks_do_not_change_the_judge():
    """A preset that gains its protocol's labels and fields, or more asks for unreadable
    replies, resumes its runs; a template is another judge."""
    before = {"benchmark": {"judge": {"name": "llm", "rule": "hle"}}}
    stated = json.loads(json.dumps(before))
    stated["benchmark"]["judge"] |= {"labels": ["yes", "no"], "fields": ["verdict"], "max_asks": 5}
    assert resume_changes(before, stated) == ([], [])
    templated = json.loads(json.dumps(before))
    templated["benchmark"]["judge"]["template"] = "grader.txt"
    assert resume_changes(before, templated)[1] == [
        "benchmark.judge.template: '(absent)' -> 'grader.txt'"
    ]


def test_every_difference_is_listed_for_the_manifest_harmless_ones_too():
    before = {"llm": {"base_url": "http://a/v1"}, "agent": {}}
    after = {"llm": {"base_url": "http://b/v1"}, "agent": {"keep_tool_result": 3}}
    assert config_differences(before, after) == [
        "agent: {} -> '(absent)'",
        "agent.keep_tool_result: '(absent)' -> 3",
        "llm.base_url: 'http://a/v1' -> 'http://b/v1'",
    ]
