"""summary.json numbers from hand-made task records."""

from __future__ import annotations

import json

import pytest

from deepledger.bench.metrics import format_summary, summarize
from deepledger.records.results import SummaryRecord


def summary_json(records, **settings) -> dict:
    """The summary of ``records`` as ``summary.json`` holds it."""
    return summarize(records, **settings).to_json()


def usage(inp=0, out=0, read=0, write=0):
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "cache_read_tokens": read,
        "cache_write_tokens": write,
    }


def attempt(n, correct, carried=0, retries=()):
    return {
        "attempt": n,
        "final_answer": "x",
        "correct": correct,
        "provenance": "summary",
        "carried_post_mortems": carried,
        "retries": list(retries),
    }


def task(task_id, **fields):
    record = {
        "task_id": task_id,
        "question": "q",
        "ground_truth": "a",
        "final_answer": "a",
        "provenance": "summary",
        "correct": True,
        "judgement": None,
        "status": "finished",
        "error": None,
        "end_reason": "model_finished",
        "attempts": [],
        "usage": usage(),
        "cost": 0.0,
        "turns": 1,
        "tool_calls": 0,
        "elapsed_seconds": 1.0,
    }
    record.update(fields)
    return record


@pytest.fixture
def records():
    return [
        # wrong first, right on the second attempt which carried a post-mortem
        task(
            "t1",
            correct=True,
            attempts=[attempt(1, False), attempt(2, True, carried=1)],
            usage=usage(1000, 100, 200, 0),
            cost=0.02,
            turns=20,
            tool_calls=15,
            judgement={"correct": True, "judge": "llm", "score": 1.0},
        ),
        task(
            "t2",
            provenance="boxed_retry",
            attempts=[attempt(1, True)],
            usage=usage(500, 50, 0, 100),
            cost=0.01,
            turns=10,
            tool_calls=5,
        ),
        # wrong twice; no task-level usage, so the retries' usage is summed; cost unknown
        task(
            "t3",
            provenance="intermediate_fallback",
            correct=False,
            usage=None,
            cost=None,
            end_reason="turns_exhausted",
            turns=30,
            tool_calls=29,
            attempts=[
                attempt(1, False, carried=2, retries=[{"usage": usage(300, 30)}]),
                attempt(2, False, carried=3, retries=[{"usage": usage(200, 20, 10)}]),
            ],
        ),
        # crashed before any attempt finished
        task(
            "t4",
            status="error",
            error="boom",
            correct=None,
            provenance=None,
            end_reason=None,
            final_answer=None,
            turns=None,
            tool_calls=None,
        ),
        # no ground truth: answered, not judged
        task(
            "t5",
            ground_truth=None,
            correct=None,
            attempts=[attempt(1, None)],
            end_reason="window_exhausted",
            turns=4,
            tool_calls=3,
            cost=0.005,
            judgement={"correct": None, "judge": "llm", "score": 0.5},
        ),
    ]


def test_task_counts_and_pass_at_1_vs_pass_at_k(records):
    summary = summary_json(records, pass_at_k=2, benchmark="toy")
    assert summary["tasks"] == {
        "total": 5,
        "finished": 4,
        "errors": 1,
        "judged": 3,
        "expected": None,
    }
    # pass@1 counts only first attempts: t2 right, t1 and t3 wrong
    assert summary["accuracy"] == pytest.approx(1 / 3)
    assert summary["correct_first_attempt"] == 1
    # pass@k: t1's second attempt counts too
    assert summary["pass_at_k"] == pytest.approx(2 / 3)
    assert summary["correct_any_attempt"] == 2
    assert summary["k"] == 2


def test_accuracy_by_final_answer_provenance(records):
    by = summary_json(records, pass_at_k=2, benchmark="toy")["by_provenance"]
    assert by["summary"] == {"tasks": 2, "judged": 1, "correct": 1, "accuracy": 1.0}
    assert by["boxed_retry"] == {"tasks": 1, "judged": 1, "correct": 1, "accuracy": 1.0}
    assert by["intermediate_fallback"] == {
        "tasks": 1,
        "judged": 1,
        "correct": 0,
        "accuracy": 0.0,
    }
    assert by["none"] == {"tasks": 1, "judged": 0, "correct": 0, "accuracy": None}


def test_attempts_split_by_carried_post_mortems(records):
    split = summary_json(records, pass_at_k=2, benchmark="toy")["post_mortems"]
    # t1#1 wrong, t2#1 right, t5#1 unjudged
    assert split["without"] == {"attempts": 3, "judged": 2, "correct": 1, "accuracy": 0.5}
    # t1#2 right, t3#1 and t3#2 wrong
    assert split["with"]["attempts"] == 3
    assert split["with"]["correct"] == 1
    assert split["with"]["accuracy"] == pytest.approx(1 / 3)


