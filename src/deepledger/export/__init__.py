"""Runs out of deepledger, in the forms other tools read: ``deepledger export RUN_DIR…``.

- ``request.py`` says what was asked (runs, format, output, filters) and what was written;
- ``formats.py`` is the registry of formats, each a module with one entry function:
  ``results`` (a row per task and attempt, JSONL or Parquet), ``chatml`` and ``openai``
  (training samples from the trajectories), ``dpo`` (pairs of a correct and an
  incorrect attempt at one task), ``mirothinker`` (MiroThinker's log layout).

What a user imports from here: ``ExportRequest``, ``ExportOutcome``, ``FORMATS`` and
``export`` (run one request).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepledger.lazy import lazy_exports

if TYPE_CHECKING:
    from deepledger.export.formats import FORMATS, export
    from deepledger.export.request import ExportOutcome, ExportRequest

__getattr__ = lazy_exports(
    __name__,
    {
        "formats": ("FORMATS", "export"),
        "request": ("ExportOutcome", "ExportRequest"),
    },
)
__all__ = ["FORMATS", "ExportOutcome", "ExportRequest", "export"]
