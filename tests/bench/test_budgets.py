"""Task limits and run budgets (benchmark.execution.*): the loop ends with `limit`, the
task records which, the run stops starting tasks and a raised budget resumes it."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
from pathlib import Path

import pytest

from deepledger.agent.limits import RunBudget, Spending, TaskBudget, TaskLimits
from deepledger.agent.task import AgentFactory
from deepledger.bench.metrics import format_summary, summarize
from deepledger.bench.progress import Progress
from deepledger.bench.report import rebuild_summary
from deepledger.config import validate
from deepledger.errors import ConfigError, FatalLLMError
from deepledger.llm.scripted import ScriptedLLM, reply
from deepledger.llm.usage import UsageLedger
from deepledger.messages import EndReason, LLMResponse, Message, StopReason, Usage
from deepledger.report.page import write_run_report
from deepledger.store.files import read_jsonl
from deepledger.store.journal import Journal
from deepledger.store.run_store import RunStore
from deepledger.tools.pool import ToolManager
from tests.support.bench import bench_command, results, run
from tests.support.browser import open_report
from tests.support.cli import ROOT
from tests.support.config import composed
from tests.support.doubles.bench_model import decide, respond_http
from tests.support.doubles.fake_llm_server import FakeLLMServer

SUITE = Path(__file__).with_name("suite")
PER_CALL = Usage(1000, 0)  # every scripted call costs 1,000 tokens
# The OpenAI API's gpt-4.1, priced by genai-prices' bundled data at $2 per million input
# tokens: $0.002 a call (the model is scripted: nothing is sent)
PRICED = ("llm=openai",)


def config(*overrides: str):
    return composed(
        f"benchmark.data.data_dir={SUITE}",
        "agent.main_agent.tools=[memory]",
        "agent.max_final_answer_retries=1",
        *overrides,
    )


class FakeClock:
    """Time that moves only when a model call says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def researcher(clock: FakeClock | None = None, seconds_per_call: float = 0.0) -> ScriptedLLM:
    """A model that keeps calling a tool (a new note each turn) until it is asked for the
    answer, which it boxes; every call costs PER_CALL and moves the clock."""

    def respond(messages: list[Message], tools) -> LLMResponse:
        if clock is not None:
            clock.now += seconds_per_call
        last = messages[-1].content
        if "This attempt at the task is over" in last:
            return reply("Failure type: incomplete\nWhat happened: ran out.", usage=PER_CALL)
        if "The work on this task is over" in last:
            return reply("\\boxed{Paris}", usage=PER_CALL)
        turn = sum(1 for m in messages if m.role.value == "assistant")
        call = (
            "<use_mcp_tool><server_name>memory</server_name><tool_name>write</tool_name>"
            f'<arguments>{{"name": "note-{turn}", "text": "fact {turn}"}}</arguments>'
            "</use_mcp_tool>"
        )
        return LLMResponse(Message.assistant(call), StopReason.END_TURN, PER_CALL, "scripted")

    return ScriptedLLM(responder=respond)


def finisher(clock: FakeClock | None = None, seconds_per_call: float = 0.0) -> ScriptedLLM:
    """The suite's usual stand-in model (tests.support.doubles.bench_model), PER_CALL a call."""

    def respond(messages: list[Message], tools) -> LLMResponse:
        if clock is not None:
            clock.now += seconds_per_call
        return reply(decide([m.content for m in messages]), usage=PER_CALL)

    return ScriptedLLM(responder=respond)


def journal_events(root: Path, task_id: str, name: str = "attempt-1-retry-0.jsonl") -> list[dict]:
    run_dir = RunStore(root)
    try:
        return read_jsonl(run_dir.task_dir(task_id) / name)
    finally:
        run_dir.close()


# -- config ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["task_time_limit_seconds", "task_token_limit", "task_cost_limit_usd", "max_tokens"]
)
def test_a_budget_must_be_positive_or_null(key):
    validate(composed(f"benchmark.execution.{key}=5"))
    with pytest.raises(ConfigError, match=f"benchmark.execution.{key}=0 must be positive"):
        validate(composed(f"benchmark.execution.{key}=0"))
    with pytest.raises(ConfigError, match=f"benchmark.execution.{key}=-1 must be positive"):
        validate(composed(f"benchmark.execution.{key}=-1"))


