"""The package's layering: a module imports only from its own floor or lower, no two
modules import each other (directly or round a longer circle), and only the run store's
layout (``store/layout.py``) spells the run directory's file names.

Floors, bottom to top (``FLOORS``): what a floor may use is below it, so the bottom of
the tree can be read, tested and reused without what is built on it. A circle of
imports ties its modules together the same way: none of them can be read, tested or
moved without the others.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deepledger.store import layout

SOURCE = Path(__file__).resolve().parents[1] / "src" / "deepledger"

# The top-level modules and packages of deepledger, by floor ("" is deepledger/__init__).
FLOORS = {
    0: (
        "",
        "messages",
        "errors",
        "paths",
        "processes",
        "prompts",
        "secret_files",
        "blocked_urls",
        "prices",
        "lazy",
    ),
    1: ("config", "records"),
    2: ("store",),
    3: ("llm",),
    4: ("web",),
    5: ("tools",),
    6: ("context",),
    7: ("agent",),
    8: ("report",),
    9: ("bench", "export", "view"),
    10: ("cli", "__main__"),
}
FLOOR_OF = {part: floor for floor, parts in FLOORS.items() for part in parts}

# Names of the run directory that no module but store/layout.py writes as a literal:
# each is reached through ``deepledger.store.layout``.
RUN_FILE_NAMES = frozenset(
    {
        layout.LOCK,
        layout.HYDRA,
        layout.MANIFEST,
        layout.RESULTS,
        layout.SUMMARY,
        layout.PROGRESS,
        layout.TOOL_SERVER_LOGS,
        layout.REPLAY,
        layout.JUDGINGS,
        layout.JUDGING,
        layout.REPORT,
        layout.RUN_JOURNAL,
        layout.SUBAGENTS,
        layout.SERVER_LOG_SUFFIX,
    }
)
# Plain words used for other things too ("memory" is also a tool's name): flagged only
# where they are joined onto a path (``root / "tasks"``).
RUN_FOLDER_WORDS = frozenset({layout.TASKS, layout.MEMORY, layout.ARCHIVE})
# Pieces of the journal file-name grammar (``attempt-A-retry-R.interrupted-<stamp>``);
# "-retry-" alone is too common a word part (``--retry-wait``).
JOURNAL_GRAMMAR = ("attempt-", layout.INTERRUPTED)


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    imported: str
    line: int


def module_name(path: Path, root: Path = SOURCE) -> str:
    parts = ["deepledger", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = SOURCE) -> Iterator[Import]:
    """Every deepledger module ``path`` imports: at the top, inside functions and under
    ``TYPE_CHECKING`` alike, relative imports resolved."""
    importer = module_name(path, root)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # ``from deepledger.store import layout`` imports deepledger.store.layout
            targets = [_submodule(base, alias.name, root) for alias in node.names]
        else:
            continue
        for target in targets:
            if target == "deepledger" or target.startswith("deepledger."):
                yield Import(importer, target, node.lineno)


def _submodule(package: str, name: str, root: Path) -> str:
    """``package.name`` when that is a module or package of the tree, else ``package``
    (the name is one the package defines)."""
    folder = root.joinpath(*package.split(".")[1:], name)
    is_module = folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file()
    return f"{package}.{name}" if package == "deepledger" or is_module else package


def floor_of(module: str) -> int:
    """The floor of a dotted module name; a top-level part with no floor fails."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    if top not in FLOOR_OF and not (SOURCE / top).is_dir() and not (SOURCE / f"{top}.py").exists():
        top = ""  # ``from deepledger import __version__`` and the like
    if top not in FLOOR_OF:
        raise AssertionError(f"{module}: deepledger.{top} has no floor; add it to FLOORS")
    return FLOOR_OF[top]


def upward_imports(root: Path = SOURCE) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        for found in imports_of(path, root):
            own, theirs = floor_of(found.importer), floor_of(found.imported)
            if theirs > own:
                problems.append(
                    f"{found.importer} (floor {own}) imports {found.imported} (floor {theirs}), "
                    f"line {found.line}"
                )
    return problems


def test_no_module_imports_from_a_floor_above_its_own():
    assert upward_imports() == []


def test_every_top_level_module_has_a_floor():
    tops = {p.stem for p in SOURCE.glob("*.py")} | {
        p.name for p in SOURCE.iterdir() if (p / "__init__.py").exists()
    }
    assert tops - {"__init__"} <= set(FLOOR_OF)


def test_an_upward_import_is_named_with_both_floors(tmp_path):
    """The check can fail: a copy of the tree with one planted upward import."""
    planted = tmp_path / "deepledger"
    for path in SOURCE.rglob("*.py"):
        copy = planted / path.relative_to(SOURCE)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    target = planted / "store" / "layout.py"
    target.write_text(
        target.read_text() + "\n\ndef _late():\n    from ..bench import runner  # noqa\n"
    )
    problems = upward_imports(planted)
    assert len(problems) == 1
    assert problems[0].startswith(
        "deepledger.store.layout (floor 2) imports deepledger.bench.runner (floor 9)"
    )


# -- import circles ---------------------------------------------------------------------
#
# Every import counts: at a module's top, inside a function, and under TYPE_CHECKING.
# A deferred import inside a function is the usual way a circle is hidden from the
# interpreter, not removed; and a type-only one still means the two modules cannot be
# read or moved apart (tools/archive.py imported the old manager.py's tool types, which
# named archive.py's class in its annotations: the types now have a module of their own).
# Circles across floors cannot happen (no upward imports), so looking at the whole
# graph finds every circle inside a package, and between modules of one floor.

