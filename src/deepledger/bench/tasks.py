"""Loading a benchmark's tasks from JSONL.

One task a line, MiroThinker's standardized format by default: ``task_id``,
``task_question``, ``ground_truth`` (may be null) and optional ``file_name`` (relative to
``data_dir``); other field names map through ``benchmark.data.field_mapping``.

A line that is not a JSON object, lacks an id or a question, repeats an earlier id, or
names an attached file that does not exist is reported with its line number and skipped
— or stops the run when ``benchmark.data.strict`` is on. A missing data folder or task
file is always an error naming the path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepledger.bench.public import PACKAGE_SOURCE, read_package_set
from deepledger.errors import ConfigError


@dataclass(frozen=True)
class Task:
    task_id: str
    question: str
    ground_truth: str | None = None
    file_path: str | None = None  # absolute path of the attached file
    line: int = 0


@dataclass
class TaskFile:
    path: Path
    tasks: list[Task] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "FILE:LINE: what is wrong"


def load_tasks(data: Any, max_tasks: int | None = None) -> TaskFile:
    """The tasks of ``benchmark.data``; ``max_tasks`` keeps the first N good ones."""
    if data.source.startswith(PACKAGE_SOURCE):
        return _package_tasks(data.source, max_tasks)
    if data.source != "jsonl":
        raise ConfigError(
            f"benchmark.data.source={data.source!r}: use jsonl or package:<name> "
            "(simpleqa, freshqa, fanoutqa)."
        )
    data_dir = Path(data.data_dir)
    path = data_dir / data.metadata_file
    if not data_dir.is_dir():
        raise ConfigError(
            f"benchmark.data.data_dir={str(data_dir)!r} is not a folder. Put the benchmark's "
            "data there, or point benchmark.data.data_dir at it."
        )
    if not path.is_file():
        raise ConfigError(
            f"The task file {path} does not exist (benchmark.data.metadata_file="
            f"{data.metadata_file!r} inside benchmark.data.data_dir)."
        )
    loaded = TaskFile(path)
    seen: set[str] = set()
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if max_tasks is not None and len(loaded.tasks) >= max_tasks:
                break
            if not line.strip():
                continue
            task, problem = _parse_line(line, number, data, data_dir, seen)
            if problem:
                loaded.problems.append(f"{path}:{number}: {problem}")
                if data.strict:
                    raise ConfigError(f"{loaded.problems[-1]} (benchmark.data.strict is on)")
                continue
            seen.add(task.task_id)
            loaded.tasks.append(task)
    return loaded


def _parse_line(
    line: str, number: int, data: Any, data_dir: Path, seen: set[str]
) -> tuple[Task | None, str]:
    mapping = data.field_mapping
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(record, dict):
        return None, "not a JSON object"
    task_id = record.get(mapping.task_id_field)
    question = record.get(mapping.task_question_field)
    if task_id is None or str(task_id).strip() == "":
        return None, f"no task id (field {mapping.task_id_field!r})"
    if not isinstance(question, str) or not question.strip():
        return None, f"no question (field {mapping.task_question_field!r})"
    task_id = str(task_id)
    if task_id in seen:
        return None, f"duplicate task id {task_id!r} (the first one is kept)"
    file_path = None
    file_name = record.get(mapping.file_name_field)
    if file_name:
        attached = (data_dir / str(file_name)).resolve()
        if not attached.is_file():
            return None, f"attached file {str(file_name)!r} not found in {data_dir}"
        file_path = str(attached)
    truth = _as_text(record.get(mapping.ground_truth_field))
    return Task(task_id, question, truth, file_path, number), ""


def _package_tasks(source: str, max_tasks: int | None) -> TaskFile:
    path, rows = read_package_set(source)
    loaded = TaskFile(path)
    for number, (task_id, question, truth) in enumerate(rows, start=1):
        if max_tasks is not None and len(loaded.tasks) >= max_tasks:
            break
        loaded.tasks.append(Task(task_id, question, truth, None, number))
    return loaded


def _as_text(value: Any) -> str | None:
    """Ground truths come as strings, numbers or lists; judges compare text."""
    if value is None:
        return None
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)
