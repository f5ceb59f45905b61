"""Read an HTML page and a Word file through the reader of the deepledger this Python has.

scripts/check_pip_install.sh runs it with the interpreter of a fresh venv in which
deepledger was installed as a pip user installs it; exit 0 when both read as they should.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for tests.support.documents (not for deepledger itself)

from tests.support.documents import make_word_docx  # noqa: E402

PAGE = (
    "<html><head><title>Herons</title></head><body><nav>Home | About</nav><article>"
    + "<p>The grey heron is a long-legged wading bird of the heron family.</p>" * 12
    + "</article></body></html>"
)


async def read_both(folder: Path) -> list[str]:
    """The reader's answers for the page and the document, or why they failed."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "deepledger.tools.servers.reader", "--root", str(folder)],
    )
    problems = []
    async with Client(params) as client:
        for source, expected in (
            ("page.html", "The grey heron is a long-legged wading bird"),
            ("notes.docx", "| Oslo | 12 |"),
        ):
            result = await client.call_tool("read", {"source": source})
            text = "\n".join(block.text for block in result.content if block.type == "text")
            if result.is_error or expected not in text:
                problems.append(f"{source}: {text[:400]}")
    return problems


def main() -> int:
    import deepledger

    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        (base / "page.html").write_text(PAGE, encoding="utf-8")
        docx = make_word_docx(
            "Grey herons", ["Grey herons eat fish."], ["Wingspan 155-195 cm"],
            [["city", "colonies"], ["Oslo", "12"]], link="https://example.org/herons",
        )  # fmt: skip
        (base / "notes.docx").write_bytes(docx)
        problems = asyncio.run(read_both(base))
    where = Path(deepledger.__file__).parent
    if problems:
        print(f"The reader of {where} could not read:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(f"The reader of {where} reads HTML and docx.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
