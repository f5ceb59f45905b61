"""The runs under a logs folder, one row each, read cheaply for the viewer's list.

A finished bench is read from its ``manifest.json`` and ``summary.json`` alone; a bench
that has not finished from its manifest and its result lines (no journal is read); a
``deepledger run`` folder from the first and last few kilobytes of its journal. So a
logs folder of hundreds of runs lists in well under a second. Nothing here writes.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from deepledger.errors import DeepLedgerError
from deepledger.messages import JSONObject
from deepledger.store.files import latest_records, read_jsonl
from deepledger.store.layout import RunLayout
from deepledger.store.locate import RunKind, runs_under
from deepledger.store.lock import run_is_live
from deepledger.store.run_store import load_manifest
from deepledger.view.live import json_objects

# Bytes read from each end of a `deepledger run` journal: its task_started line (the
# question, early) and its task_finished line (the answer and usage, last).
JOURNAL_PEEK = 64 * 1024


def list_runs(logs: Path) -> list[JSONObject]:
    """One row per run under ``logs``, newest first (by start time, then path)."""
    rows = [run_row(logs, path, kind) for path, kind in runs_under(logs)]
    rows.sort(key=lambda row: (str(row.get("started") or ""), str(row["id"])), reverse=True)
    return rows


def run_row(logs: Path, root: Path, kind: RunKind) -> JSONObject:
    """What the list shows of the run in ``root``; a run that cannot be read says why."""
    row: JSONObject = {
        "id": run_id(logs, root),
        "kind": kind,
        "suite": None,
        "model": None,
        "question": None,
        "accuracy": None,
        "done": None,
        "expected": None,
        "tokens": None,
        "cost": None,
        "status": "running" if run_is_live(root) else "stopped",
        "started": None,
        "problem": None,
    }
    try:
        row.update(_bench_row(root, row["status"]) if kind == "bench" else _question_row(root))
    # A file of the wrong shape (a list where an object belongs...) is that run's problem,
    # shown on its row: one bad run must not take the whole list down.
    except (DeepLedgerError, OSError, ValueError, LookupError, TypeError, AttributeError) as exc:
        row["problem"] = str(exc) or repr(exc)
    if row["status"] == "running" and not run_is_live(root):  # ended while being read
        row["status"] = "stopped"
    if row["started"] is None:
        row["started"] = _mtime(root)
    return row


def run_id(logs: Path, root: Path) -> str:
    """The run's address in the viewer: its path below the logs folder ("." for it)."""
    return root.relative_to(logs).as_posix()


def _bench_row(root: Path, status: Any) -> JSONObject:
    manifest, config = load_manifest(root)
    runs = manifest.get("runs") or []
    finished = bool(runs and runs[-1].get("finished_at"))
    row: JSONObject = {
        "suite": config["benchmark"]["name"],
        "model": (config.get("llm") or {}).get("model_name"),
        "started": runs[0].get("started_at") if runs else manifest.get("created_at"),
        "expected": manifest.get("tasks_expected"),
    }
    if finished and status != "running":
        row["status"] = "finished"
    summary = _finished_summary(root) if finished else None
    if summary is None:  # not finished: its result lines, read without the journals
        summary = _results_summary(root, manifest, config)
    counts = summary.get("tasks") or {}
    totals = (summary.get("tokens") or {}).get("total") or {}
    row.update(
        accuracy=summary.get("accuracy"),
        done=counts.get("total"),
        expected=row["expected"] or counts.get("expected"),
        tokens=(totals.get("input") or 0) + (totals.get("output") or 0),
        cost=summary.get("cost_total"),
    )
    return row


def _finished_summary(root: Path) -> JSONObject | None:
    try:
        summary = json.loads(RunLayout(root).summary.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def _results_summary(root: Path, manifest: JSONObject, config: JSONObject) -> JSONObject:
    """The figures of the tasks recorded so far, as ``summary.json`` would hold them."""
    from deepledger.bench.metrics import summarize  # the bench's own arithmetic
    from deepledger.records.results import TaskRecord

    lines = latest_records(read_jsonl(RunLayout(root).results))
    records = [TaskRecord.load(line) for line in lines.values()]
    summary = summarize(
        records,
        pass_at_k=config["benchmark"]["execution"]["pass_at_k"],
        benchmark=config["benchmark"]["name"],
        tasks_expected=manifest.get("tasks_expected"),
        execution=config["benchmark"]["execution"],
        metrics=config["benchmark"].get("metrics") or (),
        breakdown=config["benchmark"].get("breakdown") or (),
    )
    return summary.to_json()


def _question_row(root: Path) -> JSONObject:
    layout = RunLayout(root)
    head, tail = _peek(layout.run_journal)
    row: JSONObject = {"suite": "question", "model": _hydra_model(layout.hydra_config)}
    for line in head:
        if line.get("event") == "task_started":
            row["question"] = str(line.get("task") or "")[:400]
            row["started"] = line.get("ts") or None
            break
    for line in reversed(tail):
        if line.get("event") == "task_finished":
            usage = line.get("usage") or {}
            row["tokens"] = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
            row["cost"] = line.get("cost")
            row["done"], row["expected"] = 1, 1
            row["status"] = "finished"
            break
    return row


def _peek(journal: Path) -> tuple[list[JSONObject], list[JSONObject]]:
    """The whole lines at the start and at the end of ``journal`` (a torn last line and
    a line cut by the window are skipped)."""
    with journal.open("rb") as handle:
        head = handle.read(JOURNAL_PEEK)
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - JOURNAL_PEEK))
        tail = handle.read(JOURNAL_PEEK)
    return json_objects(head), json_objects(tail)


def _hydra_model(config: Path) -> str | None:
    try:
        model = OmegaConf.select(OmegaConf.load(config), "llm.model_name")
    except Exception:  # an unreadable config leaves the model unnamed, not the list failing
        return None
    return str(model) if model is not None else None


def _mtime(root: Path) -> str | None:
    try:
        stamp = root.stat().st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")
