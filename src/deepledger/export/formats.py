"""The export formats: a name, the module that writes it, and one line saying what it is.

A format is one module of this package with one entry function
``(request: ExportRequest) -> ExportOutcome``; adding one is a module and a line here.
Modules are imported when their format is asked for (pyarrow only for Parquet).

A writer writes ``request.out`` (one file, or one folder for a format whose ``output`` is
``"folder"``) and nothing else: ``deepledger export`` hands it a temporary name beside
the output and renames it once the writer returns, so a failed export leaves nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from deepledger.errors import ConfigError
from deepledger.export.request import ExportOutcome, ExportRequest, Only
from deepledger.store.locate import RunKind

Writer = Callable[[ExportRequest], ExportOutcome]


@dataclass(frozen=True)
class ExportFormat:
    """Where a format's writer lives (``module:function`` in this package) and what it
    writes, for ``deepledger export --help``."""

    entry: str
    summary: str
    # What is kept without --only: training formats keep the correct attempts, tables
    # every row.
    default_only: Only = "correct"
    output: Literal["file", "folder"] = "file"
    # The run folders it reads: bench runs, and for some `deepledger run` folders too.
    kinds: tuple[RunKind, ...] = ("bench",)
    # The options of `deepledger export` it honours (besides --out and --force): the
    # command refuses the others rather than ignore them.
    options: tuple[str, ...] = ()

    def writer(self) -> Writer:
        module, _, function = self.entry.partition(":")
        writer: Writer = getattr(importlib.import_module(f"deepledger.export.{module}"), function)
        return writer


_FILTERS = ("--only", "--min-turns", "--max-turns", "--end-reason")

FORMATS: dict[str, ExportFormat] = {
    "mirothinker": ExportFormat(
        "mirothinker:export_mirothinker",
        "MiroThinker's benchmark log folder (run_N/ task logs, benchmark_results.jsonl, "
        "pass@k accuracy file), read by its average-score and progress scripts; OUT is a "
        "new or empty folder",
        default_only="all",  # the whole run, judged or not: no filters
        output="folder",
    ),
    "results": ExportFormat(
        "results:export_results",
        "a row per task (--per-attempt: per attempt), JSONL or Parquet (--table)",
        default_only="all",
        options=(*_FILTERS, "--table", "--per-attempt"),
    ),
    "chatml": ExportFormat(
        "training:chatml",
        "training samples, one JSON line each: messages as the model received and wrote them",
        kinds=("bench", "run"),
        options=(*_FILTERS, "--per-turn", "--thinking"),
    ),
    "openai": ExportFormat(
        "training:openai",
        "training samples in OpenAI's chat fine-tuning format (messages, tools)",
        kinds=("bench", "run"),
        options=(*_FILTERS, "--per-turn", "--thinking"),
    ),
    "dpo": ExportFormat(
        "training:dpo",
        "preference pairs: a correct and an incorrect attempt at one task, same prompt",
        kinds=("bench", "run"),
        # Pairs need both verdicts: --only is not for it.
        options=("--min-turns", "--max-turns", "--end-reason", "--thinking"),
    ),
}


def export(request: ExportRequest) -> ExportOutcome:
    """Run ``request`` with its format's writer (``only`` unset: the format's default)."""
    chosen = format_named(request.format)
    if request.only is None:
        request = replace(request, only=chosen.default_only)
    return chosen.writer()(request)


def format_named(name: str) -> ExportFormat:
    """The format called ``name``; a one-line :class:`ConfigError` listing the formats
    there are for any other name."""
    if name not in FORMATS:
        known = ", ".join(sorted(FORMATS))
        raise ConfigError(f"deepledger export: no format {name!r}; one of {known}.")
    return FORMATS[name]


def judged_tasks(run_dirs: tuple[Path, ...]) -> int:
    """How many tasks of these runs a judge gave a verdict (correct or incorrect): with
    none, ``--only correct`` has nothing to keep."""
    from deepledger.store.run_store import task_records

    return sum(
        1
        for run_dir in run_dirs
        for record in task_records(run_dir).values()
        # A failed task counts as wrong, but no judge saw it.
        if record.judgement is not None
        and not record.judgement.unjudged
        and record.correct is not None
    )
