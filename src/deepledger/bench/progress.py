"""A live progress display for a running benchmark.

The runner reports events (``task_started`` / ``task_spent`` / ``task_finished``); each
event only updates a few counters, so it costs next to nothing inside an asyncio loop
with hundreds of tasks. Rendering happens elsewhere:

- on a terminal, a ``rich`` Live display on stderr redraws itself a few times a second
  from the counters (done / running / failed, accuracy so far, tokens, elapsed, ETA);
- otherwise (not a terminal, ``plain=True`` or ``DEEPLEDGER_PLAIN_PROGRESS=1``) one line
  per finished task is written to stderr and nothing else, e.g.
  ``[12/300] t12 correct | acc 0.58 | 1.2M tokens | eta 0:14:10``.

Both count the whole run: after a resume the tasks earlier sessions finished count in
``[N/M]``, the accuracy and the tokens (from their recorded results), and one line says
so at the start (``resuming: 6 of 10 tasks already done (acc 0.83: 5/6)``). The tokens are the
finished tasks' plus what the running ones have spent so far: a running task reports its
spending as each of its model calls returns (``task_spent``, from its ``TaskBudget``), so
the count rises before the first task finishes. (With ``backend=ray`` the calls happen
in workers: the driver learns a task's tokens when it finishes.)

With a run budget (``benchmark.execution.max_cost_usd`` / ``max_tokens``) both show what
the run has spent against it, e.g. ``budget $0.4210/$2``, running tasks included. A
task the budget stops is not done (a resume runs it): its line says ``stopped``, its
spending stays in the tokens.

The ETA is ``remaining tasks × mean duration of a task finished in this session ÷
concurrency``, where concurrency is the most tasks seen running at once (capped by the
tasks remaining). It is unknown (``?``) until a task started in this session finishes.
Tasks already done when the run resumed count as done but not in the mean duration.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import IO, Self

from rich.console import Console
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from deepledger.bench.metrics import human_count
from deepledger.records.results import TaskRecord

PLAIN_ENV = "DEEPLEDGER_PLAIN_PROGRESS"


class Progress:
    """Counts a benchmark's tasks as they run and shows it; see the module docstring.

    ``plain`` forces (True) or forbids (False) plain lines. Left as None, plain lines are
    used when ``DEEPLEDGER_PLAIN_PROGRESS=1``, else the live display when a rich
    ``console`` is injected, else plain unless ``file`` (stderr by default) is a terminal.
    """

    def __init__(
        self,
        *,
        plain: bool | None = None,
        file: IO[str] | None = None,
        console: Console | None = None,
        refresh_per_second: float = 4,
    ) -> None:
        self._file = file if file is not None else sys.stderr
        self._console = console
        self._plain = _use_plain(plain, self._file, console)
        self._refresh_per_second = refresh_per_second
        self._live: Live | None = None
        self.total = 0
        self.done = 0
        self.failed = 0
        self.judged = 0
        self.correct = 0
        self.tokens = 0  # of the finished tasks (earlier sessions' included)
        self._running: dict[str, float] = {}
        # What each running task has spent so far (its own earlier retries included), and
        # their sum: kept as a number so the live display's thread reads no dict.
        self._spent_running: dict[str, int] = {}
        self._running_tokens = 0
        self._peak_running = 0
        self._finished_here = 0
        self._duration_sum = 0.0
        self._started_at = time.monotonic()
        self._budget: Callable[[], str] | None = None

    # ------------------------------------------------------------------ events

    def start(
        self,
        total: int,
        earlier: Iterable[TaskRecord] = (),
        budget: Callable[[], str] | None = None,
    ) -> None:
        """Begin: ``total`` tasks in the suite; ``earlier``: the records of those earlier
        sessions finished (a resume), counted as done, in the accuracy and the tokens;
        ``budget`` says what the run spent against its budget (None: it has none)."""
        self.total = total
        self._budget = budget
        self._started_at = time.monotonic()
        for record in earlier:
            self._count(record.correct, _tokens(record), failed=record.status == "error")
        if self.done:  # the counts below start from these: say where they come from
            acc = (
                f" (acc {_acc(self.accuracy)}: {self.correct}/{self.judged})" if self.judged else ""
            )
            print(
                f"resuming: {self.done} of {total} tasks already done{acc}",
                file=self._file,
                flush=True,
            )
        if not self._plain and self._live is None:
            console = self._console or Console(file=self._file)
            self._live = Live(
                get_renderable=self._render,
                console=console,
                refresh_per_second=self._refresh_per_second,
                transient=False,
            )
            self._live.start()

    def task_started(self, task_id: str) -> None:
        self._running[task_id] = time.monotonic()
        self._peak_running = max(self._peak_running, len(self._running))

    def task_spent(self, task_id: str, tokens: int) -> None:
        """A running task has spent ``tokens`` so far (input + output): called as each of
        its model calls returns. Ignored for a task not reported started (a Ray worker's
        runner has a display nobody sees; its driver's learns the task's tokens at its end)."""
        if task_id not in self._running:
            return
        before = self._spent_running.get(task_id, 0)
        self._spent_running[task_id] = tokens
        self._running_tokens += tokens - before

    def task_finished(
        self, task_id: str, correct: bool | None, tokens: int, failed: bool = False
    ) -> None:
        """A task ended: ``correct`` is None when it was not judged; ``failed`` if it
        errored; ``tokens``: all it spent, which replaces what it reported running."""
        started = self._running.pop(task_id, None)
        if started is not None:
            self._finished_here += 1
            self._duration_sum += time.monotonic() - started
        self._running_tokens -= self._spent_running.pop(task_id, 0)
        self._count(correct, tokens, failed)
        if self._plain:
            print(self._plain_line(task_id, correct, failed), file=self._file, flush=True)

    def task_stopped(self, task_id: str, tokens: int) -> None:
        """The run's budget stopped a running task: it is not done (unrecorded, a resume
        runs it), so not in ``[N/M]`` nor the pace, but ``tokens`` (what it spent, which
        replaces what it reported running) are spent."""
        self._running.pop(task_id, None)
        self._running_tokens -= self._spent_running.pop(task_id, 0)
        self.tokens += tokens
        if self._plain:
            print(self._plain_line(task_id, None, False, "stopped"), file=self._file, flush=True)

    def _count(self, correct: bool | None, tokens: int, failed: bool) -> None:
        self.done += 1
        self.failed += failed
        self.tokens += tokens or 0
        if correct is not None:
            self.judged += 1
            self.correct += correct

    def close(self) -> None:
        """Stop the live display (a last redraw shows the final counts). Safe to repeat."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ derived numbers

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def accuracy(self) -> float | None:
        """Correct among the judged tasks finished so far (None before the first)."""
        return self.correct / self.judged if self.judged else None

    @property
    def tokens_so_far(self) -> int:
        """The run's tokens: the finished tasks' and what the running ones spent so far."""
        return self.tokens + self._running_tokens

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._started_at

    def eta_seconds(self) -> float | None:
        """Seconds until all tasks are done, or None while no timing is known."""
        remaining = max(0, self.total - self.done)
        if remaining == 0:
            return 0.0
        if self._finished_here == 0:
            return None
        mean_duration = self._duration_sum / self._finished_here
        concurrency = max(1, min(self._peak_running, remaining))
        return remaining * mean_duration / concurrency

    # ------------------------------------------------------------------ rendering

    def _plain_line(
        self, task_id: str, correct: bool | None, failed: bool, outcome: str = ""
    ) -> str:
        outcome = outcome or (
            "failed" if failed else {True: "correct", False: "wrong", None: "unjudged"}[correct]
        )
        budget = f" | budget {self._budget()}" if self._budget else ""
        return (
            f"[{self.done}/{self.total}] {task_id} {outcome} | acc {_acc(self.accuracy)} | "
            f"{human_count(self.tokens_so_far)} tokens{budget} | eta {_clock(self.eta_seconds())}"
        )

    def _render(self) -> Table:
        bar = ProgressBar(total=max(self.total, 1), completed=min(self.done, self.total), width=30)
        stats = Text.assemble(
            (f"{self.done}/{self.total} done", "bold"),
            f" · {self.running} running · ",
            (f"{self.failed} failed", "red" if self.failed else ""),
            f" · acc {_acc(self.accuracy)} ({self.correct}/{self.judged})",
            f" · {human_count(self.tokens_so_far)} tokens",
            f" · budget {self._budget()}" if self._budget else "",
            f" · {_clock(self.elapsed)} elapsed · eta {_clock(self.eta_seconds())}",
        )
        line = Table.grid(padding=(0, 1))
        line.add_row(bar, stats)
        return line


def _use_plain(plain: bool | None, file: IO[str], console: Console | None) -> bool:
    if plain is not None:
        return plain
    if os.environ.get(PLAIN_ENV) == "1":
        return True
    if console is not None:
        return False
    isatty = getattr(file, "isatty", None)
    return not (isatty and isatty())


def _tokens(record: TaskRecord) -> int:
    return record.usage.input_tokens + record.usage.output_tokens


def _acc(accuracy: float | None) -> str:
    return "n/a" if accuracy is None else f"{accuracy:.2f}"


def _clock(seconds: float | None) -> str:
    return "?" if seconds is None else str(timedelta(seconds=round(seconds)))
