"""The numbers of one benchmark run, computed from its task records.

``summarize`` turns the records of ``benchmark_results.jsonl`` (``TaskRecord``s) into
the ``SummaryRecord`` written as ``summary.json``; ``format_summary`` renders it for the
terminal. Both classes are in ``records/results.py``.

What each number means (every ratio is ``None`` when its denominator is 0 — never NaN):

- ``tasks``: ``total`` records, how many ``finished`` / ``errors`` (by ``status``),
  ``judged`` (task-level ``correct`` is not null — it had a ground truth and was graded),
  and ``expected`` (the suite's size, when the caller knows it; else null).
  An errored task whose ``correct`` is null is *not* judged, so it does not lower
  ``accuracy``; ``tasks.errors`` says how many such tasks there were. ``unjudged``
  (written only when > 0): tasks whose judge was asked but gave no verdict
  (``judgement.unjudged``; their ``correct`` is null), or gave none on their first
  attempt (with ``avg_at_k`` later attempts run and may have one; pass@1 has none): in
  neither ``judged`` nor accuracy, and printed beside accuracy so they are never
  silently wrong.
- ``accuracy``: pass@1 — among judged tasks, the share whose FIRST attempt was correct
  (a task without attempt records counts its task-level ``correct`` as its first
  attempt). Later attempts never raise it.
- ``pass_at_k``: among judged tasks, the share where ANY attempt was correct (or the
  task-level ``correct`` is true). Equals ``accuracy`` when ``k`` is 1.
- ``k``: the configured number of attempts per task (pass@k's k).
- ``by_provenance``: for each provenance of the task's final answer (``summary``,
  ``boxed_retry``, ``intermediate_fallback``, ``none``, or whatever else occurs; a
  missing one is ``none``): ``tasks``, ``judged``, ``correct`` (task-level correct) and
  ``accuracy`` = correct / judged.
- ``post_mortems``: attempts (of all tasks) split by how many post-mortems the answering
  format-retry carried (``carried_post_mortems``): ``without`` (0) and ``with`` (>= 1);
  each has ``attempts``, ``judged`` (attempt ``correct`` not null), ``correct`` and
  ``accuracy``. It answers "do the lessons of failed retries help?" — roughly, since
  the two groups are different questions (hard ones are likelier to need retries).
  ``format_summary`` shows it (as ``(correct/judged attempts)``) only for a run that
  writes post-mortems.
- ``judge_score``: ``mean`` of the judges' numeric ``judgement.score`` over the
  ``scored`` tasks that have one.
- ``judge_tokens``: the LLM judge's own ``input`` and ``output`` tokens (a different
  model from the agent's, so not in ``tokens`` or the cost).
- ``extraction_tokens``: of ``tokens``, what the page extractor used
  (``scrape_and_extract_info``'s model calls): ``input``, ``output``, ``calls_tasks``
  (tasks that made any). Part of the totals and the cost, shown apart.
- ``tokens``: ``total`` and ``mean_per_task`` (over all tasks) of ``input`` (the whole
  prompt, cache included), ``output``, ``cache_read``, ``cache_write``. A task's usage is
  its record's ``usage``; if that is missing, the sum of its retries' ``usage``.
- ``cost_total`` / ``cost_mean_per_task``: USD; null when any task's cost is unknown,
  and ``cost_unknown_tasks`` says how many were (so a run is never reported as free).
- ``turns`` / ``tool_calls``: ``mean``, ``median``, ``max`` per task, over the tasks that
  report the number (null when none does).
- ``prefix_breaks``: the same, of the model calls whose request did not begin with the
  whole previous request (``keep_tool_result`` blanked an older result, or a context
  strategy dropped a round): past that point a provider's prompt cache misses.
- ``end_reasons``: how each task's last turn loop ended: ``answered`` (model finished),
  ``max_turns`` (turns exhausted), ``window_exhausted``, ``looping`` (the same reply and
  results over and over), ``limit`` (the task's own limit stopped it),
  ``cut_or_empty`` (the model's last reply asked for no tools and was cut at
  ``llm.max_tokens`` or said nothing: never counted as answered; listed only when a task
  ended so), ``error`` (an ``error`` end
  reason, or an errored task without one) and ``unknown`` — they sum to ``tasks.total``.
- ``budget`` (``agent/limits.py``): the ``limits`` set in ``benchmark.execution``
  (``task_time_limit_seconds``, ``task_token_limit``, ``task_cost_limit_usd``,
  ``max_cost_usd``, ``max_tokens``; empty: none), what the run spent (``spent_tokens``:
  input + output; ``spent_usd``: priced calls only; the recorded tasks' plus what the
  tasks the budget stopped spent), what is ``left_tokens`` / ``left_usd`` of the run's
  budget (null without one), ``exhausted`` (the run's budget is spent),
  ``tasks_stopped`` (running when the budget ran out: unrecorded, their finished
  retries kept), ``tasks_not_started`` (expected, neither recorded nor stopped) — a
  resume with a raised budget runs both — and ``limits_hit``: recorded tasks stopped by
  each limit.
- ``protocol_metrics`` (absent unless the preset's ``benchmark.metrics`` or
  ``benchmark.breakdown`` chose some): the numbers the suite's official grader publishes
  — ``simpleqa`` (label counts, accuracy given attempted, F1, not-attempted rate),
  ``calibration_error`` (HLE's binned RMS, in percent), ``confidence_interval`` (HLE's
  95 % half-width), ``deepsearchqa`` (outcome rates, F1 over every task), ``avg_at_k``
  (mean accuracy over attempts) and ``breakdown`` (accuracy per value of a task field);
  each defined in ``bench/protocol_metrics.py``.
- ``extra``: whatever the caller passed (config digest, run dir...), unchanged.
- ``token_economics`` (added by the bench and report commands, from the journals): the
  prompt per turn, its growth against the quadratic arithmetic, the cache-read share
  and the policy's saving against keep-everything (``bench/economics.py``).
- ``endpoints`` (added by the bench and report commands, from the journals, when the
  calls were routed over ``llm.endpoints``; absent otherwise): for each server by its
  URL, ``requests`` (calls it answered, sub-agents' and killed retries' included),
  ``errors`` (HTTP attempts it failed: before another attempt got the answer, or of a
  loop call that failed on every attempt, ``llm_call_failed``),
  ``tasks`` (task attempts that called it), the ``latency_*_seconds`` of its answers
  (mean, p50, p95; nearest rank), ``cache_read_share`` (``cache_read_tokens`` over
  ``input_tokens``: how well sticky routing kept the prefix cache warm), and
  ``moved_in`` / ``moved_out`` (attempts moved to it / away from it, ``endpoint_moved``:
  away from a drained server, or back to their first choice once healthy).
- ``tool_servers_given_up`` (absent when none was): each tool server given up on for the
  run (it failed again right after a restart, or its restart failed), by name: the
  ``reason`` (how its process ended, its last stderr lines), and the ``tasks`` (with
  their ``task_ids``) that ran without it: the one it was given up on during and every
  later one that wanted it. Each of those tasks is an error (``status: error``, counted
  in ``tasks.errors``, so the run exits 1), its answer judged as given
  (``tools/given_up.py``).
- ``inputs_changed`` (absent when there is nothing to say): ``tasks`` / ``task_ids``
  whose result replaced one recorded for other inputs (question, ground truth, attached
  file or judge; ``bench/inputs.py``) — the old results are not counted anywhere above —
  and ``unverified``: results written before input digests, kept unchecked (counted
  once some record of the run has a digest).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deepledger.bench.economics import UNREADABLE, economics_line
from deepledger.bench.protocol_metrics import (
    first_unjudged,
    graded,
    protocol_metrics,
    protocol_rows,
)
from deepledger.config import BUDGET_KEYS
from deepledger.llm.usage import sources_line
from deepledger.messages import JSONObject, Usage
from deepledger.records.codec import read_journal
from deepledger.records.events import ClosingCall, EndpointMoved, LLMCall, LLMCallFailed
from deepledger.records.results import (
    AttemptRecord,
    AttemptTally,
    BudgetSummary,
    Distribution,
    EndpointCounts,
    ExtractionTokens,
    GivenUpServer,
    InputsChanged,
    JudgeScore,
    PostMortemSplit,
    ProvenanceTally,
    SummaryRecord,
    Tally,
    TaskCounts,
    TaskRecord,
    TokenCounts,
    TokenMeans,
    TokenPair,
    TokenTotals,
    sum_usage,
)
from deepledger.store.layout import RunLayout, attempt_journals, subagent_journals

TOKEN_FIELDS = ("input", "output", "cache_read", "cache_write")
END_REASONS = {
    "model_finished": "answered",
    "turns_exhausted": "max_turns",
    "window_exhausted": "window_exhausted",
    "looping": "looping",
    "limit": "limit",
    "cut_or_empty": "cut_or_empty",
    "error": "error",
}
# End reasons newer than the summaries of schema 1, counted only when a task ended so: a
# summary without them keeps the shape its older readers know.
END_REASONS_WHEN_SEEN = frozenset({"cut_or_empty"})


@dataclass(frozen=True)
class StoppedTasks:
    """Tasks the run's budget cut short while they ran (unrecorded), and what they spent."""

    tasks: int = 0
    tokens: int = 0
    usd: float = 0.0


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or ``None`` when there is nothing to divide by."""
    return numerator / denominator if denominator else None


def summarize(
    records: Iterable[TaskRecord | JSONObject],
    *,
    pass_at_k: int,
    benchmark: str,
    extra: JSONObject | None = None,
    tasks_expected: int | None = None,
    execution: Any = None,
    stopped: StoppedTasks | None = None,
    metrics: Sequence[str] = (),
    breakdown: Sequence[str] = (),
) -> SummaryRecord:
    """The summary of a run (written as ``summary.json``); see the module docstring.
    ``records``: task records, or their lines as read.
    ``execution``: the run's ``benchmark.execution`` (config or dict), for its budget.
    ``stopped``: the tasks the run's budget cut short, unrecorded, and what they spent
    (from the runner).
    ``metrics`` / ``breakdown``: the preset's ``benchmark.metrics`` and
    ``benchmark.breakdown`` (``bench/protocol_metrics.py``)."""
    tasks = [r if isinstance(r, TaskRecord) else TaskRecord.load(r) for r in records]
    judged = [r for r in tasks if graded(r)]
    first_correct = sum(1 for r in judged if _first_attempt_correct(r))
    any_correct = sum(1 for r in judged if _any_attempt_correct(r))
    tokens = _token_totals(tasks)
    cost_total, cost_mean, cost_unknown = _cost(tasks)
    return SummaryRecord(
        benchmark=benchmark,
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        k=pass_at_k,
        tasks=TaskCounts(
            total=len(tasks),
            finished=sum(1 for r in tasks if r.status == "finished"),
            errors=sum(1 for r in tasks if r.status == "error"),
            judged=len(judged),
            expected=tasks_expected,
            unjudged=sum(1 for r in tasks if _unjudged(r)),
        ),
        accuracy=ratio(first_correct, len(judged)),
        correct_first_attempt=first_correct,
        pass_at_k=ratio(any_correct, len(judged)),
        correct_any_attempt=any_correct,
        by_provenance=_by_provenance(tasks),
        post_mortems=_post_mortem_split(tasks),
        judge_score=_judge_score(tasks),
        judge_tokens=_judge_tokens(tasks),
        extraction_tokens=_extraction_tokens(tasks),
        tokens=TokenTotals(
            total=tokens,
            mean_per_task=TokenMeans(
                **{name: ratio(getattr(tokens, name), len(tasks)) for name in TOKEN_FIELDS}
            ),
        ),
        cost_total=cost_total,
        cost_mean_per_task=cost_mean,
        cost_unknown_tasks=cost_unknown,
        turns=_distribution(tasks, "turns"),
        tool_calls=_distribution(tasks, "tool_calls"),
        prefix_breaks=_distribution(tasks, "prefix_breaks"),
        end_reasons=_end_reasons(tasks),
        budget=_budget(tasks, budget_limits(execution), tasks_expected, stopped or StoppedTasks()),
        extra=dict(extra or {}),
        tool_servers_given_up=_given_up(tasks),
        inputs_changed=_inputs_changed(tasks),
        protocol_metrics=protocol_metrics(tasks, metrics, breakdown, pass_at_k),
    )


def _unjudged(record: TaskRecord) -> bool:
    """The judge was asked about the task's answer, or its first attempt's, and gave no
    verdict (not in ``judged`` nor accuracy)."""
    own = record.correct is None and record.judgement is not None and record.judgement.unjudged
    return own or first_unjudged(record)


def _given_up(records: list[TaskRecord]) -> dict[str, GivenUpServer] | None:
    servers: dict[str, GivenUpServer] = {}
    for record in records:
        for name, reason in record.tool_servers_given_up.items():
            server = servers.setdefault(name, GivenUpServer(reason=reason))
            server.tasks += 1
            server.task_ids.append(record.task_id)
    return servers or None


def _inputs_changed(records: list[TaskRecord]) -> InputsChanged | None:
    """The tasks whose result replaced one recorded for other inputs; and, once some
    record has a digest, those written before digests (kept, not checked). None: a run
    with neither, or only older records (nothing about inputs to say)."""
    rerun = [r.task_id for r in records if r.inputs_changed]
    digested = any(r.input_digest for r in records)
    unverified = sum(1 for r in records if not r.input_digest) if digested else 0
    if not rerun and not unverified:
        return None
    return InputsChanged(tasks=len(rerun), task_ids=rerun, unverified=unverified)


def budget_limits(execution: Any) -> dict[str, float]:
    """The task limits and run budgets set in ``benchmark.execution`` (a config or the
    dict of a manifest); unset ones are left out."""
    if execution is None:
        return {}
    if isinstance(execution, Mapping):
        return {key: value for key in BUDGET_KEYS if (value := execution.get(key)) is not None}
    return {
        key: value for key in BUDGET_KEYS if (value := getattr(execution, key, None)) is not None
    }


def _budget(
    records: list[TaskRecord], limits: dict[str, float], expected: int | None, stopped: StoppedTasks
) -> BudgetSummary:
    tokens = stopped.tokens + sum(
        u.input_tokens + u.output_tokens for u in map(_task_usage, records)
    )
    cost = stopped.usd + sum(r.cost or 0.0 for r in records)
    max_usd, max_tokens = limits.get("max_cost_usd"), limits.get("max_tokens")
    hits: dict[str, int] = {}
    for record in records:
        if record.limit is not None:
            hits[record.limit.kind] = hits.get(record.limit.kind, 0) + 1
    return BudgetSummary(
        limits=limits,
        spent_tokens=tokens,
        spent_usd=cost,
        left_tokens=None if max_tokens is None else max(0, int(max_tokens) - tokens),
        left_usd=None if max_usd is None else max(0.0, max_usd - cost),
        exhausted=(max_usd is not None and cost >= max_usd)
        or (max_tokens is not None and tokens >= max_tokens),
        # Not done, both resumed with a raised budget: stopped while running (its
        # finished retries kept), or never started.
        tasks_stopped=stopped.tasks,
        tasks_not_started=max(0, expected - len(records) - stopped.tasks) if expected else 0,
        limits_hit=hits,
    )


def _judge_tokens(records: list[TaskRecord]) -> TokenPair:
    """The LLM judge's own input and output tokens over the run (0 for rule judges)."""
    usage = sum_usage(r.judge_usage for r in records)
    return TokenPair(input=usage.input_tokens, output=usage.output_tokens)


