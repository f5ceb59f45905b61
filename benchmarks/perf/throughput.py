"""deepledger's own CPU per turn, and wall time against the ideal with thousands of tasks.

Two measurements, both through the real runner (``BenchmarkRunner``, the run store, the
journals, the progress display, the OpenAI-compatible client over aiohttp) against a
loopback fake model served by processes of its own (``--fake-processes`` of them on one
port with SO_REUSEPORT and a listen backlog of 8192), so neither the fake's work nor
its scheduling is counted or in the way:

- **CPU per turn**: tasks run one at a time (``max_concurrent=1``) against a fake that
  answers at once, each ``--long-turns`` turns calling an in-process tool double that
  returns 5 KB at once (no latency, no server) with every result kept in the window
  (``agent.keep_tool_result=-1``; at turn 300 each request carries ~1.5 MB of history).
  The process's CPU time (``time.process_time``: every thread of the runtime, the fake
  and tool servers are other processes or none) is read at each tool call, so the
  difference between two calls of a task is one whole turn of deepledger's own work:
  the tool result taken in, the journal, the request built and encoded, the HTTP
  exchange, the reply decoded and parsed. Reported: the median of turns 6-15 and of the
  last ten turns, and CPU seconds per 1,000 turns for both.
- **Wall vs ideal**: ``--tasks`` (256 and 2,048) concurrent tasks of 10 tool-calling
  turns at 1 s model latency, the same tool double; each task makes 12 model calls (10
  calling the tool, the answer, the closing summary), so the ideal wall is 12 s.
  Reported beside the process's CPU: the event loop's thread's own
  (``event_loop_cpu_s``), the share one core must carry; the wall time less it is what
  the loop spent waiting.

``--backend ray`` adds the largest load through the whole suite as the CLI runs it
(``bench.suite.run_suite``), once with the asyncio backend and once with
``benchmark.execution.backend=ray`` and 2 local workers (Ray's start included), the tool
being the built-in memory tool's listing (Ray's workers build their own tools from the
config, so the in-process double cannot be handed to them): both wall times and their
ratio.

    .venv/bin/python benchmarks/perf/throughput.py [--label after] [--tasks 256 2048]
        [--compare before /tmp/before-throughput] [--backend ray] [--out FILE]

``--compare NAME TREE`` first runs the same measurements with another source tree's
``src`` on ``PYTHONPATH`` (e.g. the last commit, unpacked with ``git archive``).
``--profile FILE`` writes a cProfile of the CPU-per-turn run (of the wall-time run of
``--tasks N`` when given); ``THROUGHPUT_FAKE_TRACE=1`` has the fakes say every 2 s how
many requests they hold.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import io
import itertools
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

LATENCY = 1.0
TURNS = 10
LONG_TURNS = 300
RESULT_BYTES = 5 * 1024
OVER = "The work on this task is over"  # the closing summary request's text
BACKLOG = 8192
EARLY = range(6, 16)  # turns whose CPU is "at turn 10"


# --------------------------------------------------------------------------- the fake


KB_CALL = (
    "<use_mcp_tool><server_name>kb</server_name><tool_name>lookup</tool_name>"
    '<arguments>{{"query": "step {done}"}}</arguments></use_mcp_tool>'
)
# The built-in memory tool's listing (a directory read): a cheap tool every Ray worker
# has, for the backend comparison, whose workers build their own tools from the config.
MEMORY_CALL = (
    "<use_mcp_tool><server_name>memory</server_name><tool_name>list</tool_name>"
    "<arguments>{{}}</arguments></use_mcp_tool>"
)
CALLS = {"kb": KB_CALL, "memory": MEMORY_CALL}


def reply_text(body: bytes, turns: int, call: str = KB_CALL) -> str:
    """The scripted model: call the tool until ``turns`` calls were made, then answer.
    Read from the body's bytes, not its decoded JSON: the fake's own CPU is kept small
    (it shares the 2 cores), and the runtime's bodies use the standard separators."""
    done = body.count(b'"role": "assistant"') + body.count(b'"role":"assistant"')
    last_message = body[body.rfind(b'{"role"') :]
    if OVER.encode() in last_message or done >= turns:
        return "\\boxed{42}"
    return f"Step {done}. {call.format(done=done)}"


