"""``benchmark.execution.backend=ray``: a run's tasks spread over Ray async actors.

- **The driver** (the ``deepledger bench`` process) owns the run as with asyncio: the
  run directory's lock, the manifest, the progress display, each task's result line,
  the summary and the report. Its ``BenchmarkRunner`` gets a :class:`RayTasks`
  task backend: it dispatches each task to a worker, keeping each at most
  ``benchmark.execution.max_concurrent`` tasks in flight, and records what comes back.
- **The workers** are ``benchmark.execution.ray.num_workers`` async actors
  (:class:`TaskWorker`). Each builds in its own process what an asyncio run builds
  (``services.task_services``: its model clients, tool servers, judge, note writer, page
  scraper) from the same typed config, and runs each task with the same per-task code
  (``BenchmarkRunner.task_outcome``: attempts, format-retries, budgets), writing its
  journals and ``progress.jsonl`` through a worker ``RunStore`` (no lock, no results)
  into the run directory — which every node must therefore see at the same path.
- **The workers start before the run does**: before the manifest or ``.hydra/`` change,
  the driver writes a random token into the run directory (``RunLayout.shared_check``),
  starts every worker (within ``START_SECONDS``) and each must read that token and write
  a file beside it, or the run is refused naming ``hydra.run.dir``. The workers take no
  CPU of Ray's (``num_cpus=0``: they wait on models and tools), so a cluster with fewer
  free CPUs than ``num_workers`` still places them all; they are spread over the nodes.
- **A worker that dies** under a task (its process killed, its node lost, or Ray losing
  the task's result): the driver kills the actor for good first (an actor Ray only calls
  *unavailable* may still be running the task, and two processes must never write one
  task's journal), waits until Ray says it is dead, starts a replacement in its place
  and runs its tasks again. A rerun goes on as a resume does: from the killed retry's
  journal (``resume=turn``), or from the task's last finished retry (the killed retry's
  journal set aside as interrupted, its model calls counted). Should the dead worker
  still write that journal (Ray gave up waiting), the journal's lock tells (one writer a
  journal: ``store/journal.py``), and the rerun starts the retry afresh beside it. The
  record says how often (``worker_lost``). Each death costs each of the
  ``n`` tasks the worker was running ``1/n`` of a loss, so a task that keeps killing its
  worker (out of memory) does not use up the tasks beside it: a task alone on its worker
  ends as an error record after ``MAX_WORKER_LOSSES`` deaths, one always beside another
  after twice as many. A resume runs such a task again.
- **A task that raises in the worker** what ``task_outcome`` does not catch (a bug, an
  outcome Ray cannot send back) becomes that task's error record; the run goes on.
- **Cancelling** a task on the driver (an endpoint rejected the run, Ctrl-C) cancels it in
  its worker too (``ray.cancel``). A worker's control calls (``pid``, ``tasks_running``,
  ``close``) have a concurrency group of their own: they never wait behind the tasks it
  runs. (``start`` does not: Ray gives each group its own event loop, and the clients
  it builds belong to the tasks' loop; it runs before any task.)
- **Budgets**: the driver checks the run's budget before each dispatch against what the
  recorded (and budget-stopped) tasks spent: exact for those. A worker's running tasks
  are counted against the run's budget at each turn from what was recorded when the task
  was dispatched plus that worker's own running tasks, not those of the other workers:
  the run may overshoot its budget by up to what the other workers' running tasks spend.
  Task limits are exact: a task runs in one worker at a time.

Ray is imported only here, and only when ``backend=ray`` (``require_ray``): it is an
optional extra and slow to import.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from deepledger.agent.limits import RunBudget, Spending
from deepledger.bench.metrics import StoppedTasks
from deepledger.bench.progress import Progress
from deepledger.bench.runner import (
    YOUNG_GENERATION_THRESHOLD,
    BenchmarkRunner,
    TaskOutcome,
    counted_in,
)
from deepledger.bench.services import (
    PresetPath,
    SuiteModels,
    TaskServices,
    close_checked_models,
    concurrency_advice,
    ensure_open_files,
    llm_judge_model,
    note_writer,
    page_scraper,
    preset_path,
    task_services,
)
from deepledger.bench.tasks import Task
from deepledger.config import Config, RayConfig, share_reading_rules
from deepledger.errors import (
    DeepLedgerError,
    EndpointRejectedError,
    RayBackendError,
    RunDirectoryError,
    WorkerLostError,
)
from deepledger.records.results import TaskRecord
from deepledger.store.layout import RunLayout
from deepledger.store.lock import unusable
from deepledger.store.run_store import RunStore

log = logging.getLogger(__name__)

RAY_INSTALL = "pip install 'deepledger[ray]'"
ADDRESS_KEY = "benchmark.execution.ray.address"
WORKERS_KEY = "benchmark.execution.ray.num_workers"
MAX_WORKER_LOSSES = 3  # a task alone on a worker that dies this often ends as an error record
# A worker's start: Ray placing a new process (on a cluster, maybe after a node is added
# or a runtime environment is set up), importing deepledger, building the models and
# tool servers. Beyond this it is most likely never placed: the cluster has no room.
START_SECONDS = 300.0
# After ray.kill, how long Ray may take to confirm the actor dead; an unreachable node is
# declared dead by Ray's health checks (about 30 s by default).
DEAD_SECONDS = 120.0
CONTROL_GROUP = "control"  # a worker's pid, tasks_running and close
CONTROL_CALLS = 4  # at once in that group: a test's probes beside the driver's close
REACH_SECONDS = 5.0  # how long the cluster's address may take to accept a connection
CLOSE_SECONDS = 30.0  # how long a worker may take to close its tool servers at the end
DEFAULT_CLIENT_PORT = 10001  # ray://host without a port
DEFAULT_GCS_PORT = 6379
MAX_TEMP_BASE = 30  # characters; Ray adds ~75 to it in its socket paths


def require_ray() -> ModuleType:
    """The ``ray`` module; or the one line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RayBackendError(
            f"benchmark.execution.backend=ray needs Ray, which is not installed: {RAY_INSTALL}"
        ) from None
    return ray