def test_tokens_cost_turns_end_reasons(records):
    summary = summary_json(records, pass_at_k=2, benchmark="toy", extra={"run": "r1"})
    assert summary["tokens"]["total"] == {
        "input": 2000,
        "output": 200,
        "cache_read": 210,
        "cache_write": 100,
    }
    assert summary["tokens"]["mean_per_task"]["input"] == 400
    assert summary["cost_total"] is None
    assert summary["cost_mean_per_task"] is None
    assert summary["cost_unknown_tasks"] == 1
    assert summary["judge_score"] == {"scored": 2, "mean": 0.75}
    assert summary["turns"] == {"mean": 16, "median": 15, "max": 30}
    assert summary["tool_calls"]["max"] == 29
    assert summary["end_reasons"] == {
        "answered": 2,
        "max_turns": 1,
        "window_exhausted": 1,
        "looping": 0,
        "limit": 0,
        "error": 1,
        "unknown": 0,
    }
    assert summary["extra"] == {"run": "r1"}
    json.dumps(summary, allow_nan=False)  # summary.json must be strict JSON


def test_cost_is_summed_when_every_task_has_one(records):
    known = [r for r in records if r["cost"] is not None]
    summary = summary_json(known, pass_at_k=2, benchmark="toy")
    assert summary["cost_total"] == pytest.approx(0.035)
    assert summary["cost_mean_per_task"] == pytest.approx(0.035 / 4)
    assert summary["cost_unknown_tasks"] == 0
    assert "$0.0350 total" in format_summary(SummaryRecord.load(summary))


def test_no_judged_tasks_gives_nulls_not_errors():
    records = [task("a", correct=None, ground_truth=None), task("b", correct=None)]
    summary = summary_json(records, pass_at_k=1, benchmark="toy")
    assert summary["accuracy"] is None
    assert summary["pass_at_k"] is None
    assert summary["post_mortems"]["with"]["accuracy"] is None
    assert summary["judge_score"]["mean"] is None
    json.dumps(summary, allow_nan=False)
    assert "accuracy       n/a (0/0)" in format_summary(SummaryRecord.load(summary))


def test_empty_run_gives_nulls_not_errors():
    summary = summary_json([], pass_at_k=3, benchmark="toy", tasks_expected=10)
    assert summary["tasks"]["total"] == 0
    assert summary["tasks"]["expected"] == 10
    assert summary["tokens"]["mean_per_task"]["input"] is None
    assert summary["turns"] == {"mean": None, "median": None, "max": None}
    json.dumps(summary, allow_nan=False)
    assert "0 tasks of 10 expected" in format_summary(SummaryRecord.load(summary))


def test_format_summary_shows_the_headline_numbers(records):
    text = format_summary(summarize(records, pass_at_k=2, benchmark="toy"))
    assert text.splitlines()[0] == "toy: 5 tasks (4 finished, 1 error), 3 judged"
    assert "0.333 (1/3)" in text
    assert "pass@2" in text and "0.667 (2/3)" in text
    assert "intermediate_fallback 0.000 (0/1)" in text
    assert "unknown (1 task without a price)" in text
    assert "2.0k input" in text
    assert "answered 2 · max_turns 1 · window_exhausted 1 · looping 0 · limit 0 · error 1" in text
    assert "context" not in text  # no journals read: no token economics line


def test_judge_tokens_are_totalled_apart_from_the_agent_tokens():
    records = [
        {
            "task_id": "a",
            "status": "finished",
            "correct": True,
            "judge_usage": {"input_tokens": 120, "output_tokens": 8},
        },
        {"task_id": "b", "status": "finished", "correct": False},
    ]
    summary = summary_json(records, pass_at_k=1, benchmark="x")
    assert summary["judge_tokens"] == {"input": 120, "output": 8}
    assert summary["tokens"]["total"]["input"] == 0


def test_cache_prefix_breaks_are_summarized_and_shown(records):
    with_breaks = [dict(r, prefix_breaks=n) for r, n in zip(records, [0, 4, 2, 6, 3], strict=False)]
    summary = summary_json(with_breaks, pass_at_k=1, benchmark="toy")
    assert summary["prefix_breaks"] == {"mean": 3, "median": 3, "max": 6}
    shown = format_summary(SummaryRecord.load(summary))
    assert "prefix breaks  mean 3.0 · median 3 · max 6" in shown
    older = summary_json(records, pass_at_k=1, benchmark="toy")  # records from before the field
    assert older["prefix_breaks"]["mean"] is None
    assert "prefix breaks  -" in format_summary(SummaryRecord.load(older))


def test_counts_of_one_are_singular():
    from deepledger.bench.metrics import plural

    assert [plural(n, "task") for n in (0, 1, 2)] == ["0 tasks", "1 task", "2 tasks"]
