"""Budgets: what one task, and the whole run, may spend.

Per task (``benchmark.execution.``): ``task_time_limit_seconds`` (wall clock since the
task started), ``task_token_limit`` (input + output tokens of its model calls) and
``task_cost_limit_usd``. Per run: ``max_tokens`` and ``max_cost_usd``, summed over the
tasks recorded in the run directory (earlier sessions of a resumed run included) and the
tasks running now (each counted up to its last turn boundary). Null: no limit.

What is counted: every model call made for the task — the loop's, the closing calls,
sub-agents', compaction notes, page extraction — across all its retries and attempts,
plus the calls of retries a killed run left unfinished. A resumed task starts with what
its finished retries spent, time included (each retry records its ``elapsed_seconds``),
and the time killed runs worked, from their journals' stamps (``store.journal
.writers_seconds``: what a kill cut off after a run's last line is not known). The judge's calls
are not counted (another model, reported apart). Calls whose model has no price count 0
towards a cost limit; the runner refuses a cost limit when the agent's own model has no
price.

When it is checked: before each turn of every agent loop (the main agent's and each
sub-agent's) and before the runner starts a task, a retry or an attempt. A call in
flight is never cut off, so a task stops at the first turn boundary at or over its limit,
and the loop's last turn may overshoot it. The loop then ends with end reason ``limit``
and finalizes with one closing call (the answer, falling back to the last intermediate
``\\boxed{}``; no post-mortem, as no retry follows), which overshoots by one more call —
one per agent the limit stops, when a sub-agent is running.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypedDict

from deepledger.config import RUN_BUDGETS, ExecutionConfig
from deepledger.llm.usage import UsageLedger
from deepledger.messages import Usage
from deepledger.records.results import Spent

Clock = Callable[[], float]


class LimitFields(TypedDict):
    """A limit hit as journal events and records hold it (``LimitReached``, ``LimitRecord``)."""

    kind: str
    limit: float
    spent: float


@dataclass(frozen=True)
class LimitHit:
    """A limit that was reached: its config key, its value and what had been spent."""

    kind: str  # the key under benchmark.execution, e.g. "task_cost_limit_usd"
    limit: float
    spent: float

    @property
    def recorded_spent(self) -> float:
        """``spent`` as journals and records hold it."""
        return round(self.spent, 6)

    def record(self) -> LimitFields:
        """As written to journals and records."""
        return {"kind": self.kind, "limit": self.limit, "spent": self.recorded_spent}

    @property
    def is_run_budget(self) -> bool:
        """The run's budget (``max_cost_usd``, ``max_tokens``), not the task's own limit:
        a task it stops is not done, and a resume with a raised budget continues it."""
        return self.kind in RUN_BUDGETS

    def describe(self) -> str:
        return (
            f"benchmark.execution.{self.kind}={self.limit:g} reached "
            f"({_amount(self.kind, self.spent)} spent)"
        )


def _amount(kind: str, value: float) -> str:
    if kind.endswith("usd"):
        return f"${value:.4f}"
    if kind.endswith("seconds"):
        return f"{value:.1f}s"
    return f"{int(value):,} tokens"


@dataclass(frozen=True)
class Spending:
    tokens: int = 0  # input + output
    cost: float = 0.0  # USD of the calls whose price is known
    seconds: float = 0.0

    def __add__(self, other: Spending) -> Spending:
        return Spending(
            self.tokens + other.tokens, self.cost + other.cost, self.seconds + other.seconds
        )


def recorded_spending(records: Iterable[Spent]) -> Spending:
    """What retry records (or task records) say they spent."""
    total = Spending()
    for record in records:
        tokens = record.usage.input_tokens + record.usage.output_tokens
        total += Spending(tokens, record.cost or 0.0, record.elapsed_seconds or 0.0)
    return total


@dataclass(eq=False)
class _Tally:
    """A ledger's spending, kept up to date by adding only the calls recorded since the
    last look: with hundreds of tasks running, every turn of every task sums them all,
    and re-adding each task's every call each time cost milliseconds a turn."""

    ledger: UsageLedger
    _seen: tuple[int, ...] = (0, 0, 0)
    _spent: Spending = Spending()

    def current(self) -> Spending:
        parts = (self.ledger.calls, self.ledger.delegated, self.ledger.extraction)
        seen = (len(parts[0]), len(parts[1]), len(parts[2]))
        if seen == self._seen:  # the common case: nothing new since the last look
            return self._spent
        if any(now < before for now, before in zip(seen, self._seen, strict=True)):
            self._seen, self._spent = (0, 0, 0), Spending()  # replaced, not appended to
        tokens, cost = self._spent.tokens, self._spent.cost
        for calls, before in zip(parts, self._seen, strict=True):
            for call in calls[before:]:
                tokens += call.usage.input_tokens + call.usage.output_tokens
                cost += call.cost or 0.0
        self._seen, self._spent = seen, Spending(tokens, cost)
        return self._spent