# -- the cluster --------------------------------------------------------------------


@dataclass
class RayCluster:
    """The Ray this run uses. ``connected_here``: this run started it or joined it, and
    lets go of it at the end (a Ray the process had already is left as it was)."""

    connected_here: bool
    temp_dir: Path | None = None

    def close(self) -> None:
        if not self.connected_here:
            return
        require_ray().shutdown()
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


def connect(settings: RayConfig) -> RayCluster:
    """Start a local Ray (``address`` null) or join the cluster at ``address``; an
    address that cannot be reached is refused (within ``REACH_SECONDS``) naming the key.
    A Ray this process has already started (a test's) is used as it is."""
    ray = require_ray()
    if ray.is_initialized():
        return RayCluster(connected_here=False)
    address = settings.address
    if address is None:
        temp_dir = _short_temp_dir()
        try:
            ray.init(
                num_cpus=max(os.cpu_count() or 1, settings.num_workers),
                include_dashboard=False,
                _temp_dir=str(temp_dir),
                logging_level=logging.WARNING,
            )
        except Exception as exc:  # OSError, TimeoutError, Ray's own: it cannot start here
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise RayBackendError(
                f"{ADDRESS_KEY}=null: a local Ray could not start here ({exc})."
            ) from exc
        return RayCluster(connected_here=True, temp_dir=temp_dir)
    _check_reachable(address)
    try:
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
    except Exception as exc:  # ConnectionError, TimeoutError, Ray's own: the address's fault
        raise RayBackendError(
            f"{ADDRESS_KEY}={address!r}: cannot join the Ray cluster there ({exc}). Start it "
            "(`ray start --head` on its head node), fix the address, or set it to null to "
            "start a local Ray on this machine. (ray://... addresses need "
            "`pip install 'ray[client]==2.60.0'`.)"
        ) from exc
    return RayCluster(connected_here=True)


def _short_temp_dir() -> Path:
    """A folder of our own for a local Ray's files. Short: Ray's Unix sockets live three
    levels inside it, and a socket's path must stay under 108 bytes (a run directory, or
    a long $TMPDIR, would not)."""
    base = tempfile.gettempdir()
    if len(base) > MAX_TEMP_BASE and os.path.isdir("/tmp"):
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix="dl-ray-", dir=base))


