"""errors.py's drawn exception tree tells the truth: every exception class defined in
``src/deepledger`` is drawn, under its real parent, with the module it lives in."""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from pathlib import Path

import deepledger.errors

PACKAGE = Path(deepledger.errors.__file__).parent
BUILTIN_EXCEPTIONS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}
# A drawn entry: a root at the drawing's left edge, or a child after "── ".
ROOT = re.compile(r"^    (?P<name>[A-Za-z_]\w*)\b")
CHILD = re.compile(r"── (?P<name>[A-Za-z_]\w*)(?:\s+\[(?P<where>[^\]]+)\])?")
NAMED_WHERE = re.compile(r"^\s*(?:[│├└─ ]*── )?[A-Za-z_]\w*\s+\[(?P<where>[^\]]+)\]")


@dataclass(frozen=True)
class Drawn:
    parent: str | None  # None: a root of the drawing
    where: str  # the module, relative to src/deepledger


@dataclass(frozen=True)
class Defined:
    base: str
    where: str


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # ssrf.BlockedURLError
        return node.attr
    return None


def defined_exceptions(package: Path = PACKAGE) -> dict[str, Defined]:
    """Every class under ``package`` that derives from an exception, by name, read from
    the source (nothing imported): a class is one when a base is a builtin exception or
    another class found to be one."""
    classes: dict[str, list[tuple[list[str], str]]] = {}
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [b for b in map(_base_name, node.bases) if b]
                classes.setdefault(node.name, []).append((bases, where))
    found: dict[str, Defined] = {}
    grew = True
    while grew:
        grew = False
        for name, definitions in classes.items():
            for bases, where in definitions:
                base = next((b for b in bases if b in BUILTIN_EXCEPTIONS or b in found), None)
                if base is not None and name not in found:
                    assert len(definitions) == 1, f"{name} is defined twice: {definitions}"
                    found[name] = Defined(base, where)
                    grew = True
    return found


def drawn_tree(docstring: str) -> dict[str, Drawn]:
    """The classes errors.py's docstring draws, with their drawn parent and module."""
    drawn: dict[str, Drawn] = {}
    stack: list[tuple[int, str]] = []  # (column of the name, name), outermost first
    for line in docstring.splitlines():
        child, root = CHILD.search(line), ROOT.match(line)
        if child:
            name, column = child["name"], child.start("name")
        elif root and not line.startswith("     "):
            name, column = root["name"], root.start("name")
        else:
            continue
        while stack and stack[-1][0] >= column:
            stack.pop()
        named = NAMED_WHERE.match(line)
        where = named["where"] if named else "errors.py"
        assert name not in drawn, f"{name} is drawn twice"
        drawn[name] = Drawn(stack[-1][1] if stack else None, where)
        stack.append((column, name))
    return drawn


DOC = deepledger.errors.__doc__ or ""


def test_the_reader_of_the_drawing_sees_parents_and_places() -> None:
    doc = (
        "::\n\n    Base      top\n     ├── A     [x/a.py] one\n     │    │  more text\n"
        "     │    └── B  two\n     └── C\n    ValueError\n     └── D  [d.py] four\n"
    )
    assert drawn_tree(doc) == {
        "Base": Drawn(None, "errors.py"),
        "A": Drawn("Base", "x/a.py"),
        "B": Drawn("A", "errors.py"),
        "C": Drawn("Base", "errors.py"),
        "ValueError": Drawn(None, "errors.py"),
        "D": Drawn("ValueError", "d.py"),
    }


def test_the_reader_of_the_code_finds_exceptions_through_their_bases(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "class Mine(ValueError): ...\nclass Deeper(Mine): ...\nclass Plain: ...\n"
        "class Far(mod.Deeper): ...\n"
    )
    assert defined_exceptions(tmp_path) == {
        "Mine": Defined("ValueError", "a.py"),
        "Deeper": Defined("Mine", "a.py"),
        "Far": Defined("Deeper", "a.py"),
    }


def test_every_exception_class_is_drawn_where_it_lives_under_its_parent() -> None:
    defined, drawn = defined_exceptions(), drawn_tree(DOC)
    assert "DeepLedgerError" in defined and "ToolRefusal" in defined
    missing = sorted(set(defined) - set(drawn))
    assert not missing, f"not drawn in errors.py's tree: {missing}"
    for name, real in defined.items():
        place = drawn[name]
        assert place.where == real.where, f"{name} lives in {real.where}, drawn as {place}"
        if place.parent is None:  # a root of the drawing hangs off a builtin exception
            assert real.base in BUILTIN_EXCEPTIONS, f"{name} derives from {real.base}"
        else:
            assert place.parent == real.base, f"{name} derives from {real.base}: {place}"


def test_the_drawing_names_no_class_that_does_not_exist() -> None:
    defined = defined_exceptions()
    for name, place in drawn_tree(DOC).items():
        if place.parent is None and name in BUILTIN_EXCEPTIONS:
            continue  # a builtin base drawn as a root
        assert name in defined, f"errors.py draws {name}, which is not an exception class"
