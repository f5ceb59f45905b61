"""Benchmark suites: tasks, the runner, judging, metrics, progress and multi-run reports.

The entry points behind the commands, importable from here (each on first use):
``run_suite`` (``deepledger bench``, suite.py), ``run_replay`` (``deepledger
replay``, replay.py), ``run_judging`` (``deepledger judge``, judging.py),
``rebuild_summary`` (``deepledger report``, report.py); and what a suite is made of:
``Task`` and ``load_tasks`` (tasks.py), ``Judge``, ``Judgement`` and ``make_judge``
(judge.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepledger.lazy import lazy_exports

if TYPE_CHECKING:
    from deepledger.bench.judge import Judge, Judgement, make_judge
    from deepledger.bench.judging import run_judging
    from deepledger.bench.replay import run_replay
    from deepledger.bench.report import rebuild_summary
    from deepledger.bench.suite import run_suite
    from deepledger.bench.tasks import Task, load_tasks

__getattr__ = lazy_exports(
    __name__,
    {
        "judge": ("Judge", "Judgement", "make_judge"),
        "judging": ("run_judging",),
        "replay": ("run_replay",),
        "report": ("rebuild_summary",),
        "suite": ("run_suite",),
        "tasks": ("Task", "load_tasks"),
    },
)

__all__ = [
    "Judge",
    "Judgement",
    "Task",
    "load_tasks",
    "make_judge",
    "rebuild_summary",
    "run_judging",
    "run_replay",
    "run_suite",
]
