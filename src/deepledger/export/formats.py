"""The export formats: a name, the module that writes it, and one line saying what it is.

A format is one module of this package with one entry function
``(request: ExportRequest) -> ExportOutcome``; adding one is a module and a line here.
Modules are imported when their format is asked for (pyarrow only for Parquet).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from deepledger.errors import ConfigError
from deepledger.export.request import ExportOutcome, ExportRequest

Writer = Callable[[ExportRequest], ExportOutcome]


@dataclass(frozen=True)
class ExportFormat:
    """Where a format's writer lives (``module:function`` in this package) and what it
    writes, for ``deepledger export --help``."""

    entry: str
    summary: str

    def writer(self) -> Writer:
        module, _, function = self.entry.partition(":")
        writer: Writer = getattr(importlib.import_module(f"deepledger.export.{module}"), function)
        return writer


FORMATS: dict[str, ExportFormat] = {
    "mirothinker": ExportFormat(
        "mirothinker:export_mirothinker",
        "MiroThinker's benchmark log folder (run_N/ task logs, benchmark_results.jsonl, "
        "pass@k accuracy file), read by its average-score and progress scripts; OUT is a "
        "new or empty folder",
    ),
    "chatml": ExportFormat(
        "training:chatml",
        "training samples, one JSON line each: messages as the model received and wrote them",
    ),
    "openai": ExportFormat(
        "training:openai",
        "training samples in OpenAI's chat fine-tuning format (messages, tools)",
    ),
    "dpo": ExportFormat(
        "training:dpo",
        "preference pairs: a correct and an incorrect attempt at one task, same prompt",
    ),
}


def export(request: ExportRequest) -> ExportOutcome:
    """Run ``request`` with its format's writer."""
    if request.format not in FORMATS:
        known = ", ".join(sorted(FORMATS))
        raise ConfigError(f"deepledger export: no format {request.format!r}; one of {known}.")
    return FORMATS[request.format].writer()(request)