def _check_reachable(address: str) -> None:
    """A host:port (or ray://host[:port]) that accepts no connection is refused now:
    ``ray.init`` would wait a minute and more on it."""
    if address == "auto":
        return  # Ray finds the cluster this machine belongs to, or says it found none
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    default = DEFAULT_CLIENT_PORT if parts.scheme == "ray" else DEFAULT_GCS_PORT
    try:
        host, port = parts.hostname, parts.port or default
    except ValueError as exc:  # a port that is not a number
        raise RayBackendError(f"{ADDRESS_KEY}={address!r} is not host:port ({exc}).") from exc
    if not host:
        raise RayBackendError(
            f"{ADDRESS_KEY}={address!r}: use null (a local Ray), auto, host:port or "
            "ray://host:port."
        )
    try:
        socket.create_connection((host, port), timeout=REACH_SECONDS).close()
    except OSError as exc:
        raise RayBackendError(
            f"{ADDRESS_KEY}={address!r}: nothing answers at {host}:{port} ({exc}). Start the "
            "cluster, fix the address, or set it to null to start a local Ray here."
        ) from exc


# -- the workers --------------------------------------------------------------------


@dataclass
class RunStop:
    """A worker's word that the run must stop: an endpoint rejected it, or the disk of
    the run directory refused a write. The driver raises ``error`` as its own."""

    error: EndpointRejectedError | RunDirectoryError


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs to run the driver's tasks (picklable: sent to each actor)."""

    cfg: Config
    root: str  # the run directory, the same path on every node
    # The driver's preset path (services.PresetPath), for the judge's and other models'
    # presets: the same folders on every node, as the run directory is.
    preset_dirs: tuple[str, ...]
    config_id: str  # the driver's run's, which every progress line carries
    judged: bool  # whether the LLM judge's model is needed (some task has a ground truth)
    token: str  # what the driver wrote into the run directory's shared check


@dataclass(frozen=True)
class WorkerStarted:
    """A worker's answer to ``start``: why it cannot run tasks (None: it can), and the
    word of ``services.concurrency_advice`` for its model, if any."""

    problem: str | None = None
    advice: str | None = None


class TaskWorker:
    """One Ray async actor: its own model clients, tool servers and runner; it runs the
    tasks the driver sends, up to ``max_concurrent`` at once on its event loop."""

    def __init__(self, setup: WorkerSetup, name: str) -> None:
        self.setup = setup
        self.name = name
        self.services: TaskServices | None = None
        self.runner: BenchmarkRunner | None = None
        self.running: set[str] = set()
        self.tasks_loop: asyncio.AbstractEventLoop | None = None  # start's, the tasks' loop
        _exit_with_parent()

    async def start(self) -> WorkerStarted:
        """Check the shared folder, then build what tasks need; or say why it cannot."""
        setup = self.setup
        root = Path(setup.root)
        self.tasks_loop = asyncio.get_running_loop()
        if (problem := shared_folder_problem(root, setup.token, self.name)) is not None:
            return WorkerStarted(problem=problem)
        cfg, conf_dir = setup.cfg, PresetPath(tuple(map(Path, setup.preset_dirs)))
        share_reading_rules(cfg)  # as the driver's command did for its own process
        try:
            ensure_open_files(cfg.benchmark.execution.max_concurrent)
            judge_llm = llm_judge_model(cfg, conf_dir) if setup.judged else None
            writer, scraper = (
                note_writer(cfg, conf_dir),
                page_scraper(cfg, conf_dir),
            )
            run_dir = RunStore.for_worker(root, setup.config_id)
            self.services = await task_services(cfg, run_dir, judge_llm, writer, scraper)
        except DeepLedgerError as exc:
            return WorkerStarted(
                problem=f"a Ray worker on {socket.gethostname()} cannot start: {exc}"
            )
        execution = cfg.benchmark.execution
        # As runner.run tunes the driver's collector for many tasks (this process only
        # runs tasks, for the length of the run: nothing to restore).
        gc.freeze()
        gc.set_threshold(YOUNG_GENERATION_THRESHOLD, *gc.get_threshold()[1:])
        self.runner = self.services.runner(cfg, run_dir, Progress(plain=True))
        self.runner.budget = RunBudget(execution.max_cost_usd, execution.max_tokens)
        return WorkerStarted(advice=concurrency_advice(cfg, self.services.llm.capabilities))

    async def pid(self) -> int:
        return os.getpid()

    async def tasks_running(self) -> list[str]:
        return sorted(self.running)

    async def run_task(self, task: Task, recorded: Spending) -> TaskOutcome | RunStop:
        """The task's outcome, counting the run's budget from ``recorded`` (what the
        driver's recorded tasks spent) plus this worker's running tasks."""
        assert self.runner is not None, "start() comes first"
        self.runner.budget.set_ended(recorded)
        self.running.add(task.task_id)
        try:
            return await self.runner.task_outcome(task)
        except EndpointRejectedError as exc:  # described here, where its model is known
            return RunStop(self.runner.mark_rejected(exc))
        except RunDirectoryError as exc:
            return RunStop(exc)
        finally:
            self.running.discard(task.task_id)

    async def close(self) -> None:
        """Close the tool servers and clients, on the loop they were made on (this call
        comes in on the control group's own loop)."""
        if self.tasks_loop is None or self.tasks_loop.is_closed():
            return
        closing = asyncio.run_coroutine_threadsafe(self._close_services(), self.tasks_loop)
        await asyncio.wrap_future(closing)

    async def _close_services(self) -> None:
        if self.services is not None:
            services, self.services = self.services, None
            await services.aclose()


