"""A task-scoped tool server against a shared one: wall time against the ideal span.

16 tasks x 10 turns at 8-way concurrency, each turn calling the real local ``search``
MCP server over stdio, against the loopback OpenAI-compatible fake (in a process of its
own) answering every request after a fixed delay. Run twice: ``tools.search.scope=task``
(one server process per task, started with its task) and ``scope=shared`` (one for the
run, up before timing). Each task makes ``turns + 2`` sequential requests (the calls,
the answer, the closing summary), and the tasks run in ``tasks / concurrency`` waves, so
the ideal span is ``waves * (turns + 2) * delay``; the target is at most 1.1x of it both
ways. The run has a tool-list cache, as ``deepledger bench`` does, filled before timing,
so a task's server starts with the task while its first request is in flight; a third
run without the cache (each task's first request waits for its server to list its
tools) shows what that saves. What is left over is the servers' own start: all of a
wave's servers start at once and share the cores, and a call that comes before its
server is up waits for it. A fourth run, ``task_spares``, is what ``deepledger bench`` does:
its runner has the pool start the servers ahead as the tasks start
(``ToolManager.warm_ahead``, ``tools/spares.py``); the first wave's still start with
their tasks, but each later task finds its server up. The ``task`` run turns that off.
``--rounds N`` repeats the four runs interleaved, so the machine's load hits each alike.

    .venv/bin/python benchmarks/perf/task_servers.py [--tasks 16] [--turns 10]
        [--concurrency 8] [--delay 1.0] [--rounds 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
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
from deepledger.tools.list_cache import ToolListCache
from deepledger.tools.pool import ToolManager


def responder(turns: int, delay: float):
    def respond(request) -> Reply:
        messages = request.messages
        task = messages[1]["content"]
        done = sum(1 for m in messages if m["role"] == "assistant")
        if "The work on this task is over" in messages[-1]["content"] or done >= turns:
            return Reply("\\boxed{42}", delay=delay)
        call = (
            "<use_mcp_tool><server_name>search</server_name><tool_name>search</tool_name>"
            f'<arguments>{{"query": "{task} step {done}", "k": 3}}</arguments></use_mcp_tool>'
        )
        return Reply(f"Step {done}. {call}", delay=delay)

    return respond


def serve(turns: int, delay: float) -> None:
    """The fake model until stdin closes, in its own process (its work is not timed)."""
    with FakeLLMServer(responder=responder(turns, delay)) as server:
        print(server.openai_base_url, flush=True)
        sys.stdin.read()


@contextmanager
def fake_model_process(turns: int, delay: float) -> Iterator[str]:
    command = [sys.executable, __file__, "--serve", "--turns", str(turns), "--delay", str(delay)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield process.stdout.readline().strip()
    finally:
        process.stdin.close()
        process.wait(timeout=30)


async def measure(
    scope: str, args: argparse.Namespace, folder: Path, listed: bool, spares: bool
) -> dict:
    lines = [
        json.dumps({"task_id": f"t{i}", "task_question": f"Topic {i}: Paris", "ground_truth": "42"})
        for i in range(args.tasks)
    ]
    (folder / "standardized_data.jsonl").write_text("\n".join(lines) + "\n")
    layout = RunLayout(folder / "run")
    with fake_model_process(args.turns, args.delay) as base_url:
        cfg = compose(
            config_dir(),
            [
                f"benchmark.data.data_dir={folder}",
                "llm=openai_compatible",
                f"llm.base_url={base_url}",
                "agent.main_agent.tools=[search]",
                f"benchmark.execution.max_concurrent={args.concurrency}",
                "agent.max_final_answer_retries=1",
                f"tools.search.scope={scope}",
            ],
        )
        llm = create_client(cfg.llm)
        cache = ToolListCache(folder / "tool_lists") if listed else None
        tools = ToolManager(tool_servers(cfg), list_cache=cache)
        warm = tools.for_task(["search"])  # index built (and list cached) before timing
        await warm.start()
        await warm.aclose()
        runner = BenchmarkRunner(
            cfg,
            llm=llm,
            tools=tools,
            run_dir=RunStore(layout.root),
            judge=make_judge("normalized"),
            progress=Progress(plain=True, file=io.StringIO()),
            warm_task_servers=spares,  # the runner warms them as its tasks start
        )
        started = time.monotonic()
        records = await runner.run(load_tasks(cfg.benchmark.data).tasks)
        wall = time.monotonic() - started
        await tools.aclose()
        await llm.aclose()
    waves = math.ceil(args.tasks / args.concurrency)
    ideal = waves * (args.turns + 2) * args.delay
    return {
        "wall_s": round(wall, 2),
        "ideal_s": round(ideal, 2),
        "ratio_to_ideal": round(wall / ideal, 3),
        "tasks_correct": sum(1 for r in records if r.correct),
        "tool_calls": sum(r.tool_calls for r in records),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--delay", type=float, default=1.0, help="the model's reply delay, s")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved repeats")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/perf/results/task_servers.json")
    )
    args = parser.parse_args()
    if args.serve:
        serve(args.turns, args.delay)
        return
    result: dict = {
        "tasks": args.tasks,
        "turns_per_task": args.turns,
        "concurrency": args.concurrency,
        "model_delay_s": args.delay,
    }
    # "task_unlisted": no tool-list cache, so each task's first request waits for its
    # server to list its tools (what the early start saves).
    # "task_spares": the pool starts task-scoped servers ahead (ToolManager.warm_ahead)
    # from the moment the tasks start: later waves find theirs up.
    runs = [
        ("task", "task", True, False),
        ("task_spares", "task", True, True),
        ("shared", "shared", True, False),
        ("task_unlisted", "task", False, False),
    ]
    for round_ in range(args.rounds):  # interleaved: the machine's load hits each alike
        for label, scope, listed, spares in runs:
            with tempfile.TemporaryDirectory() as folder:
                measured = asyncio.run(measure(scope, args, Path(folder), listed, spares))
            key = label if args.rounds == 1 else f"{label}_{round_ + 1}"
            result[key] = measured
            print(key, measured["ratio_to_ideal"], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