@dataclass(frozen=True)
class TaskLimits:
    time_seconds: float | None = None
    tokens: int | None = None
    cost_usd: float | None = None

    @classmethod
    def from_execution(cls, execution: ExecutionConfig) -> TaskLimits:
        return cls(
            execution.task_time_limit_seconds,
            execution.task_token_limit,
            execution.task_cost_limit_usd,
        )

    def over(self, spent: Spending) -> LimitHit | None:
        checks = (
            ("task_cost_limit_usd", self.cost_usd, spent.cost),
            ("task_token_limit", self.tokens, spent.tokens),
            ("task_time_limit_seconds", self.time_seconds, spent.seconds),
        )
        for kind, limit, value in checks:
            if limit is not None and value >= limit:
                return LimitHit(kind, limit, value)
        return None


class RunBudget:
    """The run's budget: what ended tasks spent plus what running tasks have spent.

    A running task reports its spending at each of its checks (before every turn of its
    agents), so the total is O(1) to read however many tasks run; it counts a running
    task up to its last turn boundary, never the turn in flight.
    """

    def __init__(
        self,
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        recorded: Spending = Spending(),
    ) -> None:
        self.max_cost_usd = max_cost_usd
        self.max_tokens = max_tokens
        self._ended = recorded  # tasks that are no longer running
        self._reported: dict[TaskBudget, tuple[int, float]] = {}
        self._running_tokens = 0
        self._running_cost = 0.0

    @classmethod
    def from_execution(cls, execution: ExecutionConfig, recorded: Iterable[Spent]) -> RunBudget:
        return cls(execution.max_cost_usd, execution.max_tokens, recorded_spending(recorded))

    @property
    def enabled(self) -> bool:
        return self.max_cost_usd is not None or self.max_tokens is not None

    def spent(self) -> Spending:
        return Spending(
            self._ended.tokens + self._running_tokens, self._ended.cost + self._running_cost
        )

    def exhausted(self) -> LimitHit | None:
        if not self.enabled:
            return None
        spent = self.spent()
        if self.max_cost_usd is not None and spent.cost >= self.max_cost_usd:
            return LimitHit("max_cost_usd", self.max_cost_usd, spent.cost)
        if self.max_tokens is not None and spent.tokens >= self.max_tokens:
            return LimitHit("max_tokens", self.max_tokens, spent.tokens)
        return None

    def set_ended(self, spent: Spending) -> None:
        """What the tasks no longer running spent, as another process counts them (the
        Ray backend's driver, which records them): it replaces this budget's own count."""
        self._ended = spent

    def report(self, task: TaskBudget, tokens: int, cost: float) -> None:
        """What a running task has spent so far."""
        before_tokens, before_cost = self._reported.get(task, (0, 0.0))
        self._reported[task] = (tokens, cost)
        self._running_tokens += tokens - before_tokens
        self._running_cost += cost - before_cost

    def task_started(self, task: TaskBudget) -> None:
        self.report(task, *task.tokens_and_cost())

    def task_ended(self, task: TaskBudget) -> None:
        """The task is recorded (or failed): what it spent stays in the run's total."""
        if task not in self._reported:
            return
        self.report(task, 0, 0.0)
        del self._reported[task]
        tokens, cost = task.tokens_and_cost()
        self._ended += Spending(tokens, cost)

    def line(self) -> str:
        """Spent against the budget, for the progress display: ``$0.1200/$0.50``."""
        spent = self.spent()
        parts = []
        if self.max_cost_usd is not None:
            parts.append(f"${spent.cost:.4f}/${self.max_cost_usd:g}")
        if self.max_tokens is not None:
            parts.append(f"{_short(spent.tokens)}/{_short(self.max_tokens)} tokens")
        return " · ".join(parts)


