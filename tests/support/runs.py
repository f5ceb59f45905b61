"""Run directories written by real runs, for the tests that read them (the report, the
token economics): `deepledger bench`'s own code path (``run_suite``) on WorldFacts'
demo questions, with the real search tool server over its corpus and a scripted model.

The model's script makes a run that has what real ones have: several searches a task,
compaction near the end of a small window, a task that misses the answer format and
is answered on the format-retry that carries its post-mortem, a transient error the
retry policy absorbs, and a task whose model fails for good (an error record). A run
can also be killed partway (the process exits at a given model call): its last task
has journals and no record, and the tasks after it never started.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deepledger.bench.suite import run_suite
from deepledger.errors import FatalLLMError, TransientLLMError
from deepledger.llm.retry import RetryingClient, RetryPolicy
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import Message, ToolSpec
from tests.support.cli import ROOT
from tests.support.config import CONF, composed
from tests.support.doubles.faults import FAST_RETRY

DEMO = ROOT / "benchmarks" / "worldfacts" / "demo.jsonl"
WINDOW = 6_000
TASKS = 6
SEARCHES = 6  # model turns with a search before the answer
UNBOXED = 1  # index of the task whose first retry never boxes its answer
TRANSIENT = 2  # ... whose first model call fails once, transiently
FAILING = TASKS - 1  # ... whose model fails for good: the last record is an error
KILLED_AT = (3, 2)  # a killed run dies at this task's second model call
KILLED_EXIT = 137  # what a shell shows for SIGKILL
NOTES = "Task goal: the figure asked for. Confirmed facts: the pages searched. Open leads: none."
OVERRIDES = [
    "benchmark=worldfacts",
    f"benchmark.execution.max_tasks={TASKS}",
    "benchmark.execution.max_concurrent=1",  # the model's script follows the task order
    "benchmark.execution.report_every_seconds=0",
    "llm=openai",
    "llm.model_name=gpt-4.1",
    f"llm.max_context_length={WINDOW}",
    "llm.max_tokens=500",
    "agent.main_agent.tools=[search]",
    "agent.context.strategy=compaction",
    "agent.context.keep_rounds=2",
    "agent.context_compress_limit=2",
    "agent.max_final_answer_retries=1",
    *FAST_RETRY,
]


def demo_tasks() -> list[dict]:
    return [json.loads(line) for line in DEMO.read_text().splitlines()][:TASKS]


def search_call(query: str) -> str:
    return (
        "<use_mcp_tool><server_name>search</server_name><tool_name>search</tool_name>"
        f"<arguments>{json.dumps({'query': query})}</arguments></use_mcp_tool>"
    )


@dataclass
class Researcher:
    """The scripted model: a function of what it is sent (and of how often each task
    text has been sent, which the compaction of older rounds does not change)."""

    kill_at: tuple[int, int] | None = None
    failing: int | None = FAILING
    tasks: list[dict] = field(default_factory=demo_tasks)
    calls: Counter[str] = field(default_factory=Counter)

    def __call__(self, messages: list[Message], tools: list[ToolSpec]) -> str:
        task = messages[1].content if len(messages) > 1 else ""
        if "You keep the notes of a research agent" in messages[0].content + task:
            return NOTES
        index = next(i for i, t in enumerate(self.tasks) if t["task_question"] in task)
        self.calls[task] += 1
        turn = self.calls[task]
        if (index, turn) == self.kill_at:
            os._exit(KILLED_EXIT)  # as SIGKILL would: no cleanup, nothing flushed after
        if index == self.failing:
            raise FatalLLMError("the model refused the request (scripted)")
        if index == TRANSIENT and turn == 1 and self.calls[f"failed {task}"] == 0:
            self.calls[f"failed {task}"] += 1
            raise TransientLLMError("the server is busy (scripted)")
        return self._reply(index, task, messages[-1].content, turn)

    def _reply(self, index: int, task: str, last: str, turn: int) -> str:
        if "This attempt at the task is over" in last:
            return (
                "Failure type: format_missed\nWhat happened: I did not box the answer.\n"
                "Useful findings: the first search result names the place."
            )
        answer = self.tasks[index]["ground_truth"] if index % 3 else "0"  # some are wrong
        if "The work on this task is over" in last or "Your previous reply had no" in last:
            if index == UNBOXED and "[Attempt " not in task:
                return "I am not sure."
            return f"\\boxed{{{answer}}}"
        if turn <= SEARCHES:
            question = self.tasks[index]["task_question"]
            query = question if turn == 1 else f"{question} {turn}"
            return f"Searching, step {turn}.\n" + search_call(query)
        if index == UNBOXED and "[Attempt " not in task:
            return "I have looked enough; the answer is in the pages above."
        return f"The pages agree. \\boxed{{{answer}}}"


def record_run(
    root: Path,
    kill_at: tuple[int, int] | None = None,
    overrides: tuple[str, ...] = (),
    failing: int | None = FAILING,
) -> Path:
    """Run the suite into ``root`` with the scripted model (and ``overrides`` after the
    run's own; ``failing``: the task whose model fails, if any); return ``root``."""
    model = Researcher(kill_at, failing)

    def scripted_client(cfg) -> RetryingClient:
        return RetryingClient(ScriptedLLM(responder=model), RetryPolicy.from_config(cfg.retry))

    cwd = Path.cwd()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("deepledger.bench.services.create_client", scripted_client)
        os.chdir(ROOT)  # the preset's corpus path is relative to the repository
        try:
            given = [*OVERRIDES, *overrides]
            asyncio.run(run_suite(composed(*given), root, CONF, ["bench", *given]))
        finally:
            os.chdir(cwd)
    return root


def record_killed_run(root: Path) -> Path:
    """A run whose process died at ``KILLED_AT``: a forked copy of this process (it
    need not import anything again) runs it and dies."""
    child = multiprocessing.get_context("fork").Process(target=record_run, args=(root, KILLED_AT))
    child.start()
    child.join(timeout=300)
    assert child.exitcode == KILLED_EXIT, f"the killed run ended with {child.exitcode}"
    return root


def record_runs_keeping(folder: Path, keeps: tuple[int, ...]) -> list[Path]:
    """One run per ``agent.keep_tool_result`` value, as a multirun makes (``keep<k>``),
    with no failing task: runs to average."""
    return [
        record_run(
            folder / f"keep{k}",
            # One cut a turn: the scripted model opens what its results show, so batched
            # cuts (more results shown) would change its trajectory between the runs.
            overrides=(
                "agent.context.strategy=keep_tool_results",
                f"agent.keep_tool_result={k}",
                "agent.context.cut_batch=1",
            ),
            failing=None,
        )
        for k in keeps
    ]
