"""``deepledger bench``: a benchmark suite run under Hydra into its run folder."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from deepledger.bench.metrics import plural
from deepledger.cli.common import config_dir, fail
from deepledger.cli.resuming import how_to_resume, short_resume_command
from deepledger.errors import ConfigError, RunDirectoryError, RunRejectedError
from deepledger.store.layout import RunLayout

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from deepledger.config import Config
    from deepledger.records.results import BudgetSummary


def checked(cfg: Config) -> None:
    from deepledger.config import share_reading_rules, validate
    from deepledger.context.strategies import STRATEGIES
    from deepledger.llm.factory import create_client

    validate(cfg, STRATEGIES)
    share_reading_rules(cfg)
    # Building the client fails early on a missing key or an unavailable provider.
    asyncio.run(create_client(cfg.llm).aclose())


@contextlib.contextmanager
def refused_leaves_nothing() -> Iterator[None]:
    """A command refused for its configuration before its run started leaves no new run
    folder behind: the one the Hydra callback made (its lock, ``.hydra/``) is removed
    again. A folder that was there before is left as it was, and one whose run started
    (``RunStore.start``) is never touched (``store/lock.py``)."""
    from hydra.core.hydra_config import HydraConfig

    from deepledger.store.lock import discard_claimed

    try:
        yield
    except ConfigError:
        discard_claimed(Path(HydraConfig.get().runtime.output_dir))
        raise


def bench_command(cfg: Config, node: DictConfig) -> int:
    from hydra.core.hydra_config import HydraConfig

    from deepledger.bench.suite import run_suite
    from deepledger.cli.hydra_command import in_sweep
    from deepledger.config import node_data

    root = Path(HydraConfig.get().runtime.output_dir)
    sweep_dir = root.parent if in_sweep() else None
    overrides = sys.argv[1:]  # the command line as Hydra got it (cli/hydra_command.py)
    composed = node_data(node, resolve=False)  # for .hydra/config.yaml: as composed
    try:
        # run_suite refuses some settings itself (no tasks in data_dir, a judge's missing
        # key) before its run starts writing: those leave no folder either.
        with refused_leaves_nothing():
            checked(cfg)
            summary = asyncio.run(
                run_suite(
                    cfg,
                    root,
                    config_dir(),
                    overrides,
                    hydra_config=composed,
                    on_started=lambda: say_run_folder(root, overrides),
                )
            )
    except (RunRejectedError, RunDirectoryError) as exc:
        if not RunLayout(root).manifest.is_file():
            raise  # refused before its run started: nothing to resume
        code = fail(exc)  # the suite stopped: what it finished is saved
        print(how_to_resume(overrides, root, sweep_dir), file=sys.stderr)
        return code
    print(f"Run directory: {root}")
    budget = summary.budget
    not_done = budget is not None and (budget.tasks_not_started or budget.tasks_stopped)
    stopped = budget is not None and budget.exhausted and not_done  # tasks kept from finishing
    if stopped or (errors := summary.tasks.errors):
        raised = raised_budgets(budget) if stopped and budget is not None else []
        why = (
            f"deepledger bench: the budget stopped the run (the commands below double it: "
            f"{' '.join(raised)}; set the one you want)"
            if stopped
            else f"deepledger bench: {plural(errors, 'task')} errored (a resume runs "
            f"{'it' if errors == 1 else 'them'} again)"
        )
        print(how_to_resume(overrides, root, sweep_dir, why=why, changed=raised), file=sys.stderr)
    return 0 if not summary.tasks.errors and not stopped else 1


def raised_budgets(budget: BudgetSummary) -> list[str]:
    """The spent run budgets, doubled, as overrides: the same budget again would stop
    the resumed run before its first task."""
    left = {"max_tokens": budget.left_tokens, "max_cost_usd": budget.left_usd}
    raised = []
    for kind, limit in budget.limits.items():
        if (left_over := left.get(kind)) is not None and left_over <= 0:
            # Written out in full: 2e+06 would be read as a float, a token count is not.
            doubled = f"{int(limit * 2)}" if kind == "max_tokens" else f"{limit * 2:.6f}"
            value = doubled.rstrip("0").rstrip(".") if "." in doubled else doubled
            raised.append(f"benchmark.execution.{kind}={value}")
    return raised


def say_run_folder(root: Path, overrides: list[str]) -> None:
    """The run folder, named on stderr as soon as its run has started, before any task:
    the one a resume needs (the default one carries the start time, so the same command
    again starts a new run). A run refused before it started names no folder."""
    print(
        f"deepledger bench: run folder {root} — resume with: "
        f"{short_resume_command(overrides, root)}",
        file=sys.stderr,
    )
