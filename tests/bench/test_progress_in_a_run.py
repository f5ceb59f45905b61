"""The progress display fed by a real run (the scripted model): a resumed run's lines
count the whole run, a running task's tokens reach the display call by call, and the
summary's post-mortems line shows only for a run that writes them."""

from __future__ import annotations

import io
from pathlib import Path

from deepledger.agent.retry_plan import RetryPlan
from deepledger.bench.judge import make_judge
from deepledger.bench.metrics import format_summary, summarize
from deepledger.bench.progress import Progress
from deepledger.bench.runner import BenchmarkRunner
from deepledger.bench.tasks import load_tasks
from deepledger.records.results import AttemptRecord, SummaryRecord, TaskRecord
from deepledger.store.run_store import RunStore
from deepledger.tools.pool import ToolManager
from tests.support.bench import config, model


class Watched(Progress):
    """Plain lines into a string, and every event in order."""

    def __init__(self) -> None:
        super().__init__(plain=True, file=io.StringIO())
        self.events: list[tuple[str, str, int]] = []

    def task_spent(self, task_id: str, tokens: int) -> None:
        super().task_spent(task_id, tokens)
        self.events.append(("spent", task_id, self.tokens_so_far))

    def task_finished(
        self, task_id: str, correct: bool | None, tokens: int, failed: bool = False
    ) -> None:
        super().task_finished(task_id, correct, tokens, failed)
        self.events.append(("finished", task_id, self.tokens_so_far))

    def lines(self) -> list[str]:
        assert isinstance(self._file, io.StringIO)
        return self._file.getvalue().splitlines()


async def run(root: Path, only: tuple[str, ...] = (), *overrides: str) -> tuple[Watched, list]:
    cfg = config(*overrides)
    tasks = [t for t in load_tasks(cfg.benchmark.data).tasks if not only or t.task_id in only]
    run_dir = RunStore(root)
    progress = Watched()
    runner = BenchmarkRunner(
        cfg,
        llm=model(),
        tools=ToolManager({}),
        run_dir=run_dir,
        judge=make_judge("normalized"),
        progress=progress,
    )
    try:
        return progress, await runner.run(tasks)
    finally:
        run_dir.close()


def tokens(records: list) -> int:
    return sum(r.usage.input_tokens + r.usage.output_tokens for r in records)


async def test_a_resumed_run_counts_the_tasks_earlier_sessions_finished(tmp_path):
    # easy/1 is right and "hard #2" wrong (no format-retry to box it): a killed run
    first, done = await run(tmp_path, ("easy/1", "hard #2"), "agent.context_compress_limit=0")
    assert first.lines()[-1].startswith("[2/2] ")
    progress, records = await run(tmp_path, (), "agent.context_compress_limit=0")
    lines = progress.lines()
    assert lines[0] == "resuming: 2 of 4 tasks already done (acc 0.50: 1/2)"
    assert [line.split(" | ")[0].split(" ")[0] for line in lines[1:]] == ["[3/4]", "[4/4]"]
    # the last line is the whole run's: the accuracy of its 3 judged tasks (open-4 has
    # no ground truth) and every task's tokens
    judged = [r.correct for r in records if r.correct is not None]
    assert len(judged) == 3
    assert f"acc {sum(judged) / 3:.2f}" in lines[-1]
    assert progress.tokens == tokens(records) and tokens(done) < tokens(records)


async def test_a_running_task_reports_its_tokens_as_its_calls_return(tmp_path):
    # three runs of one attempt (two format-retries with post-mortems): many calls
    progress, (record,) = await run(tmp_path, ("hard #2",), "agent.context_compress_limit=2")
    *spent, finished = progress.events
    assert finished == ("finished", "hard #2", tokens([record]))
    assert len(spent) >= 6 and {e[0] for e in spent} == {"spent"}
    counts = [e[2] for e in spent]
    assert counts == sorted(counts) and 0 < counts[0] < counts[-1] <= tokens([record])


def post_mortem_row(records: list, *overrides: str) -> list[str]:
    """The summary's post-mortems line(s) for a run with ``overrides``, as `bench` prints it."""
    plan = RetryPlan.from_config(config(*overrides))
    summary = summarize(records, pass_at_k=1, benchmark="tiny")
    text = format_summary(summary, post_mortems_on=plan.writes_post_mortems)
    return [line.strip() for line in text.splitlines() if "post-mortems" in line]


async def test_the_summary_says_post_mortems_only_when_the_run_writes_them(tmp_path):
    off = ("agent.context_compress_limit=0",)
    _, records = await run(tmp_path / "off", (), *off)
    assert post_mortem_row(records, *off) == []
    # format-retries without post-mortems: none is written, none is shown
    quiet = ("agent.context_compress_limit=2", "agent.retry_with_summary=false")
    _, records = await run(tmp_path / "quiet", (), *quiet)
    assert post_mortem_row(records, *quiet) == []
    on = ("agent.context_compress_limit=2",)
    _, records = await run(tmp_path / "on", (), *on)
    # hard #2 is answered by its third run, which carried two post-mortems; the other
    # three tasks' answering runs carried none (open-4's attempt is not judged)
    assert post_mortem_row(records, *on) == [
        "post-mortems   none carried 1.000 (2/2 attempts) · >=1 carried 1.000 (1/1 attempts)"
    ]


def test_a_summary_read_without_the_config_shows_the_line_when_an_attempt_carried_one():
    def summary(carried: int) -> SummaryRecord:
        record = TaskRecord(
            task_id="t",
            correct=True,
            attempts=[AttemptRecord(attempt=1, correct=True, carried_post_mortems=carried)],
        )
        return summarize([record], pass_at_k=1, benchmark="b")

    assert "post-mortems" not in format_summary(summary(0))  # e.g. `deepledger report`
    assert "(0/0 attempts) · >=1 carried 1.000 (1/1 attempts)" in format_summary(summary(1))
    assert "none carried 1.000 (1/1 attempts)" in format_summary(summary(0), post_mortems_on=True)