def _exit_with_parent(every_seconds: float = 0.2) -> None:
    """End this worker as soon as the process that started it (Ray's node manager) is
    gone: a killed driver takes its local Ray with it, and a worker left running would
    go on writing journals into a run directory that a resume may already be using."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="exit with the node", daemon=True).start()


def shared_folder_problem(root: Path, token: str, worker: str) -> str | None:
    """None when this process reads the driver's token in ``root`` and can write beside
    it; else what to do (the folder must be the same on every node)."""
    check = RunLayout(root)
    reply = check.shared_check_reply(worker)
    try:
        seen = check.shared_check.read_text(encoding="utf-8").strip()
        if seen == token:
            reply.write_text(token, encoding="utf-8")
            reply.unlink()
            return None
        found = "another run's token"
    except OSError as exc:
        found = f"{type(exc).__name__}: {exc}"
    return (
        f"the Ray worker on {socket.gethostname()} cannot use the run directory "
        f"hydra.run.dir={root} ({found}). With benchmark.execution.backend=ray the run "
        "directory must be a folder shared by every node of the cluster (the same path, "
        "readable and writable from each): put hydra.run.dir=... on shared storage."
    )


@dataclass
class _Slot:
    """One worker's place in the pool: its actor (replaced when it dies), the tasks it has
    in flight, and how many each of its actors was running when it died."""

    index: int
    actor: Any = None  # a Ray ActorHandle
    generation: int = 0  # of the actor now in place: 1 the first, 2 its replacement, ...
    in_flight: int = 0  # tasks sent to this slot, waiting for its actor included
    running: Counter[int] = field(default_factory=Counter)  # tasks on each generation's actor
    died_with: dict[int, int] = field(default_factory=dict)  # generation -> tasks it ran then
    replacing: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class _Losses:
    """What the deaths of its workers cost one task: ``deaths`` (its record's
    ``worker_lost``), and ``share``: each death counts ``1/n`` with ``n`` tasks on the
    worker, so the task that kills its worker uses up the limit, not those beside it."""

    deaths: int = 0
    share: float = 0.0

    def add(self, running: int) -> None:
        self.deaths += 1
        self.share += 1 / max(running, 1)

    @property
    def too_many(self) -> bool:
        return self.share >= MAX_WORKER_LOSSES - 1e-9  # three thirds make one


def _remote_worker_class(ray: ModuleType) -> Any:
    """``TaskWorker`` as a Ray actor class, its control methods in a concurrency group of
    their own: a probe or ``close`` must not queue behind ``max_concurrent`` running
    tasks (Ray runs the other methods in the default group, ``max_concurrency``)."""
    control = ray.method(concurrency_group=CONTROL_GROUP)
    # Not start: Ray gives each group an event loop of its own, and the clients start
    # builds must live on the loop the tasks run on (it runs before any task anyway).
    for method in (TaskWorker.pid, TaskWorker.tasks_running, TaskWorker.close):
        control(method)  # marks the function; TaskWorker itself stays a plain class
    return ray.remote(concurrency_groups={CONTROL_GROUP: CONTROL_CALLS})(TaskWorker)


class RayTasks:
    """The driver's task backend (``BenchmarkRunner(backend=...)``): tasks to the
    workers and their outcomes back, workers replaced when they die."""

    def __init__(self, setup: WorkerSetup, driver: BenchmarkRunner | None = None) -> None:
        self.ray = require_ray()
        self.setup = setup
        execution = setup.cfg.benchmark.execution
        self.per_worker = execution.max_concurrent
        self.workers = [_Slot(i) for i in range(execution.ray.num_workers)]
        self.driver = driver  # builds the error record of a task that lost its workers
        self.advice: str | None = None  # services.concurrency_advice, as a worker found it
        self._remote = _remote_worker_class(self.ray)
        self._run_name = secrets.token_hex(4)  # names this run's actors apart

    @property
    def slots(self) -> int:
        return self.per_worker * len(self.workers)

    async def start(self) -> None:
        """Every worker up and checked; a :class:`RayBackendError` saying why not (the
        workers started are ended then)."""
        started = await asyncio.gather(
            *(self._start(slot) for slot in self.workers), return_exceptions=True
        )
        if failed := [e for e in started if isinstance(e, BaseException)]:
            await self.close()
            raise failed[0]

    async def _start(self, slot: _Slot) -> None:
        """A new actor for ``slot``, given to it once it is ready to run tasks."""
        slot.generation += 1
        name = f"deepledger-{self._run_name}-worker-{slot.index}.{slot.generation}"
        actor = self._remote.options(
            name=name,
            max_concurrency=self.per_worker,
            max_restarts=0,  # a dead worker is replaced by the driver, which knows its tasks
            # No CPU of Ray's: a worker waits on model servers and tools, it does not
            # compute; with num_cpus=1 a cluster with fewer free CPUs than num_workers
            # would never place the last ones, and the run would wait for ever.
            num_cpus=0,
            scheduling_strategy="SPREAD",  # over the nodes: one lost node takes fewer
        ).remote(self.setup, name)
        try:
            answer: WorkerStarted = await asyncio.wait_for(actor.start.remote(), START_SECONDS)
            problem = answer.problem
            self.advice = self.advice or answer.advice
        except TimeoutError:
            problem = (
                f"a Ray worker did not start within {START_SECONDS:.0f} s: the cluster has "
                f"no room for it, most likely. Lower {WORKERS_KEY}="
                f"{len(self.workers)}, or add nodes or resources to the cluster."
            )
        except self.ray.exceptions.RayError as exc:
            problem = f"a Ray worker did not start: {_first_line(exc)}"
        except asyncio.CancelledError:  # the run is stopping: no actor left behind
            self.ray.kill(actor, no_restart=True)
            raise
        if problem is not None:
            self.ray.kill(actor, no_restart=True)
            raise RayBackendError(problem)
        slot.actor = actor

    def _control(self, actor: Any, method: str, *args: Any) -> Any:
        """The ObjectRef of a control call (pid, tasks_running, close): in its own group,
        never behind the tasks."""
        call = getattr(actor, method).options(concurrency_group=CONTROL_GROUP)
        return call.remote(*args)

    async def outcome(self, task: Task, budget: RunBudget) -> TaskOutcome:
        """The task run on a worker, counting what the recorded tasks spent (the run
        budget the worker counts from); its spending then counts here, where the next
        task is dispatched from."""
        return counted_in(budget, await self(task, budget.spent()))

    async def __call__(self, task: Task, recorded: Spending) -> TaskOutcome:
        started, losses = time.monotonic(), _Losses()
        while True:
            slot = min(self.workers, key=lambda s: s.in_flight)
            slot.in_flight += 1
            try:
                async with slot.replacing:  # a dead worker's replacement: wait for it
                    actor, generation = slot.actor, slot.generation
                if actor is None:  # its replacement did not start: the run is stopping
                    raise RayBackendError(f"worker {slot.index} of {WORKERS_KEY} is gone")
                slot.running[generation] += 1
                try:
                    outcome = await self._run_on(actor, task, recorded)
                except self.ray.exceptions.RayTaskError as exc:  # raised in run_task: a bug
                    return await self._failed(task, exc, time.monotonic() - started, losses)
                except self.ray.exceptions.RayError as exc:  # the worker, or Ray, lost it
                    log.warning(
                        "task %s: its Ray worker died or Ray lost the task (%s); running it "
                        "again from its last finished retry",
                        task.task_id,
                        _first_line(exc),
                    )
                    losses.add(await self._replace(slot, actor, generation))
                    if losses.too_many:
                        return await self._lost(task, losses, time.monotonic() - started)
                    continue  # run again, from its last finished retry
                finally:
                    slot.running[generation] -= 1
            finally:
                slot.in_flight -= 1
            if isinstance(outcome, RunStop):
                raise outcome.error
            if isinstance(outcome, TaskRecord) and losses.deaths:
                outcome.worker_lost = losses.deaths
            return outcome

    async def _run_on(self, actor: Any, task: Task, recorded: Spending) -> TaskOutcome | RunStop:
        """The task run by ``actor``; cancelled there too when it is cancelled here."""
        ref = actor.run_task.remote(task, recorded)
        try:
            outcome: TaskOutcome | RunStop = await ref
        except asyncio.CancelledError:
            self.ray.cancel(ref)  # an async actor cancels the task's asyncio task
            raise
        return outcome

    async def _replace(self, slot: _Slot, dead: Any, generation: int) -> int:
        """Kill the actor of ``generation`` (once, however many of its tasks saw it go),
        wait until it is dead, start a new one in its place; how many tasks it was running."""
        async with slot.replacing:
            if slot.generation == generation and slot.actor is dead:
                slot.died_with[generation] = slot.running[generation]
                slot.actor = None
                await self._kill(dead)
                await self._start(slot)
        return slot.died_with.get(generation, 1)

    async def _kill(self, actor: Any) -> None:
        """End ``actor`` for good, and wait (up to ``DEAD_SECONDS``) until Ray says it is
        dead: an actor that is only unreachable may still be running its tasks, and their
        reruns must not write the same journals beside it."""
        self.ray.kill(actor, no_restart=True)
        deadline = time.monotonic() + DEAD_SECONDS
        while time.monotonic() < deadline:
            try:
                await asyncio.wait_for(self._control(actor, "pid"), 5.0)
            except self.ray.exceptions.ActorDiedError:
                return
            except (TimeoutError, self.ray.exceptions.RayError):
                pass  # unreachable, not yet known dead: ask again
            await asyncio.sleep(0.2)
        log.warning(
            "a Ray worker killed %.0f s ago is not known dead yet: going on without it",
            DEAD_SECONDS,
        )

    async def _failed(
        self, task: Task, exc: BaseException, elapsed: float, losses: _Losses
    ) -> TaskRecord:
        """The error record of a task whose worker raised what ``task_outcome`` does not
        catch (a bug, an outcome Ray could not send back): the run goes on."""
        cause = getattr(exc, "cause", None) or exc
        log.error(
            "task %s failed in its Ray worker: %s: %s",
            task.task_id,
            type(cause).__name__,
            _first_line(cause),
        )
        return await self._error_record(task, cause, elapsed, losses)

    async def _lost(self, task: Task, losses: _Losses, elapsed: float) -> TaskRecord:
        error = WorkerLostError(
            f"the Ray worker running the task died {losses.deaths} times; a resume runs it "
            "again from its last finished retry"
        )
        return await self._error_record(task, error, elapsed, losses)

    async def _error_record(
        self, task: Task, exc: BaseException, elapsed: float, losses: _Losses
    ) -> TaskRecord:
        driver = self.driver
        assert driver is not None, "the driver's runner is set before tasks run"
        # It reads the task's progress from disk: on a thread, not the driver's event loop.
        record = await asyncio.to_thread(driver.error_record, task, exc, elapsed)
        if losses.deaths:
            record.worker_lost = losses.deaths
        return record

    async def close(self) -> None:
        """Let each worker close its tool servers and clients, then end the actors and
        remove the shared-folder token (kept until now: a replacement checks it too)."""
        live = [slot.actor for slot in self.workers if slot.actor is not None]
        closing = [asyncio.ensure_future(self._control(actor, "close")) for actor in live]
        if closing:
            await asyncio.wait(closing, timeout=CLOSE_SECONDS)
        for actor in live:
            self.ray.kill(actor, no_restart=True)
        for slot in self.workers:
            slot.actor = None
        RunLayout(Path(self.setup.root)).shared_check.unlink(missing_ok=True)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


async def start_workers(
    cfg: Config, run_dir: RunStore, conf_dir: Path | PresetPath, config_id: str, *, judged: bool
) -> RayTasks:
    """Every worker started and its shared-folder check passed — before the manifest
    changes (``config_id``: the one ``run_dir.start`` will give the run). Ray is
    connected already (``connect``); ``RayTasks.close`` ends them."""
    tasks = RayTasks(_worker_setup(cfg, run_dir, conf_dir, config_id, judged))
    await tasks.start()
    if tasks.advice:
        print(f"deepledger: {tasks.advice}", file=sys.stderr)
    return tasks


async def run_on_ray(
    cfg: Config, run_dir: RunStore, tasks: list[Task], workers: RayTasks
) -> tuple[list[TaskRecord], StoppedTasks]:
    """The run's tasks on the started workers, recorded here: the records, and the tasks
    the run's budget stopped unrecorded."""
    runner = BenchmarkRunner(
        cfg,
        llm=None,
        tools=None,
        run_dir=run_dir,
        judge=None,
        progress=Progress(),
        backend=workers,
    )
    workers.driver = runner
    records = await runner.run(tasks)
    return records, runner.unrecorded()


