"""The metrics each benchmark's official protocol publishes, beside accuracy and pass@k.

A preset chooses them by name in ``benchmark.metrics`` (``config.PROTOCOL_METRICS``) and
the task fields to break accuracy down by in ``benchmark.breakdown``; ``summarize``
(``bench/metrics.py``) writes what was chosen as ``summary.json``'s ``protocol_metrics``
section, absent when nothing was. Every number is computed from the task records: the
judgement's ``label``, ``confidence`` and ``score``, ``correct``, and the task's
``metadata``.

Which tasks count. A task is *graded* when its ``correct`` is not null: it had a ground
truth and the judge gave a verdict (a task the judge could not decide, ``unjudged``, is
counted apart in ``tasks.unjudged`` and in none of these numbers). An errored task with a
ground truth is graded, as wrong, as it is in ``accuracy``. Each task is graded by its
FIRST attempt (its judgement and ``correct``), as ``accuracy`` is, so a protocol's
accuracy always equals the summary's. Ratios over nothing are null, never NaN.

- ``simpleqa`` (openai/simple-evals' SimpleQA grader): each graded task is CORRECT when
  correct; otherwise NOT_ATTEMPTED when the judge labelled it so, else INCORRECT (a
  judgement without a label: correct -> CORRECT, incorrect -> INCORRECT). ``accuracy`` =
  correct / graded (simple-evals' ``is_correct``), ``not_attempted_rate`` = not attempted
  / graded, ``accuracy_given_attempted`` = correct / (correct + incorrect), ``f1`` = the
  harmonic mean of accuracy-given-attempted and accuracy, 2·a·c / (a + c), 0 when both are
  0. Where nothing was attempted simple-evals writes 0 for accuracy-given-attempted and
  F1; we write null (there is no accuracy among no attempts, and a 0 would read as "all
  attempts were wrong").
- ``calibration_error`` (HLE's ``run_judge_results.py``; BrowseComp reports the same
  figure): the graded answers sorted by the response's confidence (``judgement.confidence``
  in 0-100, divided by 100 as HLE does; a judgement without one takes 100, the value HLE's
  judge is told to write when the response states none; ``without_confidence`` counts
  them; when none has one, the judge was not asked and the value is null with a
  ``reason``), cut into bins of 100 answers (the last bin takes the remainder), and the square
  root of the sum over bins of (bin size / answers) · (mean confidence − accuracy)²,
  written in percent. Fewer than 100 answers: null with a ``reason`` (HLE's script fails
  there: it has no bin). HLE's script leaves its last bin out of the sum (it loops over
  all bins but the last), so with 100-199 answers it always prints 0, and otherwise
  drops up to 199 answers: ``value`` counts every bin (the method as described);
  ``as_published`` leaves the last bin out, to compare with numbers HLE's script
  printed. HLE's script prints it rounded to a whole percent; we keep the figure unrounded
  and print it rounded. Ties in confidence keep the tasks' order (numpy's default sort
  in HLE's script leaves their order unspecified).
- ``confidence_interval`` (HLE): the accuracy in percent and the half-width of its 95 %
  Wald interval, 1.96·sqrt(p·(100 − p)/n), over the n graded tasks. HLE's n is every
  question of the set (an unjudged one counts as wrong there); ours is accuracy's.
- ``deepsearchqa`` (DeepSearchQA's outcome categories): a task is fully correct when
  every expected part is found and nothing extra is given (``correct``), fully incorrect
  when no expected part is found (``score`` 0, or no score and not correct: an empty or
  missing answer, an errored task), correct with extraneous answers when every part is
  found but extra answers too. The judge says which by its label (FULLY_CORRECT,
  CORRECT_WITH_EXTRANEOUS, PARTIALLY_CORRECT, FULLY_INCORRECT); a partly right task
  without one cannot be told from a partially correct one by its score, so it is counted
  in ``outcome_unknown`` and ``correct_with_extraneous_rate`` is null while any is. Each
  rate is over the graded tasks. ``f1_mean`` is the mean F1 over EVERY graded task: the
  judge's ``score``, else 1 for a correct answer (decided without the model) and 0 for a
  wrong one (empty, missing or errored).
- ``avg_at_k`` (xbench-evals' ``avg_score``: the mean, over questions, of the share of
  correct repeats): each graded task's correct attempts over its graded attempts,
  averaged. It needs every one of the k attempts; a task that stopped early (attempts
  stop at the first correct one unless ``avg_at_k`` is chosen, see ``bench/runner.py``)
  makes it null with a ``reason``. xbench's ``best_of_n`` is pass@k.
- ``breakdown``: for each field named in ``benchmark.breakdown``, for each value of the
  task's ``metadata`` field (as text; a task without it under ``(missing)``): ``tasks``,
  ``judged``, ``correct`` (first attempt) and ``accuracy``, as ``by_provenance``.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence

from deepledger.bench.judge_rules import (
    CORRECT_WITH_EXTRANEOUS,
    FULLY_CORRECT,
    FULLY_INCORRECT,
    OUTCOMES,
)
from deepledger.bench.verdict import NOT_ATTEMPTED
from deepledger.records.results import (
    AccuracyInterval,
    AverageAtK,
    CalibrationError,
    DeepSearchQAMetrics,
    JudgementRecord,
    ProtocolMetrics,
    ProvenanceTally,
    SimpleQAMetrics,
    TaskRecord,
)

CALIBRATION_BIN = 100  # answers per bin, as HLE's script bins them
NO_CONFIDENCE = 100.0  # what HLE's judge writes when the response states no confidence
MISSING = "(missing)"  # the breakdown's bucket of tasks without the field


def protocol_metrics(
    records: Sequence[TaskRecord], metrics: Sequence[str], breakdown: Sequence[str], k: int
) -> ProtocolMetrics | None:
    """The chosen metrics of these task records; None when none was chosen."""
    if not metrics and not breakdown:
        return None
    graded_tasks = [r for r in records if graded(r)]
    chosen = set(metrics)
    return ProtocolMetrics(
        simpleqa=simpleqa(graded_tasks) if "simpleqa" in chosen else None,
        calibration_error=(
            calibration_error(graded_tasks) if "calibration_error" in chosen else None
        ),
        confidence_interval=(
            confidence_interval(graded_tasks) if "confidence_interval" in chosen else None
        ),
        deepsearchqa=deepsearchqa(graded_tasks) if "deepsearchqa" in chosen else None,
        # Every attempt counts in avg@k: a task whose first attempt went unjudged is in
        # it (and makes it null, with the reason), not left out.
        avg_at_k=(
            average_at_k([r for r in records if r.correct is not None or first_unjudged(r)], k)
            if "avg_at_k" in chosen
            else None
        ),
        breakdown={name: breakdown_by(records, name) for name in breakdown} or None,
    )


def graded(record: TaskRecord) -> bool:
    """Whether the task counts in accuracy: it had a verdict, and its first attempt had
    one too (with ``avg_at_k`` every attempt runs, so a task whose first attempt went
    unjudged can end with a verdict from a later one: pass@1 has none for it)."""
    return record.correct is not None and not first_unjudged(record)


def first_unjudged(record: TaskRecord) -> bool:
    """The judge was asked about the task's first attempt and gave no verdict."""
    judgement = record.attempts[0].judgement if record.attempts else record.judgement
    return judgement is not None and judgement.unjudged


