"""The recorder: a run's records on disk, flushed together (group commit).

A task's finished retries and attempts go to its ``progress.jsonl``, flushed before the
task does more work (so what is done is not done again after a power cut); finished
tasks go to ``benchmark_results.jsonl``, one write and one ``fsync`` for every record that
ended while the flush before was on its way. The writes wait on threads of the
recorder's own, so a slow disk stalls no other task.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from deepledger.bench.tasks import Task
from deepledger.records.results import AttemptRecord, RetryRecord, TaskRecord
from deepledger.store.run_store import RunStore

# Threads that flush task records to disk (Recorder.flushed): they wait on the disk, so
# more of them than cores is the point.
FLUSH_THREADS = 32


class Recorder:
    """Writes and flushes one run's progress lines and task records."""

    def __init__(self, run_dir: RunStore) -> None:
        self.run_dir = run_dir
        self._flushers: ThreadPoolExecutor | None = None  # see flushed
        self._unflushed: set[str] = set()  # tasks with progress lines not flushed yet
        # Records waiting for the results flush on its way (recorded), and its task.
        self._results_queue: list[tuple[TaskRecord, asyncio.Future[None]]] = []
        self._results_flusher: asyncio.Task[None] | None = None

    def forget(self, task_id: str) -> None:
        """The task ended here: its unflushed lines are the results line's to cover."""
        self._unflushed.discard(task_id)

    async def progress_written(self, task: Task, finished: RetryRecord | AttemptRecord) -> None:
        """``finished`` appended to the task's progress, not yet flushed to disk: if the
        task ends here, its result line (flushed) follows at once and says it all; if it
        goes on, :meth:`progress_flushed` flushes it first. Three flushes a task, one
        after another, were most of a 2,048-task run's last two seconds."""
        line = self.run_dir.progress_line(finished, task.digest)  # Python's part: see flushed
        await self.flushed(partial(self.run_dir.append_progress, sync=False), task.task_id, line)
        self._unflushed.add(task.task_id)

    async def progress_flushed(self, task: Task) -> None:
        """Before more work on ``task``: its progress lines on disk, so that what is
        done is not done again after a power cut either."""
        if task.task_id in self._unflushed:
            await self.flushed(self.run_dir.flush_progress, task.task_id)
            self._unflushed.discard(task.task_id)

    async def recorded(self, record: TaskRecord) -> None:
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
                await self.flushed(self.run_dir.append_results, lines)
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

    def stop(self) -> None:
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

    async def flushed(self, write: Callable[..., None], *args: Any) -> None:
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


def _own_copy(exc: BaseException) -> BaseException:
    """``exc`` again, for another waiter to raise with a traceback of its own."""
    try:
        return copy.copy(exc)
    except Exception:  # one that cannot be made again from its arguments
        return exc
