"""Several runs in one report: accuracy and cost side by side, and task by task which
run solved what (e.g. a Hydra multirun over ``agent.keep_tool_result=-1,0,5``).

Each run is labelled by the settings in which it differs from the others. A folder that
is not a readable run is listed with the reason, and the others are still compared.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

from deepledger import __version__
from deepledger.errors import DeepLedgerError
from deepledger.messages import JSONObject
from deepledger.records.results import SummaryRecord, TaskRecord
from deepledger.report import charts
from deepledger.report.collect import (
    QUESTION_LIMIT,
    clip,
    last_writes,
    outcome,
    wall_seconds,
)
from deepledger.report.page import render
from deepledger.report.view import (
    ComparedRun,
    ComparisonPayload,
    RunFigures,
    TaskAcrossRuns,
    UnreadRun,
)
from deepledger.store.files import write_text_atomic
from deepledger.store.layout import RunLayout
from deepledger.store.lock import run_is_live
from deepledger.store.run_store import load_manifest, task_records

COMPARISON = "comparison.html"
_NOT_SETTINGS = ("run_dir", "hydra", "output_dir", "data_dir", "metadata_file")
LABEL_KEYS = 4  # differing settings named in a run's label
SWEEP_CONFIG = "multirun.yaml"  # Hydra writes it at the top of a sweep folder
_JOB_FOLDER = re.compile(r"^(\d+)(?:_|$)")  # hydra.sweep.subdir starts with the job number


def sweep_runs(folder: Path) -> list[Path] | None:
    """The runs of a sweep folder (``hydra.sweep.dir``, or any folder of run
    directories), in job order; None when ``folder`` is a run itself or holds none.
    A job that left no manifest is listed too (the comparison says what is wrong with
    it) when Hydra's ``multirun.yaml`` marks the folder as a sweep."""
    if not folder.is_dir() or RunLayout(folder).manifest.is_file():
        return None
    sweep = (folder / SWEEP_CONFIG).is_file()
    runs = [
        d
        for d in folder.iterdir()
        if d.is_dir() and (RunLayout(d).manifest.is_file() or (sweep and _JOB_FOLDER.match(d.name)))
    ]
    return sorted(runs, key=_job_order) or None


def _job_order(run_dir: Path) -> tuple[float, str]:
    number = _JOB_FOLDER.match(run_dir.name)
    return (int(number[1]) if number else float("inf"), run_dir.name)


def default_output(run_dirs: list[Path]) -> Path:
    """Beside the runs: their common parent folder (a multirun's sweep folder)."""
    resolved = [d.resolve() for d in run_dirs]
    common = Path(os.path.commonpath(resolved))
    if common in resolved or common == Path(common.anchor):
        common = Path.cwd()
    return common / COMPARISON


