"""What a task's input digest covers (bench/inputs.py): what decides its answer or its
verdict changes it; where the judge's server is, or a judge for an unjudged task, not."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from deepledger.bench.inputs import (
    check_inputs,
    file_sha256,
    input_digest,
    judge_identity,
    start_over,
)
from deepledger.bench.tasks import Task
from deepledger.config import JudgeConfig, LLMConfig, validate
from deepledger.errors import ConfigError
from deepledger.records.results import AttemptRecord, RetryRecord, TaskRecord
from deepledger.store import run_store
from deepledger.store.run_store import RunStore, task_records
from tests.support.config import composed

JUDGE = judge_identity(JudgeConfig(name="normalized"))
MODEL = LLMConfig(provider="openai", model_name="gpt-4.1", max_context_length=128_000)


def digest(task: Task, judge=JUDGE) -> str:
    attachment = file_sha256(task.file_path) if task.file_path else None
    return input_digest(task, judge, attachment)


def test_the_same_inputs_give_the_same_digest_and_each_input_changes_it(tmp_path: Path):
    attached = tmp_path / "animal.txt"
    attached.write_text("a lion")
    task = Task("t", "Name the animal.", "Lion", str(attached))
    first = digest(task)
    assert digest(dataclasses.replace(task, line=7)) == first  # where it is in the file: no
    assert len(first) == 64 and all(c in "0123456789abcdef" for c in first)
    changed = {
        digest(dataclasses.replace(task, question="Name the animal!")),
        digest(dataclasses.replace(task, ground_truth="Tiger")),
        digest(dataclasses.replace(task, ground_truth=None)),
        digest(dataclasses.replace(task, file_path=None)),
        digest(task, judge_identity(JudgeConfig(name="exact"))),
    }
    attached.write_text("a tiger")
    changed.add(digest(task))
    assert first not in changed and len(changed) == 6


def test_the_judge_counts_only_for_a_task_it_judges():
    unjudged = Task("t", "Anything?", None)
    exact = judge_identity(JudgeConfig(name="exact"))
    assert digest(unjudged) == digest(unjudged, exact)


def test_the_llm_judges_model_counts_and_where_it_is_served_does_not():
    judge = JudgeConfig(name="llm", llm="openai")
    task = Task("t", "Capital of France?", "Paris")
    first = digest(task, judge_identity(judge, MODEL))
    moved = dataclasses.replace(MODEL, base_url="http://127.0.0.1:9/v1", timeout_seconds=5)
    assert digest(task, judge_identity(judge, moved)) == first
    other_model = dataclasses.replace(MODEL, model_name="gpt-4.1-mini")
    assert digest(task, judge_identity(judge, other_model)) != first
    other_rule = dataclasses.replace(judge, rule="hle")
    assert digest(task, judge_identity(other_rule, MODEL)) != first


def test_a_judge_template_s_text_counts_and_the_protocol_s_stated_labels_do_not(tmp_path):
    template = tmp_path / "grader.txt"
    template.write_text("{question} {response} {correct_answer}")
    judge = JudgeConfig(name="llm", llm="openai", rule="hle")
    task = Task("t", "Capital of France?", "Paris")
    ours = digest(task, judge_identity(judge, MODEL))
    official = dataclasses.replace(judge, template=str(template))
    first = digest(task, judge_identity(official, MODEL))
    assert first != ours
    template.write_text("Grade it. {question} {response} {correct_answer}")
    assert digest(task, judge_identity(official, MODEL)) != first  # another text: another judge
    stated = dataclasses.replace(judge, labels=["yes", "no"], fields=["confidence"], max_asks=5)
    assert digest(task, judge_identity(stated, MODEL)) == ours


def test_on_changed_tasks_takes_rerun_or_refuse():
    assert composed().resume.on_changed_tasks == "rerun"
    validate(composed("resume.on_changed_tasks=refuse"))
    assert composed("+resume.on_changed_tasks=refuse").resume.on_changed_tasks == "refuse"
    with pytest.raises(ConfigError, match=r"resume.on_changed_tasks='ask': use one of rerun"):
        validate(composed("resume.on_changed_tasks=ask"))


def store_with(root: Path, record_digest: str | None, progress_digest: str | None) -> RunStore:
    """A run directory holding task "t": a finished result for ``record_digest`` (none
    when None) and one finished retry run on ``progress_digest`` (none when None)."""
    store = RunStore(root)
    if record_digest is not None:
        task = Task("t", "Q?", "A", digest=record_digest)
        store.add_result(TaskRecord.finished(task, [AttemptRecord(retries=[RetryRecord()])], 1.0))
    if progress_digest is not None:
        store.record_progress("t", RetryRecord(post_mortem="old lesson"), digest=progress_digest)
    return store


@pytest.mark.parametrize(
    ("record", "progress", "changed", "set_aside"),
    [
        ("new", None, False, False),  # done for these inputs
        ("old", None, True, False),  # done for other inputs; no folder to set aside
        ("old", "old", True, True),  # done for others: its folder is the old work
        # A re-run of the new inputs a killed run left: it goes on from its progress.
        ("old", "new", True, False),
        (None, "old", True, True),  # never finished, its progress for other inputs
        (None, "new", False, False),  # unfinished, for these inputs: resumed as ever
    ],
)
def test_which_tasks_changed_and_whose_folder_is_set_aside(
    tmp_path, record, progress, changed, set_aside
):
    store = store_with(tmp_path, record, progress)
    try:
        check = check_inputs(store, [Task("t", "Q?", "A", digest="new")])
        assert (check.changed == ["t"], check.set_aside == ["t"]) == (changed, set_aside)
        (task,), _ = start_over(store, check, [Task("t", "Q?", "A", digest="new")])
        assert task.inputs_changed is changed
        carried = [r.post_mortem for r in store.progress("t").retries]
        assert carried == ([] if set_aside or progress is None else ["old lesson"])
        if set_aside:  # the old post-mortem is out of reach of the new retries, kept apart
            (moved,) = [p for p in (tmp_path / "superseded").iterdir() if p.is_dir()]
            assert "old lesson" in (moved / "progress.jsonl").read_text()
        assert ("t" in store.finished_results()) == (record == "new")
    finally:
        store.close()


def finished(store: RunStore, task_id: str, digest: str) -> None:
    task = Task(task_id, "Q?", "A", digest=digest)
    store.add_result(TaskRecord.finished(task, [AttemptRecord(retries=[RetryRecord()])], 1.0))


def test_a_changed_tasks_old_lines_leave_the_results_before_it_runs_again(tmp_path):
    store = store_with(tmp_path, "old", "old")
    finished(store, "u", "same")
    try:
        tasks = [Task("t", "Q?", "A", digest="new"), Task("u", "Q?", "A", digest="same")]
        start_over(store, check_inputs(store, tasks), tasks)
        # Every reader of the results goes by task_records: the old verdict is gone from
        # it before the task runs again, not only from this process's view.
        assert list(task_records(tmp_path)) == ["u"]
        kept = [
            json.loads(line) for line in store.layout.superseded_results.read_text().splitlines()
        ]
        assert [line["task_id"] for line in kept] == ["t"]
        assert kept[0]["input_digest"] == "old"
    finally:
        store.close()


def test_a_run_killed_while_setting_a_task_aside_leaves_the_next_resume_to_finish_it(
    tmp_path, monkeypatch
):
    store = store_with(tmp_path, "old", None)
    tasks = [Task("t", "Q?", "A", digest="new")]
    try:
        with monkeypatch.context() as killed:  # killed after the copy, before the replace
            killed.setattr(run_store, "write_text_atomic", _killed)
            with pytest.raises(KeyboardInterrupt):
                start_over(store, check_inputs(store, tasks), tasks)
        assert "t" in task_records(tmp_path)  # still there: the next resume moves it
        start_over(store, check_inputs(store, tasks), tasks)
        assert task_records(tmp_path) == {}
        assert len(store.layout.superseded_results.read_text().splitlines()) == 1  # once
        # Killed again before the task's new line: nothing is left to move, and the new
        # line still says that it replaced a result of other inputs.
        check = check_inputs(store, tasks)
        assert check.changed == []
        ((task,), _) = start_over(store, check, tasks)
        assert task.inputs_changed is True
    finally:
        store.close()


def _killed(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt
