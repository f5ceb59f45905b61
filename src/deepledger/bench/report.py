"""``deepledger report RUN_DIR``: rebuild a run's summary and its HTML report.

Works on a finished run and on one still going (or killed): the summary covers the
tasks in ``benchmark_results.jsonl`` and says how many the suite expected; the report
marks the tasks that have not finished. A ``deepledger run`` folder is summed up as a
run of one task, never judged, and nothing is written into it but its report.
"""

from __future__ import annotations

import json
from pathlib import Path

from deepledger.bench.economics import token_economics
from deepledger.bench.metrics import endpoint_counts, plural, summarize
from deepledger.messages import JSONObject
from deepledger.records.results import ConfigBreakdown, SummaryRecord
from deepledger.report.collect import QUESTION_LIMIT, RUN_BENCHMARK, clip, run_folder_record
from deepledger.store.files import write_json_atomic
from deepledger.store.layout import RunLayout
from deepledger.store.locate import run_kind
from deepledger.store.lock import run_is_live
from deepledger.store.run_config import config_breakdown
from deepledger.store.run_store import load_manifest, task_records


def rebuild_summary(root: Path) -> SummaryRecord:
    """Recompute and rewrite ``summary.json``; return it. A ``deepledger run`` folder's
    summary is returned and not written: that folder has no summary.json, and its own
    process may still be writing in it."""
    summary = current_summary(root)
    if run_kind(root) != "run":
        write_json_atomic(RunLayout(root).summary, summary.to_json())
    return summary


def current_summary(root: Path) -> SummaryRecord:
    """The run's summary as its files say now, written nowhere (a live view's)."""
    if run_kind(root) == "run":
        return run_folder_summary(root)
    manifest, config = load_manifest(root)
    summary = summarize(
        list(task_records(root).values()),
        pass_at_k=config["benchmark"]["execution"]["pass_at_k"],
        benchmark=config["benchmark"]["name"],
        tasks_expected=manifest.get("tasks_expected"),
        extra={"run_dir": str(root), "rebuilt": True, **_kept_from_last_summary(root)},
        execution=config["benchmark"]["execution"],  # its budget
        # The protocol's metrics, as the run chose them (a run from before: none).
        metrics=config["benchmark"].get("metrics") or (),
        breakdown=config["benchmark"].get("breakdown") or (),
    )
    summary.token_economics = token_economics(root)
    summary.prices = _last_prices(root)  # the run's prices, as it said them
    summary.endpoints = endpoint_counts(root)  # llm.endpoints: each server's counts
    if configs := config_breakdown(root):  # a resume changed settings: counted apart
        summary.configs = ConfigBreakdown.model_validate(configs)
    return summary


def run_folder_summary(root: Path) -> SummaryRecord:
    """A ``deepledger run`` folder's summary: its one question, once it has ended
    (before: no task recorded yet), with no ground truth to judge it by."""
    record = run_folder_record(root)
    return summarize(
        [] if record is None else [record],
        pass_at_k=1,
        benchmark=RUN_BENCHMARK,
        tasks_expected=1,
        extra={"run_dir": str(root), "rebuilt": True},
    )


def format_run_folder(root: Path) -> str:
    """A ``deepledger run`` folder in a few lines, as ``deepledger run`` ended (or where
    it is): the question, the answer with where it came from, what it spent."""
    record = run_folder_record(root)
    if record is None:
        state = "running now" if run_is_live(root) else "stopped before it finished"
        return f"{RUN_BENCHMARK}: {state}, no answer yet (not judged: no ground truth)"
    usage, cost = record.usage, record.cost
    lines = [
        f"{RUN_BENCHMARK}: finished, not judged (a question has no ground truth)",
        f"  question  {clip(record.question, QUESTION_LIMIT)}",
        f"  answer    {record.final_answer if record.final_answer is not None else '(none)'}",
        f"  how       {record.provenance}; {record.end_reason} after "
        f"{plural(record.turns, 'turn')}, {plural(record.tool_calls, 'tool call')}",
        f"  tokens    {usage.input_tokens:,} input · {usage.output_tokens:,} output · "
        f"{usage.cache_read_tokens:,} cache read · {usage.cache_write_tokens:,} cache write",
        f"  cost      {'unknown (no price for its model)' if cost is None else f'${cost:.4f}'}",
    ]
    if record.end_detail:
        lines.append(f"  why       {record.end_detail}")
    return "\n".join(lines)


def run_report_page(root: Path) -> str:
    """The report page of the run in ``root`` (either kind), as text, nothing written:
    what a live viewer serves."""
    from deepledger.report.page import render_run_report  # the page's parts: on first use

    return render_run_report(root, current_summary(root))


def _last_summary(root: Path) -> SummaryRecord | None:
    try:
        return SummaryRecord.load(json.loads(RunLayout(root).summary.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):  # pydantic's ValidationError is a ValueError
        return None


def _last_prices(root: Path) -> dict[str, str] | None:
    last = _last_summary(root)
    return None if last is None else last.prices


def _kept_from_last_summary(root: Path) -> JSONObject:
    """What only the run knew and its results do not hold: the task file's skipped
    lines (the run printed the first ones and points at this list for the rest)."""
    last = _last_summary(root)
    if last is None:
        return {}
    kept = last.extra.get("skipped_lines")
    return {"skipped_lines": kept} if isinstance(kept, list) else {}
