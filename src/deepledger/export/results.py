"""The ``results`` format: a row per task (or, ``--per-attempt``, per attempt of pass@k)
of bench runs, as JSONL or Parquet, for pandas and the like.

Rows come from the typed records the runner wrote: each task's newest line of the
results (``store/run_store.py``'s ``task_records``: a resume's newer line supersedes an
older one), the times of its attempts from its progress lines and the first stamp of
its journals. Every row has every column of :data:`COLUMNS`, null where a run does not
know a figure, so the Parquet schema is the same for every export, even when a column
is all null. ``docs/export.md`` says what each column means.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deepledger.errors import ConfigError
from deepledger.export.request import ExportOutcome, ExportRequest
from deepledger.messages import JSONObject, Usage
from deepledger.records.results import (
    AttemptFinished,
    AttemptRecord,
    TaskRecord,
    sum_cost,
    sum_usage,
)
from deepledger.store.files import read_jsonl
from deepledger.store.layout import RunLayout, attempt_journals, safe_name
from deepledger.store.redaction import redact_exported
from deepledger.store.run_store import load_manifest, task_records

Row = dict[str, Any]

# Every column, in order, with its type (Parquet's; JSONL writes the same values).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_dir", "string"),
    ("benchmark", "string"),
    ("model", "string"),
    ("task_id", "string"),
    ("config_id", "string"),
    ("attempt", "int64"),  # the row's attempt; per task: the attempt that answered
    ("attempts", "int64"),  # attempts the task made
    ("first_correct_attempt", "int64"),  # pass@k: the first attempt judged correct
    ("question", "string"),
    ("ground_truth", "string"),
    ("file_path", "string"),
    ("answer", "string"),
    ("provenance", "string"),
    ("verdict", "string"),  # correct, incorrect, unjudged, ungraded
    ("correct", "bool"),
    ("score", "float64"),
    ("judge", "string"),
    ("judge_reason", "string"),
    ("judge_label", "string"),
    ("judge_confidence", "float64"),
    ("judge_extracted_answer", "string"),
    ("judge_asks", "int64"),
    ("judge_input_tokens", "int64"),
    ("judge_output_tokens", "int64"),
    ("status", "string"),  # finished, error
    ("error", "string"),
    ("end_reason", "string"),
    ("end_detail", "string"),
    ("retries", "int64"),
    ("turns", "int64"),
    ("tool_calls", "int64"),
    ("input_tokens", "int64"),
    ("output_tokens", "int64"),
    ("cache_read_tokens", "int64"),
    ("cache_write_tokens", "int64"),
    ("cost_usd", "float64"),
    ("started_at", "string"),
    ("finished_at", "string"),
    ("seconds", "float64"),
    ("metadata", "string"),  # the task line's other fields, as JSON text
)
NOT_FINISHED = "tasks not finished yet (journals, no result line)"


def export_results(request: ExportRequest) -> ExportOutcome:
    """Write the rows of ``request.run_dirs`` to ``request.out``."""
    if request.per_turn:
        raise ConfigError(
            "deepledger export: --per-turn makes training samples (chatml, openai); "
            "results has a row per task, or per attempt with --per-attempt."
        )
    outcome = ExportOutcome()
    rows = [row for run_dir in request.run_dirs for row in run_rows(run_dir, request, outcome)]
    if request.table == "parquet":
        write_parquet(rows, request.out)
    else:
        write_jsonl(rows, request.out)
    outcome.written.append(request.out)
    outcome.rows = len(rows)
    return outcome


def run_rows(run_dir: Path, request: ExportRequest, outcome: ExportOutcome) -> list[Row]:
    """The rows of one run, filtered as ``request`` asks (what is left out is counted
    in ``outcome``)."""
    _, config = load_manifest(run_dir)
    run = {
        "run_dir": str(run_dir),
        "benchmark": config["benchmark"]["name"],
        "model": (config.get("llm") or {}).get("model_name"),
    }
    records = task_records(run_dir)
    recorded = {safe_name(task_id) for task_id in records}
    if waiting := len(set(RunLayout(run_dir).task_dirs()) - recorded):
        outcome.skip(NOT_FINISHED, waiting)
    rows = []
    for record in records.values():
        times = _attempt_times(run_dir, record.task_id)
        for row in _task_rows(record, times, request.per_attempt):
            reason = left_out(row, request)
            if reason is None:
                rows.append(redact_exported(run | row))  # as the journals are: no secret leaves
            else:
                outcome.skip(reason)
    return rows


def left_out(row: Row, request: ExportRequest) -> str | None:
    """Why ``row`` is not exported under the request's filters; None: it is."""
    if request.only == "correct" and row["verdict"] != "correct":
        return "not judged correct (--only correct)"
    return request.left_out(row["turns"], row["end_reason"])


