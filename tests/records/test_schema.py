"""The records' JSON schema: the committed file is the generated one, and the report page
reads no event field the schema does not have."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deepledger.messages import ToolResult
from deepledger.records.events import ToolResults
from deepledger.records.schema import ASSET, records_schema, records_schema_text
from deepledger.report.collect import compact_event

REPORT_JS = Path(ASSET).parent / "report.js"
SCHEMA = records_schema()
DEFS = SCHEMA["$defs"]
EVENTS = {
    name: ref.rsplit("/", 1)[-1]
    for name, ref in SCHEMA["properties"]["journal_event"]["discriminator"]["mapping"].items()
}
# Fields the report's collector adds to an event for the page (report/collect.py).
ADDED_BY_THE_COLLECTOR = {("ToolResultRecord", "chars")}


def test_the_committed_schema_is_the_generated_one():
    assert ASSET.read_text(encoding="utf-8") == records_schema_text(), (
        "records.schema.json is stale: run `.venv/bin/python -m deepledger.records.schema`"
    )


def _resolve(schema: dict) -> dict:
    """The object schema behind a field: through ``$ref``, a nullable ``anyOf`` and an
    array's ``items``."""
    while True:
        if "$ref" in schema:
            schema = DEFS[schema["$ref"].rsplit("/", 1)[-1]]
        elif "anyOf" in schema:
            (schema,) = [s for s in schema["anyOf"] if s.get("type") != "null"]
        elif schema.get("type") == "array":
            schema = schema["items"]
        else:
            return schema


def _fields(schema: dict) -> set[str]:
    found = set(schema.get("properties", {}))
    assert found, f"not an object schema: {schema}"
    title = schema.get("title", "")
    return found | {field for owner, field in ADDED_BY_THE_COLLECTOR if owner == title}


def _function(source: str, name: str) -> str:
    """The body of ``function name(...) { ... }`` up to its closing brace at column 0."""
    start = source.index(f"function {name}(")
    return source[start : source.index("\n}\n", start)]


def _renderers(source: str) -> dict[str, str]:
    """``RENDER``'s entries: event name → the source of its renderer."""
    start = source.index("const RENDER = {")
    block = source[start : source.index("\n};\n", start)]
    heads = list(re.finditer(r"^  (\w+): \(e\) =>", block, re.M))
    assert len(heads) > 20, "the RENDER table was not found where it was"
    ends = [h.start() for h in heads[1:]] + [len(block)]
    return {h[1]: block[h.end() : end] for h, end in zip(heads, ends, strict=True)}


def _reads(code: str, variable: str) -> set[str]:
    return set(re.findall(rf"(?<![\w.]){variable}\.(\w+)", code))


def _problems(event: str, code: str, usage_fields: set[str], call_fields: set[str]) -> list[str]:
    """The fields a renderer reads that its event's schema lacks."""
    schema = DEFS[EVENTS[event]]
    top = _fields(schema)
    problems = [f"{event}.{f}" for f in _reads(code, "e") - top]
    # Names bound to a field's value: `const m = e.message || {}`, `(e.results || []).map((r`,
    # `const c = (e.calls || [])[i]`; and `(e.message || {}).content`.
    bindings = re.findall(r"const (\w+) = \(?e\.(\w+) \|\| [{\[]", code)
    bindings += [(v, f) for f, v in re.findall(r"\(e\.(\w+) \|\| \[\]\)\.map\(\((\w+)", code)]
    for variable, field in bindings:
        if field not in top:
            continue  # reported above
        inner = _fields(_resolve(schema["properties"][field]))
        problems += [f"{event}.{field}[].{f}" for f in _reads(code, variable) - inner]
        if f"argsText({variable})" in code:
            problems += [f"{event}.{field}[].{f} (argsText)" for f in call_fields - inner]
    for field, name in re.findall(r"\(e\.(\w+) \|\| \{\}\)\.(\w+)", code):
        if field in top and name not in _fields(_resolve(schema["properties"][field])):
            problems.append(f"{event}.{field}.{name}")
    for field in re.findall(r"usageText\(e\.(\w+)\)", code):
        inner = _fields(_resolve(schema["properties"][field]))
        problems += [f"{event}.{field}.{f} (usageText)" for f in usage_fields - inner]
    return problems


def test_every_event_field_the_report_page_reads_is_in_the_schema():
    source = REPORT_JS.read_text(encoding="utf-8")
    renderers = _renderers(source)
    unknown = set(renderers) - set(EVENTS)
    assert not unknown, f"report.js renders events no record class defines: {unknown}"
    usage_fields = _reads(_function(source, "usageText"), "u")
    call_fields = _reads(source[source.index("const argsText") :].split("\n", 1)[0], "call")
    assert {"input_tokens", "cache_read_tokens"} <= usage_fields and call_fields
    problems = []
    for event, code in renderers.items():
        problems += _problems(event, code, usage_fields, call_fields)
    carried = _function(source, "carriedInto")
    (shown,) = re.findall(r'e\.event === "(\w+)"', carried)
    problems += [f"{shown}.{f}" for f in _reads(carried, "e") - _fields(DEFS[EVENTS[shown]])]
    assert not problems, f"report.js reads fields the records do not have: {problems}"


@pytest.mark.parametrize(
    ("event", "code", "problem"),
    [
        ("llm_call", "ev(`${e.turns_left}`)", "llm_call.turns_left"),
        ("closing_call", "ev(`${(e.message || {}).text}`)", "closing_call.message.text"),
        ("assistant", "const m = e.message || {}; m.txt", "assistant.message[].txt"),
        ("tool_results", "(e.results || []).map((r, i) => r.size)", "tool_results.results[].size"),
        ("tool_results", "const c = (e.calls || [])[i]; argsText(c)", "tool_results.calls[].raw"),
        ("llm_call", "usageText(e.usage)", "llm_call.usage.cache_tokens"),
    ],
)
def test_the_check_finds_a_field_that_is_not_there(event, code, problem):
    """The parse is not vacuous: a misspelt field in a renderer is reported."""
    problems = _problems(event, code, {"input_tokens", "cache_tokens"}, {"name", "raw"})
    assert any(p.startswith(problem) for p in problems), problems
    assert not _problems(event, "ev(`${e.turn}`)" if event != "closing_call" else "", set(), set())


def test_the_field_the_collector_adds_is_added():
    event = ToolResults(turn=1, calls=[], results=[ToolResult("c1", "text")])
    (result,) = compact_event(event)["results"]
    assert result["chars"] == 4
    assert json.loads(json.dumps(result))  # the page gets plain JSON
