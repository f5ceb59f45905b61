"""The agreement script's official parser rules (benchmarks/fidelity/judge_agreement.py)
behave as the official graders' code does, and its table covers every battery."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.support.doubles.judge_battery import BATTERIES

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity" / "judge_agreement.py"


@pytest.fixture(scope="module")
def agreement():
    # As `python benchmarks/fidelity/judge_agreement.py` would: its folder first on the path
    # (the script imports its `_checkout` helper from there).
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location("judge_agreement", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


@pytest.mark.parametrize(
    ("reply", "grade"),
    [
        ("B", "INCORRECT"),
        ("As the answer differs: B", "CORRECT"),  # the first A, B or C anywhere
        ("no letter here", "NOT_ATTEMPTED"),  # the default
    ],
)
def test_simpleqa_official_rule(agreement, reply, grade):
    assert agreement.simpleqa_official(reply) == grade


def test_browsecomp_official_rule(agreement):
    assert agreement.browsecomp_official("correct: yes\nconfidence: 9") == "yes"
    assert agreement.browsecomp_official("**correct:** yes") == "no"  # no match: no
    assert agreement.browsecomp_official("Correct: yes") == "no"  # case as written


def test_hle_official_rule_needs_the_structured_output(agreement):
    data = {"extracted_final_answer": "x", "reasoning": "r", "correct": "yes", "confidence": 5}
    assert agreement.hle_official(json.dumps(data)) == "yes"
    assert agreement.hle_official("correct: yes") == agreement.UNJUDGED
    assert agreement.hle_official(json.dumps({**data, "confidence": "5"})) == agreement.UNJUDGED


def test_xbench_official_rule(agreement):
    assert agreement.xbench_official("结论: 正确") == "正确"
    assert agreement.xbench_official("结论:正确") == "正确"
    assert agreement.xbench_official("结论：正确") == "错误"  # no ASCII colon to split on
    assert agreement.xbench_official("**结论**: 正确") == "错误"  # no match


def test_the_table_covers_every_battery_and_counts_add_up(agreement):
    for rule, make in BATTERIES.items():
        row = agreement.compare(rule, make())
        parts = row["agree"] + row["ours_as_meant"] + row["official_as_meant"] + row["neither"]
        assert parts == row["shapes"] == len(make())