def _short(n: float) -> str:
    for limit, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= limit:
            return f"{n / limit:.1f}{suffix}"
    return f"{n:g}"


@dataclass(eq=False)
class TaskBudget:
    """What one task may spend, and what it has spent: its earlier retries' (given at the
    start) plus the ledgers of the agents running for it now (``watch``)."""

    limits: TaskLimits = field(default_factory=TaskLimits)
    run: RunBudget | None = None
    earlier: Spending = Spending()
    clock: Clock = time.monotonic
    # Told what the task has spent (tokens) as each call of a watched ledger returns:
    # the progress display's live count (bench/progress.py). Not the budget's own
    # count, which stays at turn boundaries (check).
    on_spend: Callable[[int], None] | None = None
    _live: list[_Tally] = field(default_factory=list)
    _kept: list[UsageLedger] = field(default_factory=list)  # this run's retries' ledgers
    _started: float = 0.0

    def __post_init__(self) -> None:
        self._started = self.clock() - self.earlier.seconds

    @contextmanager
    def watch(self, ledger: UsageLedger, *, keep: bool) -> Iterator[None]:
        """Count ``ledger`` while an agent runs. ``keep``: its calls stay counted after
        (a retry's main agent); a sub-agent's are absorbed into its parent's ledger."""
        tally = _Tally(ledger)
        self._live.append(tally)
        told = ledger.on_call
        if self.on_spend is not None:
            ledger.on_call = self._call_returned
        try:
            yield
        finally:
            ledger.on_call = told
            self._live.remove(tally)
            if keep:
                self.earlier += tally.current()
                self._kept.append(ledger)

    def _call_returned(self) -> None:
        if self.on_spend is not None:
            self.on_spend(self.tokens_and_cost()[0])

    def tokens_and_cost(self) -> tuple[int, float]:
        tokens, cost = self.earlier.tokens, self.earlier.cost
        for tally in self._live:
            now = tally.current()
            tokens += now.tokens
            cost += now.cost
        return tokens, cost

    def spent(self) -> Spending:
        return Spending(*self.tokens_and_cost(), self.clock() - self._started)

    def usage_now(self) -> tuple[Usage, float | None]:
        """Tokens and cost of the retries run for the task since this budget was made,
        finished or not (a retry that raised included): what the run's budget counted
        of it beyond ``earlier``. Cost None when a call's price is unknown."""
        usage = sum((ledger.total for ledger in self._kept), Usage())
        costs = [ledger.cost for ledger in self._kept]
        return usage, None if any(c is None for c in costs) else sum(costs)  # type: ignore[arg-type]

    def check(self) -> LimitHit | None:
        """The first limit reached (the task's own, then the run's), or None."""
        spent = self.spent()
        if self.run is not None:
            self.run.report(self, spent.tokens, spent.cost)
        hit = self.limits.over(spent)
        if hit is None and self.run is not None:
            hit = self.run.exhausted()
        return hit
