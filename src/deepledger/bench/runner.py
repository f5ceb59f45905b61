"""Running a benchmark suite: tasks x attempts (pass@k) x format-retries.

- Tasks run concurrently in one process, at most ``benchmark.execution.max_concurrent``
  at a time; the model client and the shared tool servers serve them all. With
  ``benchmark.execution.backend=ray`` this runner is the driver and the per-task work
  (``task_outcome`` and below) runs in Ray workers: see ``bench/ray_backend.py``.
- A task gets up to ``pass_at_k`` attempts and stops at the first correct one (a task
  without ground truth gets one attempt: there is nothing to retry for); with
  ``avg_at_k`` in ``benchmark.metrics`` it gets all of them (their mean is the metric).
- Inside an attempt, the **format-retry loop**: while the answer has no box, up to
  ``agent.context_compress_limit`` more runs, each task text rebuilt from the original
  question plus the post-mortems of the retries before it; the last one is the final
  retry (generate and fall back). With context management off, one run.
- Finished retries and attempts are written to the task's ``progress.jsonl`` as they end,
  and finished tasks to ``benchmark_results.jsonl``: see ``store/layout.py`` for resuming.
  A retry a killed run left unfinished continues at its next turn from its journal
  (``benchmark.execution.resume=turn``, ``agent/resume.py``); where the journal cannot be
  rebuilt, or with ``resume=retry``, it starts afresh and its partial journal is set
  aside (below, "set aside on resume" means this case).

A judge model that fails (unreachable, or an error after its retries) fails no task: the
answer is recorded with an unjudged judgement (``correct: null``, the reason), no further
attempt starts on it, and a resume judges it from the recorded answer without running the
agent again (``_judged_again``). A task that fails outright (the agent's model unreachable
after all retries, a bug) is recorded with ``status: error``, its reason and everything it
spent (the retry that failed included, as the run's budget counted it), and the other
tasks go on. Running
the same command again retries it from its finished retries. A task that ran without a
tool server given up on for the run is an error too, its answer kept and judged (each
retry notes the servers it lost: ``tools/given_up.py``).
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
import copy
import gc
import logging
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
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
from deepledger.agent.resume import ResumePoint, reopen_unfinished
from deepledger.agent.state import RunState
from deepledger.agent.task import AgentFactory, policy_from_config, task_message
from deepledger.bench.experience import retry_task_text
from deepledger.bench.judge import Judge, Judgement
from deepledger.bench.metrics import StoppedTasks, plural
from deepledger.bench.progress import Progress
from deepledger.bench.tasks import Task
from deepledger.config import (
    COMMAND_LINE_KEY_ENV,
    Config,
    LLMConfig,
    ResumeMode,
    extract_llm_name,
    prompt_set,
)
from deepledger.context.compaction import NoteWriter
from deepledger.errors import (
    DeepLedgerError,
    EndpointRejectedError,
    EndpointUnreachableError,
    LLMError,
    RayBackendError,
    RunDirectoryError,
    RunRejectedError,
)
from deepledger.llm.base import LLMClient
from deepledger.llm.endpoints import routed_as
from deepledger.llm.usage import price_of
from deepledger.records.base import build_in_background
from deepledger.records.events import ResumeFellBack, RetryStarted
from deepledger.records.results import (
    AttemptFinished,
    AttemptRecord,
    Expense,
    JudgementRecord,
    LimitRecord,
    RetryFinished,
    RetryRecord,
    Spent,
    SummaryRecord,
    TaskRecord,
    total_spent,
)
from deepledger.store.files import disk_trouble
from deepledger.store.journal import Journal
from deepledger.store.run_store import RunStore, TaskProgress
from deepledger.tools.given_up import noting_given_up
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
# Threads that flush task records to disk (BenchmarkRunner._flushed): they wait on the
# disk, so more of them than cores is the point.
FLUSH_THREADS = 32
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


class TaskExecutor(Protocol):
    """Runs tasks in other processes (bench/ray_backend.py): each call gives back the
    task's outcome for the runner to record. ``recorded``: what the tasks recorded so far
    spent, the run budget the other process counts from."""

    @property
    def slots(self) -> int:
        """How many tasks it runs at once."""
        ...

    async def __call__(self, task: Task, recorded: Spending) -> TaskOutcome: ...


class BenchmarkRunner:
    """Runs tasks and records them. With an ``executor`` (``benchmark.execution.backend=
    ray``) this runner is the driver: it dispatches, checks the run's budget and records,
    while the per-task work (``task_outcome`` and below) runs in the executor's workers,
    each in a runner of its own."""

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
        executor: TaskExecutor | None = None,
    ) -> None:
        self.cfg = cfg
        self.llm = llm
        self.tools = tools
        self.run_dir = run_dir
        self.judge = judge
        self.note_writer = note_writer
        self.scraper = scraper
        self.progress = progress or Progress(plain=True)
        self.stopped: list[LimitHit] = []  # tasks the run's budget cut short, unrecorded
        self._stopped_spent = Spending()  # what they spent: in the run's total, not in a record
        self.retry_limit = cfg.agent.context_compress_limit
        self.pass_at_k = cfg.benchmark.execution.pass_at_k
        # avg@k (xbench's mean over repeats) needs every attempt, a correct one included.
        self.every_attempt = "avg_at_k" in (cfg.benchmark.metrics or ())
        self.price = price_of(cfg.llm, cfg.pricing)
        self.clock = clock  # read by the task time limits; tests pass a fake one
        self.limits = TaskLimits.from_execution(self.cfg.benchmark.execution)
        self.budget = RunBudget()  # the run's, set up by run() from what is recorded
        self.executor = executor
        # Tasks no earlier run left anything of (run() looks once): nothing of theirs to
        # read back, so they start and end without the file work that looks for it.
        self._untouched: frozenset[str] = frozenset()
        self._flushers: ThreadPoolExecutor | None = None  # see _flushed
        self._unflushed: set[str] = set()  # tasks with progress lines not flushed yet
        # Records waiting for the results flush on its way (_recorded), and its task.
        self._results_queue: list[tuple[TaskRecord, asyncio.Future[None]]] = []
        self._results_flusher: asyncio.Task[None] | None = None

    async def _progress_written(self, task: Task, finished: RetryRecord | AttemptRecord) -> None:
        """``finished`` appended to the task's progress, not yet flushed to disk: if the
        task ends here, its result line (flushed) follows at once and says it all; if it
        goes on, :meth:`_progress_flushed` flushes it first. Three flushes a task, one
        after another, were most of a 2,048-task run's last two seconds."""
        line = self.run_dir.progress_line(finished, task.digest)  # Python's part: see _flushed
        await self._flushed(partial(self.run_dir.append_progress, sync=False), task.task_id, line)
        self._unflushed.add(task.task_id)

    async def _progress_flushed(self, task: Task) -> None:
        """Before more work on ``task``: its progress lines on disk, so that what is
        done is not done again after a power cut either."""
        if task.task_id in self._unflushed:
            await self._flushed(self.run_dir.flush_progress, task.task_id)
            self._unflushed.discard(task.task_id)

    async def _recorded(self, record: TaskRecord) -> None:
        """``record`` in the results file, on disk. Written and flushed on a thread (a
        slow disk or a network filesystem must not stall every other task), together
        with every record that ended while the flush before was on its way: one write
        and one ``fsync`` for them all (group commit), where one each, in turn, was
        seconds at the end of a run of thousands of tasks."""
        written = asyncio.get_running_loop().create_future()
        self._results_queue.append((record, written))
        if self._results_flusher is None or self._results_flusher.done():
            self._results_flusher = asyncio.create_task(self._flush_results())
        await written

    async def _flush_results(self) -> None:
        """Flush what is queued, then what was queued meanwhile, until nothing is. A
        flush that fails fails each of its records' tasks (the disk, not the task: see
        _run_and_record)."""
        while self._results_queue:
            batch, self._results_queue = self._results_queue, []
            try:
                lines = self.run_dir.result_lines([record for record, _ in batch])
                await self._flushed(self.run_dir.append_results, lines)
            except BaseException as exc:  # cancelled too: no waiter is left waiting
                for _, written in batch:
                    if written.done():
                        continue
                    if isinstance(exc, asyncio.CancelledError):
                        written.cancel()
                    else:
                        written.set_exception(_own_copy(exc))
                if not isinstance(exc, Exception):
                    self._drop_queued_results()  # no flusher is left for them
                    raise
                continue
            for _, written in batch:
                if not written.done():  # its task may have been cancelled meanwhile
                    written.set_result(None)

    def _stop_flushing(self) -> None:
        """At the end of run(): nothing more is written for its tasks. Every finished
        task's record is on disk by now; when the run stopped early, records of tasks
        cancelled meanwhile are dropped unwritten (their tasks run again on resume), and
        the one write a flush thread may still be doing is not waited for: the event
        loop must not stop for a slow disk."""
        if self._results_flusher is not None:
            self._results_flusher.cancel()
            self._results_flusher = None
        self._drop_queued_results()
        if self._flushers is not None:
            self._flushers.shutdown(wait=False, cancel_futures=True)
            self._flushers = None

    def _drop_queued_results(self) -> None:
        """Cancel the waits of the records still queued, which no flush will write."""
        for _, written in self._results_queue:
            written.cancel()
        self._results_queue = []

    async def _flushed(self, write: Callable[..., None], *args: Any) -> None:
        """``write(*args)``, a record flushed to disk (``fsync``), on a thread of the
        runner's own: each waits on the disk, not on Python, so many can wait at once
        (the file system commits concurrent flushes together). With thousands of tasks
        ending together, the default pool's few threads queued them for seconds. What
        Python does of a record is best done before, on the loop: each system call of a
        thread takes the interpreter's lock back from the busy loop, and 2,048 progress
        lines built and appended on threads (a dozen calls each) kept the loop at half
        its pace for the last 4 s of benchmarks/perf/throughput.py's run."""
        if self._flushers is None:
            self._flushers = ThreadPoolExecutor(
                FLUSH_THREADS, thread_name_prefix="deepledger-flush"
            )
        await asyncio.get_running_loop().run_in_executor(self._flushers, partial(write, *args))

    async def run(self, tasks: list[Task]) -> list[TaskRecord]:
        """Every task's record, in task order: earlier runs' and this run's."""
        finished = self.run_dir.finished_results()
        todo = [t for t in tasks if t.task_id not in finished]
        self._untouched = self.run_dir.untouched([t.task_id for t in todo])
        execution = self.cfg.benchmark.execution
        # Finished tasks' spending; a task that errored is run again, and counts what its
        # retries spent from its start (an error record would count it twice).
        self.budget = RunBudget.from_execution(execution, finished.values())
        self.progress.start(
            total=len(tasks),
            already_done=len(tasks) - len(todo),
            budget=self.budget.line if self.budget.enabled else None,
        )
        slots = self.executor.slots if self.executor else execution.max_concurrent
        limit = asyncio.Semaphore(slots)
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
            raise self._rejected(exc, sum(t.task_id not in finished for t in tasks)) from None
        # The disk is full (no other task could be recorded either), or backend=ray lost
        # a worker it could not replace.
        except (RunDirectoryError, RayBackendError):
            await _cancel(jobs)
            raise
        finally:
            self.progress.close()
            self._untouched = frozenset()  # a later task_outcome must look for itself
            self._stop_flushing()
        if not_started or self.stopped:
            hit = (not_started or self.stopped)[-1]
            _say_budget_spent(hit, len(not_started), len(self.stopped))
        return [finished[t.task_id] for t in tasks if t.task_id in finished]

    def unrecorded(self) -> StoppedTasks:
        """The tasks this run's budget stopped while they ran, which have no record, and
        what they spent (counted by the budget): for the summary (metrics.summarize)."""
        spent = self._stopped_spent
        return StoppedTasks(tasks=len(self.stopped), tokens=spent.tokens, usd=spent.cost)

    async def _run_and_record(self, task: Task, finished: dict[str, TaskRecord]) -> None:
        self.progress.task_started(task.task_id)
        try:
            record = await self._outcome(task)
            if isinstance(record, StoppedTask):  # the run's budget: not done, resumable
                self.stopped.append(record.hit)
                self._stopped_spent += record.spent
                self.progress.task_finished(task.task_id, None, 0, failed=False)
                return
            await self._recorded(record)
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

    async def _outcome(self, task: Task) -> TaskOutcome:
        """The task run here, or by the executor's workers; their spending then counts in
        the run's budget here, where the next task is dispatched from."""
        if self.executor is None:
            return await self.task_outcome(task)
        outcome = await self.executor(task, self.budget.spent())
        spent = outcome.spent if isinstance(outcome, StoppedTask) else recorded_spending([outcome])
        self.budget.set_ended(self.budget.spent() + spent)
        return outcome

    async def task_outcome(self, task: Task) -> TaskOutcome:
        """The task's record; or the run's budget that stopped it, left unrecorded."""
        try:
            outcome = await self._task_outcome(task)
            # To be resumed (unjudged answers are judged again from it): what is done, on disk.
            if _resumed_later(outcome):
                await self._progress_flushed(task)
            return outcome
        finally:
            self._unflushed.discard(task.task_id)

    async def _task_outcome(self, task: Task) -> TaskOutcome:
        started = self.clock()
        budget: TaskBudget | None = None
        earlier: list[Spent] = []
        try:
            done, budget, earlier = await self._start(task)
            attempts, stopped_by = await self._attempts(task, done, budget)
        except (EndpointRejectedError, RunDirectoryError):
            raise  # the run stops: see run()
        except _StoppedByRunBudget as stop:
            so_far = Spending(*budget.tokens_and_cost()) if budget is not None else Spending()
            return StoppedTask(stop.hit, so_far)
        except Exception as exc:  # one task's failure must not end the suite
            if (trouble := self._disk_trouble(exc)) is not None:
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
        untouched = task.task_id in self._untouched  # no killed run's journal to count
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
        if task.task_id in self._untouched:  # what the files would say: nothing, no time
            done, earlier = TaskProgress(), [Expense(cost=0.0, elapsed_seconds=0.0)]
        else:
            done = await asyncio.to_thread(self.run_dir.progress, task.task_id)
            earlier = [r for a in done.attempts for r in a.retries]
            earlier += done.retries
            attempt, retry = len(done.attempts) + 1, len(done.retries)
            earlier += await asyncio.to_thread(self._killed_runs, task, attempt, retry)
        budget = TaskBudget(self.limits, self.budget, recorded_spending(earlier), self.clock)
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

    def _disk_trouble(self, exc: BaseException) -> RunDirectoryError | None:
        """The run-stopping error when ``exc`` (or what it wraps) is a write the disk
        refused: full or read-only. Journals write through plain files, so their
        OSError comes unconverted."""
        for cause in _causes(exc):
            if isinstance(cause, RunDirectoryError):
                return cause
            if isinstance(cause, OSError):
                where = cause.filename or self.run_dir.root
                if (trouble := disk_trouble(Path(where), cause)) is not None:
                    return trouble
        return None

    def _rejected(self, exc: EndpointRejectedError, not_done: int) -> RunRejectedError:
        """The one message of a suite stopped by an endpoint that rejects it (described
        by the worker that met it, with the backend=ray: ``mark_rejected``)."""
        whose = exc.whose or self.rejecting(exc)
        said = exc.said or str(exc.__cause__ or exc)  # key blanked
        if any(isinstance(cause, EndpointUnreachableError) for cause in _causes(exc)):
            return _unreachable(whose, said, not_done)
        status = f"HTTP {exc.status}" if exc.status else "a rejection"
        return RunRejectedError(
            f"the model endpoint answered {status}, refusing the key or the model, for "
            f"{whose}. The suite stopped at this first such answer: {plural(not_done, 'task')} "
            f"{'is' if not_done == 1 else 'are'} not done and none of them was recorded. Fix "
            "the key, the model name or the URL, then run the same command again (same "
            "hydra.run.dir) to resume.\n"
            f"  The server said: {said}"
        )

    def mark_rejected(self, exc: EndpointRejectedError) -> EndpointRejectedError:
        """``exc`` carrying its description, for a driver that has not these models."""
        exc.whose = self.rejecting(exc)
        exc.said = str(exc.__cause__ or exc)
        return exc

    def rejecting(self, exc: EndpointRejectedError) -> str:
        """Which model, URL and key source rejected the run, without the key."""
        if (key := getattr(exc, "config_key", None)) is not None:
            whose = self._other_model(key, exc)
        elif isinstance(exc, _JudgeRejectedError) and self.judge is not None:
            llm = getattr(self.judge, "llm", None)
            preset = self.cfg.benchmark.judge.llm
            whose = (
                f"the judge's model, benchmark.judge.llm={preset} (model "
                f"{getattr(llm, 'model', '?')!r} at {_refused_url(exc) or _base_url(llm)!r}; "
                "its API key from the variable named by llm.api_key_env in that preset)"
            )
        else:
            llm_cfg = self.cfg.llm
            whose = (
                f"llm.model_name={llm_cfg.model_name!r} at {self._agent_url(exc)}, "
                f"{_key_source(llm_cfg)}"
            )
        return whose

    def _agent_url(self, exc: EndpointRejectedError) -> str:
        """``llm.endpoints[i]=URL`` of the server that refused, else ``llm.base_url=URL``."""
        endpoints, refused = self.cfg.llm.endpoints or [], _refused_url(exc)
        if refused is not None and refused in endpoints:
            return f"llm.endpoints[{endpoints.index(refused)}]={refused!r}"
        return f"llm.base_url={self.cfg.llm.base_url or _base_url(self.llm)!r}"

    def _other_model(self, key: str, exc: EndpointRejectedError) -> str:
        """A model of its own preset (``key`` names it), described without its key."""
        if key == "agent.context.summary_llm":
            what, preset = "the compaction notes' model", self.cfg.agent.context.summary_llm
            llm = self.note_writer.llm if self.note_writer is not None else None
        else:
            what, preset = "the page extraction model", extract_llm_name(self.cfg)
            llm = self.scraper.model.llm if self.scraper is not None else None
        return (
            f"{what}, {key}={preset} (model {getattr(llm, 'model', '?')!r} at "
            f"{_refused_url(exc) or _base_url(llm)!r}; its API key from the variable named by "
            "llm.api_key_env in that preset)"
        )

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

    async def _attempts(
        self, task: Task, done: TaskProgress, budget: TaskBudget
    ) -> tuple[list[AttemptRecord], LimitRecord | None]:
        """The task's attempts, and the limit that stopped them (None: none did)."""
        # File work (reading what earlier runs left, opening journals) happens on worker
        # threads: hundreds of tasks start at once, and the event loop serves them all.
        attempts: list[AttemptRecord] = await self._judged_again(task, list(done.attempts))
        if (
            (any(a.correct for a in attempts) and not self.every_attempt)
            or _gave_up(attempts)
            or self._awaits_verdict(attempts)
        ):
            return attempts, None
        first = len(attempts) + 1
        tries = self.pass_at_k if task.ground_truth is not None else 1
        for number in range(first, tries + 1):
            if attempts and (hit := budget.check()) is not None:
                _stop_if_run_budget(hit)
                return attempts, _limit_record(hit)  # no new attempt once over its own limit
            carried: list[RetryRecord] = list(done.retries) if number == first else []
            await self._progress_flushed(task)
            attempt = await self._attempt(task, number, carried, budget)
            await self._progress_written(task, attempt)
            attempts.append(attempt)
            # Unjudged: whether another attempt is due is not known until a resume has
            # judged it (_judged_again).
            if (
                (attempt.correct and not self.every_attempt)
                or attempt.limit
                or _gave_up(attempts)
                or self._awaits_verdict(attempts)
            ):
                break
        return attempts, attempts[-1].limit

    async def _attempt(
        self,
        task: Task,
        number: int,
        finished_retries: list[RetryRecord],
        budget: TaskBudget,
    ) -> AttemptRecord:
        """One attempt: the format-retry loop, resumed after ``finished_retries``."""
        retries = list(finished_retries)
        post_mortems = [r.post_mortem for r in retries if r.post_mortem]
        stopped_by = None
        while not (retries and retries[-1].final_answer is not None):
            index = len(retries)
            if index > self.retry_limit:
                break
            if retries and (stopped_by := _limit_after(retries[-1], budget)) is not None:
                break  # a retry would start over the limit: the attempt ends here
            if retries and retries[-1].does_not_fit:
                break  # with post-mortems added, the task text would only be longer
            await self._progress_flushed(task)
            with routed_as(task.task_id, number):  # llm.endpoints: the attempt's server
                retry = await self._retry(task, number, index, post_mortems, budget)
            if retry.limit is not None:  # not recorded as finished when the run's
                _stop_if_run_budget(LimitHit(**retry.limit.model_dump()))  # budget cut it short
            await self._progress_written(task, retry)
            retries.append(retry)
            if retry.post_mortem:
                post_mortems.append(retry.post_mortem)
        last = retries[-1]
        with routed_as(task.task_id, number):  # a judge preset with endpoints spreads too
            judgement = await self._judge(task, last.final_answer)
        return AttemptRecord(
            attempt=number,
            final_answer=last.final_answer,
            provenance=last.provenance,
            correct=judgement.correct,
            judgement=JudgementRecord.model_validate(asdict(judgement)),
            carried_post_mortems=last.carried_post_mortems,
            limit=stopped_by or last.limit,
            retries=retries,
        )

    async def _retry(
        self, task: Task, attempt: int, index: int, post_mortems: list[str], budget: TaskBudget
    ) -> RetryRecord:
        """One format-retry, with the tool servers given up on that it ran without."""
        with noting_given_up() as given_up:
            record = await self._run_retry(task, attempt, index, post_mortems, budget)
        record.tool_servers_given_up = dict(given_up)
        return record

    async def _run_retry(
        self, task: Task, attempt: int, index: int, post_mortems: list[str], budget: TaskBudget
    ) -> RetryRecord:
        policy = policy_from_config(self.cfg.agent, is_final_retry=index == self.retry_limit)
        assert self.llm is not None and self.tools is not None, "a driver runs no task itself"
        factory = AgentFactory(
            self.cfg, self.llm, self.tools, policy, self.note_writer, self.scraper, budget
        )
        text = retry_task_text(task.question, post_mortems, prompt_set(self.cfg.agent))
        resumable = await self._resume_point(task, attempt, index, text)
        started = self.clock()
        state: RunState | str | None = None
        point: str | None = resumable if isinstance(resumable, str) else None
        killed_calls, killed_time = 0, 0.0  # of the killed runs this retry goes on from
        if isinstance(resumable, tuple):  # benchmark.execution.resume=turn
            resumed, journal = resumable
            try:
                state = await factory.resume(text, journal, resumed, file_path=task.file_path)
            finally:
                journal.close()
            point = state if isinstance(state, str) else None  # refused: why
            if point is None:
                killed_calls, killed_time = resumed.killed_calls, resumed.killed_seconds
        if not isinstance(state, RunState):
            journal = await asyncio.to_thread(self.run_dir.journal, task.task_id, attempt, index)
            journal.write(
                RetryStarted(
                    task_id=task.task_id,
                    attempt=attempt,
                    retry=index,
                    carried_post_mortems=len(post_mortems),
                    final_retry=policy.is_final_retry,
                    config_id=self.run_dir.config_id,
                )
            )
            if point is not None:  # a reason: resume=turn fell back to the first turn
                log.warning(
                    "task %s attempt %d retry %d starts afresh: %s",
                    task.task_id,
                    attempt,
                    index,
                    point,
                )
                journal.write(ResumeFellBack(reason=point))
            try:
                state = await factory.solve(text, journal, file_path=task.file_path)
            finally:
                journal.close()
        record = _retry_record(state, index, len(post_mortems), self.run_dir.relative(journal.path))
        record.elapsed_seconds = round(self.clock() - started + killed_time, 3)
        record.interrupted_calls = killed_calls
        return record

    async def _resume_point(
        self, task: Task, attempt: int, index: int, text: str
    ) -> tuple[ResumePoint, Journal] | str | None:
        """With benchmark.execution.resume=turn, where a retry a killed run left goes on,
        with its journal held to go on writing (or why it cannot: it starts afresh);
        None: nothing to resume, or resume=retry."""
        if self.cfg.benchmark.execution.resume != ResumeMode.TURN:
            return None
        if task.task_id in self._untouched:
            return None  # no journal of it was there, and this run writes each once
        path = self.run_dir.journal_path(task.task_id, attempt, index)
        if not await asyncio.to_thread(path.exists):
            return None
        if any(t.startswith("agent-") for t in self.cfg.agent.main_agent.tools):
            return "sub-agent runs are not rebuilt by resume=turn"
        sees_images = self.llm is not None and self.llm.capabilities.images
        sent, _ = await task_message(self.cfg, text, task.file_path, sees_images=sees_images)
        reopen = partial(self.run_dir.journal, task.task_id, attempt, index, resume=True)
        return await reopen_unfinished(reopen, path, config_id=self.run_dir.config_id, task=sent)

    def _awaits_verdict(self, attempts: Sequence[AttemptRecord]) -> bool:
        """Whether the attempts stop for an unjudged one: whether another is due is not
        known until a resume judged it. With avg@k every attempt runs anyway."""
        return not self.every_attempt and _unjudged(attempts)

    async def _judged_again(self, task: Task, attempts: list[AttemptRecord]) -> list[AttemptRecord]:
        """Earlier runs' attempts, those left unjudged judged now from their recorded
        answer (the agent is not run again), each written to the task's progress so a
        kill after it does not ask again."""
        judged = []
        for attempt in attempts:
            if attempt.judgement is not None and attempt.judgement.unjudged:
                with routed_as(task.task_id, attempt.attempt):
                    judgement = await self._judge(task, attempt.final_answer)
                attempt = attempt.model_copy(
                    update={
                        "correct": judgement.correct,
                        "judgement": JudgementRecord.model_validate(asdict(judgement)),
                    }
                )
                await self._progress_written(task, attempt)
            judged.append(attempt)
        return judged

    async def _judge(self, task: Task, answer: str | None) -> Judgement:
        """The answer's judgement. A judge model that fails (unreachable, or an error
        after its retries) leaves the answer unjudged: recorded, not counted, judged
        again by a resume; only an endpoint that refuses the key or the model stops the
        run (the same failure would meet every task)."""
        if task.ground_truth is None or self.judge is None:
            return Judgement(None, "none", "no ground truth")
        try:
            return await self.judge.judge(task.question, answer, task.ground_truth)
        except EndpointUnreachableError as exc:
            return judge_failed(task.task_id, self.judge, exc)
        except EndpointRejectedError as exc:  # named as the judge's in the message
            judge = _JudgeRejectedError(str(exc), provider=exc.provider, status=exc.status)
            judge.endpoint = exc.endpoint
            raise judge from exc
        except LLMError as exc:
            return judge_failed(task.task_id, self.judge, exc)


