"""The JSON schema of the records, for readers outside Python (the report page).

``report/assets/records.schema.json`` holds it; a test checks that the file is what
this module generates and that every field ``report.js`` reads exists in it. After
changing a record, regenerate it::

    .venv/bin/python -m deepledger.records.schema

One document, one ``$defs``: ``journal_event`` (the union of journal lines, told apart
by ``event``), the task, retry and attempt records, and the run summary.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

from deepledger.records.base import SCHEMA_VERSION
from deepledger.records.events import JournalEvent
from deepledger.records.results import AttemptFinished, RetryFinished, SummaryRecord, TaskRecord

if TYPE_CHECKING:
    from typing_extensions import TypeForm  # pydantic's dependency; for the annotation only

# Where the report page finds it (a path only: records import nothing above them).
ASSET = Path(__file__).resolve().parents[1] / "report" / "assets" / "records.schema.json"

# Each top-level record, by the name the schema gives it.
TOP_LEVEL: dict[str, TypeForm[Any]] = {  # classes, and the union of the journal's events
    "journal_event": JournalEvent,
    "task_record": TaskRecord,
    "retry_finished": RetryFinished,
    "attempt_finished": AttemptFinished,
    "summary": SummaryRecord,
}


def records_schema() -> JsonSchemaValue:
    """The schema document: ``properties`` names each top-level record by a ``$ref``
    into ``$defs``, which every record shares."""
    inputs = [
        (name, "validation", TypeAdapter(kind).core_schema) for name, kind in TOP_LEVEL.items()
    ]
    refs, definitions = GenerateJsonSchema().generate_definitions(inputs)  # type: ignore[arg-type]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "deepledger records",
        "description": f"Records of a run directory, schema version {SCHEMA_VERSION}.",
        "schema_version": SCHEMA_VERSION,
        "properties": {name: refs[(name, "validation")] for name in TOP_LEVEL},
        "$defs": definitions,
    }


def records_schema_text() -> str:
    return json.dumps(records_schema(), indent=1, sort_keys=True) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the records' JSON schema.")
    parser.add_argument("--out", type=Path, default=ASSET)
    target = parser.parse_args().out
    target.write_text(records_schema_text(), encoding="utf-8")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
