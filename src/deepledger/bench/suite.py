"""``deepledger bench``: one run of a suite, from config to ``summary.json``."""

from __future__ import annotations

import asyncio
import logging
import shlex
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from deepledger.agent.retry_plan import RetryPlan
from deepledger.bench.backends import SuiteBackend, backend_for
from deepledger.bench.economics import token_economics
from deepledger.bench.hydra_hooks import save_hydra_files
from deepledger.bench.inputs import (
    InputCheck,
    check_inputs,
    judge_identity,
    refuse_changed,
    start_over,
    with_digests,
)
from deepledger.bench.judge_rules import check_protocol
from deepledger.bench.metrics import (
    StoppedTasks,
    endpoint_counts,
    format_summary,
    plural,
    summarize,
)
from deepledger.bench.services import (
    PresetPath,
    SuiteModels,
    judge_model,
    judge_preset,
    note_writer,
    page_scraper,
    price_sources,
)
from deepledger.bench.tasks import Task, TaskFile, load_tasks, require_tasks
from deepledger.config import (
    Config,
    as_record,
    secret_rules,
)
from deepledger.context.strategies import strategy_problems
from deepledger.errors import ConfigError, RunDirectoryError
from deepledger.messages import JSONObject
from deepledger.records.economics import EconomicsUnavailable
from deepledger.records.results import SummaryRecord, TaskRecord
from deepledger.report.page import write_run_report
from deepledger.store.layout import RunLayout
from deepledger.store.run_store import RunStore, task_records

log = logging.getLogger(__name__)


async def run_suite(
    cfg: Config,
    root: Path,
    conf_dir: Path,
    argv: list[str],
    hydra_config: JSONObject | None = None,
    on_started: Callable[[], None] | None = None,
) -> SummaryRecord:
    """Run (or resume) the suite into ``root``; return the summary it wrote.
    ``hydra_config``: the config as Hydra composed it, for ``.hydra/`` (the CLI's).
    ``on_started``: called once the run has started in ``root`` (its manifest written),
    so a folder is named to the user only when there is a run in it to resume."""
    # config's validate() cannot see the strategies' registry (a floor above it): a
    # caller that composed its own config gets a bad name refused here, before any work.
    if problems := strategy_problems(cfg.agent.context):
        raise ConfigError(problems[0])
    backend = backend_for(cfg)
    backend.prepare()  # e.g. the open-file limit, or how to install Ray: before any work
    presets = PresetPath.of(conf_dir)  # Hydra's search path, while the command runs
    models = await _suite_models(cfg, presets)
    run_dir = RunStore(root)
    unwritten: RunDirectoryError | None = None  # the final report, refused by the disk
    try:
        config = as_record(cfg)
        allowed, changed = await _accepted_resume(cfg, run_dir, config, models.tasks)
        # A backend that cannot start (an unreachable cluster, a worker that cannot
        # see the run directory) is refused before the manifest and .hydra/ change too.
        await backend.start(run_dir, presets, run_dir.planned_config_id(config), models)
        if hydra_config is not None:
            save_hydra_files(root, hydra_config)
        run_dir.start(config, argv, tasks=len(models.tasks))
        if on_started is not None:
            on_started()
        tasks = await _start_over_changed(run_dir, changed, models.tasks, allowed)
        records, stopped = await _run_with_live_report(cfg, run_dir, tasks, models, backend)
        summary = await _final_summary(cfg, run_dir, records, stopped, len(tasks), models)
        report, unwritten = await _final_report(cfg, root, summary)
    finally:
        await backend.close()
        run_dir.close()
    print(format_summary(summary, post_mortems_on=RetryPlan.from_config(cfg).writes_post_mortems))
    if report is not None:
        print(f"Report: {report}")
    folder = shlex.quote(str(root))  # pastes as is: a folder may hold a space or a quote
    how = (
        f"resume the run in its folder (deepledger resume {folder}); or grade them apart, "
        f"in a judging beside the run's results: deepledger judge {folder}"
    )
    if warning := unjudged_warning(summary.tasks.unjudged, how):
        print(f"deepledger: {warning}", file=sys.stderr)
    if unwritten is not None:
        raise _report_not_written(root, unwritten)
    return summary


