"""What running a suite's tasks takes, built where they run: models, tool servers, judge.

The models (the agent's, the judge's, the compaction notes', the page extractor's) come
from their presets; the process's open-file limit is raised to what its tasks need.

An asyncio run builds them once in the driver; with ``backend=ray`` each worker builds
its own from the same typed config (``bench/ray_backend.py``), which is why they live
here, apart from the suite's own steps (``bench/suite.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from deepledger.bench.judge import Judge, make_judge
from deepledger.bench.progress import Progress
from deepledger.bench.runner import BenchmarkRunner
from deepledger.bench.tasks import Task, load_tasks
from deepledger.config import (
    Config,
    JudgeConfig,
    JudgeName,
    LLMConfig,
    ToolServerConfig,
    check_llm_preset,
    extract_llm_name,
    secret_rules,
    tool_servers,
    typed_llm,
)
from deepledger.context.compaction import NoteWriter
from deepledger.context.strategies import writes_notes
from deepledger.errors import ConfigError
from deepledger.llm.base import GenerationSettings, LLMCapabilities, LLMClient
from deepledger.llm.factory import create_client, settings_from_config
from deepledger.llm.usage import UNPRICED, price_of
from deepledger.store.run_store import RunStore
from deepledger.tools.list_cache import ToolListCache
from deepledger.tools.pool import ToolManager
from deepledger.tools.roots import narrow_wide_roots
from deepledger.tools.scrape import ExtractionModel, PageScraper, suite_corpus


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
        await close_checked_models(self.judge_llm, self.note_writer, self.scraper)


async def close_checked_models(
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