def judge_failed(task_id: str, judge: Judge, exc: LLMError) -> Judgement:
    """An unjudged judgement saying why: the judge model's error, in one line."""
    why = " ".join(str(exc).split())
    log.warning("task %s: unjudged, the judge's model failed: %s", task_id, why)
    return Judgement(
        None, judge.name, f"unjudged: the judge's model failed ({why})", unjudged=True, asks=1
    )


def _resumed_later(outcome: TaskOutcome) -> bool:
    """Whether a resume runs (or judges) the task again: its record is not its result."""
    if isinstance(outcome, StoppedTask) or outcome.status != "finished":
        return True
    return _unjudged(outcome.attempts)


def _unjudged(attempts: Sequence[AttemptRecord]) -> bool:
    """Whether an attempt was left unjudged (as RunStore.finished_results tells)."""
    return any(a.judgement is not None and a.judgement.unjudged for a in attempts)


class _JudgeRejectedError(EndpointRejectedError):
    """The judge's endpoint, not the agent's, rejected the run."""


class _StoppedByRunBudget(Exception):
    """The run's budget cut a task short: it stays unrecorded, resumable."""

    def __init__(self, hit: LimitHit) -> None:
        super().__init__(hit.describe())
        self.hit = hit


def _own_copy(exc: BaseException) -> BaseException:
    """``exc`` again, for another waiter to raise with a traceback of its own."""
    try:
        return copy.copy(exc)
    except Exception:  # one that cannot be made again from its arguments
        return exc


