"""`deepledger export RUN_DIR results`: a real pass@k run of the scripted model, written
as JSONL and Parquet and read back with pandas and pyarrow, row for row against the
run's own results."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from deepledger.bench.suite import run_suite
from deepledger.cli import main
from deepledger.export.results import COLUMNS, schema
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import Message, ToolSpec
from deepledger.records.results import TaskRecord
from deepledger.store.layout import RunLayout
from tests.support.bench import SUITE
from tests.support.config import CONF, composed

RIGHT = {"France": "Paris", "Vienna": "Danube", "animal": "Lion", "Anything": "42"}


class PassAtTwo:
    """The scripted model: France right at once; Vienna wrong on both attempts; the
    animal wrong first and right on the second attempt; the task with no ground truth
    answered. The answer is asked of it once per attempt (no tools, no post-mortems)."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()

    def __call__(self, messages: list[Message], tools: list[ToolSpec]) -> str:
        task, last = messages[1].content, messages[-1].content
        key = next(k for k in RIGHT if k in task)
        if "The work on this task is over" not in last and "previous reply had no" not in last:
            return "Let me think. No tools are needed here."
        self.asked[key] += 1
        wrong = key == "Vienna" or (key == "animal" and self.asked[key] == 1)
        return f"\\boxed{{{'Rhine' if wrong else RIGHT[key]}}}"


def record_pass_at_two(root: Path) -> Path:
    """`deepledger bench`'s own code path over the small suite, pass@k=2, into ``root``."""
    given = [
        f"benchmark.data.data_dir={SUITE}",
        "benchmark.name=tiny",
        "benchmark.execution.pass_at_k=2",
        "benchmark.execution.max_concurrent=1",
        "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1",
        "llm=openai",
        "llm.model_name=gpt-4.1",
    ]
    model = PassAtTwo()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            "deepledger.bench.services.create_client", lambda cfg: ScriptedLLM(responder=model)
        )
        asyncio.run(run_suite(composed(*given), root, CONF, ["bench", *given]))
    return root


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_pass_at_two(tmp_path_factory.mktemp("export") / "run")


def records(run_dir: Path) -> dict[str, TaskRecord]:
    lines = RunLayout(run_dir).results.read_text(encoding="utf-8").splitlines()
    return {r.task_id: r for r in (TaskRecord.load(json.loads(line)) for line in lines)}


def export(*args: str) -> int:
    return main(["export", *args])


