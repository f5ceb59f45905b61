"""Averaging independent runs of one suite (``scripts/multi_run.sh``, ``deepledger report``).

For the runs of a sweep, which differ in their settings: the same checks without the
averages (``format_aggregate(..., averaged=False)``).

``aggregate`` reads each run directory's ``summary.json`` and reports, per metric, the
mean, sample standard deviation (None for fewer than 2 runs), min and max over the runs:

- ``accuracy``: each run's pass@1 accuracy (see ``bench/metrics.py``);
- ``pass_at_k``: each run's pass@k;
- ``cost_total``: each run's total USD (runs with an unknown cost are left out of this
  metric only; ``n`` says how many runs it is over);
- ``tokens_total``: each run's input + output tokens (input includes cached prompt parts);
- ``turns_mean``: each run's mean turns per task.

A run that cannot be trusted is never averaged silently. It is listed under
``problems`` with the reason, left out of the statistics, and makes ``complete`` false:
a directory that is missing, has no (or an unreadable) ``summary.json`` or no
``benchmark_results.jsonl``; a summary with errored or unfinished tasks, fewer tasks than
it expected, or fewer tasks than the largest run; a different benchmark than the others.
``runs_expected`` (directories given) vs ``runs_used`` (runs averaged) shows the gap.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TypedDict

from pydantic import ValidationError

from deepledger.bench.metrics import human_count
from deepledger.errors import DeepLedgerError
from deepledger.records.results import SummaryRecord
from deepledger.store.layout import RESULTS, SUMMARY, RunLayout

METRICS = ("accuracy", "pass_at_k", "cost_total", "tokens_total", "turns_mean")


class RunProblem(TypedDict):
    dir: str
    reason: str


class RunFigures(TypedDict, total=False):
    """One run's line: its folder, whether it was averaged, and (once loaded) its figures."""

    dir: str
    used: bool
    benchmark: str | None
    tasks: int
    tasks_finished: int
    tasks_errors: int
    tasks_expected: int | None
    accuracy: float | None
    pass_at_k: float | None
    cost_total: float | None
    tokens_total: int
    turns_mean: float | None


class MetricStats(TypedDict):
    n: int
    mean: float | None
    std: float | None
    min: float | None
    max: float | None


class Aggregate(TypedDict):
    benchmark: str | None
    complete: bool
    runs_expected: int
    runs_used: int
    metrics: dict[str, MetricStats]  # by name, of METRICS
    runs: list[RunFigures]
    problems: list[RunProblem]


class RunLoadError(DeepLedgerError):
    """A run directory has no readable summary or results; ``reason`` says what is wrong."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def load_run(run_dir: Path) -> SummaryRecord:
    """The run's ``summary.json``; raises RunLoadError if it or the results file is missing."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunLoadError(run_dir, "run directory does not exist")
    summary_path = RunLayout(run_dir).summary
    if not summary_path.is_file():
        raise RunLoadError(run_dir, f"no {SUMMARY} (the run failed or did not finish)")
    if not RunLayout(run_dir).results.is_file():
        raise RunLoadError(run_dir, f"no {RESULTS} next to its summary")
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RunLoadError(run_dir, f"{SUMMARY} is unreadable ({exc})") from exc
    if not isinstance(summary, dict) or not isinstance(summary.get("tasks"), dict):
        raise RunLoadError(run_dir, f"{SUMMARY} is not a deepledger summary (no tasks object)")
    try:
        return SummaryRecord.load(summary)
    except ValidationError as exc:
        raise RunLoadError(run_dir, f"{SUMMARY} is not a deepledger summary ({exc})") from exc


def aggregate(run_dirs: list[Path]) -> Aggregate:
    """Mean / std / min / max of each metric over the trustworthy runs; see the docstring."""
    runs: list[RunFigures] = []
    problems: list[RunProblem] = []
    for run_dir in run_dirs:
        try:
            summary = load_run(run_dir)
        except RunLoadError as exc:
            problems.append({"dir": str(run_dir), "reason": exc.reason})
            runs.append({"dir": str(run_dir), "used": False})
            continue
        runs.append(_run_metrics(str(run_dir), summary))
    for run in runs:
        for reason in _run_problems(run, runs):
            problems.append({"dir": run["dir"], "reason": reason})
            run["used"] = False
    used = [run for run in runs if run["used"]]
    return {
        "benchmark": next((r.get("benchmark") for r in used), None),
        "complete": not problems and len(used) == len(run_dirs),
        "runs_expected": len(run_dirs),
        "runs_used": len(used),
        "metrics": {name: _stats([_metric(r, name) for r in used]) for name in METRICS},
        "runs": runs,
        "problems": problems,
    }


