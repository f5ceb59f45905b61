"""The task, attempt, retry and summary records: one class per kind, read and written by
the same class, and the files of the release before them (schema 1) still load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from deepledger.bench.metrics import summarize
from deepledger.messages import Usage
from deepledger.records.base import SCHEMA_VERSION
from deepledger.records.results import (
    FIRST_SCHEMA,
    AttemptFinished,
    AttemptRecord,
    JudgementRecord,
    LimitRecord,
    RetryFinished,
    RetryRecord,
    SummaryRecord,
    TaskRecord,
)
from deepledger.store.files import read_jsonl
from deepledger.store.run_store import RunStore
from tests.support.bench import FlakyJudge, config, model, run

SCHEMA1 = Path(__file__).parents[1] / "fixtures" / "runs" / "schema1"


async def test_a_failed_and_a_finished_task_are_one_class_with_the_same_fields(tmp_path):
    # A judge that crashes (a bug, not its model failing) makes the task an error.
    cfg, judge = config("agent.context_compress_limit=2"), FlakyJudge(RuntimeError("a bug"))
    await run(cfg, model(), tmp_path, ("hard #2",), judge=judge)
    await run(cfg, model(), tmp_path, ("hard #2",), judge=judge)  # the resume finishes it
    failed, finished = read_jsonl(tmp_path / "benchmark_results.jsonl")
    assert (failed["status"], finished["status"]) == ("error", "finished")
    assert list(failed) == list(finished)  # the same fields, in the same order
    assert failed["schema_version"] == finished["schema_version"] == SCHEMA_VERSION
    # Fields that mean the same in both: the failed one counts the work it did.
    assert failed["turns"] == finished["turns"] == 3
    assert failed["extraction_usage"] == finished["extraction_usage"]
    assert failed["prefix_breaks"] == finished["prefix_breaks"] == 0
    assert failed["end_detail"] is None and failed["judge_usage"] == finished["judge_usage"]
    assert type(TaskRecord.load(failed)) is type(TaskRecord.load(finished))


def _retry(index: int = 0) -> RetryRecord:
    return RetryRecord(
        retry=index,
        final_answer="Danube",
        provenance="summary",
        end_reason="limit",
        turns=2,
        tool_calls=1,
        limit=LimitRecord(kind="task_token_limit", limit=2500, spent=3000),
        usage=Usage(input_tokens=30, output_tokens=15, cache_read_tokens=4),
        cost=0.25,
        extraction_usage=Usage(input_tokens=5),
        journal="tasks/t-1/attempt-1-retry-0.jsonl",
        elapsed_seconds=1.5,
        config_id="abc",
    )


def _attempt() -> AttemptRecord:
    judgement = JudgementRecord(
        correct=True,
        judge="llm",
        reason="same",
        score=0.5,
        usage=Usage(input_tokens=7, output_tokens=1),
    )
    return AttemptRecord(
        attempt=1,
        final_answer="Danube",
        correct=True,
        judgement=judgement,
        retries=[_retry(0), _retry(1)],
    )


def _task() -> TaskRecord:
    return TaskRecord(
        task_id="t 1",
        question="Which river?",
        ground_truth="Danube",
        attempts=[_attempt()],
        usage=Usage(input_tokens=60),
        cost=0.5,
        stopped="does_not_fit",
        interrupted_calls=2,
    )


ROUND_TRIPS = {
    "retry": _retry,
    "attempt": _attempt,
    "task": _task,
    "retry_finished": lambda: RetryFinished(ts="2026-12-01T00:00:00+00:00", **dict(_retry())),
    "attempt_finished": lambda: AttemptFinished(ts="2026-12-01T00:00:00+00:00", **dict(_attempt())),
    "summary": lambda: SummaryRecord.load(
        summarize([_task().to_json()], pass_at_k=2, benchmark="toy", extra={"run": "r"}).to_json()
    ),
}


@pytest.mark.parametrize("kind", list(ROUND_TRIPS))
def test_each_record_reads_back_what_it_wrote(kind):
    record = ROUND_TRIPS[kind]()
    line = json.loads(json.dumps(record.to_json()))  # through JSON text, as on disk
    again = type(record).load(line)
    assert again == record
    assert again.to_json() == line


def test_a_summary_names_its_post_mortem_split_as_before():
    summary = summarize([_task().to_json()], pass_at_k=2, benchmark="toy").to_json()
    assert summary["schema_version"] == SCHEMA_VERSION
    assert set(summary["post_mortems"]) == {"without", "with"}
    assert "configs" not in summary and "token_economics" not in summary


def test_results_and_a_summary_of_schema_1_load():
    lines = read_jsonl(SCHEMA1 / "benchmark_results.jsonl")
    records = [TaskRecord.load(line) for line in lines]
    assert {r.schema_version for r in records} == {FIRST_SCHEMA}
    by_id = {r.task_id: r for r in records}
    hard = by_id["hard #2"]
    assert [r.carried_post_mortems for r in hard.attempts[0].retries] == [0, 1, 2]
    assert hard.final_answer == "Danube" and hard.correct is True
    assert hard.usage.input_tokens == sum(r.usage.input_tokens for r in hard.retries)
    summary = SummaryRecord.load(json.loads((SCHEMA1 / "summary.json").read_text()))
    assert summary.schema_version == FIRST_SCHEMA
    assert summary.tasks.total == len(records) and summary.accuracy == 1.0
    assert summary.post_mortems.with_.attempts == 1
    assert summary.token_economics is not None and summary.configs is None
    rebuilt = summarize(lines, pass_at_k=summary.k, benchmark="tiny", tasks_expected=4).to_json()
    assert rebuilt["tasks"] == summary.to_json()["tasks"]
    assert rebuilt["tokens"] == summary.tokens.model_dump()


def test_progress_of_schema_1_resumes_with_its_post_mortems(tmp_path):
    shutil.copytree(SCHEMA1, tmp_path / "run", ignore=shutil.ignore_patterns(".lock"))
    store = RunStore(tmp_path / "run")
    try:
        done = store.progress("hard #2")
    finally:
        store.close()
    (attempt,) = done.attempts
    assert attempt.schema_version == FIRST_SCHEMA and attempt.correct is True
    assert [r.failure_type for r in attempt.retries] == ["format_missed", "format_missed", None]
    assert done.retries == []  # the attempt finished: nothing carried into a new one


def test_progress_lines_carry_the_schema_version(tmp_path):
    store = RunStore(tmp_path)
    try:
        store.record_progress("t", _retry())
        store.record_progress("t", _attempt())
        retry_line, attempt_line = read_jsonl(store.task_dir("t") / "progress.jsonl")
        done = store.progress("t")
    finally:
        store.close()
    assert (retry_line["event"], attempt_line["event"]) == ("retry_finished", "attempt_finished")
    assert retry_line["schema_version"] == attempt_line["schema_version"] == SCHEMA_VERSION
    assert done.attempts[0].retries == _attempt().retries