# -- rows ------------------------------------------------------------------------------
Times = dict[int, tuple[str | None, str | None]]  # attempt -> (started_at, finished_at)


def _task_rows(record: TaskRecord, times: Times, per_attempt: bool) -> list[Row]:
    """The task's row, or its attempts' rows (a task that failed before any attempt
    finished has one row all the same, ``attempt`` null: no task goes missing)."""
    task = _task_row(record, times)
    if not per_attempt or not record.attempts:
        return [task]
    return [task | _attempt_fields(a, times, record) for a in record.attempts]


def _task_row(record: TaskRecord, times: Times) -> Row:
    attempts = record.attempts
    last = attempts[-1] if attempts else None
    firsts = [a.attempt for a in attempts if a.correct]
    # From its journals, a failed task's too (it started, though no attempt finished).
    starts = sorted(start for start, _ in times.values() if start is not None)
    judge_usage = record.judge_usage
    return {
        "task_id": record.task_id,
        "config_id": record.config_id,
        "attempt": last.attempt if last else None,
        "attempts": len(attempts),
        "first_correct_attempt": firsts[0] if firsts else None,
        "question": record.question,
        "ground_truth": record.ground_truth,
        "file_path": record.file_path,
        "answer": record.final_answer,
        "provenance": record.provenance,
        **_judged(record.correct, record.judgement, record.ground_truth),
        "judge_input_tokens": judge_usage.input_tokens,
        "judge_output_tokens": judge_usage.output_tokens,
        "status": record.status,
        "error": record.error,
        "end_reason": record.end_reason,
        "end_detail": record.end_detail,
        "retries": len(record.retries),
        "turns": record.turns,
        "tool_calls": record.tool_calls,
        **_tokens(record.usage),
        "cost_usd": record.cost,
        "started_at": starts[0] if starts else None,
        "finished_at": times.get(last.attempt, (None, None))[1] if last else None,
        "seconds": record.elapsed_seconds,
        "metadata": json.dumps(record.metadata, ensure_ascii=False) if record.metadata else None,
    }


def _attempt_fields(attempt: AttemptRecord, times: Times, task: TaskRecord) -> Row:
    """What an attempt's row says of the attempt itself, over its task's row."""
    retries = attempt.retries
    last = retries[-1] if retries else None
    seconds = [r.elapsed_seconds for r in retries]
    judge_usage = attempt.judgement.usage if attempt.judgement else None
    started, finished = times.get(attempt.attempt, (None, None))
    return {
        "config_id": attempt.config_id or task.config_id,
        "attempt": attempt.attempt,
        "answer": attempt.final_answer,
        "provenance": attempt.provenance,
        **_judged(attempt.correct, attempt.judgement, task.ground_truth),
        "judge_input_tokens": judge_usage.input_tokens if judge_usage else 0,
        "judge_output_tokens": judge_usage.output_tokens if judge_usage else 0,
        "status": "finished",
        "error": None,
        "end_reason": last.end_reason if last else None,
        "end_detail": last.end_detail if last else None,
        "retries": len(retries),
        "turns": sum(r.turns for r in retries),
        "tool_calls": sum(r.tool_calls for r in retries),
        **_tokens(sum_usage(r.usage for r in retries)),
        "cost_usd": sum_cost(r.cost for r in retries),
        "started_at": started,
        "finished_at": finished,
        "seconds": None if None in seconds else round(sum(s or 0.0 for s in seconds), 3),
    }


