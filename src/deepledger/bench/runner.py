"""The runner: schedules a suite's tasks on a backend and records each one's outcome.

It is one of three parts: the scheduler here (how many tasks run at once, the run's
budget, what stops the run), the attempt loop (``bench/attempts.py``: pass@k x
format-retries, as ``agent/retry_plan.py`` reads them from config) and the recorder
(``bench/recorder.py``: progress lines and results on disk, flushed together).

- Tasks run concurrently in one process, at most ``benchmark.execution.max_concurrent``
  at a time; the model client and the shared tool servers serve them all. With
  ``benchmark.execution.backend=ray`` this runner is the driver and the per-task work
  (``task_outcome`` and below) runs in Ray workers: the backend object
  (:class:`TaskBackend`; ``bench/ray_backend.py``) is all that differs.
- A task gets up to ``pass_at_k`` attempts and stops at the first correct one (a task
  without ground truth gets one attempt: there is nothing to retry for); with
  ``avg_at_k`` in ``benchmark.metrics`` it gets all of them (their mean is the metric).
- Inside an attempt, the **format-retry loop**: while the answer has no box, up to
  ``agent.context_compress_limit`` more runs (``RetryPlan.format_retries``), each task
  text rebuilt from the original question plus the post-mortems of the retries before
  it; the last one is the final retry (generate and fall back). With context
  management off, one run.
- Finished retries and attempts are written to the task's ``progress.jsonl`` as they end,
  and finished tasks to ``benchmark_results.jsonl``: see ``store/layout.py`` for resuming.
  A retry a killed run left unfinished continues at its next turn from its journal
  (``benchmark.execution.resume=turn``, ``agent/resume.py``); where the journal cannot be
  rebuilt, or with ``resume=retry``, it starts afresh and its partial journal is set
  aside (below, "set aside on resume" means this case).

A judge model that fails (unreachable, or an error after its retries) fails no task: the
answer is recorded with an unjudged judgement (``correct: null``, the reason), no further
attempt starts on it, and a resume judges it from the recorded answer without running the
agent again (``AttemptLoop._judged_again``). A task that fails outright (the agent's
model unreachable after all retries, a bug) is recorded with ``status: error``, its
reason and everything it spent (the retry that failed included, as the run's budget
counted it), and the other tasks go on. Running the same command again retries it from
its finished retries. A task that ran without a tool server given up on for the run is
an error too, its answer kept and judged (each retry notes the servers it lost:
``tools/given_up.py``).
A deepledger error (the model's, a required tool server that cannot start: the message
says why) is logged in one line; a traceback means a bug.

A task whose question alone cannot fit the configured window (the closing call is
skipped, its ``end_detail`` says so, its retry's ``does_not_fit`` is set from
``RunState.task_does_not_fit``) gets no further format-retry or attempt: each would skip
the same call. Its record keeps the end reason and ``end_detail``, and ``stopped:
"does_not_fit"``. (Over a window only the server's refusal stated, the attempt is an
error instead: agent/answer.py.)

A disk that fills (or goes read-only) under the run directory stops the run at the first
write it refuses, the way a rejected endpoint does: no task starts after it, the running
ones are cancelled unrecorded, and :class:`RunDirectoryError` says what to do. A resume
after freeing space runs the tasks not done from their finished retries.

An endpoint that rejects the run (HTTP 401/403, or 404 for the model; the agent's model,
the judge's, the compaction notes' ``agent.context.summary_llm`` or the page extractor's
``tools.extract_llm``) stops the suite at its first such answer: no task starts after it, the
running ones are cancelled without a record (their partial journals are set aside on
resume), and :class:`RunRejectedError` says which model, URL and key variable to check.
Fixed, the same command resumes the tasks not done.

Budgets (``agent/limits.py``): a task over its own limit ends its loop with end reason
``limit`` and gets no further retry or attempt; its record says which limit (``limit:
{kind, limit, spent}``). Once the run's budget is spent no task starts, and a running task
the budget stops is left unrecorded: its finished retries stay in its ``progress.jsonl``
and the retry it cut short is redone on resume (its partial journal set aside, its calls
counted), as after a kill. So the same command with a raised budget runs exactly what
running with that budget from the start would have.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from deepledger.agent.limits import (
    Clock,
    LimitHit,
    RunBudget,
    Spending,
    TaskBudget,
    TaskLimits,
    recorded_spending,
)
from deepledger.agent.retry_plan import RetryPlan
from deepledger.bench.attempts import AttemptLoop, StoppedByRunBudget, unjudged
from deepledger.bench.judge import Judge
from deepledger.bench.metrics import StoppedTasks
from deepledger.bench.progress import Progress
from deepledger.bench.recorder import Recorder
from deepledger.bench.stopping import RunStops, say_budget_spent
from deepledger.bench.tasks import Task
from deepledger.config import Config
from deepledger.context.compaction import NoteWriter
from deepledger.errors import (
    DeepLedgerError,
    EndpointRejectedError,
    RayBackendError,
    RunDirectoryError,
)
from deepledger.llm.base import LLMClient
from deepledger.llm.usage import price_of
from deepledger.records.base import build_in_background
from deepledger.records.results import (
    AttemptFinished,
    AttemptRecord,
    Expense,
    JudgementRecord,
    RetryFinished,
    RetryRecord,
    Spent,
    SummaryRecord,
    TaskRecord,
    total_spent,
)
from deepledger.store.files import disk_trouble
from deepledger.store.run_store import RunStore, TaskProgress
from deepledger.tools.pool import ToolManager
from deepledger.tools.scrape import PageScraper

log = logging.getLogger(__name__)

# The records written when a retry, an attempt, a task or the run ends: built while the
# first tasks wait for the model (records.base.build_in_background).
RECORDED_AT_THE_END = (
    RetryFinished,
    AttemptFinished,
    AttemptRecord,
    RetryRecord,
    JudgementRecord,
    TaskRecord,
    SummaryRecord,
)
# Tasks started in one turn of the event loop (BenchmarkRunner.run). Started all at once,
# 2,048 tasks sent their first requests close together, their replies came back
# together, and the loop then idled while all of them waited: gaps of up to 0.8 s that
# took five rounds to close. Started this many at a time, the first tasks' requests
# go out while later ones are being set up: the loop's CPU goes up a little, its waits
# down more (benchmarks/perf/results/throughput-2048-journal-batching.json).
STARTED_PER_TURN = 64

# Objects allocated before the youngest generation is collected (Python's default: 700).
# Each in-flight request holds objects alive for its model's latency (a second or more),
# so a collection every few tens of thousands scanned them several times and promoted
# them to older generations, whose collections took longer still: with 2,048 tasks,
# 10,000 spent 3.1-3.8 s in the collector, 200,000 0.9-1.2 s, and ~1 s less of CPU
# (benchmarks/perf/throughput.py). Cyclic garbage waits longer: a few tens of MB at most.
YOUNG_GENERATION_THRESHOLD = 200_000


@dataclass(frozen=True)
class StoppedTask:
    """A task the run's budget cut short, left unrecorded, and what it spent (counted in
    the run's total)."""

    hit: LimitHit
    spent: Spending