def test_a_row_per_task_as_jsonl_read_by_pandas(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    assert export(str(run_dir), "results", "--out", str(out)) == 0
    frame = pd.read_json(out, lines=True, dtype=False)
    assert list(frame.columns) == [name for name, _ in COLUMNS]
    truth = records(run_dir)
    assert sorted(frame["task_id"]) == sorted(truth)
    rows = {row["task_id"]: row for row in frame.to_dict("records")}
    assert rows["easy/1"]["verdict"] == "correct"
    assert rows["hard #2"]["verdict"] == "incorrect"
    assert rows["näive 3"]["verdict"] == "correct"
    assert rows["open-4"]["verdict"] == "ungraded"
    # pass@k: the attempts each task made, and the first that was right.
    assert rows["hard #2"]["attempts"] == 2 and pd.isna(rows["hard #2"]["first_correct_attempt"])
    assert rows["näive 3"]["attempts"] == 2 and rows["näive 3"]["first_correct_attempt"] == 2
    assert rows["easy/1"]["attempts"] == 1 and rows["easy/1"]["first_correct_attempt"] == 1
    for task_id, record in truth.items():
        row = rows[task_id]
        assert row["run_dir"] == str(run_dir.resolve())
        assert (row["benchmark"], row["model"]) == ("tiny", "gpt-4.1")
        assert row["question"] == record.question
        assert row["answer"] == record.final_answer
        assert row["judge"] == (record.judgement.judge if record.judgement else None)
        assert row["config_id"] == record.config_id
        assert row["end_reason"] == record.end_reason and row["turns"] == record.turns
        assert row["input_tokens"] == record.usage.input_tokens > 0
        assert row["output_tokens"] == record.usage.output_tokens > 0
        assert row["seconds"] == pytest.approx(
            record.elapsed_seconds
        )  # pandas parses floats its way
        assert row["started_at"] <= row["finished_at"]  # ISO stamps, both UTC


def test_a_row_per_attempt_as_parquet_with_a_fixed_schema(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "attempts.parquet"
    code = export(str(run_dir), "results", "--per-attempt", "--table", "parquet", "--out", str(out))
    assert code == 0
    table = pq.read_table(out)
    assert table.schema.equals(schema())  # all-null columns keep their types
    frame = pd.read_parquet(out)
    truth = records(run_dir)
    assert len(frame) == sum(len(r.attempts) for r in truth.values()) == 6
    animal = frame[frame["task_id"] == "näive 3"].sort_values("attempt")
    assert list(animal["attempt"]) == [1, 2]
    assert list(animal["answer"]) == ["Rhine", "Lion"]
    assert list(animal["verdict"]) == ["incorrect", "correct"]
    attempts = truth["näive 3"].attempts
    assert list(animal["input_tokens"]) == [
        sum(r.usage.input_tokens for r in a.retries) for a in attempts
    ]
    assert sum(animal["input_tokens"]) == truth["näive 3"].usage.input_tokens
    assert (animal["started_at"] <= animal["finished_at"]).all()
    assert animal.iloc[0]["finished_at"] <= animal.iloc[1]["started_at"]
    assert frame["judge_label"].isna().all()  # the normalized judge has no labels


def test_filters_and_what_they_left_out(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "correct.jsonl"
    assert export(str(run_dir), "results", "--only", "correct", "--out", str(out)) == 0
    frame = pd.read_json(out, lines=True, dtype=False)
    assert set(frame["task_id"]) == {"easy/1", "näive 3"}
    said = capsys.readouterr()
    assert said.out.strip() == str(out)  # the answer: the file written
    assert "results: 2 written" in said.err
    assert "left out: 2 not judged correct (--only correct)" in said.err

    out = tmp_path / "long.jsonl"
    given = ["--min-turns", "2", "--end-reason", "model_finished", "--out", str(out)]
    assert export(str(run_dir), "results", *given) == 0
    frame = pd.read_json(out, lines=True, dtype=False)
    assert set(frame["task_id"]) == {"hard #2", "näive 3"}  # two attempts of one turn
    assert "left out: 2 fewer than 2 turns (--min-turns)" in capsys.readouterr().err


def test_a_newer_line_supersedes_an_older_one_and_secrets_stay_out(
    run_dir: Path, tmp_path: Path
) -> None:
    """A resume appends a task's new line: the export takes the newest."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    results = RunLayout(copy).results
    first = TaskRecord.load(json.loads(results.read_text().splitlines()[0]))
    redone = first.model_copy(update={"final_answer": "Paris, again api_key=sk-live-123"})
    with results.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(redone.to_json()) + "\n")
    out = tmp_path / "out.jsonl"
    assert export(str(copy), "results", "--out", str(out)) == 0
    frame = pd.read_json(out, lines=True, dtype=False)
    assert len(frame) == 4
    # The newest line, with what looks like a secret redacted as the journals do.
    assert frame[frame["task_id"] == first.task_id]["answer"].item() == "Paris, again api_key=***"


def test_a_run_still_going_exports_what_has_finished(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task with journals and no result line yet is counted as left out; a result line
    torn mid-write (the runner appending it now) is read up to the last whole line."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    results = RunLayout(copy).results
    lines = results.read_text(encoding="utf-8").splitlines(keepends=True)
    results.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2], encoding="utf-8")
    out = tmp_path / "live.jsonl"
    assert export(str(copy), "results", "--out", str(out)) == 0
    assert len(pd.read_json(out, lines=True, dtype=False)) == 3
    assert "left out: 1 tasks not finished yet (journals, no result line)" in (
        capsys.readouterr().err
    )
