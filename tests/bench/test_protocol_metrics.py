"""The published metrics of each benchmark's protocol, from hand-made task records,
against numbers computed by hand (bench/protocol_metrics.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from deepledger.bench.metrics import format_summary, summarize
from deepledger.config import validate
from deepledger.errors import ConfigError
from tests.bench.test_metrics import attempt, task
from tests.support.config import composed


def judged(task_id, correct, label=None, score=None, confidence=None, **fields):
    judgement = {"correct": correct, "judge": "llm", "reason": "r", "score": score}
    if label is not None:
        judgement["label"] = label
    if confidence is not None:
        judgement["confidence"] = confidence
    return task(task_id, correct=correct, judgement=judgement, **fields)


def unjudged(task_id):
    judgement = {"correct": None, "judge": "llm", "reason": "unreadable", "unjudged": True}
    return task(task_id, correct=None, judgement=judgement)


def section(records, *metrics, breakdown=(), k=1):
    summary = summarize(records, pass_at_k=k, benchmark="b", metrics=metrics, breakdown=breakdown)
    return summary.to_json()["protocol_metrics"]


# -- SimpleQA -----------------------------------------------------------------------------


def simpleqa_run():
    return [
        judged("c1", True, "CORRECT"),
        judged("c2", True, "CORRECT"),
        judged("c3", True),  # no label: correct -> CORRECT
        judged("i1", False),  # no label: incorrect -> INCORRECT
        judged("n1", False, "NOT_ATTEMPTED"),
        unjudged("u1"),  # not graded: in none of the numbers
        task("g1", ground_truth=None, correct=None),  # no ground truth
    ]


def test_simpleqa_counts_rates_and_f1_as_simple_evals_defines_them():
    q = section(simpleqa_run(), "simpleqa")["simpleqa"]
    assert (q["graded"], q["correct"], q["incorrect"], q["not_attempted"]) == (5, 3, 1, 1)
    assert q["accuracy"] == pytest.approx(3 / 5)
    assert q["not_attempted_rate"] == pytest.approx(1 / 5)
    assert q["accuracy_given_attempted"] == pytest.approx(3 / 4)
    # harmonic mean of 0.75 and 0.6: 2 * 0.75 * 0.6 / 1.35
    assert q["f1"] == pytest.approx(0.9 / 1.35)


def test_simpleqa_accuracy_is_the_summary_accuracy_and_a_correct_answer_is_never_relabelled():
    records = [judged("a", True, "NOT_ATTEMPTED"), judged("b", False, "INCORRECT")]
    summary = summarize(records, pass_at_k=1, benchmark="b", metrics=["simpleqa"])
    q = summary.protocol_metrics.simpleqa
    assert (q.correct, q.incorrect, q.not_attempted) == (1, 1, 0)
    assert q.accuracy == summary.accuracy == 0.5


def test_nothing_attempted_gives_null_not_zero():
    q = section([judged("a", False, "NOT_ATTEMPTED")], "simpleqa")["simpleqa"]
    assert q["accuracy"] == 0.0 and q["not_attempted_rate"] == 1.0
    assert q["accuracy_given_attempted"] is None and q["f1"] is None


def test_all_attempted_answers_wrong_gives_an_f1_of_zero():
    q = section([judged("a", False), judged("b", False, "NOT_ATTEMPTED")], "simpleqa")["simpleqa"]
    assert q["accuracy_given_attempted"] == 0.0 and q["f1"] == 0.0


def test_no_graded_task_gives_nulls():
    q = section([unjudged("u")], "simpleqa")["simpleqa"]
    assert q["graded"] == 0 and q["accuracy"] is None and q["f1"] is None


def test_the_first_attempt_grades_the_task_as_accuracy_does():
    records = [
        judged("a", True, attempts=[attempt(1, False), attempt(2, True)]),
    ]
    q = section(records, "simpleqa", k=2)["simpleqa"]
    assert (q["correct"], q["incorrect"]) == (0, 1)


def test_the_summary_prints_f1_not_attempted_and_the_unjudged_apart():
    records = simpleqa_run()
    text = format_summary(summarize(records, pass_at_k=1, benchmark="b", metrics=["simpleqa"]))
    assert "accuracy       0.600 (3/5), 1 unjudged (not in accuracy)" in text
    assert "F1 0.667" in text
    assert "accuracy given attempted 0.750 (3/4)" in text
    assert "not attempted 0.200 (1/5)" in text


# -- unjudged and the optional section ------------------------------------------------------


def test_unjudged_tasks_are_counted_and_left_out_of_accuracy():
    summary = summarize([judged("a", True), unjudged("u")], pass_at_k=1, benchmark="b")
    written = summary.to_json()
    assert written["tasks"]["unjudged"] == 1 and written["tasks"]["judged"] == 1
    assert written["accuracy"] == 1.0


def test_without_chosen_metrics_the_summary_keeps_its_shape():
    written = summarize([judged("a", True)], pass_at_k=1, benchmark="b").to_json()
    assert "protocol_metrics" not in written and "unjudged" not in written["tasks"]
    assert "unjudged" not in format_summary(
        summarize([judged("a", True)], pass_at_k=1, benchmark="b")
    )


def test_only_the_chosen_metrics_are_written():
    assert set(section(simpleqa_run(), "simpleqa")) == {"simpleqa"}


# -- calibration error (HLE's binned RMS) ----------------------------------------------------


def calibration_run():
    """250 answers: 100 at confidence 20 (30 right), 150 at 90 (75 right). Bins of 100:
    [0, 100) and the remainder [100, 250)."""
    records = [judged(f"a{i}", i < 30, confidence=20) for i in range(100)]
    records += [judged(f"b{i}", i < 75, confidence=90) for i in range(150)]
    return records[::-1]  # the order of the records does not matter: sorted by confidence


def test_calibration_error_by_hand():
    c = section(calibration_run(), "calibration_error")["calibration_error"]
    # bin 1: gap 0.2 - 0.3, weight 100/250 -> 0.004; bin 2: gap 0.9 - 0.5, weight 150/250
    # -> 0.096; sqrt(0.1) in percent.
    assert c["value"] == pytest.approx(100 * math.sqrt(0.1))
    # HLE's script leaves its last bin out: sqrt(0.004)
    assert c["as_published"] == pytest.approx(100 * math.sqrt(0.004))
    assert (c["answers"], c["bins"], c["without_confidence"]) == (250, 2, 0)


def test_an_answer_without_confidence_takes_the_official_100():
    records = [judged(f"a{i}", i < 70) for i in range(99)]
    records.append(judged("stated", False, confidence=100))
    c = section(records, "calibration_error")["calibration_error"]
    assert c["value"] == pytest.approx(30.0)  # one bin: |1.0 - 0.7|
    assert c["as_published"] == 0.0  # HLE's script: its only bin is its last
    assert c["without_confidence"] == 99


def test_no_confidence_anywhere_means_the_judge_was_not_asked():
    records = [judged(f"a{i}", i < 70) for i in range(100)]
    c = section(records, "calibration_error")["calibration_error"]
    assert c["value"] is None and "no judgement carries a confidence" in c["reason"]


def test_fewer_than_100_answers_gives_null_with_a_reason():
    records = [judged(f"a{i}", True, confidence=50) for i in range(99)]
    c = section(records, "calibration_error")["calibration_error"]
    assert c["value"] is None and c["as_published"] is None
    assert "99 graded answers" in c["reason"] and "100" in c["reason"]
    text = format_summary(
        summarize(records, pass_at_k=1, benchmark="b", metrics=["calibration_error"])
    )
    assert "calibration    n/a: 99 graded answers" in text


def test_unjudged_answers_are_not_binned():
    records = [*calibration_run(), unjudged("u")]
    assert section(records, "calibration_error")["calibration_error"]["answers"] == 250


def test_calibration_is_printed_in_whole_percent():
    text = format_summary(
        summarize(calibration_run(), pass_at_k=1, benchmark="b", metrics=["calibration_error"])
    )
    assert "RMS error 32% over 250 answers in 2 bins" in text
    assert "its last bin left out: 6%" in text


# -- HLE's 95 % interval ------------------------------------------------------------------------


def test_hle_interval_half_width():
    records = [judged(f"a{i}", i < 210) for i in range(500)]
    i = section(records, "confidence_interval")["confidence_interval"]
    assert i["accuracy"] == pytest.approx(42.0) and i["n"] == 500
    assert i["half_width"] == pytest.approx(1.96 * math.sqrt(42 * 58 / 500))
    assert round(i["half_width"], 2) == 4.33
    text = format_summary(
        summarize(records, pass_at_k=1, benchmark="b", metrics=["confidence_interval"])
    )
    assert "42.00% +/- 4.33% (95 %, n = 500)" in text


def test_hle_interval_of_nothing_is_null():
    i = section([unjudged("u")], "confidence_interval")["confidence_interval"]
    assert i["accuracy"] is None and i["half_width"] is None and i["n"] == 0


# -- DeepSearchQA ------------------------------------------------------------------------------


def deepsearchqa_run():
    """10 tasks: 5 scored by the judge model (mean 0.5), 3 correct without a score (decided
    without the model), one with no answer, one errored."""
    records = [judged(f"s{n}", False, score=s) for n, s in enumerate([0.2, 0.4, 0.5, 0.6, 0.8])]
    records += [judged(f"c{n}", True) for n in range(3)]
    records.append(judged("empty", False, final_answer=None))
    records.append(task("err", correct=False, status="error", error="X: y", final_answer=None))
    return records


def test_deepsearchqa_f1_is_the_mean_over_every_graded_task():
    summary = summarize(deepsearchqa_run(), pass_at_k=1, benchmark="b", metrics=["deepsearchqa"])
    assert summary.judge_score.mean == pytest.approx(0.5) and summary.judge_score.scored == 5
    d = summary.protocol_metrics.deepsearchqa
    assert d.graded == 10
    assert d.f1_mean == pytest.approx(0.55)  # (2.5 + 3 * 1 + 2 * 0) / 10


def test_deepsearchqa_rates():
    d = section(deepsearchqa_run(), "deepsearchqa")["deepsearchqa"]
    assert (d["fully_correct"], d["fully_incorrect"]) == (3, 2)
    assert d["fully_correct_rate"] == pytest.approx(0.3)
    assert d["fully_incorrect_rate"] == pytest.approx(0.2)
    # five partly right tasks without an outcome label: partial or with extra answers
    assert d["outcome_unknown"] == 5 and d["correct_with_extraneous_rate"] is None


def test_deepsearchqa_outcome_labels_decide():
    records = [
        judged("x", False, "CORRECT_WITH_EXTRANEOUS", score=2 / 3),
        judged("p", False, "PARTIALLY_CORRECT", score=0.5),
        judged("z", False, score=0.0),  # nothing found: fully incorrect
        judged("c", True, "FULLY_CORRECT", score=1.0),
    ]
    d = section(records, "deepsearchqa")["deepsearchqa"]
    assert (d["fully_correct"], d["fully_incorrect"], d["correct_with_extraneous"]) == (1, 1, 1)
    assert d["outcome_unknown"] == 0
    assert d["correct_with_extraneous_rate"] == pytest.approx(0.25)
    assert d["f1_mean"] == pytest.approx((2 / 3 + 0.5 + 0 + 1) / 4)
    text = format_summary(summarize(records, pass_at_k=1, benchmark="b", metrics=["deepsearchqa"]))
    assert "correct with extraneous 0.250 (1/4)" in text


# -- avg@k (xbench) -----------------------------------------------------------------------


def test_avg_at_k_is_the_mean_share_of_correct_attempts():
    records = [
        judged("a", True, attempts=[attempt(1, False), attempt(2, True), attempt(3, True)]),
        judged("b", False, attempts=[attempt(n, False) for n in (1, 2, 3)]),
    ]
    a = section(records, "avg_at_k", k=3)["avg_at_k"]
    assert a["value"] == pytest.approx(1 / 3) and a["k"] == 3 and a["tasks"] == 2


def test_avg_at_k_with_attempts_stopped_early_is_null_with_a_reason():
    records = [judged("a", True, attempts=[attempt(1, True)])]
    a = section(records, "avg_at_k", k=3)["avg_at_k"]
    assert a["value"] is None and "fewer than 3" in a["reason"]


def unjudged_attempt(n):
    judgement = {"correct": None, "judge": "llm", "reason": "unreadable", "unjudged": True}
    return {**attempt(n, None), "judgement": judgement}


def test_a_first_attempt_left_unjudged_is_unjudged_for_pass_at_1_and_avg_at_k():
    # avg_at_k runs every attempt: the task ends with the last one's verdict, but its
    # first attempt, the one accuracy counts, has none; it must not count as wrong.
    records = [
        judged("a", True, attempts=[unjudged_attempt(1), attempt(2, True), attempt(3, True)]),
        judged("b", True, attempts=[attempt(n, True) for n in (1, 2, 3)]),
    ]
    summary = summarize(records, pass_at_k=3, benchmark="b", metrics=["avg_at_k"])
    assert summary.tasks.unjudged == 1 and summary.tasks.judged == 1
    assert summary.accuracy == 1.0  # b only: a is not counted wrong
    a = summary.protocol_metrics.avg_at_k
    assert a.value is None and "unjudged" in a.reason
    assert "1 unjudged (not in accuracy)" in format_summary(summary)


# -- per-field breakdown -----------------------------------------------------------------------


def test_breakdown_per_level_with_a_missing_bucket():
    records = [
        judged("a", True, metadata={"Level": 1}),
        judged("b", False, metadata={"Level": 1}),
        judged("c", True, metadata={"Level": "2"}),
        judged("d", False),
        unjudged("u"),
    ]
    b = section(records, breakdown=["Level"])["breakdown"]["Level"]
    assert list(b) == ["1", "2", "(missing)"]
    assert (b["1"]["judged"], b["1"]["correct"], b["1"]["accuracy"]) == (2, 1, 0.5)
    assert b["2"]["accuracy"] == 1.0
    assert b["(missing)"]["tasks"] == 2 and b["(missing)"]["judged"] == 1
    text = format_summary(summarize(records, pass_at_k=1, benchmark="b", breakdown=["Level"]))
    assert "by Level       1 0.500 (1/2) · 2 1.000 (1/1) · (missing) 0.000 (0/1)" in text


# -- the preset key ----------------------------------------------------------------------------


def test_an_unknown_metric_name_is_refused_at_config_time():
    cfg = composed("benchmark=simpleqa", "benchmark.metrics=[simpleqa,f2]")
    with pytest.raises(ConfigError, match=r"benchmark.metrics: 'f2' is not a metric; use some of"):
        validate(cfg)


@pytest.mark.parametrize("n", [100, 150, 199, 200, 257, 431])
def test_calibration_bins_match_a_direct_numpy_reading_of_the_method(n):
    """Bins of 100 over the answers sorted by confidence, the last taking the remainder;
    ``as_published`` sums every bin but the last, as HLE's script does."""
    rng = np.random.default_rng(n)
    confidence = rng.integers(0, 101, n)  # many ties
    right = rng.random(n) < confidence / 100
    records = [
        judged(f"t{i}", bool(r), confidence=int(c))
        for i, (c, r) in enumerate(zip(confidence, right, strict=True))
    ]
    c = section(records, "calibration_error")["calibration_error"]
    order = np.argsort(confidence, kind="stable")
    conf, ok = confidence[order] / 100, right[order].astype(float)
    edges = [*range(0, n // 100 * 100, 100), n]
    terms = [
        (end - start) / n * (conf[start:end].mean() - ok[start:end].mean()) ** 2
        for start, end in itertools.pairwise(edges)
    ]
    assert c["bins"] == len(terms) == n // 100
    assert c["value"] == pytest.approx(100 * np.sqrt(sum(terms)))
    assert c["as_published"] == pytest.approx(100 * np.sqrt(sum(terms[:-1])))
