"""The benchmark progress display: plain lines off a terminal, rich live on one."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from deepledger.bench import progress as progress_module
from deepledger.bench.progress import PLAIN_ENV, Progress


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
    progress.start(total=5, already_done=2)
    progress.task_started("t3")
    assert progress.eta_seconds() is None
    # a task that was never reported as started gives no duration to average
    progress.task_finished("orphan", correct=True, tokens=10)
    assert out.getvalue() == "[3/5] orphan correct | acc 1.00 | 10 tokens | eta ?\n"
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
        progress.start(total=4, already_done=1)
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
