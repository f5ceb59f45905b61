from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepledger.bench.experience import retry_task_text
from deepledger.bench.tasks import load_tasks
from deepledger.config import BenchmarkDataConfig
from deepledger.errors import ConfigError

SUITE = Path(__file__).with_name("suite")


def data(folder: Path, **overrides) -> BenchmarkDataConfig:
    return BenchmarkDataConfig(data_dir=str(folder), **overrides)


def test_the_example_suite_loads_with_attachments_and_odd_ids():
    loaded = load_tasks(data(SUITE))
    assert [t.task_id for t in loaded.tasks] == ["easy/1", "hard #2", "näive 3", "open-4"]
    assert loaded.tasks[2].file_path == str((SUITE / "animal.txt").resolve())
    assert loaded.tasks[3].ground_truth is None and loaded.problems == []
    assert [t.task_id for t in load_tasks(data(SUITE), max_tasks=2).tasks] == ["easy/1", "hard #2"]


def write_lines(folder: Path, *lines: str) -> None:
    (folder / "standardized_data.jsonl").write_text("\n".join(lines) + "\n")


def test_bad_lines_are_reported_with_their_numbers_and_skipped(tmp_path):
    good = {"task_id": "a", "task_question": "Q?", "ground_truth": 42}
    write_lines(
        tmp_path,
        json.dumps(good),
        "{not json",
        "[1, 2]",
        json.dumps({"task_id": "b"}),
        json.dumps({"task_question": "no id"}),
        json.dumps(good),
        json.dumps({"task_id": "c", "task_question": "Q", "file_name": "x.pdf"}),
        "",
        json.dumps({"task_id": "d", "task_question": "list?", "ground_truth": ["a", "b"]}),
    )
    loaded = load_tasks(data(tmp_path))
    assert [(t.task_id, t.ground_truth) for t in loaded.tasks] == [("a", "42"), ("d", "a, b")]
    where = [p.split(": ", 1)[0].rsplit(":", 1)[1] for p in loaded.problems]
    assert where == ["2", "3", "4", "5", "6", "7"]
    reasons = " | ".join(loaded.problems)
    for expected in (
        "not JSON",
        "not a JSON object",
        "no question",
        "no task id",
        "duplicate task id 'a'",
        "attached file 'x.pdf' not found",
    ):
        assert expected in reasons


def test_strict_mode_stops_at_the_first_bad_line(tmp_path):
    write_lines(tmp_path, json.dumps({"task_id": "a", "task_question": "Q"}), "oops")
    with pytest.raises(ConfigError, match=r"standardized_data.jsonl:2: not JSON"):
        load_tasks(data(tmp_path, strict=True))


def test_missing_folder_or_file_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match="is not a folder"):
        load_tasks(data(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"standardized_data.jsonl does not exist"):
        load_tasks(data(tmp_path))


def test_other_field_names_map_through_field_mapping(tmp_path):
    (tmp_path / "qa.jsonl").write_text(json.dumps({"id": 7, "q": "Why?", "a": "Because"}) + "\n")
    cfg = data(tmp_path, metadata_file="qa.jsonl")
    cfg.field_mapping.task_id_field, cfg.field_mapping.task_question_field = "id", "q"
    cfg.field_mapping.ground_truth_field = "a"
    (task,) = load_tasks(cfg).tasks
    assert (task.task_id, task.question, task.ground_truth) == ("7", "Why?", "Because")


@pytest.mark.parametrize("count", [1, 2, 3])
def test_retry_text_is_rebuilt_from_the_original_question(count):
    mortems = [f"Failure type: incomplete\nUseful findings: fact {n}" for n in range(1, count + 1)]
    text = retry_task_text("What is X?", mortems)
    assert text.startswith("What is X?\n\n=== Earlier attempts at this task ===")
    assert text.count("=== Earlier attempts") == 1 and text.count("=== End of earlier") == 1
    assert [text.count(f"[Attempt {n}]") for n in range(1, count + 1)] == [1] * count
    assert count == 1 or text.index("fact 1") < text.index(f"fact {count}")
    assert text.rstrip().endswith("give the final answer in\n\\boxed{}.")
    assert retry_task_text("What is X?", []) == "What is X?"


def test_max_tasks_zero_means_none():
    assert load_tasks(data(SUITE), max_tasks=0).tasks == []
