"""Running a benchmark suite: tasks x attempts (pass@k) x format-retries.

- Tasks run concurrently in one process, at most ``benchmark.execution.max_concurrent``
  at a time; the model client and the shared tool servers serve them all.
- A task gets up to ``pass_at_k`` attempts and stops at the first correct one (a task
  without ground truth gets one attempt: there is nothing to retry for).
- Inside an attempt, the **format-retry loop**: while the answer has no box, up to
  ``agent.context_compress_limit`` more runs, each task text rebuilt from the original
  question plus the post-mortems of the retries before it; the last one is the final
  retry (generate and fall back). With context management off, one run.
- Finished retries and attempts are written to the task's ``progress.jsonl`` as they end,
  and finished tasks to ``benchmark_results.jsonl``: see ``rundir.py`` for resuming.

A task that fails outright (the model or the judge unreachable after all retries, a bug)
is recorded with ``status: error``, its reason and what its finished retries spent, and
the other tasks go on. Running the same command again retries it from those retries.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from omegaconf import OmegaConf

from deepledger.agent.state import RunState
from deepledger.agent.task import AgentFactory, policy_from_config
from deepledger.bench.experience import retry_task_text
from deepledger.bench.judge import Judge, Judgement
from deepledger.bench.progress import Progress
from deepledger.bench.rundir import RunDirectory
from deepledger.bench.tasks import Task
from deepledger.context.compaction import NoteWriter
from deepledger.llm.base import LLMClient
from deepledger.llm.usage import find_price
from deepledger.messages import Usage
from deepledger.tools.manager import ToolManager
from deepledger.tools.scrape import PageScraper

log = logging.getLogger(__name__)

# Objects allocated before the youngest generation is collected (Python's default: 700).
YOUNG_GENERATION_THRESHOLD = 10_000


class BenchmarkRunner:
    def __init__(
        self,
        cfg: Any,
        *,
        llm: LLMClient,
        tools: ToolManager,
        run_dir: RunDirectory,
        judge: Judge | None,
        progress: Progress | None = None,
        note_writer: NoteWriter | None = None,
        scraper: PageScraper | None = None,
    ) -> None:
        # Every task reads dozens of settings; on OmegaConf nodes each read costs
        # microseconds of resolution (a millisecond a task, all on the event loop), on
        # the plain dataclasses of the schema it is an attribute lookup.
        self.cfg = OmegaConf.to_object(cfg) if OmegaConf.is_config(cfg) else cfg
        self.llm = llm
        self.tools = tools
        self.run_dir = run_dir
        self.judge = judge
        self.note_writer = note_writer
        self.scraper = scraper
        self.progress = progress or Progress(plain=True)
        self.retry_limit = cfg.agent.context_compress_limit
        self.pass_at_k = cfg.benchmark.execution.pass_at_k
        self.price = find_price(cfg.llm.model_name, cfg.pricing)

    async def run(self, tasks: list[Task]) -> list[dict[str, Any]]:
        """Every task's record, in task order: earlier runs' and this run's."""
        finished = self.run_dir.finished_results()
        todo = [t for t in tasks if t.task_id not in finished]
        self.progress.start(total=len(tasks), already_done=len(tasks) - len(todo))
        limit = asyncio.Semaphore(self.cfg.benchmark.execution.max_concurrent)

        async def one(task: Task) -> None:
            async with limit:
                self.progress.task_started(task.task_id)
                try:
                    record = await self._task_record(task)
                    # Written and fsynced on a worker thread: a slow disk (or a network
                    # filesystem) must not stall every other task.
                    await asyncio.to_thread(self.run_dir.add_result, record)
                except OSError as exc:  # the disk, not the task: say so, and go on
                    log.error("could not record task %s: %s", task.task_id, exc)
                    self.progress.task_finished(task.task_id, None, 0, failed=True)
                    return
                finished[task.task_id] = record
                tokens = record["usage"]["input_tokens"] + record["usage"]["output_tokens"]
                failed = record["status"] == "error"
                self.progress.task_finished(task.task_id, record["correct"], tokens, failed)

        try:
            with collector_tuned_for_many_tasks():
                await asyncio.gather(*(one(t) for t in todo))
        finally:
            self.progress.close()
        return [finished[t.task_id] for t in tasks if t.task_id in finished]

    async def _task_record(self, task: Task) -> dict[str, Any]:
        started = time.monotonic()
        try:
            attempts = await self._attempts(task)
        except Exception as exc:  # one task's failure must not end the suite
            log.exception("task %s failed", task.task_id)
            done = self.run_dir.progress(task.task_id)  # what it finished still counts
            spent = [r for a in done.attempts for r in a["retries"]] + done.retries
            spent += self._interrupted(task)
            return _error_record(task, exc, time.monotonic() - started, spent)
        record = _task_record(task, attempts, time.monotonic() - started)
        interrupted = await asyncio.to_thread(self._interrupted, task)
        if interrupted:  # a killed run's calls were spent too: they count in the totals
            retries = [r for a in attempts for r in a["retries"]]
            usage, cost = _spent(retries + interrupted)
            record |= {"usage": asdict(usage), "cost": cost, "interrupted_calls": len(interrupted)}
        return record

    def _interrupted(self, task: Task) -> list[dict[str, Any]]:
        """Killed runs' model calls, shaped like retries for the totals."""
        calls = []
        for usage in self.run_dir.interrupted_usages(task.task_id):
            cost = self.price.cost(Usage(**usage)) if self.price else None
            calls.append({"usage": usage, "cost": cost, "turns": 0, "tool_calls": 0})
        return calls

    async def _attempts(self, task: Task) -> list[dict[str, Any]]:
        # File work (reading what earlier runs left, opening journals) happens on worker
        # threads: hundreds of tasks start at once, and the event loop serves them all.
        done = await asyncio.to_thread(self.run_dir.progress, task.task_id)
        attempts = list(done.attempts)
        if any(a["correct"] for a in attempts):
            return attempts
        first = len(attempts) + 1
        tries = self.pass_at_k if task.ground_truth is not None else 1
        for number in range(first, tries + 1):
            carried = done.retries if number == first else []
            attempt = await self._attempt(task, number, carried)
            await asyncio.to_thread(
                self.run_dir.record_progress, task.task_id, "attempt_finished", **attempt
            )
            attempts.append(attempt)
            if attempt["correct"]:
                break
        return attempts

    async def _attempt(
        self, task: Task, number: int, finished_retries: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """One attempt: the format-retry loop, resumed after ``finished_retries``."""
        retries = list(finished_retries)
        post_mortems = [r["post_mortem"] for r in retries if r.get("post_mortem")]
        while not (retries and retries[-1]["final_answer"] is not None):
            index = len(retries)
            if index > self.retry_limit:
                break
            retry = await self._retry(task, number, index, post_mortems)
            await asyncio.to_thread(
                self.run_dir.record_progress, task.task_id, "retry_finished", **retry
            )
            retries.append(retry)
            if retry["post_mortem"]:
                post_mortems.append(retry["post_mortem"])
        last = retries[-1]
        judgement = await self._judge(task, last["final_answer"])
        return {
            "attempt": number,
            "final_answer": last["final_answer"],
            "provenance": last["provenance"],
            "correct": judgement.correct,
            "judgement": asdict(judgement),
            "carried_post_mortems": last["carried_post_mortems"],
            "retries": retries,
        }

    async def _retry(
        self, task: Task, attempt: int, index: int, post_mortems: list[str]
    ) -> dict[str, Any]:
        policy = policy_from_config(self.cfg.agent, is_final_retry=index == self.retry_limit)
        factory = AgentFactory(
            self.cfg, self.llm, self.tools, policy, self.note_writer, self.scraper
        )
        journal = await asyncio.to_thread(self.run_dir.journal, task.task_id, attempt, index)
        journal.write(
            "retry_started",
            task_id=task.task_id,
            attempt=attempt,
            retry=index,
            carried_post_mortems=len(post_mortems),
            final_retry=policy.is_final_retry,
        )
        try:
            text = retry_task_text(task.question, post_mortems)
            state = await factory.solve(text, journal, file_path=task.file_path)
        finally:
            journal.close()
        return _retry_record(state, index, len(post_mortems), self.run_dir.relative(journal.path))

    async def _judge(self, task: Task, answer: str | None) -> Judgement:
        if task.ground_truth is None or self.judge is None:
            return Judgement(None, "none", "no ground truth")
        return await self.judge.judge(task.question, answer, task.ground_truth)


def _retry_record(state: RunState, index: int, carried: int, journal: str | None) -> dict[str, Any]:
    return {
        "retry": index,
        "final_answer": state.final_answer,
        "provenance": state.provenance.value,
        "end_reason": state.end_reason.value if state.end_reason else None,
        "turns": state.turn,
        "tool_calls": state.tool_calls,
        "prefix_breaks": state.prefix_breaks,
        "rollbacks": len(state.rollbacks),
        "post_mortem": state.post_mortem,
        "failure_type": state.failure_type,
        "carried_post_mortems": carried,
        "usage": asdict(state.ledger.total),
        "cost": state.ledger.cost,
        # Of which the page extractor's calls (scrape_and_extract_info), shown apart.
        "extraction_usage": asdict(state.ledger.extraction_total),
        "extraction_cost": state.ledger.extraction_cost,
        "journal": journal,
    }


def _spent(retries: list[dict[str, Any]]) -> tuple[Usage, float | None]:
    """Tokens and cost of finished retries (cost unknown if any retry's is)."""
    usage = sum((Usage(**r["usage"]) for r in retries), Usage())
    costs = [r["cost"] for r in retries]
    return usage, None if any(c is None for c in costs) else sum(costs)


def _extraction_spent(retries: list[dict[str, Any]]) -> Usage:
    """Tokens the page extractor used, part of the retries' usage (older records: 0)."""
    return sum((Usage(**r["extraction_usage"]) for r in retries if r.get("extraction_usage")),
               Usage())  # fmt: skip


def _task_record(task: Task, attempts: list[dict[str, Any]], elapsed: float) -> dict[str, Any]:
    retries = [r for a in attempts for r in a["retries"]]
    usage, cost = _spent(retries)
    final = attempts[-1]
    return {
        "task_id": task.task_id,
        "question": task.question,
        "ground_truth": task.ground_truth,
        "file_path": task.file_path,
        "final_answer": final["final_answer"],
        "provenance": final["provenance"],
        "correct": final["correct"],  # attempts stop at the first correct one
        "judgement": final["judgement"],
        "status": "finished",
        "error": None,
        "end_reason": final["retries"][-1]["end_reason"],
        "attempts": attempts,
        "usage": asdict(usage),
        "cost": cost,
        # The judge's own model calls, kept apart: another model, another price.
        "judge_usage": asdict(
            sum(
                (Usage(**a["judgement"]["usage"]) for a in attempts if a["judgement"].get("usage")),
                Usage(),
            )
        ),
        "extraction_usage": asdict(_extraction_spent(retries)),
        "turns": sum(r["turns"] for r in retries),
        "tool_calls": sum(r["tool_calls"] for r in retries),
        "prefix_breaks": sum(r.get("prefix_breaks", 0) for r in retries),
        "elapsed_seconds": round(elapsed, 3),
    }


def _error_record(
    task: Task, exc: BaseException, elapsed: float, spent: list[dict[str, Any]]
) -> dict[str, Any]:
    """A task that failed; a resume runs it again from its finished retries."""
    usage, cost = _spent(spent)
    return {
        "task_id": task.task_id,
        "question": task.question,
        "ground_truth": task.ground_truth,
        "file_path": task.file_path,
        "final_answer": None,
        "provenance": "none",
        # A failed task with a ground truth counts as wrong: accuracy must not improve
        # because the model or a server broke down.
        "correct": None if task.ground_truth is None else False,
        "judgement": None,
        "status": "error",
        "error": f"{type(exc).__name__}: {exc}",
        "end_reason": "error",
        "attempts": [],
        "usage": asdict(usage),
        "cost": cost,
        "turns": sum(r["turns"] for r in spent),
        "tool_calls": sum(r["tool_calls"] for r in spent),
        "elapsed_seconds": round(elapsed, 3),
    }


@contextmanager
def collector_tuned_for_many_tasks() -> Iterator[None]:
    """Make Python's cycle collector cheap while hundreds of tasks run, then restore it.

    Everything alive before the run (imported modules, config, the tokenizer) is frozen
    out of the collector's scans, and the youngest generation is collected less often:
    replies parsed from JSON make objects fast, and each default collection went through
    them all again. Measured with benchmarks/perf/concurrent_tasks.py.
    """
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
