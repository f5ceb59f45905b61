"""Benchmarks' official data files, read as their publishers lay them out.

``benchmark.data.format`` names the layout of ``data_dir/metadata_file``; ``auto`` (the
default) tells it from the file's extension and, for CSV, its header row, and for JSON
from the first record's fields:

- ``jsonl``: MiroThinker's standardized JSONL (``task_id``, ``task_question``,
  ``ground_truth``, ``file_name``; ``benchmark.data.field_mapping`` renames them). The
  line's other scalar fields are kept as the task's metadata.
- ``gaia``: GAIA's ``metadata.jsonl`` (``task_id``, ``Question``, ``Final answer``,
  ``file_name``, ``Level``, ``Annotator Metadata``); ``Level`` is kept. The test
  split's hidden answers (``?``) are no ground truth: those tasks are answered, not judged.
- ``hle``: Humanity's Last Exam as parquet, JSON (a list of records) or JSONL (``id``,
  ``question``, ``image``, ``answer``, ``answer_type``, ``category``, ``raw_subject``,
  ...); ``answer_type``, ``category`` and ``raw_subject`` are kept, and a question's
  image (a ``data:`` URI) becomes its attached file (bench/tasks.py writes it).
- ``browsecomp``: BrowseComp's CSV (``problem``, ``answer``, ``problem_topic``,
  ``canary``); ``problem`` and ``answer`` are base64 of the text XORed with the SHA-256
  digest of the row's canary, repeated to the text's length. ``problem_topic`` is kept.
- ``browsecomp-zh``: BrowseComp-ZH's table (``Topic``, ``Question``, ``Answer``,
  ``canary``; all three encrypted as BrowseComp's are), as its published ``.xlsx`` or
  saved as CSV. ``Topic`` is kept.
- ``xbench-deepsearch``: xbench-DeepSearch's CSV (``id``, ``prompt``, ``answer``,
  ``reference_steps``, ``canary``); ``prompt`` and ``answer`` are base64 of the text
  XORed with the canary's own UTF-8 bytes, repeated.
- ``simpleqa``: SimpleQA's CSV (``metadata``, ``problem``, ``answer``); ``metadata`` is a
  Python-literal dict whose ``topic`` and ``answer_type`` are kept.

Files without an id column number their rows (``browsecomp-0001``...; the first data
row is 1), as ``package:simpleqa`` does. Each reader yields one :class:`Entry` a row, or
the row's problem; bench/tasks.py checks and builds the tasks.
"""

from __future__ import annotations

import ast
import base64
import binascii
import csv
import hashlib
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepledger.config import FieldMapping
from deepledger.errors import ConfigError
from deepledger.messages import JSONObject

AUTO = "auto"
JSONL = "jsonl"
GAIA = "gaia"
HLE = "hle"
BROWSECOMP = "browsecomp"
BROWSECOMP_ZH = "browsecomp-zh"
XBENCH = "xbench-deepsearch"
SIMPLEQA = "simpleqa"
FORMATS = (JSONL, GAIA, HLE, BROWSECOMP, BROWSECOMP_ZH, XBENCH, SIMPLEQA)
FORMAT_KEY = "benchmark.data.format"
# The extensions each format is read from.
EXTENSIONS = {
    JSONL: (".jsonl", ".json"),
    GAIA: (".jsonl", ".json"),
    HLE: (".parquet", ".jsonl", ".json"),
    BROWSECOMP: (".csv",),
    BROWSECOMP_ZH: (".xlsx", ".csv"),
    XBENCH: (".csv",),
    SIMPLEQA: (".csv",),
}
# The columns that tell a CSV's format (its header holds all of them).
CSV_HEADERS = {
    BROWSECOMP: ("problem", "answer", "problem_topic", "canary"),
    BROWSECOMP_ZH: ("Topic", "Question", "Answer", "canary"),
    XBENCH: ("id", "prompt", "answer", "canary"),
    SIMPLEQA: ("metadata", "problem", "answer"),
}
GAIA_FIELDS = ("task_id", "Question", "Final answer")
GAIA_HIDDEN = "?"  # GAIA's test split publishes this for the answers it keeps hidden
HLE_FIELDS = ("id", "question", "answer")
# Where each format other than jsonl reads a task's id and question.
ID_AND_QUESTION = {
    GAIA: ("task_id", "Question"),
    HLE: ("id", "question"),
    BROWSECOMP: ("(row number)", "problem"),
    BROWSECOMP_ZH: ("(row number)", "Question"),
    XBENCH: ("id", "prompt"),
    SIMPLEQA: ("(row number)", "problem"),
}
HLE_KEPT = ("answer_type", "category", "raw_subject")
MAX_METADATA_CHARS = 300  # a longer text field is a body (a rationale), not a label


