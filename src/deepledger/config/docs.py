"""The key tables of docs/configuration.md and the keys ``--help`` lists, generated from
the descriptions the schema's fields carry (``setting()`` in ``schema.py``).

After changing a key, rewrite the page's tables (the prose around them is the page's own):

    python -m deepledger.config.docs --write

``--check`` exits 1 when the page differs from what the schema gives, naming the first
difference; ``tests/test_docs.py`` runs the same check.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
import textwrap
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import MISSING

from deepledger.config.schema import COMMON, DOC, ENTRIES, ROWS, Config

# The page in a source checkout: src/deepledger/config/docs.py -> the repository's root.
PAGE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
# A marked table: this comment line, a blank line, then the table. The comment names
# the key prefixes whose keys the table holds; a key goes to the longest prefix of it.
MARKER = re.compile(r"^<!-- keys: (?P<prefixes>[^>]*?) -->$")
HEADER = ("| key | default | meaning |", "| --- | --- | --- |")
REQUIRED = "required"  # the default cell of a key every preset must set (MISSING)
HELP_WIDTH = 100


@dataclass(frozen=True)
class KeyDoc:
    """One key as the page documents it."""

    key: str
    default: str  # the default cell: `value`, or "required"
    meaning: str
    common: bool = False

    def row(self) -> str:
        return f"| `{self.key}` | {self.default} | {self.meaning} |"


def key_docs(node: type = Config, prefix: str = "") -> list[KeyDoc]:
    """Every key of the schema in field order, a group's keys in its place, a mapping's
    documented entries after it. A field without a description is an error: every key
    must say what it means."""
    docs: list[KeyDoc] = []
    hints = typing.get_type_hints(node)
    for f in dataclasses.fields(node):
        key = f"{prefix}{f.name}"
        kind = hints[f.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            docs += key_docs(kind, key + ".")
            continue
        if DOC not in f.metadata:
            raise TypeError(
                f"configuration key {key} has no description: declare "
                f"{node.__name__}.{f.name} with setting(..., doc=...)"
            )
        docs += _field_docs(key, f)
    return docs


def _field_docs(key: str, f: dataclasses.Field[typing.Any]) -> list[KeyDoc]:
    """The field's own row (unless its entries document it) and its entries' rows."""
    meta = f.metadata
    docs = []
    if ENTRIES in meta:
        placeholder, schema = meta[ENTRIES]
        docs += key_docs(schema, f"{key}.{placeholder}.")
    else:
        docs.append(KeyDoc(key, default_cell(_default(f)), meta[DOC], bool(meta[COMMON])))
    for suffix, (default, meaning) in meta.get(ROWS, {}).items():
        docs.append(KeyDoc(f"{key}.{suffix}", default_cell(default), meaning))
    return docs


def _default(f: dataclasses.Field[typing.Any]) -> object:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def default_cell(value: object) -> str:
    """A default as the page writes it: YAML, as on the command line."""
    if value == MISSING:
        return REQUIRED
    if value is None:
        written = "null"
    elif isinstance(value, bool):
        written = "true" if value else "false"
    elif value == "":
        written = '""'
    else:
        written = str(value)
    return f"`{written}`"


def _table(docs: Sequence[KeyDoc]) -> list[str]:
    return [*HEADER, *(doc.row() for doc in docs)]


def _owner(key: str, prefixes: Sequence[str]) -> str | None:
    """The longest of ``prefixes`` that ``key`` is or starts with."""
    owning = [p for p in prefixes if key == p or key.startswith(p + ".")]
    return max(owning, key=len) if owning else None


def generated(text: str, docs: Sequence[KeyDoc] | None = None) -> str:
    """``text`` (the page) with each marked table rewritten from the schema. A key no
    marked table takes is an error naming it: the page must say where a new group goes."""
    docs = key_docs() if docs is None else docs
    lines = text.splitlines()
    markers = [
        (i, m["prefixes"].split()) for i, line in enumerate(lines) if (m := MARKER.match(line))
    ]
    prefixes = [p for _, ps in markers for p in ps]
    by_prefix: dict[str, list[KeyDoc]] = {p: [] for p in prefixes}
    for doc in docs:
        owner = _owner(doc.key, prefixes)
        if owner is None:
            raise ValueError(
                f"{doc.key} belongs to no table of the page: add its prefix to a "
                "'<!-- keys: ... -->' line, or add a section with one"
            )
        by_prefix[owner].append(doc)
    out: list[str] = []
    done = 0
    for at, table_prefixes in markers:
        # A blank line after the comment: else Markdown reads the table as part of it.
        out += [*lines[done : at + 1], ""]
        end = at + 1
        while end < len(lines) and not lines[end].strip():
            end += 1
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        out += _table([d for d in docs if _owner(d.key, prefixes) in table_prefixes])
        done = end
    out += lines[done:]
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def first_difference(page: str, wanted: str) -> str | None:
    """The first changed lines between the page and what the schema gives, or None."""
    diff = list(
        difflib.unified_diff(
            page.splitlines(), wanted.splitlines(), "page", "schema", n=0, lineterm=""
        )
    )
    return "\n".join(diff[:12]) if diff else None


# -- --help ------------------------------------------------------------------------------


def plain(meaning: str) -> str:
    """A key's meaning as plain text for a terminal: links and backticks dropped."""
    return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", meaning).replace("`", "")


def help_lines(docs: Sequence[KeyDoc] | None = None, width: int = HELP_WIDTH) -> Iterator[str]:
    """The common keys, one line each: ``key=default  meaning``."""
    docs = key_docs() if docs is None else docs
    common = [d for d in docs if d.common]
    for doc in common:
        head = f"  {doc.key}={doc.default.strip('`')}"
        room = max(width - len(head) - 2, 20)
        yield f"{head}  {textwrap.shorten(plain(doc.meaning), room, placeholder=' ...')}"


def key_help() -> list[str]:
    """The common keys as ``deepledger bench|run --help`` lists them, under a heading."""
    return [
        "Common keys (KEY=VALUE, shown with the schema's default; a preset may set others):",
        *help_lines(),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """``--write`` rewrites the page's tables; ``--check`` (the default) compares."""
    args = list(sys.argv[1:] if argv is None else argv)
    write = "--write" in args
    paths = [a for a in args if not a.startswith("--")]
    page = Path(paths[0]) if paths else PAGE
    text = page.read_text(encoding="utf-8")
    wanted = generated(text)
    if write:
        if wanted != text:
            page.write_text(wanted, encoding="utf-8")
        print(f"{page}: {'rewritten' if wanted != text else 'up to date'}")
        return 0
    if (difference := first_difference(text, wanted)) is not None:
        print(f"{page} differs from the schema (python -m deepledger.config.docs --write):")
        print(difference)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