# Circles on main that the branches of issue 31 are removing, each with the branch's
# change. The check fails on any circle not listed here, and on a listed one that is
# gone: then this list must shrink (it is empty once those branches are in).
KNOWN_CIRCLES_BEING_REMOVED: dict[tuple[str, ...], str] = {}


def import_graph(root: Path = SOURCE) -> dict[str, dict[str, int]]:
    """Module -> the deepledger modules it imports, each with the line of the first
    import (a name a package defines is an import of the package)."""
    modules = {module_name(path, root) for path in root.rglob("*.py")}
    graph: dict[str, dict[str, int]] = {module: {} for module in modules}
    for path in sorted(root.rglob("*.py")):
        for found in imports_of(path, root):
            target = found.imported
            while target not in modules:  # ``from deepledger import __version__``
                target = target.rpartition(".")[0]
            if target != found.importer:
                graph[found.importer].setdefault(target, found.line)
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[tuple[str, ...]]:
    """The strongly connected parts of ``graph`` with more than one module: each a set of
    modules that all reach one another through imports (Tarjan's algorithm)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[tuple[str, ...]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in graph[module]:
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            part = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(part) > 1:
                found.append(tuple(sorted(m.removeprefix("deepledger.") for m in part)))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return sorted(found)


def circle_imports(graph: dict[str, dict[str, int]], circle: tuple[str, ...]) -> str:
    """The imports that close ``circle``, for the failure message."""
    names = {f"deepledger.{m}" for m in circle}
    return "; ".join(
        f"{a.removeprefix('deepledger.')}:{line} imports {b.removeprefix('deepledger.')}"
        for a in sorted(names)
        for b, line in sorted(graph[a].items())
        if b in names
    )


def test_no_import_circle_but_the_known_ones_being_removed():
    graph = import_graph()
    new = [c for c in circles(graph) if c not in KNOWN_CIRCLES_BEING_REMOVED]
    assert new == [], "import circles:\n  " + "\n  ".join(
        f"{circle}: {circle_imports(graph, circle)}" for circle in new
    )


def test_the_known_circles_are_still_there():
    """A circle a branch removed leaves KNOWN_CIRCLES_BEING_REMOVED, so that it cannot
    come back unnoticed."""
    found = circles(import_graph())
    gone = [circle for circle in KNOWN_CIRCLES_BEING_REMOVED if circle not in found]
    assert gone == [], f"no longer circles, remove them from KNOWN_CIRCLES_BEING_REMOVED: {gone}"


@pytest.mark.parametrize(
    "planted",
    [
        "from deepledger.store.journal import Journal  # noqa",
        "def _late():\n    from deepledger.store import journal  # noqa",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .journal import Journal",
    ],
)
def test_a_planted_circle_is_found_however_it_imports(tmp_path, planted):
    """store/journal.py imports store/files.py; files.py importing journal.py back closes
    a circle, whether at the top, inside a function or for its annotations only."""
    copy = tmp_path / "deepledger"
    for path in SOURCE.rglob("*.py"):
        target = copy / path.relative_to(SOURCE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    files = copy / "store" / "files.py"
    files.write_text(files.read_text() + "\n\n" + planted + "\n")
    graph = import_graph(copy)
    assert ("store.files", "store.journal") in circles(graph)
    assert "store.journal:" in circle_imports(graph, ("store.files", "store.journal"))


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree``: prose may name files; and of the names
    a package exports (``__all__``, its ``lazy_exports`` table), which are Python names
    (``tool_servers``), not files."""
    found = set()
    for node in ast.walk(tree):
        exported = (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        ) or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "lazy_exports"
        )
        if exported:
            found |= {id(n) for n in ast.walk(node) if isinstance(n, ast.Constant)}
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def run_file_literals(path: Path) -> list[str]:
    """Where ``path`` spells a name of the run directory's layout itself."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    prose = _docstrings(tree)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and side.value in RUN_FOLDER_WORDS:
                    problems.append(f"{path.name}:{node.lineno} joins {side.value!r} onto a path")
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if id(node) in prose:
            continue
        if node.value in RUN_FILE_NAMES or any(piece in node.value for piece in JOURNAL_GRAMMAR):
            problems.append(f"{path.name}:{node.lineno} spells {node.value!r}")
    return problems


def test_only_the_store_layout_spells_the_run_directory_layout():
    layout_module = Path(layout.__file__).resolve()
    problems = {
        str(path.relative_to(SOURCE)): found
        for path in sorted(SOURCE.rglob("*.py"))
        if path.resolve() != layout_module and (found := run_file_literals(path))
    }
    assert problems == {}


@pytest.mark.parametrize(
    "source",
    [
        'path = root / "tasks" / name',
        'name = f"attempt-{attempt}-retry-{retry}.jsonl"',
        'summary = run_dir / "summary.json"',
        'journals = task_dir.glob("*.interrupted-*.jsonl")',
    ],
)
def test_a_run_file_name_built_outside_the_store_is_found(tmp_path, source):
    module = tmp_path / "module.py"
    module.write_text(f'"""Names summary.json in prose, which is fine."""\n{source}\n')
    assert len(run_file_literals(module)) == 1
