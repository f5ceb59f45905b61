"""What a budget check costs when many tasks run: every turn of every task asks it.

With a run budget set (``benchmark.execution.max_cost_usd`` / ``max_tokens``), the check
before each turn sums what the recorded tasks spent and what every running task spends
now. 256 running tasks with 100 model calls each; the time of one check (the run's and
the task's limits) is printed and written to ``results/budget_checks.json``.

    .venv/bin/python benchmarks/perf/budget_checks.py [--tasks 256] [--calls 100]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from deepledger.agent.limits import RunBudget, TaskBudget, TaskLimits
from deepledger.llm.scripted import reply
from deepledger.llm.usage import Price, UsageLedger
from deepledger.messages import Usage

RESULTS = Path(__file__).with_name("results") / "budget_checks.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=256)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--checks", type=int, default=2000)
    args = parser.parse_args()
    run = RunBudget(max_cost_usd=1e9, max_tokens=10**12)
    budgets = []
    for _ in range(args.tasks):
        budget = TaskBudget(TaskLimits(tokens=10**12, cost_usd=1e9), run)
        ledger = UsageLedger(Price(1.0, 4.0, 0.1, 1.0))
        for _ in range(args.calls):
            ledger.record(reply("x", usage=Usage(1000, 10)))
        watching = budget.watch(ledger, keep=True)
        watching.__enter__()  # running: never left in this benchmark
        run.task_started(budget)
        budgets.append((budget, ledger, watching))
    started = time.perf_counter()
    for i in range(args.checks):
        budget, ledger, _ = budgets[i % len(budgets)]
        ledger.record(reply("x", usage=Usage(1000, 10)))  # a turn's call, as in a run
        assert budget.check() is None
    per_check = (time.perf_counter() - started) / args.checks
    assert run.spent().tokens == (args.tasks * args.calls + args.checks) * 1010
    result = {"tasks": args.tasks, "calls_per_task": args.calls, "ms_per_check": per_check * 1e3}
    print(f"{args.tasks} running tasks x {args.calls} calls: {per_check * 1e3:.3f} ms a check")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
