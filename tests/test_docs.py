"""The documentation site stays true: it builds (strict: a broken link fails), it
fetches nothing, and docs/configuration.md documents every key of the schemas in
``deepledger.config`` with its default, and no key they do not have."""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import subprocess
import sys
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest

from deepledger import config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"
# A documented key: a table row whose first cell is one key in backticks.
ROW = re.compile(r"^\|\s*`(?P<key>[a-z_][\w.<>-]*)`\s*\|\s*(?P<default>[^|]*?)\s*\|")
KEY_TABLE = re.compile(r"^\|\s*key\s*\|\s*default\s*\|\s*meaning\s*\|")
PLACEHOLDER = re.compile(r"^<\w+>$")
REQUIRED = "required"  # the default cell of a key every preset must set (MISSING)
# Free-form mappings whose entries have a schema of their own: each entry's keys are
# documented as ``<prefix>.<placeholder>.<key>``. ``tools`` is typed loosely in Config
# (the command line must be able to add a server) and checked against ToolServerConfig.
ENTRY_SCHEMAS: dict[str, type] = {
    "tools": config.ToolServerConfig,
    "pricing": config.PriceConfig,
    "agent.sub_agents": config.AgentRoleConfig,
}
ENTRIES_DOCUMENTED_ELSEWHERE = {"agent.sub_agents"}  # as agent.main_agent.*
NO_DEFAULT = object()


@dataclass(frozen=True)
class Documented:
    key: str
    default: str  # the default cell as written
    line: int


def documented_keys(text: str) -> dict[str, Documented]:
    """The rows of the page's key tables (those headed ``| key | default | meaning |``)."""
    found: dict[str, Documented] = {}
    in_key_table = False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            in_key_table = False
        elif KEY_TABLE.match(line):
            in_key_table = True
        row = ROW.match(line) if in_key_table else None
        if row:
            assert row["key"] not in found, f"line {number}: {row['key']} documented twice"
            found[row["key"]] = Documented(row["key"], row["default"], number)
    return found


def _default(f: dataclasses.Field[typing.Any]) -> object:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return NO_DEFAULT
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value):
        return NO_DEFAULT  # a group: its keys are documented one by one
    return value


def schema_defaults(node: type = config.Config, prefix: str = "") -> dict[str, object]:
    """Every key of the schemas with its default (``"???"``: required), walking into the
    entries of :data:`ENTRY_SCHEMAS` as ``<prefix>.<name>.<key>``."""
    defaults: dict[str, object] = {}
    for f in dataclasses.fields(node):
        key = f"{prefix}{f.name}"
        kind = typing.get_type_hints(node)[f.name]
        if dataclasses.is_dataclass(kind):
            defaults |= schema_defaults(kind, key + ".")  # type: ignore[arg-type]
            continue
        defaults[key] = _default(f)
        if key in ENTRY_SCHEMAS and key not in ENTRIES_DOCUMENTED_ELSEWHERE:
            defaults |= schema_defaults(ENTRY_SCHEMAS[key], key + ".<name>.")
    return defaults


def _same_key(documented: str, schema: str) -> bool:
    a, b = documented.split("."), schema.split(".")
    return len(a) == len(b) and all(
        x == y or (PLACEHOLDER.match(x) and PLACEHOLDER.match(y)) for x, y in zip(a, b, strict=True)
    )


def _in_schema(key: str, keys: set[str]) -> bool:
    """``key`` is a key of the schemas, or of an entry of a free-form mapping."""
    if any(_same_key(key, known) for known in keys):
        return True
    for prefix, entry in ENTRY_SCHEMAS.items():
        rest = key.removeprefix(prefix + ".").split(".")
        if key.startswith(prefix + ".") and len(rest) == 2 and PLACEHOLDER.match(rest[0]):
            return rest[1] in {f.name for f in dataclasses.fields(entry)}
    # An entry of a mapping without a schema (resume.*, tools.<setting>): the code
    # must read it by that name.
    _, open_prefixes = config.schema_keys()
    prefix, _, name = key.rpartition(".")
    return prefix in open_prefixes and _read_by_the_code(name)


def _read_by_the_code(name: str) -> bool:
    quoted = (f'"{name}"', f"'{name}'", f".{name}")
    package = Path(config.__file__).parent
    return any(
        any(q in path.read_text(encoding="utf-8") for q in quoted) for path in package.rglob("*.py")
    )


