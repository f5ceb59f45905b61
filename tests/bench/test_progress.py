"""The benchmark progress display: plain lines off a terminal, rich live on one."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from deepledger.bench import progress as progress_module
from deepledger.bench.progress import PLAIN_ENV, Progress
from deepledger.messages import Usage
from deepledger.records.results import TaskRecord


def done_before(task_id: str, correct: bool | None, tokens: int = 0) -> TaskRecord:
    """A task an earlier session finished, as its result line holds it."""
    return TaskRecord(
        task_id=task_id, correct=correct, usage=Usage(input_tokens=tokens, output_tokens=0)
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module, "time", SimpleNamespace(monotonic=clock.monotonic))
    return clock


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def no_plain_env(monkeypatch):
    monkeypatch.delenv(PLAIN_ENV, raising=False)


def test_plain_mode_prints_one_line_per_finished_task_and_nothing_else(clock):
    out = io.StringIO()
    with Progress(plain=True, file=out) as progress:
        progress.start(total=9)
        for task_id in ("t1", "t2", "t3", "t4"):
            progress.task_started(task_id)
        clock.now += 10
        progress.task_finished("t1", correct=True, tokens=1_200_000)
        progress.task_finished("t2", correct=False, tokens=3_000)
        progress.task_finished("t3", correct=None, tokens=0)
        progress.task_finished("t4", correct=None, tokens=0, failed=True)
    assert out.getvalue().splitlines() == [
        # 8 left, 10 s each, 4 at a time -> 20 s
        "[1/9] t1 correct | acc 1.00 | 1.2M tokens | eta 0:00:20",
        "[2/9] t2 wrong | acc 0.50 | 1.2M tokens | eta 0:00:18",
        "[3/9] t3 unjudged | acc 0.50 | 1.2M tokens | eta 0:00:15",
        "[4/9] t4 failed | acc 0.50 | 1.2M tokens | eta 0:00:12",
    ]
    assert (progress.done, progress.failed, progress.running) == (4, 1, 0)


def test_eta_unknown_until_a_task_of_this_session_finishes(clock):
    out = io.StringIO()
    progress = Progress(plain=True, file=out)
    progress.start(total=5, earlier=[done_before("t1", None), done_before("t2", None)])
    assert out.getvalue() == "resuming: 2 of 5 tasks already done\n"  # none judged: no acc
    progress.task_started("t3")
    assert progress.eta_seconds() is None
    # a task that was never reported as started gives no duration to average
    progress.task_finished("orphan", correct=True, tokens=10)
    assert out.getvalue().splitlines()[-1] == "[3/5] orphan correct | acc 1.00 | 10 tokens | eta ?"
    clock.now += 30
    progress.task_finished("t3", correct=True, tokens=10)
    assert out.getvalue().splitlines()[-1].endswith("eta 0:00:30")  # 1 left, 30 s, 1 at a time
    progress.close()


def test_env_variable_forces_plain_lines_even_on_a_terminal(monkeypatch):
    monkeypatch.setenv(PLAIN_ENV, "1")
    out = FakeTTY()
    with Progress(file=out) as progress:
        progress.start(total=1)
        progress.task_started("a")
        progress.task_finished("a", correct=True, tokens=5)
    assert out.getvalue().startswith("[1/1] a correct | acc 1.00 | 5 tokens | eta 0:00:00\n")


def test_non_terminal_file_defaults_to_plain_lines():
    out = io.StringIO()
    with Progress(file=out) as progress:
        progress.start(total=2)
        progress.task_finished("a", correct=False, tokens=5)
    assert out.getvalue() == "[1/2] a wrong | acc 0.00 | 5 tokens | eta ?\n"


def test_rich_live_display_renders_the_counts():
    console = Console(file=io.StringIO(), force_terminal=True, width=160)
    with Progress(console=console, plain=False) as progress:
        progress.start(total=4, earlier=[done_before("z", None)])
        for task_id in ("a", "b", "c"):
            progress.task_started(task_id)
        progress.task_finished("a", correct=True, tokens=2_500)
        progress.task_finished("b", correct=False, tokens=500)
        progress.task_finished("c", correct=None, tokens=0, failed=True)
    text = console.file.getvalue()
    assert "4/4 done" in text
    assert "1 failed" in text
    assert "acc 0.50 (1/2)" in text
    assert "3.0k tokens" in text
    assert "[1/4]" not in text  # no plain lines in live mode
    progress.close()  # closing twice is harmless


def test_both_displays_show_the_run_budget_when_there_is_one():
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    with Progress(console=console, plain=False) as live:
        live.start(total=2, budget=lambda: "$0.4200/$2")
        live.task_finished("a", correct=True, tokens=10)
    assert "budget $0.4200/$2" in console.file.getvalue()
    out = io.StringIO()
    plain = Progress(plain=True, file=out)
    plain.start(total=2, budget=lambda: "1.2k/5.0k tokens")
    plain.task_finished("a", correct=True, tokens=10)
    assert "| budget 1.2k/5.0k tokens |" in out.getvalue()
    unbudgeted = io.StringIO()
    none = Progress(plain=True, file=unbudgeted)
    none.start(total=1)
    none.task_finished("a", correct=True, tokens=10)
    assert "budget" not in unbudgeted.getvalue()


def test_terminal_file_gets_the_live_display_not_plain_lines():
    out = FakeTTY()
    with Progress(file=out) as progress:
        progress.start(total=1)
        progress.task_started("a")
        progress.task_finished("a", correct=True, tokens=1)
    assert "1/1 done" in out.getvalue()
    assert "[1/1] a correct" not in out.getvalue()


def test_after_a_resume_the_lines_count_the_whole_run(clock):
    """Tasks earlier sessions finished count in [N/M], the accuracy and the tokens; the
    eta is this session's pace over the tasks left."""
    earlier = [done_before(f"t{i}", correct=i < 5, tokens=1_000) for i in range(6)]
    out = io.StringIO()
    with Progress(plain=True, file=out) as progress:
        progress.start(total=8, earlier=earlier)
        progress.task_started("t6")
        progress.task_started("t7")
        clock.now += 60
        progress.task_finished("t6", correct=True, tokens=500)
        progress.task_finished("t7", correct=True, tokens=500)
    assert out.getvalue().splitlines() == [
        "resuming: 6 of 8 tasks already done (acc 0.83: 5/6)",
        "[7/8] t6 correct | acc 0.86 | 6.5k tokens | eta 0:01:00",  # 1 left, 60 s each
        "[8/8] t7 correct | acc 0.88 | 7.0k tokens | eta 0:00:00",
    ]
    assert (progress.correct, progress.judged) == (7, 8)


