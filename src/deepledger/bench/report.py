"""``deepledger report RUN_DIR``: rebuild a run's summary and its HTML report.

Works on a finished run and on one still going (or killed): the summary covers the
tasks in ``benchmark_results.jsonl`` and says how many the suite expected; the report
marks the tasks that have not finished.
"""

from __future__ import annotations

import json
from pathlib import Path

from deepledger.bench.economics import token_economics
from deepledger.bench.metrics import endpoint_counts, summarize
from deepledger.messages import JSONObject
from deepledger.records.results import ConfigBreakdown, SummaryRecord
from deepledger.store.files import write_json_atomic
from deepledger.store.layout import RunLayout
from deepledger.store.run_config import config_breakdown
from deepledger.store.run_store import load_manifest, task_records


def rebuild_summary(root: Path) -> SummaryRecord:
    """Recompute and rewrite ``summary.json``; return it."""
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
    write_json_atomic(RunLayout(root).summary, summary.to_json())
    return summary


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