def completion(text: str, number: int) -> bytes:
    return json.dumps(
        {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "model": "fake-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050},
        }
    ).encode()


def serve(port: int, latency: float, turns: int, tool: str) -> None:
    """One fake process: an aiohttp server on ``port`` shared with its siblings
    (SO_REUSEPORT), answering each request ``latency`` seconds after it arrived."""
    from aiohttp import web

    served = in_flight = peak = 0

    async def chat(request: web.Request) -> web.Response:
        nonlocal served, in_flight, peak
        arrived = time.monotonic()
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            served += 1
            text = reply_text(await request.read(), turns, CALLS[tool])
            wait = latency - (time.monotonic() - arrived)
            if wait > 0:
                await asyncio.sleep(wait)
            return web.Response(body=completion(text, served), content_type="application/json")
        finally:
            in_flight -= 1

    async def report() -> None:
        if os.environ.get("THROUGHPUT_FAKE_TRACE"):
            while True:
                await asyncio.sleep(2)
                print(f"fake {os.getpid()}: in flight {in_flight} served {served}", file=sys.stderr)

    async def main() -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port, reuse_port=True, backlog=BACKLOG)
        await site.start()
        print("ready", flush=True)
        tracing = asyncio.ensure_future(report())
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        tracing.cancel()
        await runner.cleanup()
        print(f"fake {os.getpid()}: served {served}, at most {peak} at once", file=sys.stderr)

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def fake_model(processes: int, latency: float, turns: int, tool: str = "kb") -> Iterator[str]:
    """``processes`` fake servers on one port; the base URL to point the run at."""
    port = free_port()
    command = [sys.executable, __file__, "--serve", str(port), "--latency", str(latency)]
    command += ["--turns", str(turns), "--tool", tool]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the fake is ours
    with ExitStack() as stack:
        children = []
        for _ in range(processes):
            child = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
            stack.callback(_stop, child)
            children.append(child)
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield f"http://127.0.0.1:{port}/v1"