@pytest.mark.parametrize("key", ["max_cost_usd", "task_cost_limit_usd"])
def test_a_cost_limit_on_a_model_without_a_price_is_refused_by_validate(key):
    cfg = config("llm.model_name=unpriced-model", f"benchmark.execution.{key}=1")
    with pytest.raises(ConfigError, match=r"llm.model_name='unpriced-model' has no price"):
        validate(cfg)
    validate(config(*PRICED, f"benchmark.execution.{key}=1"))  # priced: fine


def test_bench_with_a_cost_limit_on_an_unpriced_model_exits_2_writing_nothing(tmp_path):
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=respond_http) as server:
        command = bench_command(
            server.openai_base_url,
            run_dir,
            "llm.model_name=unpriced-model",
            "benchmark.execution.max_cost_usd=1",
        )
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        requests = len(server.requests)
    assert done.returncode == 2, done.stderr
    assert "benchmark.execution.max_cost_usd is set" in done.stderr
    assert requests == 0
    written = sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else []
    assert not {"manifest.json", "benchmark_results.jsonl", "tasks", "summary.json"} & set(
        written
    ), written


# -- per task -------------------------------------------------------------------------


async def test_a_task_over_its_token_limit_finalizes_with_end_reason_limit(tmp_path):
    llm = researcher()
    cfg = config("benchmark.execution.task_token_limit=2500", "agent.context_compress_limit=2")
    (record,) = await run(cfg, llm, tmp_path, ("easy/1",))
    # Three turns (3,000 tokens) reach the limit; the fourth is not asked for. One
    # closing call answers, and no post-mortem or further retry follows.
    assert len(llm.calls) == 4
    assert record["end_reason"] == "limit" and record["turns"] == 3
    assert record["limit"] == {"kind": "task_token_limit", "limit": 2500, "spent": 3000}
    assert (record["final_answer"], record["correct"]) == ("Paris", True)
    (retry,) = record["attempts"][0]["retries"]
    assert retry["limit"] == record["limit"] and retry["post_mortem"] is None
    events = journal_events(tmp_path, "easy/1")
    (hit,) = [e for e in events if e["event"] == "limit_reached"]
    assert (hit["kind"], hit["spent"], hit["turn"]) == ("task_token_limit", 3000, 3)
    assert [e["purpose"] for e in events if e["event"] == "closing_call"] == ["summary"]


async def test_the_limit_counts_every_retry_of_the_task(tmp_path):
    # Retry 0 of the hard task spends 3,000 tokens (a turn, the answer without a box, a
    # post-mortem): retry 1 would start over the 2,500 limit, so it does not start.
    llm = finisher()
    cfg = config("benchmark.execution.task_token_limit=2500", "agent.context_compress_limit=2")
    (record,) = await run(cfg, llm, tmp_path, ("hard #2",))
    assert len(llm.calls) == 3
    assert len(record["attempts"][0]["retries"]) == 1
    assert record["end_reason"] == "limit"
    assert record["limit"] == {"kind": "task_token_limit", "limit": 2500, "spent": 3000}


async def test_a_resumed_task_starts_with_what_its_finished_retries_spent(tmp_path):
    cfg = config("agent.context_compress_limit=2")
    await run(cfg, finisher(), tmp_path, ("hard #2",))
    run_dir = RunStore(tmp_path)  # as if killed during retry 1: only retry 0 finished
    progress = run_dir.task_dir("hard #2") / "progress.jsonl"
    progress.write_text(progress.read_text().splitlines()[0] + "\n")
    run_dir.results_path.unlink()
    run_dir.close()
    again = finisher()
    limited = config("agent.context_compress_limit=2", "benchmark.execution.task_token_limit=2500")
    (record,) = await run(limited, again, tmp_path, ("hard #2",))
    assert again.calls == []  # retry 0's 3,000 tokens already reach the limit
    assert record["limit"]["spent"] == 3000 and record["end_reason"] == "limit"


async def test_a_task_over_its_time_limit_stops_at_the_next_turn(tmp_path):
    clock = FakeClock()
    llm = researcher(clock, seconds_per_call=10)
    cfg = config("benchmark.execution.task_time_limit_seconds=25")
    (record,) = await run(cfg, llm, tmp_path, ("easy/1",), clock=clock)
    # Turns at 0, 10 and 20 s; at 30 s the limit holds the fourth back.
    assert record["turns"] == 3 and len(llm.calls) == 4
    assert record["limit"] == {"kind": "task_time_limit_seconds", "limit": 25.0, "spent": 30.0}
    (retry,) = record["attempts"][0]["retries"]
    assert retry["elapsed_seconds"] == 40.0  # with the closing call


