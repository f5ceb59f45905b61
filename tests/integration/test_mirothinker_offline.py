"""MiroThinker's preset with no network at all: `web.search_backend=local` searches the
WorldFacts corpus through MiroThinker's google_search, and scrape_and_extract_info reads
the corpus:// links it returns. The model is the loopback fake, scripted as a function
of what it is sent."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply
from tests.support.wire import text_of, xml_call

ROOT = Path(__file__).resolve().parents[2]


def respond(request) -> Reply:
    messages = request.messages
    last = text_of(messages[-1])
    if "A research agent is reading a web page" in last:
        found = re.search(r"Population: ([\d,]+)", last)
        return Reply(f"Population: {found.group(1)}" if found else "Not on this page.")
    conversation = "\n".join(map(text_of, messages))
    extracted = re.search(r'"extracted_info": "Population: ([\d,]+)', conversation)
    if "FINAL ANSWER" in last or extracted:
        answer = extracted.group(1).replace(",", "") if extracted else "unknown"
        return Reply(f"\\boxed{{{answer}}}")
    if not any(m.get("role") == "assistant" for m in messages):
        return Reply(xml_call("search_and_scrape_webpage", "google_search",
                              {"q": "Qingyang population", "num": 3}))  # fmt: skip
    link = re.search(r"corpus://[^\"\s\\]+", last)
    arguments = {"url": link.group(0) if link else "corpus://missing",
                 "info_to_extract": "the population of Qingyang"}  # fmt: skip
    return Reply(xml_call("jina_scrape_llm_summary", "scrape_and_extract_info", arguments))


def test_the_mirothinker_preset_runs_offline_on_worldfacts(tmp_path):
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=respond) as llm:
        done = subprocess.run(
            [sys.executable, "-m", "deepledger", "bench", "benchmark=worldfacts",
             "agent=mirothinker_1.7_keep5_max200", "web.search_backend=local",
             "benchmark.execution.max_tasks=1", "llm=openai_compatible",
             f"llm.base_url={llm.openai_base_url}", f"hydra.run.dir={run_dir}"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
            env={"PATH": "/usr/bin:/bin", "DEEPLEDGER_CACHE_DIR": str(tmp_path / "cache"),
                 "HOME": str(tmp_path)},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((run_dir / "benchmark_results.jsonl").read_text().splitlines()[-1])
    assert (record["final_answer"], record["correct"]) == ("2125400", True)
    journal = next((run_dir / "tasks").glob("*/attempt-1-retry-0.jsonl"))
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    calls = [(c["server_name"], c["name"]) for e in events if e["event"] == "tool_results"
             for c in e["calls"]]  # fmt: skip
    assert calls == [
        ("search_and_scrape_webpage", "google_search"),
        ("jina_scrape_llm_summary", "scrape_and_extract_info"),
    ]
    results = [e["results"][0]["content"] for e in events if e["event"] == "tool_results"]
    assert "corpus://cities%2Fqingyang.md" in results[0]
    scraped = json.loads(results[1])
    assert scraped["success"] and scraped["extracted_info"] == "Population: 2,125,400"
    assert [e["url"] for e in events if e["event"] == "extraction_call"] == [
        "corpus://cities%2Fqingyang.md"
    ]