def _extraction_tokens(records: list[TaskRecord]) -> ExtractionTokens:
    """What the page extractor's calls used, over the run (already in ``tokens``)."""
    usage = sum_usage(r.extraction_usage for r in records)
    return ExtractionTokens(
        input=usage.input_tokens,
        output=usage.output_tokens,
        tasks=sum(1 for r in records if r.extraction_usage.input_tokens),
    )


def _first_attempt_correct(record: TaskRecord) -> bool:
    if not record.attempts:
        return record.correct is True
    return record.attempts[0].correct is True


def _any_attempt_correct(record: TaskRecord) -> bool:
    return record.correct is True or any(a.correct is True for a in record.attempts)


def _tally(items: Iterable[bool | None]) -> Tally:
    """``judged`` (not None), ``correct`` (True) and their ratio, of some correctness flags."""
    flags = list(items)
    judged = sum(1 for f in flags if f is not None)
    correct = sum(1 for f in flags if f is True)
    return Tally(judged=judged, correct=correct, accuracy=ratio(correct, judged))


def _by_provenance(records: list[TaskRecord]) -> dict[str, ProvenanceTally]:
    groups: dict[str, list[TaskRecord]] = {}
    for record in records:
        groups.setdefault(record.provenance or "none", []).append(record)
    return {
        provenance: ProvenanceTally(tasks=len(group), **dict(_tally(r.correct for r in group)))
        for provenance, group in sorted(groups.items())
    }


