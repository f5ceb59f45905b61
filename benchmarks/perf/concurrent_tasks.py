"""Hundreds of tasks at once in one process: wall time against the ideal, memory, journal.

256 tasks run concurrently; each makes 10 loop turns that call the real local ``search``
MCP server (one shared session), plus the closing summary call, against the loopback
OpenAI-compatible fake answering every call after 1 s. Each task makes 12 sequential
model calls (10 that call search, the answer, the closing summary), so the ideal wall
time is 12 s; the target is within 10 % of it. Also
reported: CPU seconds of the runtime and of the child processes (the model fake and
the search server, which share these 2 cores), peak RSS of this process and of the
largest child, and journal bytes per turn
(the journal only appends, so a task's bytes grow linearly with its turns). Then the
same run with 16 tasks gives the wall time of one task's path when nothing competes
for the cores: the ideal plus the unavoidable per-call overhead.

    .venv/bin/python benchmarks/perf/concurrent_tasks.py [--tasks 256] [--turns 10]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import _checkout  # noqa: F401  (the checkout on sys.path: tests.support.doubles)
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply

from deepledger.bench.judge import make_judge
from deepledger.bench.progress import Progress
from deepledger.bench.runner import BenchmarkRunner
from deepledger.bench.tasks import load_tasks
from deepledger.cli import config_dir
from deepledger.config import compose, tool_servers
from deepledger.llm.factory import create_client
from deepledger.store.layout import RunLayout
from deepledger.store.run_store import RunStore
from deepledger.tools.pool import ToolManager

LATENCY = 1.0
SEARCH_INSTANCES = 1  # search processes (tools.search.instances); 2 measured no better here
UNCONTENDED_TASKS = 16


def responder(turns: int):
    def respond(request) -> Reply:
        messages = request.messages
        task = messages[1]["content"]
        done = sum(1 for m in messages if m["role"] == "assistant")
        if "The work on this task is over" in messages[-1]["content"] or done >= turns:
            return Reply("\\boxed{42}", delay=LATENCY)
        call = (
            "<use_mcp_tool><server_name>search</server_name><tool_name>search</tool_name>"
            f'<arguments>{{"query": "{task} history step {done}", "k": 3}}</arguments>'
            "</use_mcp_tool>"
        )
        return Reply(f"Step {done}. {call}", delay=LATENCY)

    return respond


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def write_suite(folder: Path, tasks: int) -> None:
    lines = [
        json.dumps({"task_id": f"t{i}", "task_question": f"Topic {i}: Paris", "ground_truth": "42"})
        for i in range(tasks)
    ]
    (folder / "standardized_data.jsonl").write_text("\n".join(lines) + "\n")


def serve(turns: int) -> None:
    """Run the fake model server until stdin closes (in its own process, so its work on
    hundreds of requests does not compete with the runtime being measured)."""
    with FakeLLMServer(responder=responder(turns)) as server:
        print(server.openai_base_url, flush=True)
        sys.stdin.read()
    print(f"model fake cpu {_cpu(resource.RUSAGE_SELF):.2f}", file=sys.stderr)


@contextmanager
def fake_model_process(turns: int) -> Iterator[str]:
    command = [sys.executable, __file__, "--serve", "--turns", str(turns)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield process.stdout.readline().strip()
    finally:
        process.stdin.close()
        process.wait(timeout=30)


async def measure(tasks: int, turns: int, folder: Path) -> dict:
    write_suite(folder, tasks)
    layout = RunLayout(folder / "run")
    with fake_model_process(turns) as base_url:
        cfg = compose(
            config_dir(),
            [
                f"benchmark.data.data_dir={folder}",
                "llm=openai_compatible",
                f"llm.base_url={base_url}",
                "agent.main_agent.tools=[search]",
                f"benchmark.execution.max_concurrent={tasks}",
                "agent.max_final_answer_retries=1",
                f"tools.search.instances={SEARCH_INSTANCES}",
            ],
        )
        llm = create_client(cfg.llm)
        tools = ToolManager(tool_servers(cfg))
        await tools.for_task(["search"]).start()  # index built and server up before timing
        runner = BenchmarkRunner(
            cfg,
            llm=llm,
            tools=tools,
            run_dir=RunStore(layout.root),
            judge=make_judge("normalized"),
            progress=Progress(plain=True, file=io.StringIO()),
        )
        started, cpu_before = time.monotonic(), _cpu(resource.RUSAGE_SELF)
        records = await runner.run(load_tasks(cfg.benchmark.data).tasks)
        wall = time.monotonic() - started
        runtime_cpu = _cpu(resource.RUSAGE_SELF) - cpu_before
        await tools.aclose()
        await llm.aclose()
    journals = layout.attempt_journals()
    journal_bytes = sum(p.stat().st_size for p in journals)
    # Per task: `turns` replies calling search, the reply that answers, the summary call.
    ideal = (turns + 2) * LATENCY
    return {
        "tasks": tasks,
        "turns_per_task": turns,
        "model_latency_s": LATENCY,
        "ideal_wall_s": ideal,
        "wall_s": round(wall, 2),
        "overhead_vs_ideal": round(wall / ideal - 1, 3),
        "runtime_cpu_s": round(runtime_cpu, 2),
        "children_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN), 2),
        "tasks_correct": sum(1 for r in records if r.correct),
        "tool_calls": sum(r.tool_calls for r in records),
        "peak_rss_mb_runtime": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_rss_mb_largest_child": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
        ),
        "journal_bytes_per_task": journal_bytes // max(1, len(journals)),
        "journal_bytes_per_turn": journal_bytes // max(1, len(journals) * turns),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=256)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/perf/results/concurrent_tasks.json")
    )
    args = parser.parse_args()
    if args.serve:
        serve(args.turns)
        return
    with tempfile.TemporaryDirectory() as folder:
        result = asyncio.run(measure(args.tasks, args.turns, Path(folder)))
    # The same run with a few tasks: the ideal plus the overhead of one task's own path
    # (model fake, search server, runtime) when nothing else competes for the cores.
    with tempfile.TemporaryDirectory() as folder:
        alone = asyncio.run(measure(UNCONTENDED_TASKS, args.turns, Path(folder)))
    result["uncontended_tasks"] = UNCONTENDED_TASKS
    result["uncontended_wall_s"] = alone["wall_s"]
    result["overhead_vs_uncontended"] = round(result["wall_s"] / alone["wall_s"] - 1, 3)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
