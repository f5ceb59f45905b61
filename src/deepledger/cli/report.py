"""``deepledger report``: a run's summary and report rebuilt, or several runs compared."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from deepledger.cli.common import EXIT_USAGE
from deepledger.errors import ConfigError, DeepLedgerError

if TYPE_CHECKING:
    from deepledger.records.results import SummaryRecord

HELP = """\
deepledger report — rebuild a finished (or interrupted) run's summary and HTML report from its
journals, or compare several runs in one report. No model is called.

usage: deepledger report RUN_DIR                  one run: prints its summary and writes
                                                  RUN_DIR/report.html
       deepledger report RUN_DIR RUN_DIR... [--out FILE]
                                                  several runs: their summaries averaged
                                                  (repeats of one setting) and one
                                                  comparison.html (beside the runs, or FILE)
       deepledger report SWEEP_DIR                a -m sweep's folder: its runs compared
                                                  side by side, never averaged

RUN_DIR is a folder a bench wrote (logs/<benchmark>/<model>/<time>); a folder deepledger
run wrote is reported alone (its page; no summary.json). The summary goes to stdout, the
report's path after it.
Exit codes: 0 done, 1 a run could not be read or a compared run is incomplete, 2 a usage
  error or a folder that is not a run, 141 the output pipe was closed."""


def report_command(args: list[str]) -> int:
    """One run: rebuild its summary and report (a ``deepledger run`` folder: its report,
    the summary printed and not written). Several: average them and write one report
    comparing them (``--out FILE``, else beside the runs). A sweep folder
    (``hydra.sweep.dir``) stands for its runs, compared side by side, not averaged."""
    from deepledger.bench.aggregate import aggregate, format_aggregate
    from deepledger.bench.report import rebuild_summary
    from deepledger.report.compare import default_output, sweep_runs, write_comparison
    from deepledger.report.page import write_run_report
    from deepledger.store.layout import REPORT
    from deepledger.store.locate import require_run, run_kind

    out = None
    if "--out" in args:
        at = args.index("--out")
        if at + 1 >= len(args):
            raise ConfigError("--out needs the path of the comparison file to write.")
        out = Path(args[at + 1])
        args = args[:at] + args[at + 2 :]
    if not args or any(a.startswith("-") for a in args):
        flags = [a for a in args if a.startswith("-")]
        what = f"does not take {flags[0]}" if flags else "needs a run folder"
        print(
            f"deepledger report {what}.\nusage: deepledger report RUN_DIR [RUN_DIR...] "
            "[--out FILE]",
            file=sys.stderr,
        )
        return EXIT_USAGE
    run_dirs: list[Path] = []
    sweep = False  # runs with different settings: compared, never averaged
    for folder in map(Path, args):
        runs = sweep_runs(folder)
        sweep = sweep or runs is not None
        if runs is None and len(args) > 1 and run_kind(folder) == "run":
            raise ConfigError(
                f"deepledger report: {folder} is a `deepledger run` folder: only bench runs "
                f"are compared; report it alone (deepledger report {folder})."
            )
        if runs is None and len(args) == 1:  # no run: one line, not a traceback
            require_run(folder, "report")  # (of several, the comparison lists it)
        run_dirs += runs or [folder]
    if len(run_dirs) == 1 and out is not None:
        raise ConfigError(
            f"--out names the comparison of several runs; one run's report is {REPORT} in "
            "its run directory."
        )
    if len(run_dirs) == 1:
        return _report_one(run_dirs[0])
    summaries: dict[Path, SummaryRecord] = {}
    for run_dir in run_dirs:
        try:
            summaries[run_dir] = summary = rebuild_summary(run_dir)
            write_run_report(run_dir, summary)
        except DeepLedgerError as exc:
            print(f"deepledger: {exc}", file=sys.stderr)
        except Exception as exc:  # one run's report must not cost the comparison
            print(f"deepledger: {run_dir}: its report failed ({exc!r})", file=sys.stderr)
    combined = aggregate(run_dirs)
    print(format_aggregate(combined, averaged=not sweep))
    path = write_comparison(run_dirs, summaries, out or default_output(run_dirs))
    print(f"Comparison: {path}")
    return 0 if combined["complete"] else 1


def _report_one(run_dir: Path) -> int:
    """One run's summary printed and its report written. Into a ``deepledger run``
    folder nothing else is written (no summary.json): its process may still be going."""
    from deepledger.bench.metrics import format_summary
    from deepledger.bench.report import format_run_folder, rebuild_summary, run_folder_summary
    from deepledger.report.page import write_run_report
    from deepledger.store.locate import run_kind

    if run_kind(run_dir) == "run":
        print(format_run_folder(run_dir))
        print(f"Report: {write_run_report(run_dir, run_folder_summary(run_dir))}")
        return 0
    summary = rebuild_summary(run_dir)
    print(format_summary(summary))
    print(f"Report: {write_run_report(run_dir, summary)}")
    return 0