def _as_written(value: object) -> str:
    """A default as the page writes it (YAML, as on the command line)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    return str(value)


def _same_default(written: str, default: object) -> bool:
    if isinstance(default, float) and not isinstance(default, bool):
        try:
            return float(written) == default  # 600, 600.0 and 6e2 are one default
        except ValueError:
            return False
    return written == _as_written(default)


def _default_problem(doc: Documented, default: object) -> str | None:
    if default is NO_DEFAULT:
        return None
    if default == "???":  # omegaconf.MISSING: every preset sets it
        return None if doc.default == REQUIRED else f"{doc.key}: default cell should be required"
    written = re.match(r"`([^`]*)`", doc.default)
    if written is None:
        return f"{doc.key}: default cell {doc.default!r} should be `{_as_written(default)}`"
    if _same_default(written[1], default):
        return None
    return f"{doc.key}: default is {_as_written(default)}, documented as {written[1]}"


def coverage_problems(text: str) -> list[str]:
    """What a configuration page gets wrong: schema keys it leaves out, keys it documents
    that the schemas do not have, defaults that differ."""
    documented = documented_keys(text)
    defaults = schema_defaults()
    keys, open_prefixes = config.schema_keys()
    problems = []
    for key, default in sorted(defaults.items()):
        match = next((d for d in documented.values() if _same_key(d.key, key)), None)
        entries = [d for d in documented if d.startswith(key + ".")]
        if match is None and key in open_prefixes and entries:  # a mapping: by its entries
            continue
        if match is None:
            problems.append(f"not documented: {key}")
            continue
        problem = _default_problem(match, default)
        if problem:
            problems.append(problem)
    schema = keys | set(defaults)
    problems += [
        f"line {d.line}: {d.key} is not a configuration key"
        for d in documented.values()
        if not _in_schema(d.key, schema)
    ]
    return problems


def test_the_configuration_page_documents_every_key_of_the_schemas_and_no_other() -> None:
    problems = coverage_problems(CONFIGURATION.read_text(encoding="utf-8"))
    assert not problems, "docs/configuration.md:\n  " + "\n  ".join(problems)


def test_a_missing_key_an_unknown_key_and_a_stale_default_are_caught() -> None:
    text = CONFIGURATION.read_text(encoding="utf-8")
    without = "\n".join(line for line in text.splitlines() if "`llm.max_tokens`" not in line)
    assert coverage_problems(without) == ["not documented: llm.max_tokens"]
    row = "| `llm.max_tokens` | `4096` |"
    extra = text.replace(row, "| `llm.max_tokenz` | `1` | a typo |\n" + row)
    line = extra.splitlines().index("| `llm.max_tokenz` | `1` | a typo |") + 1
    assert coverage_problems(extra) == [f"line {line}: llm.max_tokenz is not a configuration key"]
    stale = text.replace(row, "| `llm.max_tokens` | `2048` |")
    assert coverage_problems(stale) == ["llm.max_tokens: default is 4096, documented as 2048"]
    entry = text.replace(row, "| `tools.<name>.colour` | `1` | no such key |\n" + row)
    assert len(coverage_problems(entry)) == 1, coverage_problems(entry)


def mkdocs_build(project: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``project`` into ``out``: a broken link or anchor, or a
    page left out of the navigation, is a warning, and strict makes it fail."""
    # Not -q: mkdocs counts the warnings strict fails on in the log it would silence.
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # the theme's notice, not ours
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = mkdocs_build(ROOT, out)
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def test_the_site_builds_strictly_with_a_page_for_every_document(site: Path) -> None:
    pages = sorted(p.stem for p in DOCS.glob("*.md"))
    for page in pages:
        built = site / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.is_file(), f"docs/{page}.md has no page in the site"


def test_the_site_fetches_nothing(site: Path) -> None:
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html, page
        for src in re.findall(r"""<(?:script|link)[^>]+(?:src|href)=["']([^"']+)""", html):
            assert not src.startswith(("http:", "https:", "//")), (page, src)


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the page](no-such-page.md).\n")
    (tmp_path / "mkdocs.yml").write_text(
        (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:")[0] + "\n"
    )
    built = mkdocs_build(tmp_path, tmp_path / "site")
    assert built.returncode != 0
    assert "no-such-page.md" in built.stdout + built.stderr


README_LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#(?P<anchor>[^)\s]*))?\)")


def _anchors(page: Path) -> set[str]:
    """The anchors mkdocs gives the headings of ``page`` (Python-Markdown's toc slugs)."""
    from markdown.extensions.toc import slugify  # type: ignore[import-untyped]

    headings = re.findall(r"^#+\s+(.+?)\s*$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {slugify(heading, "-") for heading in headings}


def test_the_readmes_links_into_the_repository_exist() -> None:
    """mkdocs checks the links between pages; the README is not one of them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = list(README_LINK.finditer(readme))
    assert any(link["target"].startswith("docs/") for link in links), readme
    for link in links:
        target, anchor = link["target"], link["anchor"]
        if target.startswith(("http:", "https:", "mailto:")):
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which is not there"
        if anchor:
            assert anchor in _anchors(ROOT / target), f"README.md links to {target}#{anchor}"
