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
A model error is logged in one line; a traceback means a bug.

An endpoint that rejects the run (HTTP 401/403, or 404 for the model; the agent's model
or the judge's) stops the suite at its first such answer: no task starts after it, the
running ones are cancelled without a record (their partial journals are set aside on
resume), and :class:`RunRejectedError` says which model, URL and key variable to check.
Fixed, the same command resumes the tasks not done.

Budgets (``agent/limits.py``): a task over its own limit, or any task once the run's
budget is spent, ends its loop with end reason ``limit`` and gets no further retry or
attempt; its record says which limit (``limit: {kind, limit, spent}``). Once the run's
budget is spent no task starts: those stay unrecorded, so the same command with a raised
budget runs them.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from omegaconf import OmegaConf

from deepledger.agent.limits import (
    Clock,
    LimitHit,
    RunBudget,
    TaskBudget,
    TaskLimits,
    recorded_spending,
)
from deepledger.agent.state import RunState
from deepledger.agent.task import AgentFactory, policy_from_config
from deepledger.bench.experience import retry_task_text
from deepledger.bench.judge import Judge, Judgement
from deepledger.bench.progress import Progress
from deepledger.bench.rundir import RunDirectory, TaskProgress
from deepledger.bench.tasks import Task
from deepledger.context.compaction import NoteWriter
from deepledger.errors import (
    ConfigError,
    EndpointRejectedError,
    LLMError,
    RunDirectoryError,
    RunRejectedError,
)
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
        clock: Clock = time.monotonic,
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
        self.clock = clock  # read by the task time limits; tests pass a fake one
        self.limits = TaskLimits.from_execution(self.cfg.benchmark.execution)
        self.budget = RunBudget()  # the run's, set up by run() from what is recorded

    async def run(self, tasks: list[Task]) -> list[dict[str, Any]]:
        """Every task's record, in task order: earlier runs' and this run's."""
        self._refuse_unpriced_cost_limits()
        finished = self.run_dir.finished_results()
        todo = [t for t in tasks if t.task_id not in finished]
        execution = self.cfg.benchmark.execution
        # Finished tasks' spending; a task that errored is run again, and counts what its
        # retries spent from its start (an error record would count it twice).
        self.budget = RunBudget.from_execution(execution, finished.values())
        self.progress.start(
            total=len(tasks),
            already_done=len(tasks) - len(todo),
            budget=self.budget.line if self.budget.enabled else None,
        )
        limit = asyncio.Semaphore(execution.max_concurrent)
        not_started: list[LimitHit] = []

        async def one(task: Task) -> None:
            async with limit:
                if (spent := self.budget.exhausted()) is not None:
                    not_started.append(spent)  # unrecorded: a resume with more runs it
                    return
                await self._run_and_record(task, finished)

        jobs = [asyncio.create_task(one(t)) for t in todo]
        try:
            with collector_tuned_for_many_tasks():
                await asyncio.gather(*jobs)
        except EndpointRejectedError as exc:
            await _cancel(jobs)
            raise self._rejected(exc, sum(t.task_id not in finished for t in tasks)) from None
        except RunDirectoryError:  # the disk is full: no other task could be recorded either
            await _cancel(jobs)
            raise
        finally:
            self.progress.close()
        if not_started:
            _say_budget_spent(not_started[-1], len(not_started))
        return [finished[t.task_id] for t in tasks if t.task_id in finished]

    async def _run_and_record(self, task: Task, finished: dict[str, dict[str, Any]]) -> None:
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

    async def _task_record(self, task: Task) -> dict[str, Any]:
        started = self.clock()
        budget = None
        try:
            done, budget = await self._start(task)
            attempts, stopped_by = await self._attempts(task, done, budget)
        except EndpointRejectedError:
            raise  # the run stops: see run()
        except Exception as exc:  # one task's failure must not end the suite
            if isinstance(exc, LLMError):  # the model's failure, not a bug: one line
                log.error("task %s failed: %s", task.task_id, exc)
            else:
                log.exception("task %s failed", task.task_id)
            done = self.run_dir.progress(task.task_id)  # what it finished still counts
            spent = [r for a in done.attempts for r in a["retries"]] + done.retries
            spent += self._interrupted(task)
            return _error_record(task, exc, self.clock() - started, spent)
        finally:
            if budget is not None:
                self.budget.task_ended(budget)
        record = _task_record(task, attempts, self.clock() - started)
        if record.get("end_detail"):  # e.g. the task alone cannot fit the window
            log.warning("task %s: %s", task.task_id, record["end_detail"])
        if stopped_by is not None:
            record |= {"end_reason": "limit", "limit": stopped_by}
        interrupted = await asyncio.to_thread(self._interrupted, task)
        if interrupted:  # a killed run's calls were spent too: they count in the totals
            retries = [r for a in attempts for r in a["retries"]]
            usage, cost = _spent(retries + interrupted)
            record |= {"usage": asdict(usage), "cost": cost, "interrupted_calls": len(interrupted)}
        return record

    async def _start(self, task: Task) -> tuple[TaskProgress, TaskBudget]:
        """What earlier runs finished of the task, and its budget, which starts with what
        they spent (time included)."""
        done = await asyncio.to_thread(self.run_dir.progress, task.task_id)
        earlier = [r for a in done.attempts for r in a["retries"]] + done.retries
        earlier += await asyncio.to_thread(self._interrupted, task)
        budget = TaskBudget(self.limits, self.budget, recorded_spending(earlier), self.clock)
        self.budget.task_started(budget)
        return done, budget

    def _refuse_unpriced_cost_limits(self) -> None:
        """A cost limit on a model without a price could never be reached."""
        execution = self.cfg.benchmark.execution
        keys = [k for k in ("task_cost_limit_usd", "max_cost_usd") if getattr(execution, k)]
        if keys and self.price is None:
            model = self.cfg.llm.model_name
            raise ConfigError(
                f"benchmark.execution.{keys[0]} is set, but llm.model_name={model!r} has no "
                f"price, so its cost is unknown. Add one (+pricing.{model}.input=USD "
                f"+pricing.{model}.output=USD per million tokens) or limit tokens instead "
                "(benchmark.execution.task_token_limit, .max_tokens)."
            )

    def _rejected(self, exc: EndpointRejectedError, not_done: int) -> RunRejectedError:
        """The one message of a suite stopped by an endpoint that rejects it."""
        if isinstance(exc, _JudgeRejectedError) and self.judge is not None:
            llm = getattr(self.judge, "llm", None)
            preset = self.cfg.benchmark.judge.llm
            whose = (
                f"the judge's model, benchmark.judge.llm={preset} (model "
                f"{getattr(llm, 'model', '?')!r} at {_base_url(llm)!r}; its API key from the "
                f"variable named by llm.api_key_env in that preset)"
            )
        else:
            llm_cfg = self.cfg.llm
            base_url = llm_cfg.base_url or _base_url(self.llm)
            whose = (
                f"llm.model_name={llm_cfg.model_name!r} at llm.base_url={base_url!r}, "
                f"{_key_source(llm_cfg)}"
            )
        status = f"HTTP {exc.status}" if exc.status else "a rejection"
        said = _without_key(str(exc.__cause__ or exc), self.cfg.llm)
        return RunRejectedError(
            f"the model endpoint answered {status}, refusing the key or the model, for "
            f"{whose}. The suite stopped at this first such answer: {not_done} tasks are not "
            "done and none of them was recorded. Fix the key, the model name or the URL, then "
            "run the same command again (same hydra.run.dir) to resume.\n"
            f"  The server said: {said}"
        )

    def _interrupted(self, task: Task) -> list[dict[str, Any]]:
        """Killed runs' model calls, shaped like retries for the totals."""
        calls = []
        for usage in self.run_dir.interrupted_usages(task.task_id):
            cost = self.price.cost(Usage(**usage)) if self.price else None
            calls.append({"usage": usage, "cost": cost, "turns": 0, "tool_calls": 0})
        return calls

    async def _attempts(
        self, task: Task, done: TaskProgress, budget: TaskBudget
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The task's attempts, and the limit that stopped them (None: none did)."""
        # File work (reading what earlier runs left, opening journals) happens on worker
        # threads: hundreds of tasks start at once, and the event loop serves them all.
        attempts = list(done.attempts)
        if any(a["correct"] for a in attempts):
            return attempts, None
        first = len(attempts) + 1
        tries = self.pass_at_k if task.ground_truth is not None else 1
        for number in range(first, tries + 1):
            if attempts and (hit := budget.check()) is not None:
                return attempts, hit.record()  # no new attempt once over a limit
            carried = done.retries if number == first else []
            attempt = await self._attempt(task, number, carried, budget)
            await asyncio.to_thread(
                self.run_dir.record_progress, task.task_id, "attempt_finished", **attempt
            )
            attempts.append(attempt)
            if attempt["correct"] or attempt["limit"]:
                break
        return attempts, attempts[-1].get("limit")

    async def _attempt(
        self,
        task: Task,
        number: int,
        finished_retries: list[dict[str, Any]],
        budget: TaskBudget,
    ) -> dict[str, Any]:
        """One attempt: the format-retry loop, resumed after ``finished_retries``."""
        retries = list(finished_retries)
        post_mortems = [r["post_mortem"] for r in retries if r.get("post_mortem")]
        stopped_by = None
        while not (retries and retries[-1]["final_answer"] is not None):
            index = len(retries)
            if index > self.retry_limit:
                break
            if retries and (stopped_by := _limit_after(retries[-1], budget)) is not None:
                break  # a retry would start over the limit: the attempt ends here
            retry = await self._retry(task, number, index, post_mortems, budget)
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
            "limit": stopped_by or last.get("limit"),
            "retries": retries,
        }

    async def _retry(
        self, task: Task, attempt: int, index: int, post_mortems: list[str], budget: TaskBudget
    ) -> dict[str, Any]:
        policy = policy_from_config(self.cfg.agent, is_final_retry=index == self.retry_limit)
        factory = AgentFactory(
            self.cfg, self.llm, self.tools, policy, self.note_writer, self.scraper, budget
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
        started = self.clock()
        try:
            text = retry_task_text(task.question, post_mortems)
            state = await factory.solve(text, journal, file_path=task.file_path)
        finally:
            journal.close()
        record = _retry_record(state, index, len(post_mortems), self.run_dir.relative(journal.path))
        return record | {"elapsed_seconds": round(self.clock() - started, 3)}

    async def _judge(self, task: Task, answer: str | None) -> Judgement:
        if task.ground_truth is None or self.judge is None:
            return Judgement(None, "none", "no ground truth")
        try:
            return await self.judge.judge(task.question, answer, task.ground_truth)
        except EndpointRejectedError as exc:  # named as the judge's in the message
            raise _JudgeRejectedError(str(exc), provider=exc.provider, status=exc.status) from exc


class _JudgeRejectedError(EndpointRejectedError):
    """The judge's endpoint, not the agent's, rejected the run."""


def _limit_after(last_retry: dict[str, Any], budget: TaskBudget) -> dict[str, Any] | None:
    """The limit that keeps the next retry from starting: the one the last retry ended on
    (also when resumed), or one reached since."""
    if last_retry.get("end_reason") == "limit":
        return last_retry.get("limit") or {"kind": "unknown"}
    hit = budget.check()
    return hit.record() if hit is not None else None


async def _cancel(jobs: list[asyncio.Task[None]]) -> None:
    """Cancel the tasks still running and wait until they have let go of their tools."""
    for job in jobs:
        job.cancel()
    await asyncio.gather(*jobs, return_exceptions=True)


def _say_budget_spent(hit: LimitHit, not_started: int) -> None:
    print(
        f"deepledger: the run's budget is spent: {hit.describe()}. {not_started} tasks were "
        "not started; raise the budget and run the same command again (same hydra.run.dir) "
        "to run them (finished tasks are kept).",
        file=sys.stderr,
    )


def _base_url(llm: Any) -> str | None:
    inner = getattr(llm, "inner", llm)  # the retrying wrapper holds the provider
    return getattr(inner, "base_url", None)


def _key_source(llm_cfg: Any) -> str:
    """Where the API key came from, named without the key."""
    from deepledger.cli import COMMAND_LINE_KEY_ENV
    from deepledger.llm.factory import DEFAULT_KEY_VARIABLES

    variable = llm_cfg.api_key_env
    if variable == COMMAND_LINE_KEY_ENV:
        return "with the key given as llm.api_key on the command line"
    if variable is None and llm_cfg.api_key_required:
        variable = DEFAULT_KEY_VARIABLES.get(llm_cfg.provider)
    if variable is None:
        return "with no API key (llm.api_key_env is not set; the server may need one)"
    return f"with the API key in ${variable} (llm.api_key_env)"


def _without_key(text: str, llm_cfg: Any) -> str:
    """``text`` with the API key blanked, should a server quote it back."""
    from deepledger.llm.factory import DEFAULT_KEY_VARIABLES

    variable = llm_cfg.api_key_env or DEFAULT_KEY_VARIABLES.get(llm_cfg.provider)
    key = os.environ.get(variable, "").strip() if variable else ""
    return text.replace(key, "***") if len(key) >= 4 else text


def _retry_record(state: RunState, index: int, carried: int, journal: str | None) -> dict[str, Any]:
    return {
        "retry": index,
        "final_answer": state.final_answer,
        "provenance": state.provenance.value,
        "end_reason": state.end_reason.value if state.end_reason else None,
        "end_detail": state.end_detail,  # e.g. why the task alone cannot fit the window
        "turns": state.turn,
        "tool_calls": state.tool_calls,
        "prefix_breaks": state.prefix_breaks,
        "rollbacks": len(state.rollbacks),
        "post_mortem": state.post_mortem,
        "failure_type": state.failure_type,
        "limit": state.limit.record() if state.limit else None,
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
        "end_detail": final["retries"][-1].get("end_detail"),
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