def _run_metrics(run_dir: str, summary: SummaryRecord) -> RunFigures:
    tasks, tokens = summary.tasks, summary.tokens.total
    expected = summary.extra.get("tasks_expected")
    return {
        "dir": run_dir,
        "used": True,
        "benchmark": summary.benchmark,
        "tasks": tasks.total,
        "tasks_finished": tasks.finished,
        "tasks_errors": tasks.errors,
        "tasks_expected": tasks.expected or (expected if isinstance(expected, int) else None),
        "accuracy": summary.accuracy,
        "pass_at_k": summary.pass_at_k,
        "cost_total": summary.cost_total,
        "tokens_total": tokens.input + tokens.output,
        "turns_mean": summary.turns.mean,
    }


def _metric(run: RunFigures, name: str) -> float | None:
    value = run.get(name)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _run_problems(run: RunFigures, runs: list[RunFigures]) -> list[str]:
    """Why a loaded run cannot be averaged with the others (empty when it can)."""
    if "tasks" not in run:
        return []  # not loaded; its problem is already recorded
    loaded = [r for r in runs if "tasks" in r]
    reasons = []
    if run["tasks_errors"]:
        reasons.append(f"{run['tasks_errors']} of {run['tasks']} tasks ended in an error")
    unfinished = run["tasks"] - run["tasks_finished"] - run["tasks_errors"]
    if unfinished > 0:
        reasons.append(f"{unfinished} of {run['tasks']} tasks did not finish")
    if run["tasks_expected"] and run["tasks"] < run["tasks_expected"]:
        reasons.append(f"only {run['tasks']} of {run['tasks_expected']} expected tasks ran")
    largest = max(r["tasks"] for r in loaded)
    if run["tasks"] < largest:
        reasons.append(f"covers {run['tasks']} tasks, another run covers {largest}")
    benchmarks = {r["benchmark"] for r in loaded}
    if len(benchmarks) > 1:
        reasons.append(
            f"benchmark {run['benchmark']!r}; the runs mix {sorted(map(str, benchmarks))}"
        )
    return reasons


def _stats(values: list[float | None]) -> MetricStats:
    known = [v for v in values if v is not None]
    if not known:
        return {"n": 0, "mean": None, "std": None, "min": None, "max": None}
    return {
        "n": len(known),
        "mean": statistics.fmean(known),
        "std": statistics.stdev(known) if len(known) >= 2 else None,
        "min": min(known),
        "max": max(known),
    }


# ---------------------------------------------------------------------------- terminal


def format_aggregate(agg: Aggregate, averaged: bool = True) -> str:
    """A human-readable rendering of an ``aggregate`` result, problems first. Runs of a
    sweep (``averaged`` false) differ in their settings: each is shown, none averaged."""
    status = "complete" if agg["complete"] else "INCOMPLETE"
    verb = "averaged" if averaged else "compared (a sweep: settings differ, not averaged)"
    lines = [
        f"{agg['benchmark'] or '?'}: {agg['runs_used']} of {agg['runs_expected']} runs "
        f"{verb} ({status})"
    ]
    lines += [f"  problem: {p['dir']}: {p['reason']}" for p in agg["problems"]]
    for name in METRICS if averaged else ():
        lines.append(f"  {name:<13}{_stats_line(name, agg['metrics'][name])}")
    for run in agg["runs"]:
        if "tasks" not in run:
            continue
        note = "" if run["used"] or not averaged else "  (not averaged)"
        cost = f" · cost {_num('cost_total', run['cost_total'])}" if not averaged else ""
        lines.append(
            f"    {run['dir']}: accuracy {_num('accuracy', run['accuracy'])} · "
            f"pass@k {_num('pass_at_k', run['pass_at_k'])} · {run['tasks']} tasks{cost}{note}"
        )
    return "\n".join(lines)


def _stats_line(name: str, stats: MetricStats) -> str:
    if stats["n"] == 0:
        return "-"
    return (
        f"mean {_num(name, stats['mean'])} ± {_num(name, stats['std'])} "
        f"[{_num(name, stats['min'])} .. {_num(name, stats['max'])}] (n={stats['n']})"
    )


def _num(name: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    if name == "cost_total":
        return f"${value:.4f}"
    if name == "tokens_total":
        return human_count(value)
    if name == "turns_mean":
        return f"{value:.1f}"
    return f"{value:.3f}"
