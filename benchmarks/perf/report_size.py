"""How large the HTML report gets and how long it takes, for runs of many tasks.

Generates synthetic runs (``tests.support.doubles.synthetic_run``: journals in the current
format, 2 to 60 turns a task, five 0.5–2.5 kB search results a turn), writes each run's
report, and opens it in headless Chromium (Debian's ``chromium``) to time the first
render: the run's figures, the three charts and the full task table. Then opens one
task's trajectory. Numbers go to benchmarks/perf/results/report_size.json.

    .venv/bin/python benchmarks/perf/report_size.py [--tasks 1 500 1000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _checkout  # noqa: F401  (the checkout on sys.path: tests.support.doubles)
from tests.support.doubles.synthetic_run import make_run

from deepledger.bench.metrics import summarize
from deepledger.report.page import write_run_report
from deepledger.store.files import latest_records, read_jsonl
from deepledger.store.layout import RunLayout

ROOT = Path(__file__).resolve().parents[2]
RESULTS_FILE = ROOT / "benchmarks" / "perf" / "results" / "report_size.json"
REPEATS = 3


def summary_of(root: Path) -> dict:
    records = list(latest_records(read_jsonl(RunLayout(root).results)).values())
    return summarize(records, pass_at_k=1, benchmark="worldfacts", tasks_expected=len(records))


def browser_times(report: Path) -> dict[str, float] | None:
    chromium = shutil.which("chromium")
    if chromium is None:
        return None
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        started = time.perf_counter()
        page.goto(report.as_uri())
        for chart in ("prompt", "cumulative", "turns"):
            page.wait_for_selector(f"#chart-{chart} canvas")
        opened = time.perf_counter() - started
        started = time.perf_counter()
        page.click("#task-table tbody tr:first-child")
        page.wait_for_selector("#chart-task canvas")
        task = time.perf_counter() - started
        heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : null")
        browser.close()
    return {
        "open_seconds": round(opened, 2),
        "open_task_seconds": round(task, 2),
        "js_heap_mb": round(heap / 1e6, 1) if heap else None,
    }


def measure(tasks: int, scratch: Path) -> dict:
    root = make_run(scratch / f"run-{tasks}", tasks=tasks, conf_dir=ROOT / "conf")
    journals = sum(p.stat().st_size for p in RunLayout(root).tasks.rglob("*.jsonl"))
    summary = summary_of(root)
    seconds = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        report = write_run_report(root, summary)
        seconds.append(time.perf_counter() - started)
    row = {
        "tasks": tasks,
        "journals_mb": round(journals / 1e6, 1),
        "report_mb": round(report.stat().st_size / 1e6, 2),
        "write_seconds_median": round(statistics.median(seconds), 2),
        "write_seconds_all": [round(s, 2) for s in seconds],
    }
    row |= browser_times(report) or {"browser": "chromium not installed"}
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[1, 500, 1000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        rows = []
        for n in args.tasks:
            rows.append(measure(n, Path(scratch)))
            print(json.dumps(rows[-1]), flush=True)
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_FILE.write_text(
        json.dumps(
            {
                "what": "HTML report size and time on synthetic runs",
                "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                "python": sys.version.split()[0],
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written to {RESULTS_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
