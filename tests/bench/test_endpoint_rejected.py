"""An endpoint that rejects the run (401 / 403 / 404) stops the suite at its first answer,
with one message, exit code 2 and nothing recorded as finished; a resume runs it all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deepledger.bench.judge import LLMJudge
from deepledger.bench.progress import Progress
from deepledger.bench.runner import BenchmarkRunner
from deepledger.bench.tasks import load_tasks
from deepledger.errors import EndpointRejectedError, RunRejectedError
from deepledger.llm.scripted import ScriptedLLM
from deepledger.store.files import read_jsonl
from deepledger.store.run_store import RunStore
from deepledger.tools.pool import ToolManager
from tests.support.bench import arithmetic_suite
from tests.support.config import composed
from tests.support.doubles.fake_llm_server import FakeLLMServer, Fault, Reply

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-canary-0123456789abcdef"  # must never be printed
TASKS = 5


def suite(folder: Path) -> Path:
    return arithmetic_suite(folder, TASKS)


def bench(base_url: str, data: Path, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "deepledger", "bench",
        f"benchmark.data.data_dir={data}", "benchmark.name=tiny", "benchmark.judge.name=normalized",
        "llm=openai", "llm.model_name=gpt-4.1-mini", f"llm.base_url={base_url}",
        "agent.main_agent.tools=[]", "agent.max_final_answer_retries=1",
        f"hydra.run.dir={run_dir}", *extra,
    ]  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": KEY, "DEEPLEDGER_PLAIN_PROGRESS": "1"}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def answer(request) -> Reply:
    question = request.messages[1]["content"]
    n = int(question.split()[2])
    return Reply(f"\\boxed{{{2 * n}}}")


def recorded(run_dir: Path) -> list[dict]:
    return read_jsonl(run_dir / "benchmark_results.jsonl")


def test_a_401_stops_the_suite_with_one_message_and_a_resume_runs_every_task(tmp_path):
    data, run_dir = suite(tmp_path / "data"), tmp_path / "run"
    with FakeLLMServer([Fault(status=401)], responder=answer) as server:
        url = server.openai_base_url
        stopped = bench(url, data, run_dir, "benchmark.execution.max_concurrent=1")
        requests, after_stop = len(server.requests), recorded(run_dir)
        resumed = bench(url, data, run_dir, "benchmark.execution.max_concurrent=1")
    assert stopped.returncode == 2, stopped.stderr
    assert requests == 1  # the first answer stopped the suite
    messages = [line for line in stopped.stderr.splitlines() if line.startswith("deepledger:")]
    assert len(messages) == 1, stopped.stderr
    (message,) = messages
    assert "HTTP 401" in message and "llm.model_name='gpt-4.1-mini'" in message
    assert f"llm.base_url='{url}'" in message and "$OPENAI_API_KEY" in message
    assert f"{TASKS} tasks are not done" in message
    assert f"then resume the run in its folder (deepledger resume {run_dir})" in message
    assert f"hydra.run.dir={run_dir}\n" in stopped.stderr  # the whole command, after it
    assert "Traceback" not in stopped.stderr and KEY not in stopped.stderr + stopped.stdout
    assert after_stop == []  # nothing recorded as finished (or wrong)
    assert resumed.returncode == 0, resumed.stderr
    records = recorded(run_dir)
    assert sorted(r["task_id"] for r in records) == [f"t{n}" for n in range(1, TASKS + 1)]
    assert all(r["correct"] for r in records)


@pytest.mark.parametrize("status", [403, 404])
def test_concurrent_tasks_stop_too_at_most_one_request_each(tmp_path, status):
    data, run_dir = suite(tmp_path / "data"), tmp_path / "run"
    with FakeLLMServer([Fault(status=status)] * TASKS) as server:
        stopped = bench(
            server.openai_base_url, data, run_dir, "benchmark.execution.max_concurrent=5"
        )
        requests = len(server.requests)
    assert stopped.returncode == 2, stopped.stderr
    assert 1 <= requests <= TASKS
    messages = [line for line in stopped.stderr.splitlines() if line.startswith("deepledger:")]
    assert len(messages) == 1 and f"HTTP {status}" in messages[0], stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert recorded(run_dir) == []


async def test_a_rejected_judge_stops_the_suite_and_keeps_the_agents_work(tmp_path):
    cfg = composed(
        f"benchmark.data.data_dir={suite(tmp_path / 'data')}",
        "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1",
        "benchmark.judge.llm=openai",
        "benchmark.execution.max_concurrent=1",
    )
    agent = ScriptedLLM(responder=lambda messages, tools: "\\boxed{seven}")
    rejected = EndpointRejectedError("openai returned HTTP 401: invalid key", status=401)
    judge_llm = ScriptedLLM([rejected], model="judge-model")
    run_dir = RunStore(tmp_path / "run")
    runner = BenchmarkRunner(
        cfg,
        llm=agent,
        tools=ToolManager({}),
        run_dir=run_dir,
        judge=LLMJudge(judge_llm),
        progress=Progress(plain=True),
    )
    try:
        with pytest.raises(RunRejectedError) as caught:
            await runner.run(load_tasks(cfg.benchmark.data).tasks)
    finally:
        run_dir.close()
    message = str(caught.value)
    assert "the judge's model, benchmark.judge.llm=openai" in message
    assert "model 'judge-model'" in message and "HTTP 401" in message
    assert len(judge_llm.calls) == 1  # one task was judged, then the suite stopped
    assert {c.messages[1].content for c in agent.calls} == {"What is 1 + 1?"}
    assert recorded(tmp_path / "run") == []
    progress = list((tmp_path / "run" / "tasks").glob("t1-*/progress.jsonl"))
    assert "retry_finished" in progress[0].read_text()  # a resume only judges it again


async def test_a_rejection_inside_a_sub_agent_stops_the_suite_too(tmp_path):
    cfg = composed(
        f"benchmark.data.data_dir={suite(tmp_path / 'data')}",
        "agent=multi_agent",
        "agent.main_agent.tools=[agent-browsing]",
        "agent.sub_agents.browsing.tools=[]",
        "agent.max_final_answer_retries=1",
        "benchmark.execution.max_concurrent=1",
    )
    delegate = (
        "<use_mcp_tool><server_name>agent-browsing</server_name><tool_name>run_subtask"
        '</tool_name><arguments>{"subtask": "Look it up."}</arguments></use_mcp_tool>'
    )
    revoked = EndpointRejectedError("openai returned HTTP 403: key revoked", status=403)
    llm = ScriptedLLM([delegate, revoked])  # the sub-agent's first call is refused
    run_dir = RunStore(tmp_path / "run")
    runner = BenchmarkRunner(
        cfg, llm=llm, tools=ToolManager({}), run_dir=run_dir, judge=None,
        progress=Progress(plain=True),
    )  # fmt: skip
    try:
        with pytest.raises(RunRejectedError, match="HTTP 403"):
            await runner.run(load_tasks(cfg.benchmark.data).tasks)
    finally:
        run_dir.close()
    llm.assert_consumed()
    assert len(llm.calls) == 2  # not asked again as if a tool had merely failed
    assert recorded(tmp_path / "run") == []


def xml_call(server: str, tool: str, arguments: dict) -> str:
    return (
        f"<use_mcp_tool><server_name>{server}</server_name><tool_name>{tool}</tool_name>"
        f"<arguments>{json.dumps(arguments)}</arguments></use_mcp_tool>"
    )


async def run_suite(cfg, agent, run_dir: Path, **models) -> None:
    """The runner on ``cfg``'s suite, expected to stop on a rejection."""
    directory = RunStore(run_dir)
    runner = BenchmarkRunner(
        cfg, llm=agent, tools=ToolManager({}), run_dir=directory, judge=None,
        progress=Progress(plain=True), **models,
    )  # fmt: skip
    try:
        await runner.run(load_tasks(cfg.benchmark.data).tasks)
    finally:
        directory.close()