async def test_a_resumed_task_counts_the_time_its_finished_retries_took(tmp_path):
    clock = FakeClock()
    timed = finisher(clock, seconds_per_call=10)
    cfg = config("agent.context_compress_limit=2")
    await run(cfg, timed, tmp_path, ("hard #2",), clock=clock)
    run_dir = RunStore(tmp_path)  # as if killed after retry 0 (three calls: 30 s)
    progress = run_dir.task_dir("hard #2") / "progress.jsonl"
    first = json.loads(progress.read_text().splitlines()[0])
    assert first["elapsed_seconds"] == 30.0
    progress.write_text(json.dumps(first) + "\n")
    run_dir.results_path.unlink()
    run_dir.close()
    again = finisher()
    limited = config(
        "agent.context_compress_limit=2", "benchmark.execution.task_time_limit_seconds=25"
    )
    (record,) = await run(limited, again, tmp_path, ("hard #2",), clock=FakeClock())
    assert again.calls == []
    limit = record["limit"]
    assert (limit["kind"], limit["limit"]) == ("task_time_limit_seconds", 25.0)
    # The finished retry's 30 s, and the moments the killed retry's journal shows it ran.
    assert 30.0 <= limit["spent"] < 40.0


async def test_a_task_over_its_cost_limit_stops(tmp_path):
    llm = researcher()
    cfg = config(*PRICED, "benchmark.execution.task_cost_limit_usd=0.003")
    (record,) = await run(cfg, llm, tmp_path, ("easy/1",))
    assert record["turns"] == 2 and len(llm.calls) == 3
    assert record["limit"] == {"kind": "task_cost_limit_usd", "limit": 0.003, "spent": 0.004}
    assert record["cost"] == pytest.approx(0.006)  # the closing call overshoots by one


async def test_one_question_runs_keep_the_task_limits_too():
    cfg = config("benchmark.execution.task_token_limit=1500")
    llm = researcher()
    state = await AgentFactory(cfg, llm, ToolManager({})).solve("Capital of France?", Journal(None))
    assert state.end_reason is EndReason.LIMIT and state.turn == 2
    assert state.final_answer == "Paris" and len(llm.calls) == 3


async def test_a_sub_agents_calls_count_while_it_runs():
    ledger, sub = UsageLedger(), UsageLedger()
    budget = TaskBudget(TaskLimits(tokens=1500), earlier=Spending(tokens=1000))
    with budget.watch(ledger, keep=True):
        with budget.watch(sub, keep=False):
            sub.record(reply("a", usage=Usage(400, 100)))
            hit = budget.check()
            assert hit is not None and hit.spent == 1500
        ledger.absorb(sub)  # what the parent does when the sub-agent returns
        assert budget.spent().tokens == 1500  # counted once
    assert budget.spent().tokens == 1500 and budget.earlier.tokens == 1500


# -- per run --------------------------------------------------------------------------


async def test_a_spent_run_budget_leaves_tasks_unstarted_and_a_raised_one_resumes(tmp_path, capsys):
    cfg = config("benchmark.execution.max_concurrent=1", "benchmark.execution.max_tokens=3000")
    first = finisher()
    records = await run(cfg, first, tmp_path)
    # easy/1 spends 2,000; hard #2 starts under the budget and ends over it; the other
    # two are not started and not recorded.
    assert [r["task_id"] for r in records] == ["easy/1", "hard #2"]
    assert "2 tasks were not started" in capsys.readouterr().err
    summary = summarize(
        records, pass_at_k=1, benchmark="tiny", tasks_expected=4, execution=cfg.benchmark.execution
    )
    budget = summary.to_json()["budget"]  # as summary.json holds it
    assert (budget["exhausted"], budget["tasks_not_started"]) == (True, 2)
    assert (budget["spent_tokens"], budget["left_tokens"]) == (4000, 0)
    assert "2 tasks not started" in format_summary(summary)

    raised = config("benchmark.execution.max_concurrent=1", "benchmark.execution.max_tokens=9000")
    second = finisher()
    records = await run(raised, second, tmp_path)
    assert [r["task_id"] for r in records] == ["easy/1", "hard #2", "näive 3", "open-4"]
    assert not any("France" in c.messages[1].content for c in second.calls)  # not redone
    assert not any("Vienna" in c.messages[1].content for c in second.calls)
    assert len(read_jsonl(tmp_path / "benchmark_results.jsonl")) == 4


