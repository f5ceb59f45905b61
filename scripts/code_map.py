"""The map of the code in docs/architecture.md, generated from the source tree.

Each package and module of ``src/deepledger`` gets one entry: its name, indented under
its package, the floor of a top-level one (``FLOORS`` in ``tests/test_layers.py``, the
table the layering test enforces) and the first sentence of its docstring, which says
what the module owns. The map sits between two marker comments of the page; nothing
else of the page is touched.

    .venv/bin/python scripts/code_map.py           # print the map
    .venv/bin/python scripts/code_map.py --write   # rewrite the page's map
    .venv/bin/python scripts/code_map.py --check   # exit 1 if the page's map is stale

``tests/test_docs.py`` runs the check: after a module is added, moved or re-described,
``--write`` is the whole update.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "deepledger"
LAYERS_TEST = ROOT / "tests" / "test_layers.py"
PAGE = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- code-map:begin (scripts/code_map.py --write) -->"
END = "<!-- code-map:end -->"

HEADER = "src/deepledger/           floor  what it holds"
FLOOR_END = 30  # the floor column ends here; the description starts 3 columns later
DESCRIPTION = FLOOR_END + 3
WIDTH = 99
# The end of a docstring's first sentence: a full stop before a space or the end, not
# the one of an abbreviation.
SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)\.(?=\s|$)")
ROLE = re.compile(r":[a-z]+:`([^`]+)`")  # :class:`X` as Sphinx writes it, shown as X


def floors(layers_test: Path = LAYERS_TEST) -> dict[int, tuple[str, ...]]:
    """``FLOORS`` of the layering test, read from its source (not imported: the
    script runs without the test suite's dependencies)."""
    tree = ast.parse(layers_test.read_text(encoding="utf-8"))
    table = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "FLOORS" for t in node.targets)
    )
    found: dict[int, tuple[str, ...]] = ast.literal_eval(table)
    return found


def summary(path: Path) -> str:
    """The first sentence of the module's docstring, on one line ("" without one)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), str(path))) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    end = SENTENCE_END.search(paragraph)
    sentence = paragraph[: end.end()] if end else paragraph
    return ROLE.sub(r"\1", sentence).replace("``", "`")


def entry(name: str, depth: int, floor: int | None, description: str) -> list[str]:
    """One entry: the name indented by its depth, the floor right-aligned, the
    description wrapped beside them."""
    head = "  " * (depth + 1) + name
    if floor is not None:
        head = f"{head} ".ljust(FLOOR_END - len(str(floor))) + str(floor)
    lines = textwrap.wrap(description, WIDTH - DESCRIPTION, break_on_hyphens=False) or [""]
    if len(head) > DESCRIPTION - 2:  # a long name: the description starts below it
        return [head, *(" " * DESCRIPTION + line for line in lines)]
    return [(head.ljust(DESCRIPTION) + lines[0]).rstrip()] + [
        " " * DESCRIPTION + line for line in lines[1:]
    ]


def package_entries(folder: Path, depth: int) -> list[str]:
    """The modules of a package, then its subpackages, each by name."""
    lines: list[str] = []
    for module in sorted(p for p in folder.glob("*.py") if p.name != "__init__.py"):
        lines += entry(module.name, depth, None, summary(module))
    for package in sorted(p.parent for p in folder.glob("*/__init__.py")):
        lines += entry(package.name + "/", depth, None, summary(package / "__init__.py"))
        lines += package_entries(package, depth + 1)
    return lines


def top_level(source: Path, name: str) -> Path:
    """The file or folder of a top-level part ("" is the package's own ``__init__``)."""
    if not name:
        return source / "__init__.py"
    return source / name if (source / name).is_dir() else source / f"{name}.py"


def render(source: Path = SOURCE, layers_test: Path = LAYERS_TEST) -> str:
    """The map, as the page's ``text`` block holds it (fences included)."""
    lines = [HEADER]
    for floor, parts in sorted(floors(layers_test).items()):
        for name in parts:
            path = top_level(source, name)
            if path.is_dir():
                lines += entry(path.name + "/", 0, floor, summary(path / "__init__.py"))
                lines += package_entries(path, 1)
            elif path.exists():  # a part the table names ahead of (or after) its move
                lines += entry(path.name, 0, floor, summary(path))
    return "\n".join(["```text", *lines, "```"])


def replaced(page_text: str, code_map: str) -> str:
    """The page with the text between its markers replaced by ``code_map``."""
    head, begin, rest = page_text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise SystemExit(f"{PAGE}: the markers {BEGIN!r} and {END!r} are not both there")
    return f"{head}{BEGIN}\n{code_map}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the page's map")
    action.add_argument("--check", action="store_true", help="exit 1 if the map is stale")
    args = parser.parse_args(argv)
    code_map = render()
    if not (args.write or args.check):
        print(code_map)
        return 0
    text = PAGE.read_text(encoding="utf-8")
    wanted = replaced(text, code_map)
    if args.write:
        PAGE.write_text(wanted, encoding="utf-8")
        return 0
    if text != wanted:
        print(f"{PAGE.relative_to(ROOT)}: the map is stale; run scripts/code_map.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
