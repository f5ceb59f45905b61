"""MiroThinker's agent preset end to end, as a user runs it: MiroThinker's own command
line (llm=qwen-3, llm.provider=qwen, llm.async_client, llm.api_key=...) given to
`deepledger bench` in a subprocess, against loopback fakes of the model (OpenAI
protocol), Serper and a web site, with deepledger's real tool servers (search,
tool-python under its sandbox) and the in-process scrape-and-extract tool.

One run serves the whole module (it is the slow path): the model's script probes the
sandbox for secrets, searches, scrapes a page with an extraction question, and
answers. Every test then checks one promise on what the run sent and wrote:
MiroThinker's tool names on every call, the extraction call counted apart, and no
planted secret anywhere outside the auth headers it belongs in.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply
from tests.support.doubles.fake_search_server import FakeSerper
from tests.support.doubles.fake_web_server import FakeWebServer, Page
from tests.support.wire import text_of, xml_call

ROOT = Path(__file__).resolve().parents[2]
CANARIES = {
    "SERPER_API_KEY": "canary-serper-9d8e7f",  # sent to the (fake) Serper only
    "ANTHROPIC_API_KEY": "sk-ant-canary-unused-3b4c",  # set, used by nothing
    "OPENAI_API_KEY": "sk-canary-openai-unused-8e2d",  # set, used by nothing
}
LLM_KEY = "sk-canary-llm-5f1c2a"  # on the command line, as MiroThinker's scripts pass it
DOTENV_CANARY = "canary-dotenv-77aa11"  # in the working folder's .env
PAGE = (
    "<html><head><title>Eiffel Tower facts</title></head><body><nav>Home | About</nav>"
    "<main><h1>Eiffel Tower</h1><p>The Eiffel Tower in Paris is 330 metres tall, "
    "including its antennas. It was finished in 1889.</p>"
    + "<p>Unrelated filler about the Champ de Mars and its gardens.</p>" * 200
    + "</main><footer>Copyright</footer></body></html>"
)
PROBE_CODE = r"""
import glob, os
found = []
for path in glob.glob('/proc/*/environ') + ['/proc/%d/environ' % os.getppid()]:
    try:
        found.append(open(path, 'rb').read().decode(errors='replace'))
    except OSError as exc:
        found.append(f'{path}: {exc.strerror}')
for path in ['/proc/%d/cwd/.env' % os.getppid(), '.env', '../.env', os.path.expanduser('~/.env')]:
    try:
        found.append(open(path).read())
    except OSError as exc:
        found.append(f'{path}: {exc.strerror}')