def first_graded(record: TaskRecord) -> tuple[bool, JudgementRecord | None]:
    """Whether the task's first attempt was correct, and that attempt's judgement (a task
    without attempt records: its own)."""
    if record.attempts:
        first = record.attempts[0]
        return first.correct is True, first.judgement
    return record.correct is True, record.judgement


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def simpleqa(graded: Sequence[TaskRecord]) -> SimpleQAMetrics:
    correct = not_attempted = 0
    for record in graded:
        right, judgement = first_graded(record)
        label = (judgement.label or "").upper() if judgement is not None else ""
        correct += right
        not_attempted += not right and label == NOT_ATTEMPTED
    incorrect = len(graded) - correct - not_attempted
    accuracy = _ratio(correct, len(graded))
    given_attempted = _ratio(correct, correct + incorrect)
    f1 = None
    if given_attempted is not None and accuracy is not None:
        both = given_attempted + accuracy
        f1 = 2 * given_attempted * accuracy / both if both else 0.0
    return SimpleQAMetrics(
        graded=len(graded),
        correct=correct,
        incorrect=incorrect,
        not_attempted=not_attempted,
        accuracy=accuracy,
        not_attempted_rate=_ratio(not_attempted, len(graded)),
        accuracy_given_attempted=given_attempted,
        f1=f1,
    )