def _post_mortem_split(records: list[TaskRecord]) -> PostMortemSplit:
    attempts = [a for r in records for a in r.attempts]
    without = [a for a in attempts if not a.carried_post_mortems]
    with_ = [a for a in attempts if a.carried_post_mortems]
    # "with" is a keyword: the field is ``with_``, named "with" in the file.
    return PostMortemSplit.model_validate(
        {"without": _attempt_tally(without), "with": _attempt_tally(with_)}
    )


def _attempt_tally(attempts: list[AttemptRecord]) -> AttemptTally:
    return AttemptTally(attempts=len(attempts), **dict(_tally(a.correct for a in attempts)))


def _judge_score(records: list[TaskRecord]) -> JudgeScore:
    scores = [
        float(r.judgement.score)
        for r in records
        if r.judgement is not None and r.judgement.score is not None
    ]
    return JudgeScore(scored=len(scores), mean=statistics.fmean(scores) if scores else None)


def _task_usage(record: TaskRecord) -> Usage:
    """The task's usage; a record without one (hand-made), the sum of its retries'."""
    if "usage" in record.model_fields_set:
        return record.usage
    return sum_usage(r.usage for r in record.retries)


def _token_totals(records: list[TaskRecord]) -> TokenCounts:
    usage = sum_usage(map(_task_usage, records))
    return TokenCounts(
        input=usage.input_tokens,
        output=usage.output_tokens,
        cache_read=usage.cache_read_tokens,
        cache_write=usage.cache_write_tokens,
    )