@dataclass
class Entry:
    """A row as a task: what the task file says, before bench/tasks.py checks it."""

    task_id: Any
    question: Any
    truth: Any = None
    file_name: Any = None
    image: Any = None  # HLE: a data: URI or the image's bytes; None or "": no image
    metadata: JSONObject = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)  # field -> why it was not kept
    fields: list[str] = field(default_factory=list)  # a JSON row's field names, for messages


# What a reader yields: (row number, the entry or None, why the row is unusable).
Row = tuple[int, Entry | None, str]


def format_of(path: Path, chosen: str, mapping: FieldMapping) -> str:
    """The format ``path`` is read in: ``chosen``, or found from the file when auto."""
    if chosen != AUTO and chosen not in FORMATS:
        raise ConfigError(f"{FORMAT_KEY}={chosen!r}: use auto or one of {_names()}.")
    suffix = path.suffix.lower()
    if chosen == AUTO:
        chosen = _detected(path, suffix, mapping)
    if suffix not in EXTENSIONS[chosen]:
        raise ConfigError(
            f"{path}: {FORMAT_KEY}={chosen} reads {'/'.join(EXTENSIONS[chosen])} files, "
            f"not {suffix or 'a file without an extension'}. The formats read: {_names()}."
        )
    return chosen


def _names() -> str:
    return ", ".join(f"{name} ({'/'.join(extensions)})" for name, extensions in EXTENSIONS.items())


def _detected(path: Path, suffix: str, mapping: FieldMapping) -> str:
    if suffix == ".parquet":
        return HLE
    if suffix == ".xlsx":
        return BROWSECOMP_ZH
    if suffix == ".csv":
        header = csv_header(path)
        for name, columns in CSV_HEADERS.items():
            if set(columns) <= set(header):
                return name
        raise ConfigError(
            f"{path}: a CSV whose header ({', '.join(map(repr, header)) or 'empty'}) is no "
            "layout we read: "
            + "; ".join(f"{name}: {', '.join(cols)}" for name, cols in CSV_HEADERS.items())
            + f". Name the format with {FORMAT_KEY}=..., or convert the file to JSONL."
        )
    if suffix in (".jsonl", ".json"):
        return _json_flavour(_first_record(path, suffix), mapping)
    raise ConfigError(
        f"{path}: {suffix or 'a file without an extension'} is no format we read. "
        f"The formats read: {_names()}."
    )


def _json_flavour(first: JSONObject, mapping: FieldMapping) -> str:
    """GAIA's or HLE's fields, unless the record has the (mapped) standardized ones."""
    if mapping.task_question_field in first:
        return JSONL
    if all(name in first for name in GAIA_FIELDS):
        return GAIA
    if all(name in first for name in HLE_FIELDS):
        return HLE
    return JSONL


