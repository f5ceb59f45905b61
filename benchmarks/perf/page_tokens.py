"""What a web page costs in the context window: raw HTML, all its text, its main content.

For each fixture page in ``tests/fixtures/pages/`` (real documentation pages with their
navigation, sidebars, scripts and footers), counts tokens with deepledger's default
counter (tiktoken ``o200k_base``) of:

- ``raw_html``: the page as served;
- ``all_text``: every text node outside scripts and styles (BeautifulSoup
  ``get_text``), what a converter that keeps everything visible gives (the reader's
  earlier hand-written converter did about this);
- ``main_content``: what ``deepledger.web.convert`` gives (trafilatura's main content as
  Markdown with links and tables, headed by the title), and how long conversion took;
- ``main_without_links``: trafilatura's main content with links dropped, for comparison
  (links are kept by ``convert`` so that a model can follow them; this is what they cost).

Writes ``benchmarks/perf/results/page_tokens.json`` and prints a table::

    .venv/bin/python benchmarks/perf/page_tokens.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from bs4 import BeautifulSoup

from deepledger.llm.tokens import default_counter
from deepledger.web.convert import convert

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "tests" / "fixtures" / "pages"
RESULTS = ROOT / "benchmarks" / "perf" / "results" / "page_tokens.json"


def all_text(html: bytes) -> str:
    """Every visible text node, one a line (scripts, styles and templates dropped)."""
    soup = BeautifulSoup(html, "lxml")
    for element in soup(["script", "style", "noscript", "template"]):
        element.decompose()
    lines = (line.strip() for line in soup.get_text("\n").splitlines())
    return "\n".join(line for line in lines if line)


def _main_without_links(html: bytes) -> str:
    import trafilatura

    text = trafilatura.extract(
        html.decode("utf-8", errors="replace"),
        output_format="markdown",
        include_links=False,
        include_tables=True,
        include_comments=False,
        favor_recall=True,
    )
    return text or ""


def measure(path: Path) -> dict[str, object]:
    """Token counts of one page in its three forms, and the conversion time."""
    counter = default_counter()
    raw = path.read_bytes()
    started = time.perf_counter()
    document = convert(raw, name=path.name)
    seconds = time.perf_counter() - started
    counts = {
        "raw_html": counter.count(raw.decode("utf-8", errors="replace")),
        "all_text": counter.count(all_text(raw)),
        "main_content": counter.count(document.text),
        "main_without_links": counter.count(_main_without_links(raw)),
    }
    return {
        "page": path.name,
        "bytes": len(raw),
        "tokens": counts,
        "main_share_of_all_text": round(counts["main_content"] / counts["all_text"], 3),
        "convert_seconds": round(seconds, 3),
        "note": document.notes[0] if document.notes else "",
    }


def main() -> None:
    """Measure every fixture page, write the results file, print the table."""
    convert(b"<html><body><p>warm-up</p></body></html>", name="warm.html")  # imports
    rows = [measure(path) for path in sorted(PAGES.glob("*.html"))]
    counter = default_counter()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"counter": counter.name, "pages": rows}, indent=2) + "\n")
    header = f"{'page':30} {'KB':>6} {'raw html':>9} {'all text':>9} {'main':>7} {'no links':>8}"
    print(header + f" {'main/all':>8} {'convert s':>9}")
    for row in rows:
        tokens = row["tokens"]
        print(
            f"{row['page']:30} {row['bytes'] / 1024:6.1f} {tokens['raw_html']:9,} "
            f"{tokens['all_text']:9,} {tokens['main_content']:7,} "
            f"{tokens['main_without_links']:8,} "
            f"{row['main_share_of_all_text']:8.2f} {row['convert_seconds']:9.3f}"
        )
    print(f"written to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
