"""Secrets never reach the run directory: what is redacted from a config, an argv, a text.

A value is a secret when its key is named like one (``api_key``, ``token``, ``secret``,
``password``, in any case, as the last part of the key); in a text, the value of every
``key=value`` whose key is named so. The redacted value is ``***``.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password)$", re.IGNORECASE)
# ``key=value`` inside a longer text (Hydra's ``override_dirname`` joins overrides with
# commas): the value runs to the next comma or space, or to the bracket, brace or quote
# that closes a list, dict or string it sits in (``args=[--api-key=abc]`` keeps its ``]``,
# so the redacted override still parses).
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<key>[\w.@/+~-]*?(?:api[_-]?key|token|secret|password))=(?P<value>[^,\s\]})'\"]+)",
    re.IGNORECASE,
)
_WORD = re.compile(r"\S+")


def redact(value: Any) -> Any:
    """The config without secrets: values of keys named like api_key/token/secret, and
    the value in any ``key=value`` text whose key is named so (the overrides Hydra
    records, the command line)."""
    if isinstance(value, dict):
        return {
            k: "***" if _SECRET_KEY.search(str(k)) and isinstance(v, str) and v else redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_assignments(value)
    return value


def redact_assignments(text: str) -> str:
    """``text`` with the value of each secret-looking ``key=value`` replaced by ``***``.

    A whole override (``+tools.search.env.SERPER_API_KEY='a b'``) loses everything after
    its ``=``, quotes and spaces included; in a longer text a value ends at a comma or a
    space.
    """
    key, equals, value = text.partition("=")
    if equals and value and _SECRET_KEY.search(key.split("@", 1)[0].strip()):
        return f"{key}=***"
    return _SECRET_ASSIGNMENT.sub(lambda m: f"{m['key']}=***", text)


def redact_exported(value: Any) -> Any:
    """What leaves deepledger in an export (results rows, training samples, MiroThinker's
    logs): values of keys named like secrets, as :func:`redact`; in a text, each word's
    secret-looking ``key=value`` (:func:`redact` takes a whole text for one override,
    which in a message would take the rest of the message with it); a tool call's JSON
    ``arguments`` redacted as the object they hold, so they stay valid JSON."""
    if isinstance(value, dict):
        return {k: _redact_exported_item(str(k), v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_exported(v) for v in value]
    if isinstance(value, str):
        return _WORD.sub(lambda word: redact_assignments(word.group()), value)
    return value


def _redact_exported_item(key: str, value: Any) -> Any:
    if _SECRET_KEY.search(key) and isinstance(value, str) and value:
        return "***"
    if key != "arguments" or not isinstance(value, str):
        return redact_exported(value)
    try:
        parsed = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return redact_exported(value)
    clean = redact_exported(parsed)
    return value if clean == parsed else json.dumps(clean, ensure_ascii=False)
