"""The command line's overrides as deepledger reads them: unknown keys and presets
named with the closest real one, MiroThinker's spellings carried over."""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from pathlib import Path

from deepledger.config.schema import Config

# -- unknown keys on the command line -------------------------------------------------
# Hydra rejects them too, but its message suggests `+key=value`, which would fail again
# against the schema. We name the key and the closest real one instead.

CONFIG_GROUPS = ("llm", "agent", "benchmark", "pricing", "tools")


def schema_keys(node: type = Config, prefix: str = "") -> tuple[set[str], set[str]]:
    """(every leaf or node key, the keys whose children are free-form dict entries)."""
    keys: set[str] = set()
    open_prefixes: set[str] = set()
    hints = typing.get_type_hints(node)
    for f in dataclasses.fields(node):
        key = f"{prefix}{f.name}"
        keys.add(key)
        kind = hints[f.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            sub_keys, sub_open = schema_keys(kind, key + ".")
            keys |= sub_keys
            open_prefixes |= sub_open
        elif typing.get_origin(kind) is dict:
            open_prefixes.add(key)
    return keys, open_prefixes


def closest_key(key: str, keys: set[str], cutoff: float = 0.6) -> str | None:
    """The most similar key, or None below ``cutoff``; on a tie the first alphabetically
    (difflib's own tie-break takes the last, so "llm.modle" suggested llm.model_path)."""
    best, best_score = None, cutoff
    for candidate in sorted(keys):
        score = difflib.SequenceMatcher(None, key, candidate).ratio()
        if score > best_score or (best is None and score >= cutoff):
            best, best_score = candidate, score
    return best


def unknown_override_keys(overrides: list[str]) -> list[str]:
    """Each ``key=value`` override whose key the schema does not have, with a suggestion.

    Entries under a free-form dict (``llm.extra_body``, ``pricing``) are Hydra's to
    judge: adding one needs ``+key=value`` there, and Hydra says so.
    """
    keys, open_prefixes = schema_keys()
    problems = []
    for override in overrides:
        key = override.split("=", 1)[0].strip()
        if "=" not in override or key.startswith(("+", "~", "hydra")) or key in CONFIG_GROUPS:
            continue
        if key in keys or any(key.startswith(p + ".") for p in open_prefixes):
            continue
        close = closest_key(key, keys)
        hint = f" (did you mean {close}?)" if close else ""
        problems.append(f"{key}{hint}")
    return problems


def unknown_presets(overrides: list[str], conf_dir: Path) -> list[str]:
    """Each ``group=name`` override (``llm``, ``agent``, ``benchmark``, ...; a sweep's
    ``a,b`` too) naming no file of ``conf/<group>/``, with the closest preset there.

    Hydra's own message lists every option of the group; a MiroThinker command line
    naming a preset deepledger does not carry should name the one to use instead.
    """
    problems = []
    for override in overrides:
        group, _, value = override.partition("=")
        if group not in CONFIG_GROUPS or not re.fullmatch(r"[\w.,-]+", value):
            continue
        known = {p.stem for p in (conf_dir / group).glob("*.yaml")}
        for name in value.split(","):
            if name and name != "null" and name not in known:  # null: Hydra's own
                close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.0)
                hint = f"the closest is {group}={close[0]}" if close else "there is none"
                problems.append(
                    f"{group}={name} is not a preset ({hint}; all of them: "
                    f"{', '.join(sorted(known))})"
                )
    return problems


def resume_override(override: str) -> str:
    """``+resume.allow_config_change=...`` as earlier releases documented it (``resume``
    was a mapping without keys, so Hydra wanted the ``+``): the same as without it, now
    that its keys have defaults and Hydra refuses to add a key that exists."""
    return override[1:] if override.startswith("+resume.") else override


# MiroThinker's llm presets spell the server's address per provider; its command lines
# set them so (llm.openai_base_url=$BASE_URL in its debug script). Here it is base_url.
BASE_URL_ALIASES = ("llm.openai_base_url", "llm.anthropic_base_url")


def carried_override(override: str) -> str:
    """An override as deepledger reads it: :func:`resume_override`, and MiroThinker's
    ``llm.openai_base_url=``/``llm.anthropic_base_url=`` as ``llm.base_url=``."""
    key, equals, value = override.partition("=")
    if equals and key.strip() in BASE_URL_ALIASES:
        return f"llm.base_url={value}"
    return resume_override(override)
