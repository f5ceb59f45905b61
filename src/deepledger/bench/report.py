"""``deepledger report RUN_DIR``: rebuild a run's summary and its HTML report.

Works on a finished run and on one still going (or killed): the summary covers the
tasks in ``benchmark_results.jsonl`` and says how many the suite expected; the report
marks the tasks that have not finished.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deepledger.bench.economics import token_economics
from deepledger.bench.metrics import summarize
from deepledger.store.run_store import (
    RESULTS,
    SUMMARY,
    config_breakdown,
    latest_records,
    load_manifest,
    read_jsonl,
    write_json_atomic,
)


def rebuild_summary(root: Path) -> dict[str, Any]:
    """Recompute and rewrite ``summary.json``; return it."""
    manifest, config = load_manifest(root)
    summary = summarize(
        list(latest_records(read_jsonl(root / RESULTS)).values()),
        pass_at_k=config["benchmark"]["execution"]["pass_at_k"],
        benchmark=config["benchmark"]["name"],
        tasks_expected=manifest.get("tasks_expected"),
        extra={"run_dir": str(root), "rebuilt": True, **_kept_from_last_summary(root)},
        execution=config["benchmark"]["execution"],  # its budget
    )
    summary["token_economics"] = token_economics(root)
    if configs := config_breakdown(root):  # a resume changed settings: counted apart
        summary["configs"] = configs
    write_json_atomic(root / SUMMARY, summary)
    return summary


def _kept_from_last_summary(root: Path) -> dict[str, Any]:
    """What only the run knew and its results do not hold: the task file's skipped
    lines (the run printed the first ones and points at this list for the rest)."""
    try:
        last = json.loads((root / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    extra = last.get("extra") if isinstance(last, dict) else None
    kept = extra.get("skipped_lines") if isinstance(extra, dict) else None
    return {"skipped_lines": kept} if isinstance(kept, list) else {}