def _stop(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


# --------------------------------------------------------------------------- the run


# Words, not one repeated letter (tokenizers treat those unlike text).
FACTS = " ".join(f"fact {i} about the topic" for i in range(400))


def result_text(query: str) -> str:
    """A 5 KB tool result, different for every call; made in microseconds, since the
    tool double runs in the measured process."""
    return f"{query}: {FACTS}"[:RESULT_BYTES]


def write_suite(folder: Path, tasks: int) -> None:
    lines = [
        json.dumps({"task_id": f"t{i}", "task_question": f"Topic {i}: Paris", "ground_truth": "42"})
        for i in range(tasks)
    ]
    (folder / "standardized_data.jsonl").write_text("\n".join(lines) + "\n")


async def run_suite(
    folder: Path,
    base_url: str,
    tasks: int,
    turns: int,
    overrides: list[str],
    stamps_wanted: bool = False,
) -> dict[str, Any]:
    """One run of ``tasks`` tasks through the runner; the CPU time read at each tool call
    by task, the wall time and the process's CPU time."""
    from deepledger.bench.judge import make_judge
    from deepledger.bench.progress import Progress
    from deepledger.bench.runner import BenchmarkRunner
    from deepledger.bench.tasks import load_tasks
    from deepledger.cli import config_dir
    from deepledger.config import compose
    from deepledger.llm.factory import create_client
    from deepledger.llm.tokens import default_counter
    from deepledger.store.run_store import RunStore
    from deepledger.tools.pool import ToolManager
    from deepledger.tools.types import LocalTool, ToolInfo

    calls: dict[str, list[float]] = {}
    # Read at each tool call only where needed: a CPU clock is a system call here.
    stamp = time.process_time if stamps_wanted else lambda: 0.0

    class WithToolDouble(ToolManager):
        """Every agent also gets ``kb.lookup``: 5 KB back at once, in-process."""

        def for_task(self, server_names, blacklist=(), local_tools=(), policy=None, **kw):  # type: ignore[no-untyped-def,override]
            stamps: list[float] = []

            async def lookup(arguments: dict[str, Any]) -> str:
                stamps.append(stamp())
                return result_text(str(arguments.get("query", "")))

            tool = LocalTool(ToolInfo("kb", "lookup", "Look up.", {"type": "object"}), lookup)
            calls[f"task{len(calls)}"] = stamps
            return super().for_task(server_names, blacklist, [*local_tools, tool], policy, **kw)

    write_suite(folder, tasks)
    cfg = compose(
        config_dir(),
        [
            f"benchmark.data.data_dir={folder}",
            "llm=openai_compatible",
            f"llm.base_url={base_url}",
            "llm.max_context_length=100000000",
            "agent.main_agent.tools=[]",
            f"agent.main_agent.max_turns={turns + 5}",
            "agent.keep_tool_result=-1",
            "agent.max_final_answer_retries=1",
            *overrides,
        ],
    )
    default_counter()  # loading the tokenizer is start-up work, not per-turn work
    llm = create_client(cfg.llm)
    tools = WithToolDouble({})
    runner = BenchmarkRunner(
        cfg,
        llm=llm,
        tools=tools,
        run_dir=RunStore(folder / "run"),
        judge=make_judge("normalized"),
        progress=Progress(plain=True, file=io.StringIO()),
    )
    collecting = CollectorTime()
    started, cpu_before = time.monotonic(), time.process_time()
    loop_cpu_before = time.thread_time()  # this thread runs the event loop
    with collecting:
        records = await runner.run(load_tasks(cfg.benchmark.data).tasks)
    wall = time.monotonic() - started
    cpu = time.process_time() - cpu_before
    loop_cpu = time.thread_time() - loop_cpu_before
    await tools.aclose()
    await llm.aclose()
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "loop_cpu_s": loop_cpu,
        "correct": sum(1 for r in records if r.correct),
        "gc_s": collecting.seconds,
        "gc_by_generation": {
            str(g): [collecting.counts[g], round(t, 2)]
            for g, t in sorted(collecting.by_generation.items())
        },
        "stamps": list(calls.values()),
    }