# What running a task gives the driver to record (picklable: Ray workers return it).
TaskOutcome = TaskRecord | StoppedTask


class TaskBackend(Protocol):
    """Where the runner's tasks run: in this process (:class:`InProcess`) or in other
    processes (``bench/ray_backend.py``'s ``RayTasks``). A new backend is one class of
    these two members; the runner asks nothing else of it."""

    @property
    def slots(self) -> int:
        """How many tasks it runs at once."""
        ...

    async def outcome(self, task: Task, budget: RunBudget) -> TaskOutcome:
        """The task run to its outcome; what it spent counted in the run's ``budget``
        (where the next task is dispatched from)."""
        ...


class InProcess:
    """Tasks run here, on this event loop, ``benchmark.execution.max_concurrent`` at a
    time; the model client and the shared tool servers serve them all. Their budgets
    count in the run's as they spend (``TaskBudget``), so nothing is added after."""

    def __init__(self, runner: BenchmarkRunner) -> None:
        self.runner = runner

    @property
    def slots(self) -> int:
        return self.runner.cfg.benchmark.execution.max_concurrent

    async def outcome(self, task: Task, budget: RunBudget) -> TaskOutcome:
        return await self.runner.task_outcome(task)


def counted_in(budget: RunBudget, outcome: TaskOutcome) -> TaskOutcome:
    """``outcome`` of a task run in another process, its spending added to ``budget``."""
    spent = outcome.spent if isinstance(outcome, StoppedTask) else recorded_spending([outcome])
    budget.set_ended(budget.spent() + spent)
    return outcome


class BenchmarkRunner:
    """Schedules tasks on its backend and records them. With another process's backend
    (``benchmark.execution.backend=ray``) this runner is the driver: it dispatches,
    checks the run's budget and records, while the per-task work (``task_outcome`` and
    below) runs in the backend's workers, each in a runner of its own."""

    def __init__(
        self,
        cfg: Config,
        *,
        llm: LLMClient | None,
        tools: ToolManager | None,
        run_dir: RunStore,
        judge: Judge | None,
        progress: Progress | None = None,
        note_writer: NoteWriter | None = None,
        scraper: PageScraper | None = None,
        clock: Clock = time.monotonic,
        backend: TaskBackend | None = None,
        warm_task_servers: bool = True,
    ) -> None:
        """``warm_task_servers``: start the main agent's ``scope: task`` servers ahead of
        the tasks that will claim them (``ToolManager.warm_ahead``); off only to measure
        what that saves (benchmarks/perf/task_servers.py)."""
        self.cfg = cfg
        self.run_dir = run_dir
        self.tools = tools if warm_task_servers else None  # only to warm its servers
        self.progress = progress or Progress(plain=True)
        self.stopped: list[LimitHit] = []  # tasks the run's budget cut short, unrecorded
        self._stopped_spent = Spending()  # what they spent: in the run's total, not in a record
        self.price = price_of(cfg.llm, cfg.pricing)
        self.clock = clock  # read by the task time limits; tests pass a fake one
        self.limits = TaskLimits.from_execution(self.cfg.benchmark.execution)
        self.budget = RunBudget()  # the run's, set up by run() from what is recorded
        self.backend: TaskBackend = backend or InProcess(self)
        self.recorder = Recorder(run_dir)
        self.plan = RetryPlan.from_config(cfg)
        self.loop = AttemptLoop(
            cfg,
            self.plan,
            self.recorder,
            llm=llm,
            tools=tools,
            judge=judge,
            note_writer=note_writer,
            scraper=scraper,
            clock=clock,
        )
        self.stops = RunStops(cfg, run_dir.root, llm, judge, note_writer, scraper)

    def mark_rejected(self, exc: EndpointRejectedError) -> EndpointRejectedError:
        """``exc`` carrying its description, for a driver that has not these models."""
        return self.stops.mark(exc)

    async def run(self, tasks: list[Task]) -> list[TaskRecord]:
        """Every task's record, in task order: earlier runs' and this run's."""
        finished = self.run_dir.finished_results()
        todo = [t for t in tasks if t.task_id not in finished]
        self.loop.untouched = self.run_dir.untouched([t.task_id for t in todo])
        execution = self.cfg.benchmark.execution
        # Finished tasks' spending; a task that errored is run again, and counts what its
        # retries spent from its start (an error record would count it twice).
        self.budget = RunBudget.from_execution(execution, finished.values())
        self.progress.start(
            total=len(tasks),
            earlier=[finished[t.task_id] for t in tasks if t.task_id in finished],
            budget=self.budget.line if self.budget.enabled else None,
        )
        self._warm_task_servers(len(todo))
        limit = asyncio.Semaphore(self.backend.slots)
        not_started: list[LimitHit] = []
        self.stopped.clear()
        self._stopped_spent = Spending()
        stopping = asyncio.Event()  # the run is ending: a waiting task must not start

        async def one(task: Task) -> None:
            async with limit:
                if stopping.is_set():
                    return
                if (spent := self.budget.exhausted()) is not None:
                    not_started.append(spent)  # unrecorded: a resume with more runs it
                    return
                if self.tools is not None:
                    self.tools.task_began()  # fewer spares are worth starting ahead
                try:
                    await self._run_and_record(task, finished)
                except (EndpointRejectedError, RunDirectoryError, RayBackendError):
                    stopping.set()  # before the semaphore lets the next task in
                    raise

        if todo:
            build_in_background(RECORDED_AT_THE_END)
        jobs: list[asyncio.Task[None]] = []
        try:
            with collector_tuned_for_many_tasks():
                jobs = await started_in_turns(one, todo)
                await asyncio.gather(*jobs)
        except EndpointRejectedError as exc:
            await _cancel(jobs)
            raise self.stops.rejected(exc, sum(t.task_id not in finished for t in tasks)) from None
        # The disk is full (no other task could be recorded either), or backend=ray lost
        # a worker it could not replace.
        except (RunDirectoryError, RayBackendError):
            await _cancel(jobs)
            raise
        finally:
            self.progress.close()
            self.loop.untouched = frozenset()  # a later task_outcome must look for itself
            self.recorder.stop()
        if not_started or self.stopped:
            hit = (not_started or self.stopped)[-1]
            say_budget_spent(hit, len(not_started), len(self.stopped))
        return [finished[t.task_id] for t in tasks if t.task_id in finished]

    def _warm_task_servers(self, tasks: int) -> None:
        """Have the pool start the main agent's ``scope: task`` servers ahead of the
        ``tasks`` about to run (``tools/spares.py``): not when the budget is spent (no
        task would claim them), and never at the cost of the run — a server's log the
        disk refuses is the task's error, as it was without spares."""
        if self.tools is None or not tasks or self.budget.exhausted() is not None:
            return
        try:
            self.tools.warm_ahead(self.cfg.agent.main_agent.tools, tasks, self.backend.slots)
        except OSError as exc:
            log.warning("task servers are not started ahead: %s", exc)

    def unrecorded(self) -> StoppedTasks:
        """The tasks this run's budget stopped while they ran, which have no record, and
        what they spent (counted by the budget): for the summary (metrics.summarize)."""
        spent = self._stopped_spent
        return StoppedTasks(tasks=len(self.stopped), tokens=spent.tokens, usd=spent.cost)

    async def _run_and_record(self, task: Task, finished: dict[str, TaskRecord]) -> None:
        self.progress.task_started(task.task_id)
        try:
            record = await self.backend.outcome(task, self.budget)
            if isinstance(record, StoppedTask):  # the run's budget: not done, resumable
                self.stopped.append(record.hit)
                self._stopped_spent += record.spent
                self.progress.task_stopped(task.task_id, record.spent.tokens)
                return
            await self.recorder.recorded(record)
        except OSError as exc:  # the disk, not the task: say so, and go on
            if (trouble := disk_trouble(self.run_dir.results_path, exc)) is not None:
                raise trouble from exc  # full: no other task could be recorded either
            log.error("could not record task %s: %s", task.task_id, exc)
            self.progress.task_finished(task.task_id, None, 0, failed=True)
            return
        finished[task.task_id] = record
        tokens = record.usage.input_tokens + record.usage.output_tokens
        failed = record.status == "error"
        self.progress.task_finished(task.task_id, record.correct, tokens, failed)

    async def task_outcome(self, task: Task) -> TaskOutcome:
        """The task's record; or the run's budget that stopped it, left unrecorded."""
        try:
            outcome = await self._task_outcome(task)
            # To be resumed (unjudged answers are judged again from it): what is done, on disk.
            if _resumed_later(outcome):
                await self.recorder.progress_flushed(task)
            return outcome
        finally:
            self.recorder.forget(task.task_id)

    async def _task_outcome(self, task: Task) -> TaskOutcome:
        started = self.clock()
        budget: TaskBudget | None = None
        earlier: list[Spent] = []
        try:
            done, budget, earlier = await self._start(task)
            attempts, stopped_by = await self.loop.attempts(task, done, budget)
        except (EndpointRejectedError, RunDirectoryError):
            raise  # the run stops: see run()
        except StoppedByRunBudget as stop:
            so_far = Spending(*budget.tokens_and_cost()) if budget is not None else Spending()
            return StoppedTask(stop.hit, so_far)
        except Exception as exc:  # one task's failure must not end the suite
            if (trouble := self.stops.refused_write(exc)) is not None:
                raise trouble from exc  # not the task's failure: the run stops, see run()
            if isinstance(exc, DeepLedgerError):  # raised on purpose, it says why: one line
                log.error("task %s failed: %s", task.task_id, exc)
            else:
                log.exception("task %s failed", task.task_id)
            return self.error_record(task, exc, self.clock() - started, earlier, budget)
        finally:
            if budget is not None:
                self.budget.task_ended(budget)
        record = TaskRecord.finished(task, attempts, self.clock() - started)
        if record.end_detail:  # e.g. the task alone cannot fit the window
            log.warning("task %s: %s", task.task_id, record.end_detail)
        if stopped_by is not None:
            record.end_reason, record.limit = "limit", stopped_by
        if attempts[-1].retries[-1].does_not_fit:
            record.stopped = "does_not_fit"  # no retry or attempt was left to try
        untouched = task.task_id in self.loop.untouched  # no killed run's journal to count
        interrupted = [] if untouched else await asyncio.to_thread(self._interrupted, task)
        if interrupted:  # a killed run's calls were spent too: they count in the totals
            spent = total_spent([*record.retries, *interrupted])
            record.usage, record.cost = spent.usage, spent.cost
        # Those of journals set aside, and those a resumed retry went on from (in its
        # usage already: counted, not added).
        resumed = sum(r.interrupted_calls for r in record.retries)
        record.interrupted_calls = len(interrupted) + resumed
        return record

    async def _start(self, task: Task) -> tuple[TaskProgress, TaskBudget, list[Spent]]:
        """What earlier runs finished of the task, its budget, which starts with what
        they spent (time included), and those spendings (finished and killed retries')."""
        earlier: list[Spent]
        if task.task_id in self.loop.untouched:  # what the files would say: nothing, no time
            done, earlier = TaskProgress(), [Expense(cost=0.0, elapsed_seconds=0.0)]
        else:
            done = await asyncio.to_thread(self.run_dir.progress, task.task_id)
            earlier = [r for a in done.attempts for r in a.retries]
            earlier += done.retries
            attempt, retry = len(done.attempts) + 1, len(done.retries)
            earlier += await asyncio.to_thread(self._killed_runs, task, attempt, retry)
        budget = TaskBudget(self.limits, self.budget, recorded_spending(earlier), self.clock)
        budget.on_spend = partial(self.progress.task_spent, task.task_id)  # the live count
        self.budget.task_started(budget)
        return done, budget, earlier

    def error_record(
        self,
        task: Task,
        exc: BaseException,
        elapsed: float,
        earlier: Sequence[Spent] = (),
        budget: TaskBudget | None = None,
    ) -> TaskRecord:
        """A failed task's record, counting everything it spent: what earlier runs did
        and every call of this run's retries, the one that failed included (the run's
        budget counted those calls; the summary must say the same)."""
        done = self.run_dir.progress(task.task_id)  # its turns and tool calls still count
        finished: list[RetryRecord] = [r for a in done.attempts for r in a.retries]
        finished += done.retries
        if budget is None:  # failed before it started: what is on disk is all it spent
            spent = total_spent([*finished, *self._interrupted(task)])
        else:
            now, now_cost = budget.usage_now()
            spent = total_spent([*earlier, Expense(usage=now, cost=now_cost)])
        return TaskRecord.failed(task, exc, elapsed, spent, finished)

    def _killed_runs(self, task: Task, attempt: int, retry: int) -> list[Expense]:
        """What killed runs spent on the task: their calls, and the time they worked
        (task_time_limit_seconds goes on, not over). One trip to a worker thread for
        both: every task of a run asks as it starts."""
        killed = self.run_dir.killed_seconds(task.task_id, attempt, retry)
        return [*self._interrupted(task), Expense(cost=0.0, elapsed_seconds=killed)]

    def _interrupted(self, task: Task) -> list[Expense]:
        """Killed runs' model calls, for the totals."""
        calls = []
        for usage in self.run_dir.interrupted_usages(task.task_id):
            calls.append(Expense(usage=usage, cost=self.price.cost(usage) if self.price else None))
        return calls


