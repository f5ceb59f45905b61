"""Benchmark runs on the small test suite (``tests/bench/suite``) with the scripted
model: in process through BenchmarkRunner, or as `deepledger bench` in a subprocess."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from deepledger.bench.judge import Judge, Judgement, make_judge
from deepledger.bench.progress import Progress
from deepledger.bench.runner import BenchmarkRunner
from deepledger.bench.tasks import load_tasks
from deepledger.config import as_record
from deepledger.errors import LLMError
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import MessageKind
from deepledger.store.run_store import RunStore
from deepledger.tools.pool import ToolManager
from tests.support.cli import ROOT
from tests.support.config import composed
from tests.support.doubles.bench_model import decide

SUITE = ROOT / "tests" / "bench" / "suite"


def bench_command(base_url: str, run_dir: Path, *extra: str) -> list[str]:
    """`deepledger bench` on the suite against an OpenAI-compatible server at ``base_url``."""
    return [
        sys.executable,
        "-m",
        "deepledger",
        "bench",
        f"benchmark.data.data_dir={SUITE}",
        "benchmark.name=tiny",
        "llm=openai_compatible",
        f"llm.base_url={base_url}",
        "agent.context_compress_limit=2",
        "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]


def arithmetic_suite(folder: Path, tasks: int) -> Path:
    """A data folder of ``tasks`` questions ``What is n + n?`` (ids t1, t2, ...)."""
    folder.mkdir()
    lines = [
        {"task_id": f"t{n}", "task_question": f"What is {n} + {n}?", "ground_truth": str(2 * n)}
        for n in range(1, tasks + 1)
    ]
    (folder / "standardized_data.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    return folder


def results(run_dir: Path) -> list[dict]:
    """The run's benchmark_results.jsonl lines, every one (none before the first)."""
    path = run_dir / "benchmark_results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def config(*overrides: str):
    return composed(
        f"benchmark.data.data_dir={SUITE}",
        "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1",
        *overrides,
    )


def model(decider=decide) -> ScriptedLLM:
    return ScriptedLLM(responder=lambda messages, tools: decider([m.content for m in messages]))


async def run(
    cfg, llm, root: Path, only: tuple[str, ...] = (), judge=None, clock=None, manifest=False
):
    """BenchmarkRunner over the suite's tasks (or those in ``only``), into ``root``; the
    task records as their JSON. ``manifest``: write the manifest first, as `deepledger
    bench` does (the report reads it); ``clock``: the runner's clock."""
    tasks = [t for t in load_tasks(cfg.benchmark.data).tasks if not only or t.task_id in only]
    run_dir = RunStore(root)
    if manifest:
        run_dir.start(as_record(cfg), ["bench"], tasks=len(tasks))
    runner = BenchmarkRunner(
        cfg,
        llm=llm,
        tools=ToolManager({}),
        run_dir=run_dir,
        judge=judge or make_judge("normalized"),
        progress=Progress(plain=True),
        **({"clock": clock} if clock else {}),
    )
    try:
        return [record.to_json() for record in await runner.run(tasks)]
    finally:
        run_dir.close()


def task_texts(llm: ScriptedLLM) -> list[str]:
    """The task message of every call the model saw, in order."""
    return [c.messages[1].content for c in llm.calls if c.messages[1].kind is MessageKind.TASK]


class FlakyJudge(Judge):
    """Fails its first call with ``error`` (by default a judge model that is down: the
    answer is left unjudged; another exception is a bug: the task is an error), then
    agrees with the truth."""

    name = "flaky"

    def __init__(self, error: Exception | None = None) -> None:
        self.calls = 0
        self.error = error or LLMError("judge model unavailable")

    async def _judge(self, question, answer, ground_truth):
        self.calls += 1
        if self.calls == 1:
            raise self.error
        return Judgement(answer == ground_truth, self.name, "compared")