async def test_running_tasks_stop_at_their_next_turn_once_the_run_budget_is_spent(tmp_path):
    llm = researcher()
    cfg = config("benchmark.execution.max_concurrent=2", "benchmark.execution.max_tokens=5000")
    records = await run(cfg, llm, tmp_path)
    # Both running tasks stop at a turn boundary and stay unrecorded (a raised budget
    # resumes them); the others wait and are never started.
    assert records == [] and not (tmp_path / "benchmark_results.jsonl").exists()
    loop_calls = sum(
        1
        for task in ("easy/1", "hard #2")
        for e in journal_events(tmp_path, task)
        if e["event"] == "llm_call"
    )
    assert loop_calls in (5, 6)  # the budget, plus at most one turn in flight
    for task in ("easy/1", "hard #2"):
        (hit,) = [e for e in journal_events(tmp_path, task) if e["event"] == "limit_reached"]
        assert hit["kind"] == "max_tokens"


# A task that loops on its tool until max_turns, then answers: 6 calls, 6,000 tokens.
LOOPING = ("agent.main_agent.max_turns=5", "agent.context_compress_limit=0")


async def test_a_task_the_run_budget_stops_is_continued_by_a_resume_with_a_raised_one(
    tmp_path, capsys
):
    cfg = config(
        *LOOPING, "benchmark.execution.max_tokens=7000", "benchmark.execution.max_concurrent=1"
    )
    records = await run(cfg, researcher(), tmp_path)
    # easy/1 finishes (6,000 tokens); hard #2 starts under the budget, is stopped at its
    # second turn (and its closing call) and left unrecorded; the other two never start.
    assert [r["task_id"] for r in records] == ["easy/1"]
    assert records[0]["end_reason"] == "turns_exhausted"
    err = capsys.readouterr().err
    assert "1 running task was stopped unrecorded; 2 tasks were not started" in err
    assert not (RunStore(tmp_path).task_dir("hard #2") / "progress.jsonl").exists()

    again = researcher()
    raised = config(
        *LOOPING, "benchmark.execution.max_tokens=100000", "benchmark.execution.max_concurrent=1"
    )
    records = await run(raised, again, tmp_path)
    by_id = {r["task_id"]: r for r in records}
    assert sorted(by_id) == ["easy/1", "hard #2", "näive 3", "open-4"]
    assert not any("France" in c.messages[1].content for c in again.calls)  # not redone
    hard = by_id["hard #2"]
    assert hard["status"] == "finished" and hard["end_reason"] == "turns_exhausted"
    assert hard.get("limit") is None and hard["turns"] == 5
    # The cut retry was redone from its start; its two calls still count.
    assert hard["interrupted_calls"] == 2 and hard["usage"]["input_tokens"] == 8000
    folder = RunStore(tmp_path).task_dir("hard #2")
    assert len(list(folder.glob("attempt-1-retry-0.interrupted-*.jsonl"))) == 1
    results = read_jsonl(tmp_path / "benchmark_results.jsonl")
    assert [r["task_id"] for r in results].count("easy/1") == 1


async def test_an_errored_task_counts_the_calls_of_the_retry_that_failed(tmp_path, capsys):
    # The loop's call is answered (1,000 tokens); the closing call fails for good.
    def respond(messages: list[Message], tools) -> LLMResponse:
        if "The work on this task is over" in messages[-1].content:
            raise FatalLLMError("HTTP 400: bad request", provider="scripted", status=400)
        return reply("Looking.", usage=PER_CALL)

    cfg = config(
        "benchmark.execution.max_concurrent=1",
        "benchmark.execution.max_tokens=1000",
        "agent.context_compress_limit=0",
    )
    records = await run(cfg, ScriptedLLM(responder=respond), tmp_path)
    (record,) = records
    assert record["status"] == "error"
    assert record["usage"]["input_tokens"] == 1000  # the failed retry's call included
    assert "(1,000 tokens spent). 3 tasks were not started" in capsys.readouterr().err
    summary = summarize(
        records, pass_at_k=1, benchmark="t", tasks_expected=4, execution=cfg.benchmark.execution
    )
    budget = summary.to_json()["budget"]  # as summary.json holds it
    assert (budget["spent_tokens"], budget["left_tokens"], budget["exhausted"]) == (1000, 0, True)
    assert budget["tasks_not_started"] == 3


