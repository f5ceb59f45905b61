"""What a task's input digest covers (bench/inputs.py): what decides its answer or its
verdict changes it; where the judge's server is, or a judge for an unjudged task, not."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from deepledger.bench.inputs import file_sha256, input_digest, judge_identity
from deepledger.bench.tasks import Task
from deepledger.config import JudgeConfig, LLMConfig, validate
from deepledger.errors import ConfigError
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


def test_on_changed_tasks_takes_rerun_or_refuse():
    assert composed().resume.on_changed_tasks == "rerun"
    validate(composed("resume.on_changed_tasks=refuse"))
    assert composed("+resume.on_changed_tasks=refuse").resume.on_changed_tasks == "refuse"
    with pytest.raises(ConfigError, match=r"resume.on_changed_tasks='ask': use one of rerun"):
        validate(composed("resume.on_changed_tasks=ask"))