def _stop_if_run_budget(hit: LimitHit) -> None:
    if hit.is_run_budget:
        raise _StoppedByRunBudget(hit)


def _gave_up(attempts: list[AttemptRecord]) -> bool:
    """Whether the last attempt's bare question was over the window: another attempt
    would start from that same text. (A retry that carried post-mortems may have been
    too long only because of them, so a fresh attempt still has a chance.)"""
    if not attempts:
        return False
    failed = [r for r in attempts[-1].retries if r.does_not_fit]
    return any(r.carried_post_mortems == 0 for r in failed)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, the exceptions it was raised from, and those of any group, depth first."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            stack += list(current.exceptions)
        stack += [c for c in (current.__cause__, current.__context__) if c is not None]


def _limit_after(last_retry: RetryRecord, budget: TaskBudget) -> LimitRecord | None:
    """The limit that keeps the next retry from starting: the one the last retry ended on
    (also when resumed), or one reached since."""
    if last_retry.end_reason == "limit":
        return last_retry.limit or LimitRecord(kind="unknown")
    hit = budget.check()
    if hit is not None:
        _stop_if_run_budget(hit)
    return _limit_record(hit) if hit is not None else None


def _limit_record(hit: LimitHit) -> LimitRecord:
    return LimitRecord.model_validate(hit.record())


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


def _was(count: int) -> str:
    return "was" if count == 1 else "were"


def _say_budget_spent(hit: LimitHit, not_started: int, stopped: int) -> None:
    what = (
        [f"{plural(stopped, 'running task')} {_was(stopped)} stopped unrecorded"] if stopped else []
    )
    what += (
        [f"{plural(not_started, 'task')} {_was(not_started)} not started"] if not_started else []
    )
    print(
        f"deepledger: the run's budget is spent: {hit.describe()}. {'; '.join(what)}; raise "
        "the budget and run the same command again (same hydra.run.dir) to run them "
        "(finished tasks and retries are kept).",
        file=sys.stderr,
    )


def _unreachable(whose: str, said: str, not_done: int) -> RunRejectedError:
    """The one message of a suite stopped because its model could not be reached before
    any call of the process that met it reached it (``llm/retry.py``)."""
    return RunRejectedError(
        f"the model endpoint could not be reached, for {whose}, and no call from the "
        "process that met it (with backend=ray: one worker) had reached it. The suite "
        "stopped after the first task's retries: "
        f"{plural(not_done, 'task')} {'is' if not_done == 1 else 'are'} not done and none "
        "of them was recorded. Check the URL (and that its server is running), then run "
        "the same command again (same hydra.run.dir) to resume.\n"
        f"  {said}"
    )


