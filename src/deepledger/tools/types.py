"""The tool types every part of ``tools/`` shares.

A tool's description, an in-process tool, a refusal, and the checks a call's arguments
pass before any tool runs.

They live apart from the sessions and the pool so that in-process tools (the archive,
memory, the scraper) and the protocols need nothing that starts a server.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from deepledger.messages import JSONObject, ToolResult, sorted_json


@dataclass(frozen=True)
class ToolInfo:
    server: str
    name: str
    description: str
    input_schema: JSONObject = field(default_factory=dict)  # the server's JSON schema
    server_description: str = ""

    @property
    def qualified_name(self) -> str:
        return f"{self.server}.{self.name}"


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters with a marker the model can see."""
    if limit <= 0 or len(text) <= limit:
        return text
    return f"{text[:limit]}\n...[truncated: {len(text) - limit} more characters]"


def error_result(text: str) -> ToolResult:
    """A result the model reads as an error (its call id is filled in by the caller)."""
    return ToolResult("", text, is_error=True)


class ToolRefusal(Exception):
    """An in-process tool turning down a call (a bad name, a missing note): the model
    sees the message as an error result; nothing is logged as a failure."""


@dataclass(frozen=True)
class LocalTool:
    """A tool run in-process (a sub-agent, memory, the scraper), offered to the model
    like any MCP tool. Its results are held to the same length limits as a server's."""

    info: ToolInfo
    run: Callable[[JSONObject], Awaitable[str]]  # the model's arguments, as sent
    max_result_chars: int = 20_000
    preview_chars: int = 2_000


def encodable(value: Any) -> Any:
    """``value`` with lone surrogates (which models do emit) replaced, so it can be sent
    as UTF-8: one bad character must not break a session other tasks share."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {encodable(k): encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [encodable(v) for v in value]
    return value


@functools.lru_cache(maxsize=1024)
def _cached_validator(schema_json: bytes) -> Any:
    import jsonschema  # on the first call, not on the way to the first request

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _validator(info: ToolInfo) -> Any:
    """Building a validator checks the schema itself; do it once per schema, not per call."""
    return _cached_validator(sorted_json(info.input_schema))


def schema_problem(info: ToolInfo, arguments: JSONObject) -> str | None:
    """Why ``arguments`` fail the tool's JSON schema, or None. Servers check too; checking
    here gives the model one clear message whatever the server would have said."""
    if not info.input_schema:
        return None
    import jsonschema

    try:
        error = jsonschema.exceptions.best_match(_validator(info).iter_errors(arguments))
        if error is not None:
            raise error
    except jsonschema.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path)
        return f"{path + ': ' if path else ''}{exc.message}"
    except Exception:  # a broken schema (bad $ref, invalid keyword) is not the model's fault
        return None  # let the server judge the arguments
    return None