async def started_in_turns(
    one: Callable[[Task], Coroutine[Any, Any, None]], todo: list[Task]
) -> list[asyncio.Task[None]]:
    """A job running ``one`` for each task, STARTED_PER_TURN of them started before each
    turn of the event loop, in which those started before go on. Cancelled meanwhile,
    it cancels the jobs it started and waits for them to end, as the gather they were
    meant for would have."""
    jobs: list[asyncio.Task[None]] = []
    try:
        for count, task in enumerate(todo, start=1):
            jobs.append(asyncio.create_task(one(task)))
            if count % STARTED_PER_TURN == 0:
                await asyncio.sleep(0)
    except asyncio.CancelledError:
        await _cancel(jobs)
        raise
    return jobs


async def _cancel(jobs: list[asyncio.Task[None]]) -> None:
    """Cancel the tasks still running and wait until they have let go of their tools."""
    for job in jobs:
        job.cancel()
    await asyncio.gather(*jobs, return_exceptions=True)


@contextmanager
def collector_tuned_for_many_tasks() -> Iterator[None]:
    """Make Python's cycle collector cheap while hundreds of tasks run, then restore it.

    Everything alive before the run (imported modules, config, the tokenizer) is frozen
    out of the collector's scans, and the youngest generation is collected less often:
    replies parsed from JSON make objects fast, and each default collection went through
    them all again. Measured with benchmarks/perf/concurrent_tasks.py and throughput.py.
    """
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _resumed_later(outcome: TaskOutcome) -> bool:
    """Whether a resume runs (or judges) the task again: its record is not its result."""
    if isinstance(outcome, StoppedTask) or outcome.status != "finished":
        return True
    return unjudged(outcome.attempts)