def test_the_token_count_rises_as_calls_return_before_any_task_finishes():
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    progress = Progress(console=console, plain=False, refresh_per_second=1)
    progress.start(total=2, earlier=[])
    progress.task_started("a")
    progress.task_started("b")
    assert progress.tokens_so_far == 0
    progress.task_spent("a", 1_200)  # a's first call returned
    progress.task_spent("b", 800)
    progress.task_spent("a", 2_500)  # a's second: what a spent so far, not an increment
    assert progress.tokens_so_far == 3_300
    assert "3.3k tokens" in str(_rendered(progress, console))
    progress.task_spent("ghost", 10_000)  # never started here (a Ray worker's runner)
    assert progress.tokens_so_far == 3_300
    # finishing, a task's record replaces what it reported running
    progress.task_finished("a", correct=True, tokens=2_600)
    assert progress.tokens_so_far == 2_600 + 800
    progress.task_finished("b", correct=False, tokens=900)
    assert (progress.tokens, progress.tokens_so_far) == (3_500, 3_500)
    progress.close()


def _rendered(progress: Progress, console: Console) -> str:
    with console.capture() as captured:
        console.print(progress._render())
    return captured.get()


def test_a_task_the_run_budget_stops_is_not_done_but_its_tokens_are_spent(clock):
    out = io.StringIO()
    with Progress(plain=True, file=out) as progress:
        progress.start(total=3, earlier=[])
        progress.task_started("a")
        progress.task_started("b")
        progress.task_spent("b", 700)
        clock.now += 10
        progress.task_finished("a", correct=True, tokens=1_000)
        progress.task_stopped("b", tokens=800)  # its record-less spend replaces the live one
    assert out.getvalue().splitlines() == [
        "[1/3] a correct | acc 1.00 | 1.7k tokens | eta 0:00:10",
        "[1/3] b stopped | acc 1.00 | 1.8k tokens | eta 0:00:10",
    ]
    assert (progress.done, progress.running, progress.tokens_so_far) == (1, 0, 1_800)