def test_the_progress_line_shows_spent_against_the_budget():
    budget = RunBudget(max_cost_usd=2.0, max_tokens=5000, recorded=Spending(1200, 0.42))
    assert budget.line() == "$0.4200/$2 · 1.2k/5.0k tokens"
    out = io.StringIO()
    progress = Progress(plain=True, file=out)
    progress.start(total=2, budget=budget.line)
    progress.task_finished("t1", True, 100)
    assert "budget $0.4200/$2 · 1.2k/5.0k tokens" in out.getvalue()


# -- the command ----------------------------------------------------------------------


def test_bench_stopped_by_its_budget_exits_1_and_resumes_with_a_raised_one(tmp_path):
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=respond_http) as server:  # 15 tokens a call
        base = bench_command(
            server.openai_base_url, run_dir, "benchmark.execution.max_concurrent=1"
        )
        first = subprocess.run(
            [*base, "benchmark.execution.max_tokens=40"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        seen = len(server.requests)
        stopped = json.loads((run_dir / "summary.json").read_text())["budget"]
        # The run's own overrides (max_tokens=40 among them), the raised budget replacing it.
        second = subprocess.run(
            [*base[:3], "resume", str(run_dir), "benchmark.execution.max_tokens=100000"],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        later = [r.messages[1]["content"] for r in server.requests[seen:]]
    assert first.returncode == 1, first.stderr
    assert "the run's budget is spent: benchmark.execution.max_tokens=40 reached" in first.stderr
    # hard #2 finished its retry 0, then the budget stopped its retry 1 unrecorded.
    assert "1 running task was stopped unrecorded; 2 tasks were not started" in first.stderr
    assert "1 task stopped, 2 tasks not started" in first.stdout  # the summary's budget line
    # The printed commands raise the spent budget: the same one would stop them at once.
    assert "the budget stopped the run (the commands below double it: " in first.stderr
    assert f"  deepledger resume {run_dir} benchmark.execution.max_tokens=80\n" in first.stderr
    assert " benchmark.execution.max_tokens=80 hydra.run.dir=" in first.stderr
    assert "max_tokens=40 hydra" not in first.stderr
    assert stopped["exhausted"] and stopped["spent_tokens"] == 75
    assert (stopped["tasks_stopped"], stopped["tasks_not_started"]) == (1, 2)
    assert second.returncode == 0, second.stderr
    ids = [r["task_id"] for r in results(run_dir)]
    assert sorted(ids) == sorted({"easy/1", "hard #2", "näive 3", "open-4"})  # each once
    assert later and not any("France" in t for t in later)  # the finished task: not redone
    vienna = [t for t in later if "Vienna" in t]  # hard #2 goes on from its retry 1
    assert vienna and all("Earlier attempts" in t for t in vienna)


# -- the report -----------------------------------------------------------------------


def test_the_report_shows_the_budget_and_the_limit_a_task_hit(tmp_path):
    cfg = config(
        "benchmark.execution.max_concurrent=1",
        "benchmark.execution.max_tokens=3000",
        "benchmark.execution.task_token_limit=2500",
    )
    asyncio.run(run(cfg, researcher(), tmp_path, manifest=True))  # the browser's API is sync
    summary = rebuild_summary(tmp_path)
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["budget"]["limits"]["max_tokens"] == 3000
    assert written["budget"]["limits_hit"] == {"task_token_limit": 1}
    report = write_run_report(tmp_path, summary)
    with open_report(report) as visit:
        page = visit.page
        card = page.locator("#budget-card").inner_text()
        assert "4,000 / 3,000 tokens" in card and "3 tasks not started" in card
        assert "per task at most 2,500 tokens" in card
        assert "task_token_limit 1" in card
        assert page.get_by_text("benchmark.execution.task_token_limit").count() >= 1
        assert "limit" in page.locator("#run").inner_text()  # among the end reasons
        page.click("#task-table tbody tr")
        page.wait_for_selector("#trajectory .ev.guard")
        guard = page.locator("#trajectory .ev.guard").inner_text()
        assert "benchmark.execution.task_token_limit=2500 reached (3,000 tokens spent)" in guard
    assert visit.problems == []
