"""The run report: a run directory (or several) as one self-contained HTML file.

- ``collect.py`` reads a run directory — finished, still going or killed — into the
  report's data: the run's figures, one row per task, each task's trajectory (a
  ``deepledger run`` folder: a run of its one question);
- ``charts.py`` builds the Vega-Lite chart specs (with altair);
- ``page.py`` writes the HTML file: data, charts and the viewer's script inline;
- ``compare.py`` puts several runs side by side;
- ``assets/`` holds the viewer's stylesheet and script.

What a user imports from here: ``write_run_report`` (one run's report.html),
``render_run_report`` (the same page as text, written nowhere),
``write_comparison`` (comparison.html of several runs) and ``RunData`` (a run directory
read). Each is imported on first use: altair is loaded only when a report is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepledger.lazy import lazy_exports

if TYPE_CHECKING:
    from deepledger.report.collect import RunData
    from deepledger.report.compare import write_comparison
    from deepledger.report.page import render_run_report, write_run_report

__getattr__ = lazy_exports(
    __name__,
    {
        "collect": ("RunData",),
        "compare": ("write_comparison",),
        "page": ("render_run_report", "write_run_report"),
    },
)

__all__ = [
    "RunData",
    "render_run_report",
    "write_comparison",
    "write_run_report",
]