class CollectorTime:
    """Wall time spent in Python's cycle collector while it is entered."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0
        self.by_generation: dict[int, float] = {}
        self.counts: dict[int, int] = {}

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            spent = time.perf_counter() - self._started
            self.seconds += spent
            generation = info["generation"]
            self.by_generation[generation] = self.by_generation.get(generation, 0.0) + spent
            self.counts[generation] = self.counts.get(generation, 0) + 1

    def __enter__(self) -> CollectorTime:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self._callback)


def cpu_per_turn(folder: Path, fake_processes: int, tasks: int, turns: int) -> dict[str, Any]:
    with fake_model(fake_processes, 0.0, turns) as base_url:
        run = asyncio.run(
            run_suite(
                folder, base_url, tasks, turns, ["benchmark.execution.max_concurrent=1"], True
            )
        )
    # stamps[k] is read when the tool is called at turn k+1: stamps[k] - stamps[k-1] is
    # the whole of turn k+1 but the tool's own (nil) work.
    per_turn = [[b - a for a, b in itertools.pairwise(s)] for s in run["stamps"]]
    assert all(len(p) == turns - 1 for p in per_turn), [len(p) for p in per_turn]
    early = [p[t - 2] for p in per_turn for t in EARLY]
    late = [p[t - 2] for p in per_turn for t in range(turns - 9, turns + 1)]
    early_ms = statistics.median(early) * 1000
    late_ms = statistics.median(late) * 1000
    return {
        "tasks": tasks,
        "turns_per_task": turns,
        "tool_result_bytes": RESULT_BYTES,
        "cpu_ms_per_turn_at_turn_10": round(early_ms, 3),
        f"cpu_ms_per_turn_at_turn_{turns}": round(late_ms, 3),
        "cpu_s_per_1000_turns_at_turn_10": round(early_ms, 3),
        f"cpu_s_per_1000_turns_at_turn_{turns}": round(late_ms, 3),
        "cpu_s_whole_run": round(run["cpu_s"], 2),
        "tasks_correct": run["correct"],
    }


def wall_vs_ideal(
    folder: Path, fake_processes: int, tasks: int, overrides: list[str]
) -> dict[str, Any]:
    fake_cpu_before = _children_cpu()
    with fake_model(fake_processes, LATENCY, TURNS) as base_url:
        run = asyncio.run(
            run_suite(
                folder,
                base_url,
                tasks,
                TURNS,
                [f"benchmark.execution.max_concurrent={tasks}", *overrides],
            )
        )
    fake_cpu = _children_cpu() - fake_cpu_before  # the fakes have exited: theirs alone
    ideal = (TURNS + 2) * LATENCY
    turns = tasks * (TURNS + 2)
    return {
        "tasks": tasks,
        "turns_per_task": TURNS,
        "model_latency_s": LATENCY,
        "ideal_wall_s": ideal,
        "wall_s": round(run["wall_s"], 2),
        "wall_over_ideal": round(run["wall_s"] / ideal, 3),
        "runtime_cpu_s": round(run["cpu_s"], 2),
        "runtime_cpu_ms_per_model_call": round(run["cpu_s"] / turns * 1000, 3),
        # The event loop's own thread: the part of the CPU that one core must carry.
        "event_loop_cpu_s": round(run["loop_cpu_s"], 2),
        "event_loop_cpu_ms_per_model_call": round(run["loop_cpu_s"] / turns * 1000, 3),
        "runtime_cycle_collector_s": round(run["gc_s"], 2),
        "collections_and_seconds_by_generation": run["gc_by_generation"],
        "fake_processes": fake_processes,
        "fake_cpu_s": round(fake_cpu, 2),
        "tasks_correct": run["correct"],
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement with this process's deepledger (the tree on PYTHONPATH)."""
    result: dict[str, Any] = {"load_average_1_5_15_before": _load()}
    with tempfile.TemporaryDirectory() as folder:
        result["cpu_per_turn"] = cpu_per_turn(Path(folder), 1, args.long_tasks, args.long_turns)
    result["wall_vs_ideal"] = []
    for tasks in args.tasks:
        with tempfile.TemporaryDirectory() as folder:
            result["wall_vs_ideal"].append(
                wall_vs_ideal(Path(folder), args.fake_processes, tasks, [])
            )
    if args.backend == "ray":
        result["ray"] = ray_run(args)
    result["load_average_1_5_15_after"] = _load()
    return result


RAY = ["benchmark.execution.backend=ray", "benchmark.execution.ray.num_workers=2"]


def ray_run(args: argparse.Namespace) -> dict[str, Any]:
    """The largest load through the whole suite (``bench.suite.run_suite``, as the CLI
    runs it) with each backend, the memory tool's listing as the tool: Ray's workers
    build their own tools and clients from the config, so no double can be handed in."""
    tasks = max(args.tasks)
    result: dict[str, Any] = {"tasks": tasks, "tool": "memory.list", "ideal_wall_s": 12.0}
    for name, overrides in (("asyncio", []), ("ray", RAY)):
        with tempfile.TemporaryDirectory() as folder:
            try:
                result[name] = whole_suite(Path(folder), args.fake_processes, tasks, overrides)
            except Exception as exc:  # reported in the results, not hidden
                result[name] = {"failed": f"{type(exc).__name__}: {exc}"[:500]}
    if "wall_s" in result["asyncio"] and "wall_s" in result["ray"]:
        result["ray_wall_over_asyncio_wall"] = round(
            result["ray"]["wall_s"] / result["asyncio"]["wall_s"], 3
        )
    return result


