"""The documentation site stays true: it builds (strict: a broken link fails), it
fetches nothing, and docs/configuration.md documents every key of the schemas in
``deepledger.config`` with its default, and no key they do not have: its key tables are
the ones ``python -m deepledger.config.docs --write`` generates from the schema's field
descriptions.

The pages name only modules that exist, and the map of the code is the tree's: every
module path README.md and docs/*.md name is there; docs/architecture.md's map is the one
``scripts/code_map.py`` generates from ``src/deepledger`` (every module and package, with
the floors ``tests/test_layers.py`` enforces, whose table architecture.md copies)."""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib.util
import os
import re
import subprocess
import sys
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest

from deepledger import config
from deepledger.config import docs as config_docs

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
    package = Path(config.__file__).parents[1]  # deepledger/, not only deepledger/config/
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


def test_the_configuration_pages_tables_are_the_ones_the_schema_gives() -> None:
    text = CONFIGURATION.read_text(encoding="utf-8")
    difference = config_docs.first_difference(text, config_docs.generated(text))
    assert difference is None, (
        "docs/configuration.md's key tables differ from the schema's descriptions; "
        f"run: python -m deepledger.config.docs --write\n{difference}"
    )
    assert config_docs.main(["--check", str(CONFIGURATION)]) == 0


def test_a_key_without_a_description_or_without_a_table_is_refused() -> None:
    @dataclass
    class Undocumented:
        documented: int = config.setting(1, doc="said")
        silent: int = 2

    with pytest.raises(TypeError, match=r"silent has no description"):
        config_docs.key_docs(Undocumented)
    text = CONFIGURATION.read_text(encoding="utf-8")
    without_sandbox = text.replace("<!-- keys: sandbox -->", "")
    with pytest.raises(ValueError, match=r"sandbox.memory_mb belongs to no table"):
        config_docs.generated(without_sandbox)


def test_a_new_key_and_a_changed_description_reach_the_page() -> None:
    text = CONFIGURATION.read_text(encoding="utf-8")
    docs = config_docs.key_docs()
    new = config_docs.KeyDoc("sandbox.cpus", "`null`", "CPUs of one sandbox; null: all")
    changed = [
        dataclasses.replace(d, meaning="the reply budget") if d.key == "llm.max_tokens" else d
        for d in docs
    ]
    page = config_docs.generated(text, [*changed, new])
    assert "| `llm.max_tokens` | `4096` | the reply budget |" in page
    row = "| `sandbox.cpus` | `null` | CPUs of one sandbox; null: all |"
    line = page.splitlines().index(row) + 1
    assert coverage_problems(page) == [f"line {line}: sandbox.cpus is not a configuration key"]
    assert config_docs.generated(page) == text  # the schema's own tables come back


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


# -- the pages name only modules that exist, and the maps of the code are whole -----------

SOURCE = ROOT / "src" / "deepledger"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
# A module path as the pages write it: from the repository's root
# (``src/deepledger/llm/base.py``, ``tests/test_docs.py``) or from the package's
# (``llm/base.py``). A bare ``base.py`` is a name, not a path: the maps below check those.
MODULE_PATH = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)+[A-Za-z_]\w*\.py)\b")
# Paths of other projects the pages name: MiroThinker's script, beside our command line.
NOT_OURS = {"benchmarks/common_benchmark.py"}


def stale_module_paths(text: str, source: Path = SOURCE, root: Path = ROOT) -> list[str]:
    """The module paths ``text`` names that are neither under the repository's root nor
    under the package."""
    return [
        f"line {text.count(chr(10), 0, found.start()) + 1}: {found[1]}"
        for found in MODULE_PATH.finditer(text)
        if found[1] not in NOT_OURS
        and not (root / found[1]).is_file()
        and not (source / found[1]).is_file()
    ]


def test_every_module_path_the_pages_name_exists() -> None:
    problems = {
        page.relative_to(ROOT).as_posix(): found
        for page in PAGES
        if (found := stale_module_paths(page.read_text(encoding="utf-8")))
    }
    assert problems == {}, "pages name modules that are not there (moved or renamed?)"


def _code_map_script() -> typing.Any:
    spec = importlib.util.spec_from_file_location("code_map", ROOT / "scripts" / "code_map.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


code_map = _code_map_script()


def layering_floors() -> dict[str, int]:
    """The floor of each top-level module, as tests/test_layers.py enforces them (its
    ``FLOORS`` table, read from the source: the docs copy the enforced table)."""
    tree = ast.parse((ROOT / "tests" / "test_layers.py").read_text(encoding="utf-8"))
    table = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "FLOORS" for t in node.targets)
    )
    floors: dict[int, tuple[str, ...]] = ast.literal_eval(table)
    return {part or "__init__": floor for floor, parts in floors.items() for part in parts}


ARCHITECTURE = DOCS / "architecture.md"
FLOOR_ROW = re.compile(r"^\|\s*(?P<floor>\d+)\s*\|(?P<parts>[^|]*)\|")


def floor_table(text: str) -> dict[str, int]:
    """The floors architecture.md's layering table gives (``deepledger/__init__`` as
    ``__init__``)."""
    table: dict[str, int] = {}
    for line in text.splitlines():
        if row := FLOOR_ROW.match(line):
            for part in re.findall(r"`([^`]+)`", row["parts"]):
                table[part.removeprefix("deepledger/")] = int(row["floor"])
    return table


def test_the_architecture_page_draws_the_floors_the_layering_test_enforces() -> None:
    assert floor_table(ARCHITECTURE.read_text(encoding="utf-8")) == layering_floors()


def test_the_architecture_map_is_the_one_generated_from_the_tree() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert text == code_map.replaced(text, code_map.render()), (
        "docs/architecture.md's map is stale: run .venv/bin/python scripts/code_map.py --write"
    )


def test_the_readme_points_to_the_map_instead_of_drawing_one() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/architecture.md#map-of-the-code)" in readme
    assert "src/deepledger/ " not in readme  # no second map to keep true


def test_a_new_module_a_new_docstring_and_a_new_floor_change_the_map(tmp_path: Path) -> None:
    source = tmp_path / "deepledger"
    for path in SOURCE.rglob("*.py"):
        copy = source / path.relative_to(SOURCE)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    layers = tmp_path / "test_layers.py"
    layers.write_text(code_map.LAYERS_TEST.read_text(encoding="utf-8"), encoding="utf-8")
    before = code_map.render(source, layers).splitlines()

    (source / "context" / "new_thing.py").write_text('"""A new thing. Details."""\n')
    (source / "store" / "lock.py").write_text('"""The lock, said otherwise."""\n')
    layers.write_text(layers.read_text().replace('2: ("store",)', '2: ("store", "newtop")'))
    (source / "newtop.py").write_text('"""A top-level module\nover two lines. More."""\n')
    after = code_map.render(source, layers).splitlines()

    assert [line for line in after if line not in before] == [
        "    lock.py                      The lock, said otherwise.",
        "  newtop.py                  2   A top-level module over two lines.",
        "    new_thing.py                 A new thing.",
    ]
    with pytest.raises(SystemExit, match="markers"):
        code_map.replaced("a page without the markers", "\n".join(after))


def test_a_stale_path_and_a_floor_the_table_moved_are_caught() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert stale_module_paths("see `llm/no_such.py` and `tests/test_docs.py`") == [
        "line 1: llm/no_such.py"
    ]
    moved = text.replace("| 2 | `store` |", "| 3 | `store` |")
    assert floor_table(moved) != layering_floors()