def write_comparison(run_dirs: list[Path], summaries: dict[Path, SummaryRecord], out: Path) -> Path:
    """Write the comparison of ``run_dirs`` to ``out``; ``summaries`` holds the summary of
    each run that could be read (the others are listed with their problem)."""
    runs: list[ComparedRun | UnreadRun] = []
    problems: list[str] = []
    configs: list[dict[str, str] | None] = []
    records: list[dict[str, TaskRecord]] = []
    for run_dir in run_dirs:
        try:
            manifest, config = load_manifest(run_dir)
            if run_dir not in summaries:
                raise DeepLedgerError("no summary could be made")
        except DeepLedgerError as exc:
            runs.append({"dir": str(run_dir), "label": run_dir.name, "problem": str(exc)})
            problems.append(str(exc))
            configs.append(None)
            records.append({})
            continue
        figures = _figures(run_dir, manifest, summaries[run_dir], out)
        runs.append({"dir": str(run_dir), "label": run_dir.name, **figures})
        configs.append(_flat(config))
        records.append(task_records(run_dir))
    if all(c is None for c in configs):
        raise DeepLedgerError("None of the folders is a readable run: " + "; ".join(problems))
    for run, label in zip(runs, _labels(configs, run_dirs), strict=True):
        run["label"] = label
    payload: ComparisonPayload = {
        "kind": "comparison",
        "generated_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "deepledger_version": __version__,
        "runs": runs,
        "tasks": _task_matrix(records, [c is not None for c in configs]),
        "charts": {
            "accuracy": charts.runs_bars("accuracy", "accuracy (pass@1)", ".1%", "%"),
            "cost": charts.runs_bars("cost", "cost (USD)", "$.4f", "$,.2f"),
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        out, render(f"deepledger · {len(runs)} runs compared", payload, []), mode=0o644
    )
    return out


def _figures(run_dir: Path, manifest: JSONObject, read: SummaryRecord, out: Path) -> RunFigures:
    runs = manifest.get("runs") or []
    finished = bool(runs and runs[-1].get("finished_at"))
    tokens = read.tokens.total
    report = RunLayout(run_dir).report
    return {
        "state": "finished" if finished else "unfinished",
        "finished": read.tasks.finished,
        "expected": read.tasks.expected,
        "accuracy": read.accuracy,
        "pass_at_k": read.pass_at_k,
        "input_tokens": tokens.input,
        "cache_read_tokens": tokens.cache_read,
        "output_tokens": tokens.output,
        "cost": read.cost_total if not read.cost_unknown_tasks else None,
        "turns_mean": read.turns.mean,
        "wall_seconds": wall_seconds(
            runs, live=not finished and run_is_live(run_dir), activity=lambda: last_writes(run_dir)
        ),
        "report": Path(os.path.relpath(report.resolve(), out.parent.resolve())).as_posix()
        if report.is_file()
        else None,
    }


def _flat(config: JSONObject, prefix: str = "") -> dict[str, str]:
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if any(part in name for part in _NOT_SETTINGS):
            continue
        if isinstance(value, dict):
            flat |= _flat(value, f"{name}.")
        else:
            flat[name] = repr(value) if not isinstance(value, str) else value
    return flat


def _labels(configs: list[dict[str, str] | None], dirs: list[Path]) -> list[str]:
    """Each run's differing settings (``agent.keep_tool_result=5``), else its folder."""
    known = [c for c in configs if c is not None]
    keys = sorted({k for c in known for k in c} if known else set())
    differing = [k for k in keys if len({c.get(k) for c in known}) > 1]
    labels = []
    for config, run_dir in zip(configs, dirs, strict=True):
        if config is None or not differing:
            labels.append(run_dir.name)
            continue
        named = [f"{k}={config.get(k, '(unset)')}" for k in differing[:LABEL_KEYS]]
        more = len(differing) - LABEL_KEYS
        labels.append(", ".join(named) + (f" (+{more} more)" if more > 0 else ""))
    if len(set(labels)) < len(labels):  # same settings: tell them apart by folder
        labels = [f"{label} · {d.name}" for label, d in zip(labels, dirs, strict=True)]
    return labels


def _task_matrix(
    records: list[dict[str, TaskRecord]], readable: list[bool]
) -> list[TaskAcrossRuns]:
    """A row per task: its status in each run. It ``differs`` when the runs that could
    be read disagree (a run that could not be read has no say)."""
    ids: dict[str, None] = {}
    for run in records:
        ids |= dict.fromkeys(run)
    rows: list[TaskAcrossRuns] = []
    for task_id in ids:
        cells = [_status(run.get(task_id)) for run in records]
        question = next((r[task_id].question for r in records if task_id in r), "")
        rows.append(
            {
                "id": task_id,
                "question": clip(question or "", QUESTION_LIMIT),
                "cells": cells,
                "differs": len({c for c, ok in zip(cells, readable, strict=True) if ok}) > 1,
            }
        )
    return rows


def _status(record: TaskRecord | None) -> str | None:
    if record is None:
        return None
    if record.status != "finished":
        return "error"
    return outcome(record.correct)