def _refused_url(exc: EndpointRejectedError) -> str | None:
    """With endpoints: the URL of the server that refused (on ``exc``, or on the error it
    wraps: the notes' and the extraction model's)."""
    cause = exc.__cause__
    return exc.endpoint or (cause.endpoint if isinstance(cause, EndpointRejectedError) else None)


def _base_url(llm: Any) -> str | None:
    inner = getattr(llm, "inner", llm)  # the retrying wrapper holds the provider
    return getattr(inner, "base_url", None)


def _key_source(llm_cfg: LLMConfig) -> str:
    """Where the API key came from, named without the key."""
    from deepledger.llm.factory import DEFAULT_KEY_VARIABLES

    variable = llm_cfg.api_key_env
    if variable == COMMAND_LINE_KEY_ENV:
        return "with the key given as llm.api_key on the command line"
    if variable is None and llm_cfg.api_key_required:
        variable = DEFAULT_KEY_VARIABLES.get(llm_cfg.provider)
    if variable is None:
        return "with no API key (llm.api_key_env is not set; the server may need one)"
    return f"with the API key in ${variable} (llm.api_key_env)"


def _retry_record(state: RunState, index: int, carried: int, journal: str | None) -> RetryRecord:
    return RetryRecord(
        retry=index,
        final_answer=state.final_answer,
        provenance=state.provenance.value,
        end_reason=state.end_reason.value if state.end_reason else None,
        end_detail=state.end_detail,
        does_not_fit=state.task_does_not_fit,
        turns=state.turn,
        tool_calls=state.tool_calls,
        prefix_breaks=state.prefix_breaks,
        rollbacks=len(state.rollbacks),
        post_mortem=state.post_mortem,
        failure_type=state.failure_type,
        limit=_limit_record(state.limit) if state.limit else None,
        carried_post_mortems=carried,
        usage=state.ledger.total,
        cost=state.ledger.cost,
        extraction_usage=state.ledger.extraction_total,
        extraction_cost=state.ledger.extraction_cost,
        journal=journal,
    )


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
