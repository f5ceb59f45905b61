"""Tokens a scraped page puts into the agent's window, with and without extraction.

For each fixture page in ``tests/fixtures/pages/`` (real documentation pages, served on
loopback) and a question about it, runs MiroThinker's ``scrape_and_extract_info``
(``deepledger.tools.scrape``) twice:

- **without extraction** (``info_to_extract`` empty): the tool's result is the page's
  main content, and that is what enters the window (above ``max_result_chars`` it goes
  to the archive, and the window gets a preview instead);
- **with extraction**: the tool's result carries the extraction model's answer only;
  the page is read by the extraction model, whose input tokens are the price of that
  (counted in the task's usage as ``extraction``, not in the agent's window).

The extraction model is a real one: by default the bundled SmolLM2-135M served by
llama.cpp (``llm=local``; a weak model, so the answers' quality means little, their
length and the cost of reading the page are real), or any llm preset named with
``--llm PRESET``. Tokens are counted with deepledger's default counter (o200k_base) on
the tool result's JSON as the agent receives it.

Writes ``benchmarks/perf/results/scrape_tokens.json`` and prints a table::

    .venv/bin/python benchmarks/perf/scrape_tokens.py [--llm local]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import _checkout  # noqa: F401  (the checkout on sys.path: tests.support.doubles)
from tests.support.doubles.fake_web_server import FakeWebServer, Page

from deepledger.config import compose
from deepledger.llm.factory import create_client, settings_from_config
from deepledger.llm.tokens import default_counter
from deepledger.llm.usage import UsageLedger
from deepledger.store.journal import Journal
from deepledger.tools.scrape import ExtractionModel, PageScraper

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "tests" / "fixtures" / "pages"
RESULTS = ROOT / "benchmarks" / "perf" / "results" / "scrape_tokens.json"
QUESTIONS = {
    "python-functools.html": "What does the maxsize argument of functools.lru_cache do?",
    "python-howto-logging.html": "What is the default logging level, and where does "
    "output go by default?",
    "python-modindex.html": "Which module provides support for gzip files?",
    "python-tutorial-classes.html": "What is a namespace, according to this page?",
}


async def measure(llm_preset: str) -> list[dict]:
    cfg = compose(ROOT / "conf", [f"llm={llm_preset}"])
    llm = create_client(cfg.llm)
    model = ExtractionModel(llm, settings_from_config(cfg.llm), None, cfg.llm.max_context_length)
    scraper = PageScraper(model, scraper="direct", allow_private_networks=True)
    counter = default_counter()
    rows = []
    try:
        with FakeWebServer() as site:
            for name, question in QUESTIONS.items():
                url = site.add(f"/{name}", Page((PAGES / name).read_bytes()))
                rows.append(await _one_page(scraper, counter, name, url, question))
    finally:
        await llm.aclose()
    return rows


async def _one_page(scraper, counter, name: str, url: str, question: str) -> dict:
    journal, ledger = Journal(None), UsageLedger()
    whole = await scraper.scrape_and_extract(url, "", {}, journal, ledger)
    started = time.monotonic()
    extracted = await scraper.scrape_and_extract(url, question, {}, journal, ledger)
    seconds = time.monotonic() - started
    usage = ledger.extraction_total
    return {
        "page": name,
        "page_kb": round((PAGES / name).stat().st_size / 1024),
        "question": question,
        "window_tokens_without_extraction": counter.count(json.dumps(whole, ensure_ascii=False)),
        "window_tokens_with_extraction": counter.count(json.dumps(extracted, ensure_ascii=False)),
        "extraction_calls": len(ledger.extraction),
        "extraction_input_tokens": usage.input_tokens,
        "extraction_output_tokens": usage.output_tokens,
        "extraction_seconds": round(seconds, 1),
        "success": extracted["success"],
        "answer": extracted["extracted_info"][:300],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", default="local", help="the extraction model's llm preset")
    args = parser.parse_args()
    rows = asyncio.run(measure(args.llm))
    RESULTS.write_text(json.dumps({"llm": args.llm, "pages": rows}, indent=2) + "\n")
    print(f"extraction model: llm={args.llm}")
    print("| page | KB | window tokens, whole page | window tokens, extracted | extraction "
          "calls | extraction input tokens | s |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['page']} | {r['page_kb']} | {r['window_tokens_without_extraction']:,} | "
            f"{r['window_tokens_with_extraction']:,} | {r['extraction_calls']} | "
            f"{r['extraction_input_tokens']:,} | {r['extraction_seconds']} |"
        )


if __name__ == "__main__":
    main()