def _first_record(path: Path, suffix: str) -> JSONObject:
    """The first JSON object of the file ({} when there is none to read: the reader
    will then report the lines themselves)."""
    with path.open("rb") as lines:
        if suffix == ".json" and lines.read(64).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
            records = _json_list(path)
            return records[0] if records and isinstance(records[0], dict) else {}
        lines.seek(0)
        for raw in lines:
            if raw.strip():
                try:
                    record = json.loads(raw.decode("utf-8-sig"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    return {}
                return record if isinstance(record, dict) else {}
    return {}


def _json_list(path: Path) -> list[Any]:
    try:
        records = json.loads(path.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a JSON document ({exc})") from exc
    if not isinstance(records, list):
        raise ConfigError(f"{path}: a JSON task file holds a list of records (or one a line).")
    return records


def csv_header(path: Path) -> list[str]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as text:
            return next(csv.reader(text), [])
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def require_columns(path: Path, fmt: str, columns: list[str]) -> None:
    """Refuse a table that lacks a column its format needs, naming the columns it has."""
    missing = [c for c in CSV_HEADERS[fmt] if c not in columns]
    if missing:
        raise ConfigError(
            f"{path}: {FORMAT_KEY}={fmt} needs the columns {', '.join(CSV_HEADERS[fmt])}; "
            f"missing {', '.join(map(repr, missing))} (its columns: "
            f"{', '.join(map(repr, columns)) or 'none'})."
        )


# --- decryption: the schemes the publishers document --------------------------------


def sha256_key_decrypt(ciphertext_b64: str, canary: str) -> str:
    """BrowseComp (and BrowseComp-ZH): XOR with SHA-256(canary) repeated to the length."""
    encrypted = base64.b64decode(ciphertext_b64, validate=True)
    digest = hashlib.sha256(canary.encode("utf-8")).digest()
    key = digest * (len(encrypted) // len(digest) + 1)
    return bytes(a ^ b for a, b in zip(encrypted, key, strict=False)).decode("utf-8")


def canary_key_decrypt(ciphertext_b64: str, canary: str) -> str:
    """xbench-DeepSearch: XOR with the canary's UTF-8 bytes repeated to the length."""
    encrypted = base64.b64decode(ciphertext_b64, validate=True)
    key = canary.encode("utf-8")
    if not key:
        raise ValueError("the row's canary is empty")
    return bytes(b ^ key[i % len(key)] for i, b in enumerate(encrypted)).decode("utf-8")


def _decrypted(
    row: dict[str, Any], columns: tuple[str, ...], decrypt: Callable[[str, str], str]
) -> tuple[dict[str, str], str]:
    """(the columns in clear, "") or ({}, which one cannot be decrypted and why)."""
    canary = str(row.get("canary") or "")
    clear = {}
    for column in columns:
        value = row.get(column)
        if value is None or str(value) == "":
            clear[column] = ""
            continue
        try:
            clear[column] = decrypt(str(value).strip(), canary)
        except (binascii.Error, ValueError) as exc:  # not base64, or not UTF-8 once XORed
            return {}, f"{column!r} cannot be decrypted with the row's canary ({exc})"
    return clear, ""


# --- the readers ---------------------------------------------------------------------


def _csv_rows(path: Path, fmt: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8-sig", newline="") as text:
        reader = csv.DictReader(text)
        require_columns(path, fmt, list(reader.fieldnames or []))
        yield from enumerate(reader, start=1)


def _xlsx_rows(path: Path, fmt: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """The first sheet of a workbook, its first row the header."""
    from openpyxl import load_workbook  # only BrowseComp-ZH's workbook needs it

    try:
        book = load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises many kinds for a damaged file
        raise ConfigError(f"{path}: not a readable .xlsx workbook ({exc})") from exc
    try:
        rows = book.worksheets[0].iter_rows(values_only=True)
        header = [str(cell or "") for cell in next(rows, ())]
        require_columns(path, fmt, header)
        for number, cells in enumerate(rows, start=1):
            if any(cell not in (None, "") for cell in cells):
                yield number, dict(zip(header, cells, strict=False))
    finally:
        book.close()


def _browsecomp(number: int, row: dict[str, Any]) -> Row:
    """BrowseComp: question and answer encrypted, the topic in clear."""
    clear, problem = _decrypted(row, ("problem", "answer"), sha256_key_decrypt)
    if problem:
        return number, None, problem
    topic = _nonempty("problem_topic", str(row.get("problem_topic") or ""))
    entry = Entry(f"{BROWSECOMP}-{number:04d}", clear["problem"], clear["answer"], metadata=topic)
    return number, entry, ""


def _browsecomp_zh(number: int, row: dict[str, Any]) -> Row:
    """BrowseComp-ZH: the topic is encrypted too, with BrowseComp's scheme."""
    clear, problem = _decrypted(row, ("Question", "Answer", "Topic"), sha256_key_decrypt)
    if problem:
        return number, None, problem
    entry = Entry(f"{BROWSECOMP_ZH}-{number:04d}", clear["Question"], clear["Answer"])
    entry.metadata = _nonempty("Topic", clear["Topic"])
    return number, entry, ""


def _xbench(number: int, row: dict[str, Any]) -> Row:
    clear, problem = _decrypted(row, ("prompt", "answer"), canary_key_decrypt)
    if problem:
        return number, None, problem
    return number, Entry(row.get("id"), clear["prompt"], clear["answer"]), ""


def _simpleqa(number: int, row: dict[str, Any]) -> Row:
    try:
        described = ast.literal_eval(row.get("metadata") or "{}")
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        return number, None, f"its 'metadata' is not a Python literal ({type(exc).__name__})"
    if not isinstance(described, dict):
        return number, None, "its 'metadata' is not a dict"
    kept = {k: str(described[k]) for k in ("topic", "answer_type") if k in described}
    return (
        number,
        Entry(f"{SIMPLEQA}-{number:04d}", row["problem"], row["answer"], None, metadata=kept),
        "",
    )


def _nonempty(name: str, value: str) -> JSONObject:
    return {name: value} if value else {}


def table_rows(path: Path, fmt: str) -> Iterator[Row]:
    """The rows of a CSV or workbook format as entries."""
    rows = _xlsx_rows(path, fmt) if path.suffix.lower() == ".xlsx" else _csv_rows(path, fmt)
    for number, row in rows:
        if fmt == BROWSECOMP:
            yield _browsecomp(number, row)
        elif fmt == BROWSECOMP_ZH:
            yield _browsecomp_zh(number, row)
        elif fmt == XBENCH:
            yield _xbench(number, row)
        else:
            yield _simpleqa(number, row)


def parquet_rows(path: Path) -> Iterator[Row]:
    """HLE's parquet, a batch at a time (its images make it large)."""
    import pyarrow.parquet as pq  # only parquet files need it

    try:
        table = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow's errors for a file that is not parquet vary
        raise ConfigError(f"{path}: not a readable parquet file ({exc})") from exc
    names = table.schema_arrow.names
    missing = [name for name in HLE_FIELDS if name not in names]
    if missing:
        raise ConfigError(
            f"{path}: {FORMAT_KEY}=hle needs the columns {', '.join(HLE_FIELDS)}; missing "
            f"{', '.join(map(repr, missing))} (its columns: {', '.join(map(repr, names))})."
        )
    wanted = [n for n in (*HLE_FIELDS, "image", *HLE_KEPT) if n in names]
    number = 0
    for batch in table.iter_batches(batch_size=64, columns=wanted):
        for record in batch.to_pylist():
            number += 1
            yield number, hle_entry(record), ""


def hle_entry(record: JSONObject) -> Entry:
    kept = {k: record[k] for k in HLE_KEPT if isinstance(record.get(k), str | int | float)}
    return Entry(
        record.get("id"),
        record.get("question"),
        record.get("answer"),
        image=record.get("image"),
        metadata=kept,
    )


def gaia_entry(record: JSONObject) -> Entry:
    level = record.get("Level")
    truth = record.get("Final answer")
    return Entry(
        record.get("task_id"),
        record.get("Question"),
        None if truth == GAIA_HIDDEN else truth,
        record.get("file_name"),
        metadata={} if level is None else {"Level": level},
    )


def jsonl_entry(record: JSONObject, mapping: FieldMapping) -> Entry:
    """A standardized line; its other fields are kept when they are short scalars."""
    named = {
        mapping.task_id_field,
        mapping.task_question_field,
        mapping.ground_truth_field,
        mapping.file_name_field,
    }
    entry = Entry(
        record.get(mapping.task_id_field),
        record.get(mapping.task_question_field),
        record.get(mapping.ground_truth_field),
        record.get(mapping.file_name_field),
    )
    for key, value in record.items():
        if key in named:
            continue
        why = unkept(value)
        if why:
            entry.dropped[str(key)] = why
        else:
            entry.metadata[str(key)] = value
    return entry


def unkept(value: Any) -> str:
    """Why a field's value is not kept as metadata ("" when it is)."""
    if isinstance(value, str):
        return (
            f"longer than {MAX_METADATA_CHARS} characters"
            if len(value) > MAX_METADATA_CHARS
            else ""
        )
    if isinstance(value, float) and not math.isfinite(value):
        return "not a finite number"
    if value is None or isinstance(value, bool | int | float):
        return ""
    return "not a single value (a list or an object)"


def json_list_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """A JSON task file holding a list of records, numbered from 1."""
    yield from enumerate(_json_list(path), start=1)