async def test_a_rejected_compaction_notes_model_stops_the_suite_naming_its_key(tmp_path):
    from deepledger.context.compaction import NoteWriter
    from deepledger.llm.base import GenerationSettings

    cfg = composed(
        f"benchmark.data.data_dir={suite(tmp_path / 'data')}",
        "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1",
        "agent.context.strategy=compaction",
        "agent.context.summary_llm=openai",
        "agent.context.keep_rounds=1",
        "agent.context.compact_at=0.05",  # due from the start: the window is 32k
        "agent.context.min_saving=0",
        "llm.max_context_length=32768",
        "llm.max_tokens=2048",
        "benchmark.execution.max_concurrent=1",
    )
    look = xml_call("kb", "lookup", {"query": "sums"})
    agent = ScriptedLLM(responder=lambda messages, tools: look)  # round after round
    rejected = EndpointRejectedError("openai returned HTTP 401: invalid key", status=401)
    notes = ScriptedLLM([rejected], model="notes-model")
    writer = NoteWriter(notes, GenerationSettings(max_tokens=300))
    with pytest.raises(RunRejectedError) as caught:
        await run_suite(cfg, agent, tmp_path / "run", note_writer=writer)
    message = str(caught.value)
    assert "the compaction notes' model, agent.context.summary_llm=openai" in message
    assert "model 'notes-model'" in message and "HTTP 401" in message
    assert f"{TASKS} tasks are not done" in message
    assert len(notes.calls) == 1  # stopped at the first refusal, not tried again later
    assert recorded(tmp_path / "run") == []


