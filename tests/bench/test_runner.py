"""The benchmark runner with the scripted model: retries, post-mortems, pass@k, resume."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from deepledger.bench.judge import make_judge
from deepledger.bench.progress import Progress
from deepledger.bench.runner import BenchmarkRunner
from deepledger.bench.tasks import load_tasks
from deepledger.errors import FatalLLMError, RunDirectoryError
from deepledger.messages import Usage
from deepledger.records.events import LLMCall
from deepledger.store.files import read_jsonl
from deepledger.store.run_store import RunStore
from deepledger.tools.pool import ToolManager
from tests.support.bench import FlakyJudge, config, model, run, task_texts
from tests.support.doubles.bench_model import decide


async def test_the_format_retry_loop_carries_post_mortems_to_the_final_retry(tmp_path):
    llm = model()
    (record,) = await run(config("agent.context_compress_limit=2"), llm, tmp_path, ("hard #2",))
    (attempt,) = record["attempts"]
    retries = attempt["retries"]
    assert [r["carried_post_mortems"] for r in retries] == [0, 1, 2]
    assert [r["final_answer"] for r in retries] == [None, None, "Danube"]
    assert [r["failure_type"] for r in retries] == ["format_missed", "format_missed", None]
    assert (record["final_answer"], record["correct"]) == ("Danube", True)
    assert attempt["carried_post_mortems"] == 2
    last_text = task_texts(llm)[-1]
    assert last_text.count("=== Earlier attempts") == 1
    assert "finding-1" in last_text and "finding-2" in last_text
    assert record["turns"] == 3 and record["usage"]["input_tokens"] > 0


async def test_without_context_management_one_run_and_no_post_mortem(tmp_path):
    llm = model()
    (record,) = await run(config("agent.context_compress_limit=0"), llm, tmp_path, ("hard #2",))
    (attempt,) = record["attempts"]
    assert len(attempt["retries"]) == 1 and attempt["retries"][0]["post_mortem"] is None
    assert record["final_answer"] is None and record["correct"] is False


async def test_pass_at_k_stops_at_the_first_correct_attempt(tmp_path):
    answers = iter(["\\boxed{Lyon}", "\\boxed{Paris}", "\\boxed{never asked}"])

    def decider(contents):
        return next(answers) if "The work on this task is over" in contents[-1] else "Hmm."

    cfg = config("benchmark.execution.pass_at_k=3")
    (record,) = await run(cfg, model(decider), tmp_path, ("easy/1",))
    assert [a["correct"] for a in record["attempts"]] == [False, True]
    assert record["correct"] is True


async def test_with_avg_at_k_chosen_every_attempt_runs(tmp_path):
    answers = iter(["\\boxed{Lyon}", "\\boxed{Paris}", "\\boxed{Paris}"])

    def decider(contents):
        return next(answers) if "The work on this task is over" in contents[-1] else "Hmm."

    cfg = config("benchmark.execution.pass_at_k=3", "benchmark.metrics=[avg_at_k]")
    (record,) = await run(cfg, model(decider), tmp_path, ("easy/1",))
    assert [a["correct"] for a in record["attempts"]] == [False, True, True]


async def test_tasks_without_ground_truth_get_one_unjudged_attempt(tmp_path):
    cfg = config("benchmark.execution.pass_at_k=3")
    (record,) = await run(cfg, model(), tmp_path, ("open-4",))
    assert len(record["attempts"]) == 1 and record["correct"] is None
    assert record["judgement"]["reason"] == "no ground truth"


async def test_a_resumed_task_continues_after_its_finished_retries(tmp_path):
    cfg = config("agent.context_compress_limit=2")
    first = model()
    await run(cfg, first, tmp_path, ("hard #2",))
    # Pretend the run was killed during the task's second retry: keep only the first
    # retry's progress line and no result line.
    rundir = RunStore(tmp_path)
    progress = rundir.task_dir("hard #2") / "progress.jsonl"
    lines = progress.read_text().splitlines()
    progress.write_text(lines[0] + "\n")
    rundir.results_path.unlink()
    rundir.close()
    second = model()
    (record,) = await run(cfg, second, tmp_path, ("hard #2",))
    texts = task_texts(second)
    assert texts and all("[Attempt 1]" in t for t in texts)  # retry 0 was not redone
    assert [r["carried_post_mortems"] for r in record["attempts"][0]["retries"]] == [0, 1, 2]
    assert record["final_answer"] == "Danube"
    interrupted = list(rundir.task_dir("hard #2").glob("attempt-1-retry-1.interrupted-*.jsonl"))
    assert interrupted  # the partial journal was kept


async def test_finished_tasks_are_not_run_again(tmp_path):
    cfg = config()
    await run(cfg, model(), tmp_path, ("easy/1", "open-4"))
    again = model()
    records = await run(cfg, again, tmp_path)
    assert [r["task_id"] for r in records] == ["easy/1", "hard #2", "näive 3", "open-4"]
    assert not any("France" in t or "Anything" in t for t in task_texts(again))
    assert len(read_jsonl(tmp_path / "benchmark_results.jsonl")) == 4


async def test_a_failing_task_is_an_error_record_and_the_suite_goes_on(tmp_path):
    def decider(contents):
        if "France" in contents[1]:
            raise RuntimeError("the model server fell over")
        return decide(contents)

    records = await run(config(), model(decider), tmp_path, ("easy/1", "open-4"))
    by_id = {r["task_id"]: r for r in records}
    assert by_id["easy/1"]["status"] == "error" and "fell over" in by_id["easy/1"]["error"]
    assert by_id["easy/1"]["correct"] is False  # counts as wrong, not as skipped
    assert by_id["open-4"]["status"] == "finished"


async def test_a_model_error_is_logged_in_one_line_and_a_bug_with_its_traceback(tmp_path, caplog):
    def decider(contents):
        if "France" in contents[1]:
            raise FatalLLMError("openai returned HTTP 400: bad request")
        if "Anything" in contents[1]:
            raise RuntimeError("a bug")
        return decide(contents)

    with caplog.at_level(logging.ERROR, logger="deepledger.bench.runner"):
        records = await run(config(), model(decider), tmp_path, ("easy/1", "open-4"))
    assert [r["status"] for r in records] == ["error", "error"]
    logged = {r.getMessage(): r for r in caplog.records}
    assert logged["task easy/1 failed: openai returned HTTP 400: bad request"].exc_info is None
    assert logged["task open-4 failed"].exc_info is not None


async def test_a_judge_failure_keeps_the_work_and_a_resume_only_judges_again(tmp_path):
    cfg = config("agent.context_compress_limit=2")
    judge = FlakyJudge()
    (failed,) = await run(cfg, model(), tmp_path, ("hard #2",), judge=judge)
    # No agent error: the answer is recorded, unjudged, with the judge model's error.
    assert failed["status"] == "finished" and failed["correct"] is None
    assert (
        failed["judgement"]["unjudged"]
        and "judge model unavailable" in failed["judgement"]["reason"]
    )
    assert failed["usage"]["input_tokens"] > 0 and failed["turns"] == 3  # work is counted
    again = model()
    (record,) = await run(cfg, again, tmp_path, ("hard #2",), judge=judge)
    assert again.calls == []  # the retries were done: only the judging was repeated
    assert record["status"] == "finished" and record["correct"] is True
    latest = RunStore(tmp_path)
    assert [r["correct"] for r in read_jsonl(latest.results_path)] == [None, True]
    assert latest.finished_results()["hard #2"].correct is True
    latest.close()


async def test_tokens_spent_by_a_killed_run_count_in_the_totals(tmp_path):
    cfg = config()
    rundir = RunStore(tmp_path)
    killed = rundir.journal("easy/1", 1, 0)  # the killed run's journal for this retry
    killed.write(LLMCall(turn=1, usage=Usage(input_tokens=500, output_tokens=20)))
    killed.close()
    rundir.journal("easy/1", 1, 0).close()  # what a resume does: set it aside
    rundir.close()
    for stale in tmp_path.glob("tasks/*/attempt-1-retry-0.jsonl"):
        stale.unlink()  # keep only the interrupted copy, as after a kill
    (record,) = await run(cfg, model(), tmp_path, ("easy/1",))
    own = sum(r["usage"]["input_tokens"] for r in record["attempts"][0]["retries"])
    assert record["interrupted_calls"] == 1
    assert record["usage"]["input_tokens"] == own + 500


def huge_suite(folder: Path) -> Path:
    """One task whose question alone is far over a 4,096-token window, one small."""
    folder.mkdir(parents=True, exist_ok=True)
    questions = {"huge": "Add these up: " + " ".join(map(str, range(20_000))), "small": "2+2?"}
    lines = [
        json.dumps({"task_id": task_id, "task_question": text, "ground_truth": "4"})
        for task_id, text in questions.items()
    ]
    (folder / "standardized_data.jsonl").write_text("\n".join(lines) + "\n")
    return folder


async def test_a_question_too_big_for_the_window_gets_no_further_retry_or_attempt(tmp_path):
    data = huge_suite(tmp_path / "data")
    cfg = config(
        f"benchmark.data.data_dir={data}",
        "llm.max_context_length=4096",
        "llm.max_tokens=256",
        "agent.context_compress_limit=2",
        "benchmark.execution.pass_at_k=3",
    )
    llm = model(lambda contents: "\\boxed{4}")
    records = {r["task_id"]: r for r in await run(cfg, llm, tmp_path / "run")}
    huge = records["huge"]
    assert len(huge["attempts"]) == 1 and len(huge["attempts"][0]["retries"]) == 1
    assert huge["stopped"] == "does_not_fit" and huge["end_reason"] == "window_exhausted"
    assert huge["end_detail"].startswith("the task alone does not fit")
    journals = list((tmp_path / "run" / "tasks").glob("huge-*/attempt-*-retry-*.jsonl"))
    assert [p.name for p in journals] == ["attempt-1-retry-0.jsonl"]  # one journal, not 9
    assert not any("Add these up" in c.messages[1].content for c in llm.calls)
    assert records["small"]["correct"] is True and "stopped" not in records["small"]


async def test_a_resumed_question_too_big_for_the_window_is_not_tried_again(tmp_path):
    data = huge_suite(tmp_path / "data")
    cfg = config(
        f"benchmark.data.data_dir={data}",
        "llm.max_context_length=4096",
        "agent.context_compress_limit=2",
        "benchmark.execution.pass_at_k=3",
    )
    await run(cfg, model(lambda contents: "\\boxed{4}"), tmp_path / "run", ("huge",))
    # Killed after the retry was recorded, before the attempt and the task were.
    progress = next((tmp_path / "run" / "tasks").glob("huge-*/progress.jsonl"))
    progress.write_text(progress.read_text().splitlines()[0] + "\n")
    (tmp_path / "run" / "benchmark_results.jsonl").unlink()
    (record,) = await run(cfg, model(lambda contents: "\\boxed{4}"), tmp_path / "run", ("huge",))
    assert record["stopped"] == "does_not_fit"
    assert [len(a["retries"]) for a in record["attempts"]] == [1]
    assert len(list(progress.parent.glob("attempt-*-retry-*.jsonl"))) == 1


async def test_a_required_tool_server_that_cannot_start_is_logged_in_one_line(tmp_path, caplog):
    from deepledger.config import ToolServerConfig

    cfg = config("agent.main_agent.tools=[gone]")
    tools = ToolManager({"gone": ToolServerConfig(command="/nonexistent/srv", required=True)})
    tasks = [t for t in load_tasks(cfg.benchmark.data).tasks if t.task_id == "easy/1"]
    run_dir = RunStore(tmp_path)
    runner = BenchmarkRunner(
        cfg, llm=model(), tools=tools, run_dir=run_dir, judge=make_judge("normalized"),
        progress=Progress(plain=True),
    )  # fmt: skip
    try:
        with caplog.at_level(logging.ERROR, logger="deepledger.bench.runner"):
            (typed,) = await runner.run(tasks)
            record = typed.to_json()
    finally:
        run_dir.close()
        await tools.aclose()
    assert record["status"] == "error" and record["error"].startswith("ToolServerStartError")
    (logged,) = [r for r in caplog.records if r.getMessage().startswith("task easy/1 failed")]
    assert logged.exc_info is None  # on purpose, and it says why: no traceback
    assert "cannot run /nonexistent/srv" in logged.getMessage()
    assert "tools.gone.required is true" in logged.getMessage()


async def test_a_fresh_task_starts_without_looking_for_what_earlier_runs_left(
    tmp_path, monkeypatch
):
    """A task no run has a folder of skips the reads that look for earlier work (several
    system calls each, and thousands of tasks start at once); one an earlier run left
    something of still reads it all."""
    looked: list[str] = []
    for name in ("progress", "interrupted_usages", "killed_seconds"):
        original = getattr(RunStore, name)

        def spy(self, task_id, *args, _original=original, _name=name):
            looked.append(f"{_name} {task_id}")
            return _original(self, task_id, *args)

        monkeypatch.setattr(RunStore, name, spy)
    cfg = config("agent.context_compress_limit=2")
    (first,) = await run(cfg, model(), tmp_path, ("hard #2",))
    assert looked == []
    # Killed during the second retry: the first retry's progress line is all there is.
    rundir = RunStore(tmp_path)
    progress = rundir.task_dir("hard #2") / "progress.jsonl"
    progress.write_text(progress.read_text().splitlines()[0] + "\n")
    rundir.results_path.unlink()
    rundir.close()
    (again,) = await run(cfg, model(), tmp_path, ("hard #2",))
    assert looked == [
        "progress hard #2",
        "killed_seconds hard #2",
        "interrupted_usages hard #2",  # at the start: what killed runs spent
        "interrupted_usages hard #2",  # at the end: their calls, for the totals
    ]
    assert again["final_answer"] == first["final_answer"]
    assert again["interrupted_calls"] > 0  # the killed retries' journals were found


def _fsyncs(monkeypatch) -> list[str]:
    """The names of the files fsynced from now on, in order."""
    import os

    from deepledger.store import files

    flushed: list[str] = []
    real_fsync = os.fsync

    def fsync(handle):
        flushed.append(Path(os.readlink(f"/proc/self/fd/{handle}")).name)
        real_fsync(handle)

    monkeypatch.setattr(files.os, "fsync", fsync)
    return flushed


async def test_progress_is_flushed_before_more_work_and_not_again_at_the_end(tmp_path, monkeypatch):
    """A progress line goes to disk (fsync) before the task goes on from it, so that a
    power cut does not undo it; the lines the task ends on need no flush of their own,
    since the result line, flushed, follows at once."""
    flushed = _fsyncs(monkeypatch)
    cfg = config("agent.context_compress_limit=2")
    (record,) = await run(cfg, model(), tmp_path / "three", ("hard #2",))
    assert len(record["attempts"][0]["retries"]) == 3
    progress, results = "progress.jsonl", "benchmark_results.jsonl"
    assert flushed == [progress, progress, results]  # before retries 1 and 2; the result
    flushed.clear()
    (record,) = await run(cfg, model(), tmp_path / "one", ("easy/1",))
    assert len(record["attempts"][0]["retries"]) == 1
    assert flushed == [results]


async def _record_behind_a_held_flush(tmp_path, monkeypatch, fail_second=False):
    """Four task records given to the runner, three of them while the first one's flush
    is held on its thread; the task ids of each flush, and what each record's wait
    ended with (None: on disk)."""
    import asyncio
    import threading

    from deepledger.records.results import TaskRecord

    run_dir = RunStore(tmp_path)
    runner = BenchmarkRunner(
        config(), llm=None, tools=None, run_dir=run_dir, judge=None, progress=Progress(plain=True)
    )
    flushes: list[list[str]] = []
    real_append = RunStore.append_results

    def append_results(self, lines):
        flushes.append([json.loads(line)["task_id"] for line in lines.splitlines()])
        if len(flushes) == 1:
            pause = threading.Event()
            for _ in range(1000):  # up to 10 s for the other three to be given
                if len(runner.recorder._results_queue) == 3:
                    break
                pause.wait(0.01)
        elif fail_second:
            raise RunDirectoryError("the disk is full")
        real_append(self, lines)

    monkeypatch.setattr(RunStore, "append_results", append_results)

    async def record(task_id):
        try:
            await runner.recorder.recorded(TaskRecord(task_id=task_id))
        except RunDirectoryError as exc:
            return exc
        return None

    first = asyncio.create_task(record("t0"))
    for _ in range(1000):  # until its flush has begun
        if flushes:
            break
        await asyncio.sleep(0.01)
    others = await asyncio.gather(*(record(f"t{i}") for i in (1, 2, 3)))
    outcome = dict(zip(["t0", "t1", "t2", "t3"], [await first, *others], strict=True))
    recorded = sorted(run_dir.finished_results())
    run_dir.close()
    return flushes, outcome, recorded


async def test_records_that_end_during_a_flush_go_to_disk_together(tmp_path, monkeypatch):
    """Group commit: one write and one fsync for all the records that ended while the
    flush before was on its way; each waits until its own is on disk."""
    flushes, outcome, recorded = await _record_behind_a_held_flush(tmp_path, monkeypatch)
    assert flushes == [["t0"], ["t1", "t2", "t3"]]
    assert outcome == dict.fromkeys(["t0", "t1", "t2", "t3"])
    assert recorded == ["t0", "t1", "t2", "t3"]


async def test_every_record_of_a_failed_flush_is_told(tmp_path, monkeypatch):
    flushes, outcome, recorded = await _record_behind_a_held_flush(
        tmp_path, monkeypatch, fail_second=True
    )
    assert flushes == [["t0"], ["t1", "t2", "t3"]]
    assert outcome["t0"] is None and recorded == ["t0"]
    for name in ("t1", "t2", "t3"):
        assert isinstance(outcome[name], RunDirectoryError)
    assert len({id(outcome[name]) for name in ("t1", "t2", "t3")}) == 3  # one each


async def test_a_task_that_ends_unfinished_has_its_progress_flushed(tmp_path, monkeypatch):
    """A record a resume does not take as the task's result (here the judge is down, so
    its answer is unjudged) has the progress it ends on flushed: the task goes on from
    it."""
    from deepledger.bench.judge import Judge
    from deepledger.errors import LLMError

    class DownJudge(Judge):
        name = "down"

        async def _judge(self, question, answer, ground_truth):
            raise LLMError("judge model unavailable")

    flushed = _fsyncs(monkeypatch)
    (record,) = await run(config(), model(), tmp_path, ("easy/1",), judge=DownJudge())
    assert record["judgement"]["unjudged"]
    assert flushed == ["progress.jsonl", "benchmark_results.jsonl"]


async def test_a_run_that_stops_leaves_no_record_waiting_and_no_flush_going(tmp_path):
    """run()'s end cancels the flusher and every record still queued for it."""
    import asyncio

    from deepledger.records.results import TaskRecord

    run_dir = RunStore(tmp_path)
    runner = BenchmarkRunner(
        config(), llm=None, tools=None, run_dir=run_dir, judge=None, progress=Progress(plain=True)
    )
    loop = asyncio.get_running_loop()
    waiting = loop.create_future()
    runner.recorder._results_queue.append((TaskRecord(task_id="never"), waiting))
    runner.recorder._results_flusher = asyncio.create_task(asyncio.sleep(3600))
    runner.recorder.stop()
    assert waiting.cancelled() and runner.recorder._results_queue == []
    await asyncio.sleep(0)
    assert runner.recorder._results_flusher is None
    run_dir.close()