def _cost(records: list[TaskRecord]) -> tuple[float | None, float | None, int]:
    """The total, the mean per task (None when a task's is unknown) and how many are."""
    unknown = sum(1 for r in records if r.cost is None)
    total = None if unknown else sum(r.cost or 0.0 for r in records)
    return total, None if total is None else ratio(total, len(records)), unknown


def _distribution(records: list[TaskRecord], name: str) -> Distribution:
    """Of the tasks whose record reports ``name`` (older ones may not have it)."""
    numbers = [getattr(r, name) for r in records if name in r.model_fields_set]
    if not numbers:
        return Distribution()
    return Distribution(
        mean=statistics.fmean(numbers), median=statistics.median(numbers), max=max(numbers)
    )


def _end_reasons(records: list[TaskRecord]) -> dict[str, int]:
    counts = dict.fromkeys([*END_REASONS.values(), "unknown"], 0)
    for record in records:
        reason = END_REASONS.get(record.end_reason or "")
        if reason is None:
            reason = "error" if record.status == "error" else "unknown"
        counts[reason] += 1
    return {name: n for name, n in counts.items() if n or name not in END_REASONS_WHEN_SEEN}


# ---------------------------------------------------------------------------- terminal


def plural(count: int, word: str) -> str:
    """``1 task``, ``2 tasks``: a count and its noun (nouns taking a plain ``s``)."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def format_summary(read: SummaryRecord, *, post_mortems_on: bool | None = None) -> str:
    """A compact, human-readable rendering of a ``summarize`` result.

    ``post_mortems_on``: whether the run writes post-mortems (``RetryPlan
    .writes_post_mortems``); its ``post-mortems`` line is shown only then. None (a reader
    without the run's config): shown when some attempt carried one."""
    tasks = read.tasks
    expected = f" of {tasks.expected} expected" if tasks.expected else ""
    header = (
        f"{read.benchmark}: {plural(tasks.total, 'task')}{expected} "
        f"({tasks.finished} finished, {plural(tasks.errors, 'error')}), "
        f"{tasks.judged} judged"
    )
    first = _rate(read.accuracy, read.correct_first_attempt, tasks.judged)
    if tasks.unjudged:  # the judge gave no verdict: said, never counted as wrong
        first += f", {tasks.unjudged} unjudged (not in accuracy)"
    any_ = _rate(read.pass_at_k, read.correct_any_attempt, tasks.judged)
    rows = [
        ("accuracy", f"{first}  (pass@1: first attempt)"),
        (f"pass@{read.k}", any_),
        ("by provenance", _groups(read.by_provenance.items()) or "-"),
        *_post_mortem_rows(read.post_mortems, post_mortems_on),
    ]
    if read.judge_score.scored and read.judge_score.mean is not None:
        score = read.judge_score
        rows.append(("judge score", f"mean {score.mean:.3f} over {score.scored}"))
    rows += protocol_rows(read.protocol_metrics, read.k)
    extraction = read.extraction_tokens
    rows.append(("tokens", _tokens_line(read.tokens)))
    if extraction.input:
        rows.append(
            (
                "  extraction",
                f"{human_count(extraction.input)} input · "
                f"{human_count(extraction.output)} output "
                f"in {plural(extraction.tasks, 'task')} (pages read by scrape_and_extract_info; "
                "included above)",
            )
        )
    rows += [
        ("cost", _cost_line(read)),
        ("turns", _distribution_line(read.turns)),
        ("tool calls", _distribution_line(read.tool_calls)),
        ("prefix breaks", _distribution_line(read.prefix_breaks)),
        *([("context", economics)] if (economics := economics_line(read.token_economics)) else []),
        *([("budget", budget)] if (budget := _budget_line(read.budget)) else []),
        *[("endpoint", line) for line in _endpoint_lines(read.endpoints)],
        *[("given up", line) for line in _given_up_lines(read.tool_servers_given_up)],
        (
            "end reasons",
            " · ".join(
                f"{name} {n}" for name, n in read.end_reasons.items() if n or name != "unknown"
            ),
        ),
    ]
    if configs := read.configs:  # resumed with resume.allow_config_change=true
        ids = " · ".join(f"{cid} {plural(n.tasks, 'task')}" for cid, n in configs.ids.items())
        rows.append(("settings", f"{len(configs.ids)} settings: {ids} (config_id per task)"))
    if (changed := read.inputs_changed) is not None:
        rows.append(("inputs changed", _inputs_line(changed)))
    return "\n".join([header, *(f"  {label:<15}{value}" for label, value in rows)])


def _given_up_lines(servers: dict[str, GivenUpServer] | None) -> list[str]:
    """A line per tool server given up on: its tasks, errors for it, and why (the first
    line of the reason; the rest is in summary.json and the server's log)."""
    return [
        f"tool server {name!r}: {plural(s.tasks, 'task')} ran without it (errors) · "
        + s.reason.split("\n", 1)[0]
        for name, s in (servers or {}).items()
    ]


def _inputs_line(changed: InputsChanged) -> str:
    said = []
    if changed.tasks:
        shown = ", ".join(changed.task_ids[:5]) + (" …" if changed.tasks > 5 else "")
        said.append(f"{plural(changed.tasks, 'task')} run again on resume ({shown})")
    if changed.unverified:
        said.append(f"{changed.unverified} recorded before input digests, kept unchecked")
    return "; ".join(said)


def _post_mortem_rows(split: PostMortemSplit, on: bool | None) -> list[tuple[str, str]]:
    """The ``post-mortems`` row, when the run writes them. It counts attempts, not tasks
    (a task of pass@k has up to k, each answered by one retry): its unit says so, where
    the accuracy above it counts tasks."""
    if not (split.with_.attempts > 0 if on is None else on):
        return []
    groups = [("none carried", split.without), (">=1 carried", split.with_)]
    text = " · ".join(
        f"{name} {'n/a' if g.accuracy is None else f'{g.accuracy:.3f}'} "
        f"({g.correct}/{g.judged} attempts)"
        for name, g in groups
    )
    return [("post-mortems", text)]


def _groups(groups: Iterable[tuple[str, Tally]]) -> str:
    return " · ".join(f"{name} {_rate(g.accuracy, g.correct, g.judged)}" for name, g in groups)


def _distribution_line(d: Distribution) -> str:
    if d.mean is None or d.median is None or d.max is None:  # also an older summary
        return "-"
    return f"mean {d.mean:.1f} · median {d.median:g} · max {d.max:g}"


def _rate(value: float | None, correct: int, judged: int) -> str:
    return f"{'n/a' if value is None else f'{value:.3f}'} ({correct}/{judged})"


def human_count(n: float) -> str:
    """1234 -> '1.2k', 1_234_567 -> '1.2M'."""
    for limit, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= limit:
            return f"{n / limit:.1f}{suffix}"
    return f"{n:g}"


def _tokens_line(tokens: TokenTotals) -> str:
    total, mean = tokens.total, tokens.mean_per_task
    parts = " · ".join(
        f"{human_count(getattr(total, name))} {name.replace('_', ' ')}" for name in TOKEN_FIELDS
    )
    if mean.input is None or mean.output is None:
        return parts
    per_task = human_count(mean.input + mean.output)
    return f"{parts}  ({per_task} in+out per task)"


def _budget_line(budget: BudgetSummary | None) -> str | None:
    """The limits set, the run's budget spent and left, and the tasks it kept from
    starting; None when the run set no limit (or predates them)."""
    if budget is None or not (budget.limits or budget.limits_hit):
        return None
    limits = budget.limits
    parts = []
    if "max_cost_usd" in limits:
        parts.append(
            f"${budget.spent_usd:.4f} of ${limits['max_cost_usd']:g} "
            f"(${budget.left_usd or 0.0:.4f} left)"
        )
    if "max_tokens" in limits:
        parts.append(
            f"{human_count(budget.spent_tokens)} of {human_count(limits['max_tokens'])} "
            f"tokens ({human_count(budget.left_tokens or 0)} left)"
        )
    task = [f"{k.removeprefix('task_')} {v:g}" for k, v in limits.items() if k.startswith("task_")]
    if task:
        parts.append("per task: " + ", ".join(task))
    if budget.limits_hit:
        hit = ", ".join(f"{k} {n}" for k, n in budget.limits_hit.items())
        parts.append(f"tasks stopped: {hit}")
    if budget.exhausted and (budget.tasks_not_started or budget.tasks_stopped):
        parts.append(f"spent: {_not_done(budget)} (raise it to resume)")
    return " · ".join(parts)


def _not_done(budget: BudgetSummary) -> str:
    """``1 task stopped, 2 tasks not started``: what a raised budget would resume."""
    parts = []
    if stopped := budget.tasks_stopped:
        parts.append(f"{plural(stopped, 'task')} stopped")
    if not_started := budget.tasks_not_started:
        parts.append(f"{plural(not_started, 'task')} not started")
    return ", ".join(parts)


def _cost_line(summary: SummaryRecord) -> str:
    sources = sources_line(summary.prices)  # who priced it (llm/usage.py)
    said = f" · {sources}" if sources else ""
    unknown = summary.cost_unknown_tasks
    if summary.cost_total is None:
        return f"unknown ({plural(unknown, 'task')} without a price){said}" if unknown else "-"
    total, mean = summary.cost_total, summary.cost_mean_per_task
    return f"${total:.4f} total" + ("" if mean is None else f" · ${mean:.4f}/task") + said


# -- per-endpoint counts (llm.endpoints) -------------------------------------------------
@dataclass
class _EndpointTally:
    requests: int = 0
    errors: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    seconds: list[float] = field(default_factory=list)
    attempts: set[tuple[str, int]] = field(default_factory=set)
    moved_in: int = 0
    moved_out: int = 0


def endpoint_counts(run_dir: Path) -> dict[str, EndpointCounts] | None:
    """Each endpoint's counts over every journal of the run (resumes, interrupted
    retries, sub-agents and every worker's tasks included); ``None`` when no call was
    routed (no ``llm.endpoints``)."""
    tallies: dict[str, _EndpointTally] = {}
    for attempt, journal in _attempt_journals(run_dir):
        try:
            events = read_journal(journal)
        except UNREADABLE:  # the report lists it; the counts cover the journals that read
            continue
        for event in events:
            if isinstance(event, LLMCall | ClosingCall) and event.endpoint is not None:
                _count_call(tallies, event.endpoint, attempt, event)
            elif isinstance(event, LLMCallFailed):
                for failed in event.failed_endpoints:
                    tallies.setdefault(failed, _EndpointTally()).errors += 1
            elif isinstance(event, EndpointMoved):
                tallies.setdefault(event.from_endpoint, _EndpointTally()).moved_out += 1
                tallies.setdefault(event.to_endpoint, _EndpointTally()).moved_in += 1
    if not tallies:
        return None
    return {url: _endpoint_record(t) for url, t in sorted(tallies.items())}


def _attempt_journals(run_dir: Path) -> Iterator[tuple[tuple[str, int], Path]]:
    """Every journal of a bench run, each with its (task folder, attempt)."""
    for name, task_dir in RunLayout(run_dir).task_dirs().items():
        for interrupted in (False, True):
            for attempt, _, path in attempt_journals(task_dir, interrupted=interrupted):
                yield (name, attempt), path
                for child in subagent_journals(path):
                    yield (name, attempt), child.path


def _count_call(
    tallies: dict[str, _EndpointTally],
    endpoint: str,
    attempt: tuple[str, int],
    call: LLMCall | ClosingCall,
) -> None:
    tally = tallies.setdefault(endpoint, _EndpointTally())
    tally.requests += 1
    tally.input_tokens += call.usage.input_tokens
    tally.cache_read_tokens += call.usage.cache_read_tokens
    tally.attempts.add(attempt)
    if call.seconds is not None:
        tally.seconds.append(call.seconds)
    for failed in call.failed_endpoints:
        tallies.setdefault(failed, _EndpointTally()).errors += 1


def _endpoint_lines(endpoints: dict[str, EndpointCounts] | None) -> list[str]:
    """One line per server of ``llm.endpoints`` for the terminal summary."""
    lines = []
    for url, c in (endpoints or {}).items():
        share = "-" if c.cache_read_share is None else f"{c.cache_read_share:.0%}"
        p50 = "-" if c.latency_p50_seconds is None else f"{c.latency_p50_seconds:.2f}s"
        lines.append(
            f"{url}: {plural(c.requests, 'request')}, {plural(c.errors, 'error')}, "
            f"p50 {p50}, cache read {share}"
            + (f", {c.moved_out} moved away" if c.moved_out else "")
        )
    return lines


def _endpoint_record(tally: _EndpointTally) -> EndpointCounts:
    latencies = sorted(tally.seconds)
    return EndpointCounts(
        requests=tally.requests,
        errors=tally.errors,
        tasks=len(tally.attempts),
        input_tokens=tally.input_tokens,
        cache_read_tokens=tally.cache_read_tokens,
        cache_read_share=ratio(tally.cache_read_tokens, tally.input_tokens),
        latency_mean_seconds=round(statistics.fmean(latencies), 4) if latencies else None,
        latency_p50_seconds=_nearest_rank(latencies, 0.50),
        latency_p95_seconds=_nearest_rank(latencies, 0.95),
        moved_in=tally.moved_in,
        moved_out=tally.moved_out,
    )


def _nearest_rank(ordered: list[float], fraction: float) -> float | None:
    if not ordered:
        return None
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]
