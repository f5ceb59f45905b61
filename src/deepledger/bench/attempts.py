"""The attempt loop: a task's attempts (pass@k) and, inside each, its format-retries.

How many of each, and what each run's closing is told, come from one
:class:`~deepledger.agent.retry_plan.RetryPlan` built from config. A task gets up to
``plan.attempts`` attempts and stops at the first correct one (all of them with avg@k);
inside an attempt, while the answer has no box, up to ``plan.format_retries`` more runs,
each task text rebuilt from the question plus the post-mortems before it. A retry a
killed run left goes on from its journal (``resume=turn``) or starts afresh, its
journal saying why (:class:`~deepledger.agent.refused.Refused`). Each finished retry
and attempt goes to the recorder as it ends. See ``bench/runner.py`` for budgets,
errors and resuming as a whole.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from deepledger.agent.limits import Clock, LimitHit, TaskBudget
from deepledger.agent.refused import Refused
from deepledger.agent.resume import ResumePoint, reopen_unfinished
from deepledger.agent.retry_plan import RetryPlan
from deepledger.agent.state import RunState
from deepledger.agent.task import AgentFactory, task_message
from deepledger.bench.experience import retry_task_text
from deepledger.bench.judge import Judge, Judgement
from deepledger.bench.recorder import Recorder
from deepledger.bench.stopping import JudgeRejectedError
from deepledger.bench.tasks import Task
from deepledger.config import Config, ResumeMode, prompt_set
from deepledger.context.compaction import NoteWriter
from deepledger.errors import EndpointRejectedError, EndpointUnreachableError, LLMError
from deepledger.llm.base import LLMClient
from deepledger.llm.endpoints import routed_as
from deepledger.records.events import ResumeFellBack, RetryStarted
from deepledger.records.results import AttemptRecord, JudgementRecord, LimitRecord, RetryRecord
from deepledger.store.journal import Journal
from deepledger.store.run_store import RunStore, TaskProgress
from deepledger.tools.given_up import noting_given_up
from deepledger.tools.pool import ToolManager
from deepledger.tools.scrape import PageScraper

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resumable:
    """A retry a killed run left: where it goes on from, its journal held to append."""

    point: ResumePoint
    journal: Journal


@dataclass(frozen=True)
class _Ran:
    """A retry run to its end: its state, its journal, and what the killed runs it went
    on from had spent (counted in its totals and time)."""

    state: RunState
    journal: Path | None  # None: no file (a journal kept in memory, in tests)
    killed_calls: int = 0
    killed_seconds: float = 0.0


class AttemptLoop:
    """Runs one task's attempts and format-retries, as ``plan`` says, recording each."""

    def __init__(
        self,
        cfg: Config,
        plan: RetryPlan,
        recorder: Recorder,
        *,
        llm: LLMClient | None,
        tools: ToolManager | None,
        judge: Judge | None,
        note_writer: NoteWriter | None = None,
        scraper: PageScraper | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.cfg = cfg
        self.plan = plan
        self.recorder = recorder
        self.run_dir: RunStore = recorder.run_dir
        self.llm = llm
        self.tools = tools
        self.judge = judge
        self.note_writer = note_writer
        self.scraper = scraper
        self.clock = clock
        # Tasks no earlier run left anything of (set by the runner's run()): no journal
        # of theirs to look for.
        self.untouched: frozenset[str] = frozenset()

    async def attempts(
        self, task: Task, done: TaskProgress, budget: TaskBudget
    ) -> tuple[list[AttemptRecord], LimitRecord | None]:
        """The task's attempts, and the limit that stopped them (None: none did)."""
        # File work (reading what earlier runs left, opening journals) happens on worker
        # threads: hundreds of tasks start at once, and the event loop serves them all.
        attempts: list[AttemptRecord] = await self._judged_again(task, list(done.attempts))
        if (
            (any(a.correct for a in attempts) and not self.plan.every_attempt)
            or _gave_up(attempts)
            or self._awaits_verdict(attempts)
        ):
            return attempts, None
        first = len(attempts) + 1
        tries = self.plan.attempts_for(has_ground_truth=task.ground_truth is not None)
        for number in range(first, tries + 1):
            if attempts and (hit := budget.check()) is not None:
                stop_if_run_budget(hit)
                return attempts, limit_record(hit)  # no new attempt once over its own limit
            carried: list[RetryRecord] = list(done.retries) if number == first else []
            await self.recorder.progress_flushed(task)
            attempt = await self._attempt(task, number, carried, budget)
            await self.recorder.progress_written(task, attempt)
            attempts.append(attempt)
            # Unjudged: whether another attempt is due is not known until a resume has
            # judged it (_judged_again).
            if (
                (attempt.correct and not self.plan.every_attempt)
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
            if not self.plan.may_run(index):
                break
            if retries and (stopped_by := _limit_after(retries[-1], budget)) is not None:
                break  # a retry would start over the limit: the attempt ends here
            if retries and retries[-1].does_not_fit:
                break  # with post-mortems added, the task text would only be longer
            await self.recorder.progress_flushed(task)
            with routed_as(task.task_id, number):  # llm.endpoints: the attempt's server
                retry = await self._retry(task, number, index, post_mortems, budget)
            if retry.limit is not None:  # not recorded as finished when the run's
                stop_if_run_budget(LimitHit(**retry.limit.model_dump()))  # budget cut it short
            await self.recorder.progress_written(task, retry)
            retries.append(retry)
            if retry.post_mortem:
                post_mortems.append(retry.post_mortem)
        last = retries[-1]
        with routed_as(task.task_id, number):  # a judge preset with endpoints spreads too
            judgement = await self.judged(task, last.final_answer)
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
        assert self.llm is not None and self.tools is not None, "a driver runs no task itself"
        factory = AgentFactory(
            self.cfg,
            self.llm,
            self.tools,
            self.plan.policy_for(index),
            self.note_writer,
            self.scraper,
            budget,
        )
        text = retry_task_text(task.question, post_mortems, prompt_set(self.cfg.agent))
        resumable = await self._resume_point(task, attempt, index, text)
        started = self.clock()
        ran: _Ran | Refused | None
        if isinstance(resumable, Resumable):  # benchmark.execution.resume=turn
            ran = await _went_on(factory, text, task, resumable)
        else:
            ran = resumable
        if not isinstance(ran, _Ran):
            ran = await self._afresh(factory, text, task, attempt, index, len(post_mortems), ran)
        journal = self.run_dir.relative(ran.journal)
        record = _retry_record(ran.state, index, len(post_mortems), journal)
        record.elapsed_seconds = round(self.clock() - started + ran.killed_seconds, 3)
        record.interrupted_calls = ran.killed_calls
        return record

    async def _afresh(
        self,
        factory: AgentFactory,
        text: str,
        task: Task,
        attempt: int,
        index: int,
        carried: int,
        refused: Refused | None,
    ) -> _Ran:
        """The retry run from its first turn, in a new journal; ``refused``: why a
        killed run's retry could not be gone on from (journaled)."""
        journal = await asyncio.to_thread(self.run_dir.journal, task.task_id, attempt, index)
        journal.write(
            RetryStarted(
                task_id=task.task_id,
                attempt=attempt,
                retry=index,
                carried_post_mortems=carried,
                final_retry=factory.policy.is_final_retry,
                config_id=self.run_dir.config_id,
            )
        )
        if refused is not None:  # resume=turn fell back to the first turn
            log.warning(
                "task %s attempt %d retry %d starts afresh: %s",
                task.task_id,
                attempt,
                index,
                refused.reason,
            )
            journal.write(ResumeFellBack(reason=refused.reason))
        try:
            state = await factory.solve(text, journal, file_path=task.file_path)
        finally:
            journal.close()
        return _Ran(state, journal.path)

    async def _resume_point(
        self, task: Task, attempt: int, index: int, text: str
    ) -> Resumable | Refused | None:
        """With benchmark.execution.resume=turn, where a retry a killed run left goes on,
        with its journal held to go on writing (or why it cannot: it starts afresh);
        None: nothing to resume, or resume=retry."""
        if self.cfg.benchmark.execution.resume != ResumeMode.TURN:
            return None
        if task.task_id in self.untouched:
            return None  # no journal of it was there, and this run writes each once
        path = self.run_dir.journal_path(task.task_id, attempt, index)
        if not await asyncio.to_thread(path.exists):
            return None
        if any(t.startswith("agent-") for t in self.cfg.agent.main_agent.tools):
            return Refused("sub-agent runs are not rebuilt by resume=turn")
        sees_images = self.llm is not None and self.llm.capabilities.images
        sent, _ = await task_message(self.cfg, text, task.file_path, sees_images=sees_images)
        reopen = partial(self.run_dir.journal, task.task_id, attempt, index, resume=True)
        held = await reopen_unfinished(reopen, path, config_id=self.run_dir.config_id, task=sent)
        if isinstance(held, Refused):
            return held
        return Resumable(*held)

    def _awaits_verdict(self, attempts: Sequence[AttemptRecord]) -> bool:
        """Whether the attempts stop for an unjudged one: whether another is due is not
        known until a resume judged it. With avg@k every attempt runs anyway."""
        return not self.plan.every_attempt and unjudged(attempts)

    async def _judged_again(self, task: Task, attempts: list[AttemptRecord]) -> list[AttemptRecord]:
        """Earlier runs' attempts, those left unjudged judged now from their recorded
        answer (the agent is not run again), each written to the task's progress so a
        kill after it does not ask again."""
        judged = []
        for attempt in attempts:
            if attempt.judgement is not None and attempt.judgement.unjudged:
                with routed_as(task.task_id, attempt.attempt):
                    judgement = await self.judged(task, attempt.final_answer)
                attempt = attempt.model_copy(
                    update={
                        "correct": judgement.correct,
                        "judgement": JudgementRecord.model_validate(asdict(judgement)),
                    }
                )
                await self.recorder.progress_written(task, attempt)
            judged.append(attempt)
        return judged

    async def judged(self, task: Task, answer: str | None) -> Judgement:
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
            judge = JudgeRejectedError(str(exc), provider=exc.provider, status=exc.status)
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


def unjudged(attempts: Sequence[AttemptRecord]) -> bool:
    """Whether an attempt was left unjudged (as RunStore.finished_results tells)."""
    return any(a.judgement is not None and a.judgement.unjudged for a in attempts)


class StoppedByRunBudget(Exception):
    """The run's budget cut a task short: it stays unrecorded, resumable."""

    def __init__(self, hit: LimitHit) -> None:
        super().__init__(hit.describe())
        self.hit = hit


def stop_if_run_budget(hit: LimitHit) -> None:
    if hit.is_run_budget:
        raise StoppedByRunBudget(hit)


def _gave_up(attempts: list[AttemptRecord]) -> bool:
    """Whether the last attempt's bare question was over the window: another attempt
    would start from that same text. (A retry that carried post-mortems may have been
    too long only because of them, so a fresh attempt still has a chance.)"""
    if not attempts:
        return False
    failed = [r for r in attempts[-1].retries if r.does_not_fit]
    return any(r.carried_post_mortems == 0 for r in failed)


def _limit_after(last_retry: RetryRecord, budget: TaskBudget) -> LimitRecord | None:
    """The limit that keeps the next retry from starting: the one the last retry ended on
    (also when resumed), or one reached since."""
    if last_retry.end_reason == "limit":
        return last_retry.limit or LimitRecord(kind="unknown")
    hit = budget.check()
    if hit is not None:
        stop_if_run_budget(hit)
    return limit_record(hit) if hit is not None else None


def limit_record(hit: LimitHit) -> LimitRecord:
    return LimitRecord.model_validate(hit.record())


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
        limit=limit_record(state.limit) if state.limit else None,
        carried_post_mortems=carried,
        usage=state.ledger.total,
        cost=state.ledger.cost,
        extraction_usage=state.ledger.extraction_total,
        extraction_cost=state.ledger.extraction_cost,
        journal=journal,
    )


async def _went_on(
    factory: AgentFactory, text: str, task: Task, resumable: Resumable
) -> _Ran | Refused:
    """The killed run's retry gone on with from its point; or why it could not be
    rebuilt (nothing run: the caller starts it afresh)."""
    journal = resumable.journal
    try:
        state = await factory.resume(text, journal, resumable.point, file_path=task.file_path)
    finally:
        journal.close()
    if isinstance(state, Refused):
        return state
    point = resumable.point
    return _Ran(state, journal.path, point.killed_calls, point.killed_seconds)