print(dict(os.environ))
print('\n'.join(found)[:5000])
"""
PROBE_COMMAND = "env; cat /proc/1/environ; ls /proc; cat /etc/shadow; cat /proc/*/cwd/.env"
EXTRACTED = "The page says the Eiffel Tower is 330 metres tall, antennas included."


def respond(request) -> Reply:
    """The model: a function of the conversation it is sent."""
    messages = request.messages
    last = text_of(messages[-1])
    if "A research agent is reading a web page" in last:
        return Reply(EXTRACTED)
    if "The work on this task is over" in last or "FINAL ANSWER" in last:
        return Reply("\\boxed{330}")
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    conversation = "\n".join(map(text_of, messages))
    sandbox = re.search(r"Sandbox created with sandbox_id: ([\w-]+)", conversation)
    sandbox_id = sandbox.group(1) if sandbox else "missing"
    steps = [
        ("tool-python", "create_sandbox", {}),
        ("tool-python", "run_python_code", {"code_block": PROBE_CODE, "sandbox_id": sandbox_id}),
        ("tool-python", "run_command", {"command": PROBE_COMMAND, "sandbox_id": sandbox_id}),
        ("search_and_scrape_webpage", "google_search", {"q": "eiffel tower height"}),
    ]
    if turn < len(steps):
        return Reply(f"Step {turn + 1}.\n" + xml_call(*steps[turn]))
    if turn == len(steps):
        link = re.search(r"http://127\.0\.0\.1:\d+/eiffel", last)
        url = link.group(0) if link else "http://127.0.0.1:9/missing"
        arguments = {"url": url, "info_to_extract": "How tall is the Eiffel Tower?"}
        return Reply("Reading the page.\n" + xml_call("jina_scrape_llm_summary",
                     "scrape_and_extract_info", arguments))  # fmt: skip
    return Reply("The tower is 330 metres tall: \\boxed{330}")


@dataclass
class Run:
    run_dir: Path
    done: subprocess.CompletedProcess
    llm_requests: list
    search_requests: list
    page_requests: list


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    base = tmp_path_factory.mktemp("mirothinker")
    data, work = base / "data", base / "work"
    data.mkdir()
    work.mkdir()
    task = {"task_id": "eiffel", "task_question": "How tall is the Eiffel Tower, in metres?",
            "ground_truth": "330"}  # fmt: skip
    (data / "standardized_data.jsonl").write_text(json.dumps(task) + "\n")
    (work / ".env").write_text(f"DEEPLEDGER_DOTENV_CANARY={DOTENV_CANARY}\n")
    with (
        FakeLLMServer(responder=respond) as llm,
        FakeWebServer() as site,
    ):
        page_url = site.add("/eiffel", Page(PAGE.encode()))
        results = {"eiffel tower height": [{"title": "Eiffel Tower facts", "link": page_url,
                   "snippet": "The tower is 330 metres tall."}]}  # fmt: skip
        with FakeSerper(results=results, api_key=CANARIES["SERPER_API_KEY"]) as serper:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("JINA_", "SERPER_"))}
            env |= CANARIES | {"SERPER_BASE_URL": serper.base_url}
            done = subprocess.run(
                [sys.executable, "-m", "deepledger", "bench",
                 "agent=mirothinker_1.7_keep5_max200", "benchmark=example",
                 f"benchmark.data.data_dir={data}", "benchmark.name=miro",
                 "llm=qwen-3", "llm.provider=qwen", "llm.async_client=true",
                 f"llm.base_url={llm.openai_base_url}", "llm.model_name=MiroThinker-1.7-mini",
                 f"llm.api_key={LLM_KEY}", "benchmark.execution.max_tasks=null",
                 "web.allow_private_networks=true", f"hydra.run.dir={base / 'run'}"],
                cwd=work, env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            searches = list(serper.requests)
        pages = list(site.requests)
    return Run(base / "run", done, list(llm.requests), searches, pages)


def journal_events(run: Run) -> list[dict]:
    journals = sorted((run.run_dir / "tasks").glob("*/attempt-*.jsonl"))
    return [json.loads(line) for path in journals for line in path.read_text().splitlines()]


def test_the_run_answers_with_mirothinkers_tool_names_on_every_call(run):
    assert run.done.returncode == 0, run.done.stderr[-3000:]
    record = json.loads((run.run_dir / "benchmark_results.jsonl").read_text().splitlines()[-1])
    assert (record["final_answer"], record["correct"]) == ("330", True)
    calls = [
        (c["server_name"], c["name"])
        for e in journal_events(run)
        if e["event"] == "tool_results"
        for c in e["calls"]
    ]
    assert calls == [
        ("tool-python", "create_sandbox"),
        ("tool-python", "run_python_code"),
        ("tool-python", "run_command"),
        ("search_and_scrape_webpage", "google_search"),
        ("jina_scrape_llm_summary", "scrape_and_extract_info"),
    ]
    started = next(e for e in journal_events(run) if e["event"] == "task_started")
    assert "search_and_scrape_webpage.sogou_search" not in started["tools"]
    assert run.search_requests[0].body["q"] == "eiffel tower height"
    assert [r.path for r in run.page_requests] == ["/eiffel"]


def test_the_extraction_call_is_journaled_and_its_tokens_counted_apart(run):
    events = journal_events(run)
    extraction = [e for e in events if e["event"] == "extraction_call"]
    assert len(extraction) == 1 and extraction[0]["parts"] == 1
    assert extraction[0]["usage"]["input_tokens"] > 0
    prompt = next(
        text_of(r.messages[-1])
        for r in run.llm_requests
        if "A research agent is reading a web page" in text_of(r.messages[-1])
    )
    assert "How tall is the Eiffel Tower?" in prompt and "330 metres tall" in prompt
    assert "<nav>" not in prompt  # the page's main content, not its markup
    results = next(e for e in events if e["event"] == "tool_results" and
                   e["calls"][0]["name"] == "scrape_and_extract_info")["results"]  # fmt: skip
    answer = json.loads(results[0]["content"])
    assert answer["success"] and answer["extracted_info"] == EXTRACTED
    record = json.loads((run.run_dir / "benchmark_results.jsonl").read_text().splitlines()[-1])
    extraction_usage = record["extraction_usage"]
    assert extraction_usage["input_tokens"] == extraction[0]["usage"]["input_tokens"]
    assert record["usage"]["input_tokens"] > extraction_usage["input_tokens"]
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["extraction_tokens"]["input"] == extraction_usage["input_tokens"]
    assert "extraction" in run.done.stdout


def test_the_sandbox_probes_found_no_secret(run):
    results = [
        r["content"]
        for e in journal_events(run)
        if e["event"] == "tool_results"
        for r in e["results"]
        if e["calls"][0]["server_name"] == "tool-python"
    ]
    assert len(results) == 3, results
    assert "Sandbox created" in results[0]
    probe, command = results[1], results[2]
    assert "[stdout]" in probe and "PATH" in probe  # it ran, and saw its own environment
    assert "/proc/1/environ" not in probe or "Permission denied" in probe
    assert ".env: No such file or directory" in probe  # neither the server's cwd nor ours
    assert "[exit code]" in command and "/etc/shadow: No such file" in command
    for text in results:
        for secret in [*CANARIES.values(), LLM_KEY, DOTENV_CANARY]:
            assert secret not in text


def everything_written(run_dir: Path) -> dict[Path, str]:
    return {
        path: path.read_text(encoding="utf-8", errors="replace")
        for path in run_dir.rglob("*")
        if path.is_file()
    }


def test_no_planted_secret_reaches_a_request_body_a_file_or_the_output(run):
    written = everything_written(run.run_dir)
    assert any(p.name == "report.html" for p in written)
    places = {str(p): text for p, text in written.items()}
    places["stdout"], places["stderr"] = run.done.stdout, run.done.stderr
    for index, request in enumerate(run.llm_requests):
        places[f"model request {index}"] = json.dumps(request.body)
    for index, request in enumerate(run.search_requests):
        places[f"search request {index}"] = json.dumps(request.body)
    for index, request in enumerate(run.page_requests):
        places[f"page request {index}"] = json.dumps(request.headers) + request.path
    for secret in [*CANARIES.values(), LLM_KEY, DOTENV_CANARY]:
        leaks = [where for where, text in places.items() if secret in text]
        assert not leaks, f"{secret} leaked into {leaks}"
    # ... while the keys did go where they belong: the provider's auth headers.
    assert all(r.headers["authorization"] == f"Bearer {LLM_KEY}" for r in run.llm_requests)
    assert run.search_requests[0].headers["x-api-key"] == CANARIES["SERPER_API_KEY"]