async def test_a_rejected_page_extraction_model_stops_the_suite_naming_its_key(tmp_path):
    from deepledger.llm.base import GenerationSettings
    from deepledger.tools.scrape import ExtractionModel, PageScraper
    from tests.support.doubles.fake_web_server import FakeWebServer, Page

    cfg = composed(
        f"benchmark.data.data_dir={suite(tmp_path / 'data')}",
        "agent.main_agent.tools=[jina_scrape_llm_summary]",
        "agent.max_final_answer_retries=1",
        "+tools.extract_llm=openai",
        "benchmark.execution.max_concurrent=1",
    )
    rejected = EndpointRejectedError("openai returned HTTP 404: no such model", status=404)
    extractor = ScriptedLLM([rejected], model="extract-model")
    page = b"<html><body><p>Two plus two is four.</p></body></html>"
    with FakeWebServer({"/sums.html": Page(page, content_type="text/html")}) as site:
        read = xml_call(
            "jina_scrape_llm_summary",
            "scrape_and_extract_info",
            {"url": site.url("/sums.html"), "info_to_extract": "the sum"},
        )
        agent = ScriptedLLM(responder=lambda messages, tools: read)
        model = ExtractionModel(extractor, GenerationSettings(max_tokens=300), None, 32768)
        scraper = PageScraper(model, "direct", allow_private_networks=True)
        with pytest.raises(RunRejectedError) as caught:
            await run_suite(cfg, agent, tmp_path / "run", scraper=scraper)
    message = str(caught.value)
    assert "the page extraction model, tools.extract_llm=openai" in message
    assert "model 'extract-model'" in message and "HTTP 404" in message
    assert len(extractor.calls) == 1 and len(agent.calls) == 1  # nothing asked after it
    assert recorded(tmp_path / "run") == []


async def test_a_rejection_by_one_of_llm_endpoints_names_that_endpoint(tmp_path):
    """llm.base_url is not called with llm.endpoints set: the message names the server."""
    from deepledger.llm.endpoints import RoutedClient, ranked, route_key
    from tests.support.doubles.endpoints import answering, failing

    urls = ["http://gpu-1:8000/v1", "http://gpu-2:8000/v1"]
    cfg = composed(
        f"benchmark.data.data_dir={suite(tmp_path / 'data')}",
        "llm=openai_compatible",
        f"llm.endpoints=[{','.join(urls)}]",
        "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1",
        "benchmark.execution.max_concurrent=1",
    )
    assert any(ranked(route_key(f"t{n}", 1), urls)[0] == urls[1] for n in range(1, TASKS + 1))
    rejected = EndpointRejectedError("openai returned HTTP 401: invalid key", status=401)
    answers, refuses = (
        ScriptedLLM(responder=answering("\\boxed{2}")),
        ScriptedLLM(responder=failing(rejected)),
    )
    router = RoutedClient({urls[0]: answers, urls[1]: refuses})
    with pytest.raises(RunRejectedError) as caught:
        await run_suite(cfg, router, tmp_path / "run")
    message = str(caught.value)
    assert f"llm.endpoints[1]='{urls[1]}'" in message and "HTTP 401" in message
    assert "llm.base_url" not in message
