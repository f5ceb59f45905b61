"""``deepledger bench``: one run of a suite, from config to ``summary.json``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

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
from deepledger.bench.judge import Judge, make_judge
from deepledger.bench.judge_rules import check_protocol
from deepledger.bench.metrics import (
    StoppedTasks,
    endpoint_counts,
    format_summary,
    plural,
    summarize,
)
from deepledger.bench.progress import Progress
from deepledger.bench.runner import BenchmarkRunner
from deepledger.bench.tasks import Task, TaskFile, load_tasks, require_tasks
from deepledger.config import (
    Backend,
    Config,
    JudgeConfig,
    JudgeName,
    LLMConfig,
    ToolServerConfig,
    as_record,
    check_llm_preset,
    extract_llm_name,
    secret_rules,
    tool_servers,
    typed_llm,
)
from deepledger.context.compaction import NoteWriter
from deepledger.context.strategies import writes_notes
from deepledger.errors import ConfigError, RunDirectoryError
from deepledger.llm.base import GenerationSettings, LLMCapabilities, LLMClient
from deepledger.llm.factory import create_client, settings_from_config
from deepledger.llm.usage import UNPRICED, price_of
from deepledger.messages import JSONObject
from deepledger.records.economics import EconomicsUnavailable
from deepledger.records.results import SummaryRecord, TaskRecord
from deepledger.report.page import write_run_report
from deepledger.store.layout import RunLayout
from deepledger.store.run_store import RunStore, task_records
from deepledger.tools.list_cache import ToolListCache
from deepledger.tools.pool import ToolManager
from deepledger.tools.roots import narrow_wide_roots
from deepledger.tools.scrape import ExtractionModel, PageScraper, suite_corpus

if TYPE_CHECKING:  # Ray is optional and slow to import: only for backend=ray
    from deepledger.bench.ray_backend import RayTasks

log = logging.getLogger(__name__)


@dataclass
class SuiteModels:
    """What a run needs before its run directory is touched: the tasks with their input
    digests, the task file's skipped lines, and the models built early so that a
    missing key fails before any work (the LLM judge's, the note writer's, the page
    scraper's)."""

    tasks: list[Task]
    skipped_lines: list[str]
    judge_llm: tuple[LLMClient, GenerationSettings] | None
    writer: NoteWriter | None
    scraper: PageScraper | None
    prices: dict[str, str] | None = None  # who prices each model: summary.json's prices


async def run_suite(
    cfg: Config,
    root: Path,
    conf_dir: Path,
    argv: list[str],
    hydra_config: JSONObject | None = None,
) -> SummaryRecord:
    """Run (or resume) the suite into ``root``; return the summary it wrote.
    ``hydra_config``: the config as Hydra composed it, for ``.hydra/`` (the CLI's)."""
    on_ray = cfg.benchmark.execution.backend == Backend.RAY
    if on_ray:  # Ray is optional and slow to import: only for backend=ray
        from deepledger.bench import ray_backend

        ray_backend.require_ray()  # one line saying how to install it, before any work
    if not on_ray:  # each Ray worker makes room for its own tasks
        ensure_open_files(cfg.benchmark.execution.max_concurrent)
    presets = PresetPath.of(conf_dir)  # Hydra's search path, while the command runs
    models = await _suite_models(cfg, presets)
    run_dir = RunStore(root)
    cluster, workers = None, None
    unwritten: RunDirectoryError | None = None  # the final report, refused by the disk
    try:
        config = as_record(cfg)
        allowed, changed = await _accepted_resume(cfg, run_dir, config, models.tasks)
        if on_ray:  # an unreachable cluster, or a worker that cannot start or see the run
            # directory, is refused before the manifest and .hydra/ change too
            await _close_checked_models(models.judge_llm, models.writer, models.scraper)
            cluster = ray_backend.connect(cfg.benchmark.execution.ray)
            workers = await ray_backend.start_workers(
                cfg,
                run_dir,
                presets,
                run_dir.planned_config_id(config),
                judged=models.judge_llm is not None,
            )
        if hydra_config is not None:
            save_hydra_files(root, hydra_config)
        run_dir.start(config, argv, tasks=len(models.tasks))
        tasks = await _start_over_changed(run_dir, changed, models.tasks, allowed)
        records, stopped = await _run_with_live_report(cfg, run_dir, tasks, models, workers)
        summary = await _final_summary(cfg, run_dir, records, stopped, len(tasks), models)
        report, unwritten = await _final_report(cfg, root, summary)
    finally:
        if workers is not None:
            await workers.close()
        if cluster is not None:
            cluster.close()
        run_dir.close()
    print(format_summary(summary))
    if report is not None:
        print(f"Report: {report}")
    how = (
        "run the same command again (same hydra.run.dir); or grade them apart, in a "
        f"judging beside the run's results: deepledger judge {root}"
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
    workers: RayTasks | None,
) -> tuple[list[TaskRecord], StoppedTasks]:
    """Run the tasks here or on the Ray workers, the report rewritten while they go."""
    ended = threading.Event()
    live_report = asyncio.create_task(
        _report_while_running(run_dir.root, cfg, len(tasks), ended, models.prices),
        name="live report",
    )
    try:
        if workers is not None:
            from deepledger.bench import ray_backend

            return await ray_backend.run_on_ray(cfg, run_dir, tasks, workers)
        return await _run_tasks(
            cfg, run_dir, tasks, models.judge_llm, models.writer, models.scraper
        )
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


@dataclass
class TaskServices:
    """What running tasks takes, built in the process that runs them (this one; with
    backend=ray each worker builds its own): the model client, the tool servers, the
    judge and the other models. ``aclose`` lets go of them all."""

    llm: LLMClient
    tools: ToolManager
    judge: Judge | None
    judge_llm: tuple[LLMClient, GenerationSettings] | None
    note_writer: NoteWriter | None
    scraper: PageScraper | None

    def runner(self, cfg: Config, run_dir: RunStore, progress: Progress) -> BenchmarkRunner:
        return BenchmarkRunner(
            cfg,
            llm=self.llm,
            tools=self.tools,
            run_dir=run_dir,
            judge=self.judge,
            progress=progress,
            note_writer=self.note_writer,
            scraper=self.scraper,
        )

    async def aclose(self) -> None:
        await self.tools.aclose()
        await self.llm.aclose()
        await _close_checked_models(self.judge_llm, self.note_writer, self.scraper)


async def _close_checked_models(
    judge_llm: tuple[LLMClient, GenerationSettings] | None,
    writer: NoteWriter | None,
    scraper: PageScraper | None,
) -> None:
    if writer is not None:
        await writer.llm.aclose()
    if scraper is not None:
        await scraper.aclose()
    if judge_llm is not None:
        await judge_llm[0].aclose()


async def task_services(
    cfg: Config,
    run_dir: RunStore,
    judge_llm: tuple[LLMClient, GenerationSettings] | None,
    writer: NoteWriter | None = None,
    scraper: PageScraper | None = None,
) -> TaskServices:
    """The model client, tool servers and judge for ``cfg``'s tasks, with the models
    built earlier (``judge_model``, ``note_writer``, ``page_scraper``)."""
    llm = create_client(cfg.llm)
    tools = ToolManager(
        file_servers_confined(cfg),
        log_dir=run_dir.layout.tool_server_logs,
        list_cache=ToolListCache.default(),
    )
    try:
        judge = build_judge(cfg, judge_llm)
    except BaseException:
        await tools.aclose()
        await llm.aclose()
        raise
    return TaskServices(llm, tools, judge, judge_llm, writer, scraper)


def file_servers_confined(cfg: Config) -> dict[str, ToolServerConfig]:
    """``cfg``'s tool servers, with a data folder that holds the working directory or the
    home folder narrowed to the tasks' attached files (``tools/roots.py``). The tasks
    are read again only then: a Ray worker has no task list of its own."""
    servers = tool_servers(cfg)

    def attachments() -> list[str]:
        execution = cfg.benchmark.execution
        loaded = load_tasks(cfg.benchmark.data, execution.max_tasks, secret_rules(cfg))
        return [task.file_path for task in loaded.tasks if task.file_path]

    narrow_wide_roots(servers, attachments, cfg.web.allow_working_dir)
    return servers


async def _run_tasks(
    cfg: Config,
    run_dir: RunStore,
    tasks: list[Task],
    judge_llm: tuple[LLMClient, GenerationSettings] | None,
    writer: NoteWriter | None = None,
    scraper: PageScraper | None = None,
) -> tuple[list[TaskRecord], StoppedTasks]:
    """The records, and the tasks the run's budget stopped unrecorded (runner.unrecorded)."""
    try:
        services = await task_services(cfg, run_dir, judge_llm, writer, scraper)
    except BaseException:
        await _close_checked_models(judge_llm, writer, scraper)
        raise
    if advice := concurrency_advice(cfg, services.llm.capabilities):
        print(f"deepledger: {advice}", file=sys.stderr)
    try:
        runner = services.runner(cfg, run_dir, Progress())
        return await runner.run(tasks), runner.unrecorded()
    finally:
        await services.aclose()


def resume_may_change_config(cfg: Config) -> bool:
    """``resume.allow_config_change`` (given as ``+resume...=true`` or without the ``+``)."""
    return bool(cfg.resume.allow_config_change)


# What one running task may hold open at once: its model connection, its journal, and
# a tool call's socket or pipe; and what the run holds besides (tool servers' pipes,
# logs, the results file, the event loop's own).
FILES_PER_TASK = 3
FILES_FOR_THE_RUN = 256


def ensure_open_files(max_concurrent: int) -> None:
    """Raise this process's open-file limit (the soft one, up to the hard one) to what
    ``max_concurrent`` tasks need, so a large run does not fail connection by connection
    with "too many open files"; refuse before any work when even the hard limit is
    lower."""
    import resource

    needed = FILES_PER_TASK * max_concurrent + FILES_FOR_THE_RUN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise ConfigError(
            f"benchmark.execution.max_concurrent={max_concurrent} needs about {needed:,} open "
            f"files (a connection, a journal and a tool call's pipe a task), and this process "
            f"may open at most {hard:,} (ulimit -Hn). Lower max_concurrent, or raise the hard "
            "limit, e.g. in /etc/security/limits.conf or with `ulimit -Hn` as root."
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def concurrency_advice(cfg: Config, capabilities: LLMCapabilities) -> str | None:
    """A word when the suite's concurrency works against its model: a server that
    answers one request at a time (the bundled model's) reuses only the prompt it saw
    last."""
    concurrent = cfg.benchmark.execution.max_concurrent
    if capabilities.parallel_requests or concurrent <= 1:
        return None
    return (
        f"llm={cfg.llm.provider} answers one request at a time; with benchmark.execution."
        f"max_concurrent={concurrent} the tasks interleave and each re-reads its whole "
        "prompt. benchmark.execution.max_concurrent=1 is faster."
    )


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


def judge_model(
    cfg: Config, tasks: list[Task], conf_dir: Path | PresetPath
) -> tuple[LLMClient, GenerationSettings] | None:
    """The LLM judge's model, built before any task runs so a missing key fails early —
    and only when some task has a ground truth to judge against."""
    judge = cfg.benchmark.judge
    if judge.name != JudgeName.LLM or all(t.ground_truth is None for t in tasks):
        return None
    return llm_judge_model(cfg, conf_dir)


def judge_preset(cfg: Config, tasks: list[Task], conf_dir: Path | PresetPath) -> LLMConfig | None:
    """The llm judge's model settings, for the tasks' input digests (bench/inputs.py);
    None for another judge, or when no task has a ground truth (nothing is judged)."""
    judge = cfg.benchmark.judge
    if judge.name != JudgeName.LLM or not judge.llm or all(t.ground_truth is None for t in tasks):
        return None
    return judge_llm_config(cfg.benchmark.judge, conf_dir)


def llm_judge_model(
    cfg: Config, conf_dir: Path | PresetPath
) -> tuple[LLMClient, GenerationSettings]:
    """The model of ``benchmark.judge.name=llm``, from its preset and the judge's own
    ``model`` and ``base_url``."""
    preset = judge_llm_config(cfg.benchmark.judge, conf_dir)
    return create_client(preset), settings_from_config(preset)


def build_judge(cfg: Config, model: tuple[LLMClient, GenerationSettings] | None) -> Judge | None:
    return judge_of(cfg.benchmark.judge, model)


def judge_of(
    judge: JudgeConfig, model: tuple[LLMClient, GenerationSettings] | None
) -> Judge | None:
    """The judge ``judge`` configures, with the llm judge's ``model``."""
    if judge.name == JudgeName.LLM and model is None:
        return None  # no task has a ground truth: nothing will be judged
    llm, settings = model if model else (None, None)
    return make_judge(
        judge.name,
        rel_tol=judge.rel_tol,
        abs_tol=judge.abs_tol,
        ordered=judge.ordered,
        rule=judge.rule,
        llm=llm,
        llm_settings=settings,
        template=judge.template,
        max_asks=judge.max_asks,
    )


@dataclass(frozen=True)
class PresetPath:
    """Where llm presets another setting names are looked for, first match wins:
    ``llm/<name>.yaml`` in each folder of Hydra's search path, in Hydra's order (a
    ``-cd/--config-dir`` folder first, then the packaged ``conf/``, then
    ``hydra.searchpath``), so ``benchmark.judge.llm=<name>`` finds what ``llm=<name>``
    would."""

    dirs: tuple[Path, ...]

    @classmethod
    def of(cls, conf_dir: Path) -> PresetPath:
        """Hydra's search path when a Hydra command is running (its file and package
        sources), else ``conf_dir`` alone."""
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return cls((conf_dir,))
        dirs = [d for s in HydraConfig.get().runtime.config_sources if (d := _source_dir(s))]
        return cls(tuple(dict.fromkeys([*dirs, conf_dir])))  # in order, each once

    def find(self, name: str) -> Path | None:
        for folder in self.dirs:
            if (path := folder / "llm" / f"{name}.yaml").is_file():
                return path
        return None

    def known(self) -> list[str]:
        return sorted({p.stem for folder in self.dirs for p in (folder / "llm").glob("*.yaml")})


def _source_dir(source: object) -> Path | None:
    """The folder of one of Hydra's config sources (``file://`` or ``pkg://``)."""
    import importlib.resources

    schema, path = getattr(source, "schema", None), str(getattr(source, "path", ""))
    if schema == "file":
        return Path(path)
    if schema == "pkg":
        try:
            return Path(str(importlib.resources.files(path.replace("/", "."))))
        except (ModuleNotFoundError, TypeError):
            return None  # a source Hydra itself would find empty
    return None


def preset_path(where: Path | PresetPath) -> PresetPath:
    return where if isinstance(where, PresetPath) else PresetPath.of(where)


def load_llm_preset(
    name: str, where: Path | PresetPath, key: str = "benchmark.judge.llm"
) -> LLMConfig:
    """``llm/<name>.yaml`` from the preset path (``where``: a config folder, with Hydra's
    search path while a command runs), checked against the llm schema and as ``llm`` is
    checked (a bad ``base_url`` fails here, not at the first judged task); ``key``
    names the setting."""
    presets = preset_path(where)
    path = presets.find(name)
    if path is None:
        looked = "\n".join(f"  - {folder / 'llm' / f'{name}.yaml'}" for folder in presets.dirs)
        raise ConfigError(
            f"{key}={name!r} is not an llm preset. Looked for it in:\n{looked}\n"
            f"Known presets: {', '.join(presets.known())}. Add a folder with "
            "-cd/--config-dir DIR (DIR/llm/<name>.yaml) or hydra.searchpath=[file://DIR]."
        )
    loaded = OmegaConf.load(path)
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{key}={name}: {path} is not a mapping of llm settings.")
    preset = typed_llm(loaded, f"{key}={name}")
    check_llm_preset(preset, f"{key}={name}")
    return preset


def judge_llm_config(judge: JudgeConfig, where: Path | PresetPath) -> LLMConfig:
    """The llm judge's model settings: its preset, with ``benchmark.judge.model`` and
    ``benchmark.judge.base_url`` in place of the preset's own when given (checked as the
    preset is)."""
    if not judge.llm:
        raise ConfigError(
            "benchmark.judge.name=llm needs benchmark.judge.llm: the name of an llm preset "
            "(e.g. benchmark.judge.llm=openai)."
        )
    preset = load_llm_preset(judge.llm, where)
    if judge.model is None and judge.base_url is None:
        return preset
    preset = dataclasses.replace(
        preset,
        model_name=judge.model or preset.model_name,
        base_url=judge.base_url or preset.base_url,
    )
    given = " ".join(
        f"benchmark.judge.{k}={v}"
        for k, v in (("model", judge.model), ("base_url", judge.base_url))
        if v
    )
    check_llm_preset(preset, f"benchmark.judge.llm={judge.llm} {given}")
    return preset


def page_scraper(cfg: Config, conf_dir: Path | PresetPath) -> PageScraper | None:
    """The scrape-and-extract tool's own model (``tools.extract_llm``), built before any
    task runs so a missing key fails early; None: each agent's own model reads pages."""
    name = extract_llm_name(cfg)
    if not name:
        return None
    preset = load_llm_preset(name, conf_dir, "tools.extract_llm")
    model = ExtractionModel(
        create_client(preset),
        settings_from_config(preset),
        price_of(preset, cfg.pricing),
        preset.max_context_length,
    )
    return PageScraper(model, cfg.web.scraper, cfg.web.allow_private_networks, suite_corpus(cfg))


def price_sources(cfg: Config, conf_dir: Path | PresetPath) -> dict[str, str] | None:
    """Who prices each model the run's costs count (the agent's, the page extractor's,
    the note writer's), by model name: a price's source, or "unpriced". None when no
    model has a price: every cost is unknown, and the summary keeps schema 1's shape."""
    presets = [cfg.llm]
    if name := extract_llm_name(cfg):
        presets.append(load_llm_preset(name, conf_dir, "tools.extract_llm"))
    name = cfg.agent.context.summary_llm
    if name and writes_notes(cfg.agent.context):
        presets.append(load_llm_preset(name, conf_dir, "agent.context.summary_llm"))
    sources = {}
    for preset in presets:
        price = price_of(preset, cfg.pricing)
        sources[preset.model_name] = UNPRICED if price is None else price.source
    return None if set(sources.values()) == {UNPRICED} else sources


def note_writer(cfg: Config, conf_dir: Path | PresetPath) -> NoteWriter | None:
    """The model that writes compaction notes (``agent.context.summary_llm``), built
    before any task runs so a missing key fails early."""
    name = cfg.agent.context.summary_llm
    if not name or not writes_notes(cfg.agent.context):
        return None
    preset = load_llm_preset(name, conf_dir, "agent.context.summary_llm")
    return NoteWriter(
        create_client(preset),
        settings_from_config(preset),
        price_of(preset, cfg.pricing),
        preset.max_context_length,
    )