async def _suite_models(cfg: Config, conf_dir: PresetPath) -> SuiteModels:
    """The tasks (what the task file skipped said on stderr; no task: exit 2, saying
    why), with what each result will have answered, and the models built early."""
    check_protocol(cfg.benchmark.judge)  # a preset's labels, fields and template: exit 2 now
    loaded = load_tasks(cfg.benchmark.data, cfg.benchmark.execution.max_tasks, secret_rules(cfg))
    for notice in shown_notices(loaded):  # skipped lines, a mapping that finds no ground truth
        print(f"deepledger: {notice}", file=sys.stderr)
    require_tasks(loaded, cfg.benchmark.execution.max_tasks)
    judge_llm = judge_model(cfg, loaded.tasks, conf_dir)  # a missing key fails before any work
    judge = judge_identity(cfg.benchmark.judge, judge_preset(cfg, loaded.tasks, conf_dir))
    tasks = await with_digests(loaded.tasks, judge)
    return SuiteModels(
        tasks,
        loaded.problems,
        judge_llm,
        note_writer(cfg, conf_dir),
        page_scraper(cfg, conf_dir),
        price_sources(cfg, conf_dir),
    )


def unjudged_warning(unjudged: int, how: str) -> str | None:
    """The line a run (or a judging) with unjudged tasks ends with: its accuracy leaves
    them out, so the number is not the suite's until they are judged; ``how`` says how
    to judge them."""
    if not unjudged:
        return None
    return (
        f"warning: {plural(unjudged, 'task')} {'was' if unjudged == 1 else 'were'} left "
        "unjudged (the judge gave no verdict; the reason is in each result line) and "
        "the accuracy above leaves them out. Judge them from their recorded answers, "
        f"without running the agent again: {how}"
    )


async def _accepted_resume(
    cfg: Config, run_dir: RunStore, config: JSONObject, tasks: list[Task]
) -> tuple[list[str], InputCheck]:
    """The settings a permitted resume changes, and which tasks' inputs changed; a
    resume that may not go on is refused here, before the manifest changes."""
    # A resume that would mix settings (or judges) in one summary; see
    # store/run_config.py for which keys count.
    allowed = run_dir.check_resume(config, allow_change=resume_may_change_config(cfg))
    # Results recorded for other inputs (an edited task file, attachment or judge):
    # with resume.on_changed_tasks=refuse, refused here too (bench/inputs.py).
    changed = await asyncio.to_thread(check_inputs, run_dir, tasks)
    refuse_changed(changed, cfg.resume.on_changed_tasks, run_dir.root)
    return allowed, changed


async def _start_over_changed(
    run_dir: RunStore, changed: InputCheck, tasks: list[Task], allowed: list[str]
) -> list[Task]:
    """Set the changed tasks aside (bench/inputs.py) and say so, and what settings a
    permitted resume changed; the tasks to run."""
    tasks, said = await asyncio.to_thread(start_over, run_dir, changed, tasks)
    for line in said:
        print(f"deepledger: {line}", file=sys.stderr)
    if allowed:
        print(
            f"deepledger: resuming {run_dir.root} with other settings than its last run "
            f"(resume.allow_config_change=true); its tasks from now on record config "
            f"{run_dir.config_id}:\n  " + "\n  ".join(allowed),
            file=sys.stderr,
        )
    return tasks


async def _run_with_live_report(
    cfg: Config,
    run_dir: RunStore,
    tasks: list[Task],
    models: SuiteModels,
    backend: SuiteBackend,
) -> tuple[list[TaskRecord], StoppedTasks]:
    """Run the tasks on the backend, the report rewritten while they go."""
    ended = threading.Event()
    live_report = asyncio.create_task(
        _report_while_running(run_dir.root, cfg, len(tasks), ended, models.prices),
        name="live report",
    )
    try:
        return await backend.run(run_dir, tasks, models)
    finally:
        ended.set()  # a live report still being written must not replace the final one
        live_report.cancel()


async def _final_summary(
    cfg: Config,
    run_dir: RunStore,
    records: list[TaskRecord],
    stopped: StoppedTasks,
    expected: int,
    models: SuiteModels,
) -> SummaryRecord:
    """The run's metrics, written to summary.json, and the run's end in the manifest."""
    root = run_dir.root
    summary = summarize(
        records,
        pass_at_k=cfg.benchmark.execution.pass_at_k,
        benchmark=cfg.benchmark.name,
        tasks_expected=expected,
        extra={"run_dir": str(root), "skipped_lines": models.skipped_lines},
        execution=cfg.benchmark.execution,  # its budget
        stopped=stopped,  # tasks the run's budget cut short: unrecorded
        metrics=cfg.benchmark.metrics or (),  # the protocol's published metrics
        breakdown=cfg.benchmark.breakdown or (),
    )
    summary.token_economics = await asyncio.to_thread(token_economics, root)
    summary.endpoints = await asyncio.to_thread(endpoint_counts, root)  # llm.endpoints
    summary.prices = models.prices
    run_dir.write_summary(summary)
    run_dir.finish()
    return summary


async def _final_report(
    cfg: Config, root: Path, summary: SummaryRecord
) -> tuple[Path | None, RunDirectoryError | None]:
    """The final report, or the disk's refusal of it: the results are on disk, so that
    is said after them."""
    try:
        wanted = cfg.benchmark.execution.report
        return await asyncio.to_thread(_write_report, root, summary, wanted=wanted), None
    except RunDirectoryError as refused:
        return None, refused