def whole_suite(
    folder: Path, fake_processes: int, tasks: int, overrides: list[str]
) -> dict[str, Any]:
    from deepledger.bench.suite import run_suite as suite
    from deepledger.cli import config_dir
    from deepledger.config import compose

    write_suite(folder, tasks)
    with fake_model(fake_processes, LATENCY, TURNS, tool="memory") as base_url:
        cfg = compose(
            config_dir(),
            [
                f"benchmark.data.data_dir={folder}",
                "llm=openai_compatible",
                f"llm.base_url={base_url}",
                "agent.main_agent.tools=[memory]",
                f"agent.main_agent.max_turns={TURNS + 5}",
                "agent.max_final_answer_retries=1",
                f"benchmark.execution.max_concurrent={tasks}",
                "benchmark.execution.report=false",
                *overrides,
            ],
        )
        started, cpu_before = time.monotonic(), time.process_time()
        summary = asyncio.run(suite(cfg, folder / "run", config_dir(), ["throughput"]))
        wall = time.monotonic() - started
        cpu = time.process_time() - cpu_before
    return {
        "overrides": overrides,
        "wall_s": round(wall, 2),
        "wall_over_ideal": round(wall / ((TURNS + 2) * LATENCY), 3),
        "driver_cpu_s": round(cpu, 2),
        "accuracy": summary.accuracy,
        "tasks_finished": summary.tasks.finished,
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def in_tree(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The measurements run by another source tree (its ``src`` on PYTHONPATH)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, __file__, "--only-measure", "--out", out.name]
        command += ["--tasks", *map(str, args.tasks), "--long-turns", str(args.long_turns)]
        command += ["--long-tasks", str(args.long_tasks)]
        command += ["--fake-processes", str(args.fake_processes)]
        env = os.environ | {"PYTHONPATH": str(tree / "src")}
        subprocess.run(command, check=True, env=env)
        return json.loads(Path(out.name).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[256, 2048])
    parser.add_argument("--long-turns", type=int, default=LONG_TURNS)
    parser.add_argument("--long-tasks", type=int, default=3)
    parser.add_argument("--fake-processes", type=int, default=2)
    parser.add_argument("--backend", choices=["asyncio", "ray"], default="asyncio")
    parser.add_argument("--label", default="after")
    parser.add_argument("--compare", nargs=2, metavar=("NAME", "TREE"))
    parser.add_argument("--profile", type=Path, help="cProfile the CPU-per-turn run to FILE")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/perf/results/throughput.json"))
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--latency", type=float, default=LATENCY, help=argparse.SUPPRESS)
    parser.add_argument("--turns", type=int, default=TURNS, help=argparse.SUPPRESS)
    parser.add_argument("--tool", choices=sorted(CALLS), default="kb", help=argparse.SUPPRESS)
    parser.add_argument("--only-measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.tasks_given = "--tasks" in sys.argv
    if args.serve:
        serve(args.serve, args.latency, args.turns, args.tool)
        return
    if args.profile:
        profile(args)
        return
    if args.only_measure:
        args.out.write_text(json.dumps(measure(args), indent=2) + "\n")
        return
    result: dict[str, Any] = {
        "what": (
            "deepledger's own CPU per turn (process CPU time of the runtime; the fake model "
            "runs in processes of its own, on one port with SO_REUSEPORT) with 5 KB results "
            "of an in-process tool double with no latency (no tool servers), tasks one at a "
            "time; and wall time against the ideal for many concurrent tasks x 10 turns at "
            "1 s model latency with the same tool double; with --backend ray, the largest "
            "load through the whole suite on both backends, the built-in memory tool's "
            "listing as the tool"
        ),
        "command": " ".join(["benchmarks/perf/throughput.py", *sys.argv[1:]]),
        "cpus": os.cpu_count(),
    }
    if args.compare:
        result[args.compare[0]] = in_tree(Path(args.compare[1]).resolve(), args)
    result[args.label] = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def profile(args: argparse.Namespace) -> None:
    import cProfile

    # With --tasks N: the wall-time run of N tasks; else the CPU-per-turn run.
    with tempfile.TemporaryDirectory() as folder, cProfile.Profile() as profiler:
        if args.tasks_given:
            print(json.dumps(wall_vs_ideal(Path(folder), args.fake_processes, args.tasks[0], [])))
        else:
            print(json.dumps(cpu_per_turn(Path(folder), 1, args.long_tasks, args.long_turns)))
    profiler.dump_stats(args.profile)


if __name__ == "__main__":
    main()