def _judged(correct: bool | None, judgement: Any, ground_truth: str | None) -> Row:
    """The verdict and the judge's own fields (``records/results.py`` JudgementRecord)."""
    unjudged = judgement is not None and judgement.unjudged
    return {
        "verdict": verdict(correct, unjudged=unjudged, graded=ground_truth is not None),
        "correct": correct,
        "score": judgement.score if judgement else None,
        "judge": judgement.judge if judgement else None,
        "judge_reason": (judgement.reason or None) if judgement else None,
        "judge_label": judgement.label if judgement else None,
        "judge_confidence": judgement.confidence if judgement else None,
        "judge_extracted_answer": judgement.extracted_answer if judgement else None,
        "judge_asks": judgement.asks if judgement else 0,
    }


def verdict(correct: bool | None, *, unjudged: bool, graded: bool) -> str:
    """``correct`` / ``incorrect``; ``unjudged``: the judge was asked and gave no verdict
    (a resume asks again); ``ungraded``: no ground truth to judge against."""
    if unjudged:
        return "unjudged"
    if correct is not None:
        return "correct" if correct else "incorrect"
    return "unjudged" if graded else "ungraded"


def _tokens(usage: Usage) -> Row:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


# -- times ------------------------------------------------------------------------------
def _attempt_times(run_dir: Path, task_id: str) -> Times:
    """When each attempt of the task started (its journals' first stamp, a killed run's
    set-aside ones included) and ended (its ``attempt_finished`` progress line; an
    attempt judged again: the newest)."""
    layout = RunLayout(run_dir)
    ended: dict[int, str] = {}
    for line in read_jsonl(layout.progress(task_id)):
        if line.get("event") == "attempt_finished":
            finished = AttemptFinished.load(line)
            if (stamp := _to_second(finished.ts)) is not None:
                ended[finished.attempt] = stamp
    task_dir = layout.task_dir(task_id)
    started: dict[int, str] = {}
    journals = [*attempt_journals(task_dir), *attempt_journals(task_dir, interrupted=True)]
    for attempt, _, path in journals:
        stamp = _first_stamp(path)
        if stamp is not None and (attempt not in started or stamp < started[attempt]):
            started[attempt] = stamp
    return {a: (started.get(a), ended.get(a)) for a in started.keys() | ended.keys()}


def _first_stamp(journal: Path) -> str | None:
    """The stamp of a journal's first line (each line starts with its ``ts``): only
    that line is read, however long the journal."""
    try:
        with journal.open(encoding="utf-8", errors="replace") as lines:
            first = json.loads(lines.readline())
    except (OSError, ValueError):
        return None
    stamp = first.get("ts") if isinstance(first, dict) else None
    return _to_second(stamp) if isinstance(stamp, str) else None


def _to_second(stamp: str) -> str | None:
    """A stamp in UTC to the second, as progress lines write theirs: a start and an end
    compare as text (a journal's stamps carry milliseconds; cut off, a start is never
    after its end)."""
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if moment.tzinfo is None:  # every writer stamps UTC
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds")


# -- writing ----------------------------------------------------------------------------
def write_jsonl(rows: Iterable[Row], out: Path) -> None:
    """One JSON object a line, UTF-8, every column in :data:`COLUMNS` order."""
    with out.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(_ordered(row), ensure_ascii=False) + "\n")


def write_parquet(rows: list[Row], out: Path) -> None:
    """A Parquet table of :func:`schema`'s columns (their types fixed, even all-null)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([_ordered(row) for row in rows], schema=schema())
    pq.write_table(table, out)


def schema() -> Any:  # pyarrow.Schema; pyarrow is imported only for Parquet
    """The Parquet schema of :data:`COLUMNS`."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
    }
    return pa.schema([pa.field(name, types[kind]) for name, kind in COLUMNS])


def _ordered(row: Row) -> JSONObject:
    return {name: row.get(name) for name, _ in COLUMNS}