def _report_not_written(root: Path, refused: RunDirectoryError) -> RunDirectoryError:
    """The one line of a run whose report the disk refused (full, or read-only): its
    results and summary are written, so only the report is to be made again."""
    cause = refused.__cause__
    why = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(refused)
    layout = RunLayout(root)
    return RunDirectoryError(
        f"the HTML report {layout.report} could not be written ({why}); the results are "
        f"complete ({layout.results.name}, {layout.summary.name}). Free some space, then "
        f"write it with: deepledger report {root}"
    )


async def _report_while_running(
    root: Path,
    cfg: Config,
    expected: int,
    ended: threading.Event,
    prices: dict[str, str] | None = None,
) -> None:
    """Rewrite report.html every ``report_every_seconds`` while tasks finish, so a
    browser refresh follows a long run. The token economics (a replay of every journal)
    wait for the end."""
    # benchmark.execution.report=false: no report while the run goes either.
    every = cfg.benchmark.execution.report_every_seconds if cfg.benchmark.execution.report else 0
    results, written = RunLayout(root).results, None
    execution = cfg.benchmark.execution

    def write() -> Path | None:
        records = list(task_records(root).values())
        summary = summarize(
            records,
            pass_at_k=execution.pass_at_k,
            benchmark=cfg.benchmark.name,
            tasks_expected=expected,
            extra={"run_dir": str(root)},
            execution=execution,  # its budget
            metrics=cfg.benchmark.metrics or (),
            breakdown=cfg.benchmark.breakdown or (),
        )
        summary.token_economics = EconomicsUnavailable(unavailable="computed when the run ends")
        summary.prices = prices
        return _write_report(root, summary, ended)

    while every > 0:
        await asyncio.sleep(every)
        try:  # an appended file grows: size tells a change that a coarse clock may not
            stamp = (results.stat().st_mtime_ns, results.stat().st_size)
        except OSError:
            continue  # no task finished yet
        if stamp == written:
            continue
        try:
            if await asyncio.to_thread(write) is not None:
                written = stamp
        except Exception:  # a live report is a convenience: never the run's end
            log.exception("the live report could not be written")


_one_report_at_a_time = threading.Lock()


def _write_report(
    root: Path,
    summary: SummaryRecord,
    ended: threading.Event | None = None,
    *,
    wanted: bool = True,
) -> Path | None:
    """The run's HTML report; None when ``wanted`` is false
    (``benchmark.execution.report=false``: ``deepledger report RUN_DIR`` writes it
    later). A report that cannot be written costs the run nothing: its results and
    summary are on disk, and ``deepledger report`` can try again. A disk that refuses it
    (full, read-only) raises :class:`RunDirectoryError` for the final report, which the
    run says in one line after its summary (exit code 2).

    A live report (``ended`` given) is skipped once the run has ended: cancelling its
    task does not stop a thread already writing, so the final report waits for the lock
    and a live one that gets the lock after the end writes nothing."""
    if not wanted:
        return None
    try:
        with _one_report_at_a_time:
            if ended is not None and ended.is_set():
                return None
            return write_run_report(root, summary)
    except RunDirectoryError:  # the disk is full or read-only: no traceback, said once
        if ended is not None:  # a live one: the final report will say it
            return None
        raise
    except Exception as exc:
        log.exception("the report could not be written")
        if ended is not None:  # a live one: the final report will say it, once
            return None
        print(
            f"deepledger: the HTML report could not be written ({type(exc).__name__}: {exc}); "
            f"the results are complete. Try again with: deepledger report {root}",
            file=sys.stderr,
        )
        return None


def resume_may_change_config(cfg: Config) -> bool:
    """``resume.allow_config_change`` (given as ``+resume...=true`` or without the ``+``)."""
    return bool(cfg.resume.allow_config_change)


SKIPPED_LINES_SHOWN = 20  # a wrong field_mapping skips every line: the rest go to summary.json


def shown_notices(loaded: TaskFile) -> list[str]:
    """What the run says before it starts: the first skipped lines, how many more there
    are (summary.json's ``extra.skipped_lines`` lists them all when a task is left to
    run), then every warning."""
    skipped = [f"skipped {problem}" for problem in loaded.problems[:SKIPPED_LINES_SHOWN]]
    if (more := len(loaded.problems) - SKIPPED_LINES_SHOWN) > 0:
        where = " (all listed in summary.json's extra.skipped_lines)" if loaded.tasks else ""
        skipped.append(f"… and {more} more {'line' if more == 1 else 'lines'} skipped{where}")
    return skipped + [f"warning: {warning}" for warning in loaded.warnings]
