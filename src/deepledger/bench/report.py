"""``deepledger report RUN_DIR``: rebuild a run's summary from what it left behind.

Works on a finished run and on one still going (or killed): the summary covers the
tasks in ``benchmark_results.jsonl`` and says how many the suite expected.
"""

from __future__ import annotations

import json
from pathlib import Path

from deepledger.bench.economics import token_economics
from deepledger.bench.metrics import format_summary, summarize
from deepledger.bench.rundir import (
    MANIFEST,
    RESULTS,
    SUMMARY,
    latest_records,
    read_jsonl,
    write_json_atomic,
)
from deepledger.errors import DeepLedgerError


def rebuild_summary(root: Path) -> str:
    """Recompute and rewrite ``summary.json``; return it formatted for the terminal."""
    manifest_path, results_path = root / MANIFEST, root / RESULTS
    if not root.is_dir():
        raise DeepLedgerError(f"{root} is not a folder.")
    if not manifest_path.is_file():
        raise DeepLedgerError(
            f"{root} is not a deepledger run directory (no {MANIFEST}). Pass the folder a "
            "`deepledger bench` run wrote (its hydra.run.dir)."
        )
    try:
        manifest = json.loads(manifest_path.read_text())
        config = manifest["runs"][-1]["config"] if manifest.get("runs") else manifest["config"]
        benchmark, k = config["benchmark"]["name"], config["benchmark"]["execution"]["pass_at_k"]
    except (json.JSONDecodeError, KeyError) as exc:
        raise DeepLedgerError(f"{manifest_path} is unreadable or incomplete ({exc}).") from exc
    summary = summarize(
        list(latest_records(read_jsonl(results_path)).values()),
        pass_at_k=k,
        benchmark=benchmark,
        tasks_expected=manifest.get("tasks_expected"),
        extra={"run_dir": str(root), "rebuilt": True},
    )
    summary["token_economics"] = token_economics(root)
    write_json_atomic(root / SUMMARY, summary)
    return format_summary(summary)