async def test_tasks_start_a_batch_at_a_time_and_the_ones_started_go_on_in_between():
    import asyncio

    from deepledger.bench.runner import STARTED_PER_TURN, started_in_turns
    from deepledger.bench.tasks import Task

    events: list[str] = []

    async def one(task: Task) -> None:
        events.append(f"start {task.task_id}")
        await asyncio.sleep(0)
        events.append(f"on {task.task_id}")

    todo = [Task(task_id=str(i), question="q") for i in range(STARTED_PER_TURN * 2 + 1)]
    jobs = await started_in_turns(one, todo)
    await asyncio.gather(*jobs)
    first_on = events.index("on 0")
    assert events[:first_on] == [f"start {i}" for i in range(STARTED_PER_TURN)]
    assert events.index(f"start {STARTED_PER_TURN * 2}") > first_on  # the first went on
    assert sorted(events) == sorted(
        [f"start {t.task_id}" for t in todo] + [f"on {t.task_id}" for t in todo]
    )


async def test_tasks_started_before_the_run_is_cancelled_are_cancelled_with_it():
    import asyncio

    from deepledger.bench.runner import STARTED_PER_TURN, started_in_turns
    from deepledger.bench.tasks import Task

    waiting = asyncio.Event()

    async def one(task: Task) -> None:
        await waiting.wait()

    todo = [Task(task_id=str(i), question="q") for i in range(STARTED_PER_TURN * 3)]
    launching = asyncio.create_task(started_in_turns(one, todo))
    await asyncio.sleep(0)  # the first batch is started, the launch waits for its turn
    running = [
        t for t in asyncio.all_tasks() if t is not launching and t is not asyncio.current_task()
    ]
    assert len(running) == STARTED_PER_TURN
    launching.cancel()
    await asyncio.gather(launching, return_exceptions=True)
    assert all(t.cancelled() for t in running)  # and ended before the launch did


async def test_the_runner_has_its_pool_start_task_servers_ahead_for_the_tasks_left(
    tmp_path, monkeypatch
):
    """The spares (tools/spares.py) are planned once the run's size is known, before any
    task claims a server: for the tasks still to run, at the backend's concurrency."""
    planned: list[tuple[list[str], int, int]] = []
    monkeypatch.setattr(
        ToolManager, "warm_ahead", lambda self, names, n, k: planned.append((list(names), n, k))
    )
    cfg = config("agent.main_agent.tools=[]", "benchmark.execution.max_concurrent=3")
    tasks = load_tasks(cfg.benchmark.data).tasks
    tools = ToolManager({})
    run_dir = RunStore(tmp_path)
    runner = BenchmarkRunner(
        cfg, llm=model(), tools=tools, run_dir=run_dir, judge=make_judge("normalized"),
        progress=Progress(plain=True),
    )  # fmt: skip
    try:
        await runner.run(tasks)
    finally:
        run_dir.close()
        await tools.aclose()
    assert planned == [([], len(tasks), 3)]