def calibration_error(graded: Sequence[TaskRecord]) -> CalibrationError:
    pairs: list[tuple[float, bool]] = []
    without = 0
    for record in graded:
        right, judgement = first_graded(record)
        confidence = judgement.confidence if judgement is not None else None
        without += confidence is None
        pairs.append(((NO_CONFIDENCE if confidence is None else confidence) / 100, right))
    n = len(pairs)
    if n and without == n:  # the judge was not asked for one: 100 each would mean nothing
        return CalibrationError(
            answers=n,
            without_confidence=without,
            reason="no judgement carries a confidence (the judge rule asks for none)",
        )
    if n < CALIBRATION_BIN:
        return CalibrationError(
            answers=n,
            without_confidence=without,
            reason=f"{n} graded answers: HLE's method needs at least {CALIBRATION_BIN} "
            f"(bins of {CALIBRATION_BIN})",
        )
    pairs.sort(key=lambda pair: pair[0])  # stable: ties keep the tasks' order
    starts = range(0, n // CALIBRATION_BIN * CALIBRATION_BIN, CALIBRATION_BIN)
    ends = [*starts[1:], n]  # the last bin takes the remainder
    terms = []
    for start, end in zip(starts, ends, strict=True):
        bin_ = pairs[start:end]
        gap = statistics.fmean(c for c, _ in bin_) - statistics.fmean(r for _, r in bin_)
        terms.append(len(bin_) / n * gap * gap)
    return CalibrationError(
        value=100 * math.sqrt(sum(terms)),
        as_published=100 * math.sqrt(sum(terms[:-1])),
        answers=n,
        bins=len(terms),
        without_confidence=without,
    )


def confidence_interval(graded: Sequence[TaskRecord]) -> AccuracyInterval:
    n = len(graded)
    if not n:
        return AccuracyInterval()
    percent = 100 * sum(first_graded(r)[0] for r in graded) / n
    half_width = 1.96 * math.sqrt(percent * (100 - percent) / n)
    return AccuracyInterval(accuracy=percent, half_width=half_width, n=n)


def _outcome(right: bool, judgement: JudgementRecord | None) -> str | None:
    """The task's DeepSearchQA outcome; None: partly right, its outcome unsaid."""
    label = (judgement.label or "").upper() if judgement is not None else ""
    if label in OUTCOMES:
        return label
    if right:
        return FULLY_CORRECT
    score = judgement.score if judgement is not None else None
    return FULLY_INCORRECT if not score else None


def deepsearchqa(graded: Sequence[TaskRecord]) -> DeepSearchQAMetrics:
    counts = dict.fromkeys(OUTCOMES, 0)
    unknown = 0
    f1s = []
    for record in graded:
        right, judgement = first_graded(record)
        outcome = _outcome(right, judgement)
        if outcome is None:
            unknown += 1
        else:
            counts[outcome] += 1
        score = judgement.score if judgement is not None else None
        f1s.append(float(score) if score is not None else float(right))
    n = len(graded)
    extraneous = counts[CORRECT_WITH_EXTRANEOUS]
    return DeepSearchQAMetrics(
        graded=n,
        fully_correct=counts[FULLY_CORRECT],
        fully_incorrect=counts[FULLY_INCORRECT],
        correct_with_extraneous=extraneous,
        outcome_unknown=unknown,
        fully_correct_rate=_ratio(counts[FULLY_CORRECT], n),
        fully_incorrect_rate=_ratio(counts[FULLY_INCORRECT], n),
        correct_with_extraneous_rate=None if unknown else _ratio(extraneous, n),
        f1_mean=statistics.fmean(f1s) if f1s else None,
    )


def average_at_k(graded: Sequence[TaskRecord], k: int) -> AverageAtK:
    shares = []
    short = 0
    for record in graded:
        flags = [a.correct for a in record.attempts] or [record.correct]
        judged = [f for f in flags if f is not None]
        if len(flags) < k or len(judged) < len(flags):
            short += 1
            continue
        shares.append(sum(judged) / len(judged))
    if short:
        return AverageAtK(
            k=k,
            tasks=len(graded),
            reason=f"{short} of {len(graded)} graded tasks have fewer than {k} judged "
            "attempts (stopped by a correct one before avg_at_k was chosen, by a limit, "
            "or left unjudged)",
        )
    return AverageAtK(k=k, tasks=len(graded), value=statistics.fmean(shares) if shares else None)


def _field_value(record: TaskRecord, name: str) -> str:
    value = record.metadata.get(name)
    if value is None or value == "":
        return MISSING
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def breakdown_by(records: Sequence[TaskRecord], name: str) -> dict[str, ProvenanceTally]:
    """Accuracy per value of the task field ``name``, as ``by_provenance`` counts it."""
    groups: dict[str, list[TaskRecord]] = {}
    for record in records:
        groups.setdefault(_field_value(record, name), []).append(record)
    tallies = {}
    for value in sorted(groups, key=lambda v: (v == MISSING, v)):
        group = groups[value]
        judged = [r for r in group if graded(r)]
        correct = sum(first_graded(r)[0] for r in judged)
        tallies[value] = ProvenanceTally(
            tasks=len(group),
            judged=len(judged),
            correct=correct,
            accuracy=_ratio(correct, len(judged)),
        )
    return tallies


# ---------------------------------------------------------------------------- terminal


def _share(value: float | None, count: int, total: int) -> str:
    return f"{'n/a' if value is None else f'{value:.3f}'} ({count}/{total})"


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def protocol_rows(section: ProtocolMetrics | None, k: int) -> list[tuple[str, str]]:
    """The summary's lines for the protocol's metrics (label, text); none chosen: none."""
    if section is None:
        return []
    rows = []
    if (q := section.simpleqa) is not None:
        rows.append(("SimpleQA", _simpleqa_line(q)))
    if (c := section.calibration_error) is not None:
        rows.append(("calibration", _calibration_line(c)))
    if (i := section.confidence_interval) is not None:
        interval = "n/a (nothing graded)"
        if i.accuracy is not None and i.half_width is not None:
            interval = f"{i.accuracy:.2f}% +/- {i.half_width:.2f}% (95 %, n = {i.n})"
        rows.append(("HLE accuracy", interval))
    if (d := section.deepsearchqa) is not None:
        rows.append(("DeepSearchQA", _deepsearchqa_line(d)))
    if (a := section.avg_at_k) is not None:
        said = f"n/a: {a.reason}" if a.value is None and a.reason else _number(a.value)
        rows.append((f"avg@{a.k}", f"{said} (mean accuracy over attempts, {a.tasks} tasks)"))
    for name, groups in (section.breakdown or {}).items():
        line = " · ".join(
            f"{value} {_share(g.accuracy, g.correct, g.judged)}" for value, g in groups.items()
        )
        rows.append((f"by {name}", line or "-"))
    return rows


def _simpleqa_line(q: SimpleQAMetrics) -> str:
    return (
        f"F1 {_number(q.f1)} · accuracy given attempted "
        f"{_share(q.accuracy_given_attempted, q.correct, q.correct + q.incorrect)} · "
        f"not attempted {_share(q.not_attempted_rate, q.not_attempted, q.graded)} · "
        f"correct {q.correct}, incorrect {q.incorrect}, not attempted {q.not_attempted}"
    )


def _calibration_line(c: CalibrationError) -> str:
    if c.value is None or c.as_published is None:
        return f"n/a: {c.reason}"
    line = (
        f"RMS error {c.value:.0f}% over {c.answers} answers in {c.bins} bins "
        f"(as HLE's script prints it, its last bin left out: {c.as_published:.0f}%)"
    )
    if c.without_confidence:
        line += f"; {c.without_confidence} without a confidence, taken as 100"
    return line


def _deepsearchqa_line(d: DeepSearchQAMetrics) -> str:
    extraneous = _share(d.correct_with_extraneous_rate, d.correct_with_extraneous, d.graded)
    if d.correct_with_extraneous_rate is None and d.outcome_unknown:
        extraneous = (
            f"n/a ({d.outcome_unknown} partly right without an outcome label: partially "
            "correct or with extraneous answers)"
        )
    return (
        f"F1 {_number(d.f1_mean)} over {d.graded} · "
        f"fully correct {_share(d.fully_correct_rate, d.fully_correct, d.graded)} · "
        f"fully incorrect {_share(d.fully_incorrect_rate, d.fully_incorrect, d.graded)} · "
        f"correct with extraneous {extraneous}"
    )