def _worker_setup(
    cfg: Config, run_dir: RunStore, conf_dir: Path | PresetPath, config_id: str, judged: bool
) -> WorkerSetup:
    """What the workers get, with the token the driver writes for the shared-folder
    check; a run directory that refuses it is refused as the asyncio path refuses it."""
    token = secrets.token_hex(16)
    try:
        run_dir.layout.shared_check.write_text(token, encoding="utf-8")
    except OSError as exc:
        raise unusable(run_dir.root, "hydra.run.dir", exc) from exc
    root = os.path.abspath(run_dir.root)
    dirs = tuple(os.path.abspath(d) for d in preset_path(conf_dir).dirs)
    return WorkerSetup(cfg, root, dirs, config_id, judged, token)


class RaySuite:
    """``backend=ray`` for ``run_suite`` (``bench/backends.py``): Ray connected and the
    workers started before the manifest changes; the tasks dispatched to them."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.cluster: RayCluster | None = None
        self.workers: RayTasks | None = None

    def prepare(self) -> None:
        # Each worker makes room for its own tasks: here, only how to install Ray.
        require_ray()

    async def start(
        self, run_dir: RunStore, presets: PresetPath, config_id: str, models: SuiteModels
    ) -> None:
        # The driver runs no task: the models built to check their keys are let go.
        await close_checked_models(models.judge_llm, models.writer, models.scraper)
        self.cluster = connect(self.cfg.benchmark.execution.ray)
        judged = models.judge_llm is not None
        self.workers = await start_workers(self.cfg, run_dir, presets, config_id, judged=judged)

    async def run(
        self, run_dir: RunStore, tasks: list[Task], models: SuiteModels
    ) -> tuple[list[TaskRecord], StoppedTasks]:
        assert self.workers is not None, "start() comes first"
        return await run_on_ray(self.cfg, run_dir, tasks, self.workers)

    async def close(self) -> None:
        if self.workers is not None:
            await self.workers.close()
        if self.cluster is not None:
            self.cluster.close()
