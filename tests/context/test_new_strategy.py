"""A new context strategy is one file and one registry line: the toy ``last_messages``
(``last_messages.py``), registered here and nowhere else, runs a benchmark on the
scripted model, is replayed, and a killed run of it resumes sending byte for byte what
the uninterrupted run sent."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from deepledger.bench.replay import run_replay
from deepledger.bench.suite import run_suite
from deepledger.config import validate
from deepledger.context.strategies import STRATEGIES
from deepledger.llm.retry import RetryingClient, RetryPolicy
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import Message, MessageKind, Role, ToolSpec
from deepledger.records.codec import decode
from tests.context.last_messages import NAME, LastMessages
from tests.support.bench import arithmetic_suite
from tests.support.cli import deepledger
from tests.support.config import CONF, composed

STEPS = 6  # memory notes the model writes before it answers
KEEP = 3  # the toy keeps the newest rounds holding at least this many messages
KILLED_AFTER = 4  # the turn whose results are the last a killed run journaled


def note_call(step: int) -> str:
    arguments = json.dumps({"name": f"step {step}", "text": f"Found part {step}."})
    return (
        "<use_mcp_tool><server_name>memory</server_name><tool_name>write</tool_name>"
        f"<arguments>{arguments}</arguments></use_mcp_tool>"
    )


class Researcher:
    """Writes a note a turn, then answers; each request it is sent is kept, as text. Its
    next step follows from the newest reply it is shown, which every pick keeps."""

    def __init__(self) -> None:
        self.requests: list[list[tuple[str, str]]] = []

    def __call__(self, messages: list[Message], tools: list[ToolSpec]) -> str:
        self.requests.append([(m.role.value, m.content) for m in messages])
        if messages[-1].kind is MessageKind.INJECTED:
            return "\\boxed{2}"
        replies = [m.content for m in messages if m.role is Role.ASSISTANT]
        done = max((int(n) for r in replies for n in re.findall(r"Step (\d+)\.", r)), default=0)
        if done >= STEPS:
            return "Every part is found. \\boxed{2}"
        return f"Step {done + 1}.\n" + note_call(done + 1)


OVERRIDES = (
    "benchmark.name=tiny",
    "benchmark.execution.report=false",
    "benchmark.execution.report_every_seconds=0",
    "llm=openai_compatible",
    "llm.base_url=http://127.0.0.1:9/v1",  # never reached: the model is scripted
    "llm.model_name=gpt-4.1",
    "llm.max_tokens=500",
    "agent.main_agent.tools=[memory]",
    "agent.max_final_answer_retries=1",
    f"agent.context.strategy={NAME}",
    f"agent.context.keep_rounds={KEEP}",
    "agent.context.cut_batch=1",
)


async def bench(data: Path, run: Path, monkeypatch: pytest.MonkeyPatch) -> Researcher:
    """One run of the suite in ``data`` into ``run`` (resumed, when it holds one)."""
    model = Researcher()

    def scripted_client(cfg) -> RetryingClient:
        return RetryingClient(ScriptedLLM(responder=model), RetryPolicy.from_config(cfg.retry))

    monkeypatch.setattr("deepledger.bench.services.create_client", scripted_client)
    given = [f"benchmark.data.data_dir={data}", *OVERRIDES]
    cfg = composed(*given)
    validate(cfg, STRATEGIES)  # the command line's startup check knows the new name
    await run_suite(cfg, run, CONF, ["bench", *given])
    return model


def journal(run: Path) -> Path:
    [path] = (run / "tasks").glob("*/attempt-1-retry-0.jsonl")
    return path


def events(run: Path) -> list:
    return [decode(json.loads(line)) for line in journal(run).read_text().splitlines()]


def kill_after(run: Path, turn: int) -> int:
    """Leave ``run`` as a kill after ``turn``'s results would (a torn line after them, no
    progress, result or summary); the model calls it journaled up to there."""
    path = journal(run)
    lines = path.read_bytes().splitlines(keepends=True)
    found = [decode(json.loads(line)) for line in lines]
    cut = 1 + max(i for i, e in enumerate(found) if e.event == "tool_results" and e.turn == turn)
    path.write_bytes(b"".join(lines[:cut]) + b'{"ts": "2026-')
    (path.parent / "progress.jsonl").unlink()
    for name in ("benchmark_results.jsonl", "summary.json"):
        (run / name).unlink()
    return sum(e.event in ("llm_call", "closing_call") for e in found[:cut])


async def test_a_strategy_in_one_file_runs_replays_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setitem(STRATEGIES, NAME, LastMessages.from_config)  # its registry line
    data = arithmetic_suite(tmp_path / "data", 1)
    clean = await bench(data, tmp_path / "clean", monkeypatch)
    [record] = [json.loads(line) for line in (tmp_path / "clean/benchmark_results.jsonl").open()]
    assert record["correct"] is True
    cuts = [e for e in events(tmp_path / "clean") if e.event == "context_cut"]
    assert cuts and cuts[0].turn <= KILLED_AFTER  # it cut rounds, journaled as cuts are
    assert max(len(request) for request in clean.requests) <= 2 + KEEP + 1

    # The replay rebuilds its requests with the same strategy, exactly, and names it.
    run_replay(tmp_path / "clean", [])
    replayed = json.loads((tmp_path / "clean/replay.json").read_text())
    assert replayed["recorded_policy_error"]["max_relative_error"] == 0
    # Another setting of it: fewer rounds cut, so more tokens, under its own name.
    assert "last 5 messages" in run_replay(tmp_path / "clean", ["agent.context.keep_rounds=5"])
    [wider] = [
        p
        for p in json.loads((tmp_path / "clean/replay.json").read_text())["policies"]
        if p["name"] == "last 5 messages"
    ]
    [recorded] = [p for p in replayed["policies"] if p["name"] == "recorded"]
    assert wider["input_tokens"] > recorded["input_tokens"]

    # A kill after turn 4, then the same command: the rest is sent as it was.
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    sent_before = kill_after(tmp_path / "killed", KILLED_AFTER)
    resumed = await bench(data, tmp_path / "killed", monkeypatch)
    assert resumed.requests == clean.requests[sent_before:]
    [marker] = [e for e in events(tmp_path / "killed") if e.event == "resumed"]
    assert marker.resumed_at_turn == KILLED_AFTER + 1


def test_a_name_the_registry_does_not_hold_is_refused_at_startup(tmp_path):
    run = deepledger(
        "bench",
        "llm=openai_compatible",
        "agent.context.strategy=sliding",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    known = ", ".join(STRATEGIES)
    assert f"agent.context.strategy='sliding' is not a strategy; use one of {known}" in run.stderr
    assert not (tmp_path / "run").exists()
