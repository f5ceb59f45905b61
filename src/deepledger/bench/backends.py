"""Where a suite's tasks run: the backend object ``run_suite`` holds, one per
``benchmark.execution.backend``.

A backend prepares the process before any work, starts what it needs once the resume is
accepted (before the manifest and ``.hydra/`` change, so a backend that cannot start
leaves the run directory as it was), runs the tasks and lets go of what it started.
:class:`InThisProcess` runs them on this event loop; ``bench/ray_backend.py``'s
``RaySuite`` on Ray actors. A new backend is one class with these four methods and a
entry in :data:`BACKENDS`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Protocol

from deepledger.bench.metrics import StoppedTasks
from deepledger.bench.progress import Progress
from deepledger.bench.services import (
    PresetPath,
    SuiteModels,
    close_checked_models,
    concurrency_advice,
    ensure_open_files,
    task_services,
)
from deepledger.bench.tasks import Task
from deepledger.config import Backend, Config
from deepledger.records.results import TaskRecord
from deepledger.store.run_store import RunStore


class SuiteBackend(Protocol):
    """What ``run_suite`` asks of a backend, in this order."""

    def prepare(self) -> None:
        """Before any work: what the process needs, or a one-line error."""
        ...

    async def start(
        self, run_dir: RunStore, presets: PresetPath, config_id: str, models: SuiteModels
    ) -> None:
        """Before the manifest changes (``config_id``: the one it will give the run)."""
        ...

    async def run(
        self, run_dir: RunStore, tasks: list[Task], models: SuiteModels
    ) -> tuple[list[TaskRecord], StoppedTasks]:
        """The records, and the tasks the run's budget stopped unrecorded."""
        ...

    async def close(self) -> None:
        """Let go of what :meth:`start` started (also when it was not called)."""
        ...


class InThisProcess:
    """``backend=asyncio``: the tasks on this event loop, sharing one model client and
    the tool servers."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    def prepare(self) -> None:
        ensure_open_files(self.cfg.benchmark.execution.max_concurrent)

    async def start(
        self, run_dir: RunStore, presets: PresetPath, config_id: str, models: SuiteModels
    ) -> None:
        return None  # the models are built when the tasks start (run)

    async def run(
        self, run_dir: RunStore, tasks: list[Task], models: SuiteModels
    ) -> tuple[list[TaskRecord], StoppedTasks]:
        cfg = self.cfg
        judge_llm, writer, scraper = models.judge_llm, models.writer, models.scraper
        try:
            services = await task_services(cfg, run_dir, judge_llm, writer, scraper)
        except BaseException:
            await close_checked_models(judge_llm, writer, scraper)
            raise
        if advice := concurrency_advice(cfg, services.llm.capabilities):
            print(f"deepledger: {advice}", file=sys.stderr)
        try:
            runner = services.runner(cfg, run_dir, Progress())
            return await runner.run(tasks), runner.unrecorded()
        finally:
            await services.aclose()

    async def close(self) -> None:
        return None


def _on_ray(cfg: Config) -> SuiteBackend:
    # Ray is optional and slow to import: only for backend=ray.
    from deepledger.bench.ray_backend import RaySuite

    return RaySuite(cfg)


# One builder per benchmark.execution.backend value.
BACKENDS: dict[Backend, Callable[[Config], SuiteBackend]] = {
    Backend.ASYNCIO: InThisProcess,
    Backend.RAY: _on_ray,
}


def backend_for(cfg: Config) -> SuiteBackend:
    """The backend ``benchmark.execution.backend`` names."""
    return BACKENDS[Backend(cfg.benchmark.execution.backend)](cfg)
