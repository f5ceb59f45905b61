"""Faults injected into whole `deepledger bench` runs on loopback, and what they cost.

Every scenario runs the same suite (task k asks for the code word of key k) against the
same scripted model (tests.support.doubles.faults.ResearchModel) behind the loopback
OpenAI-compatible fake, with the faults named in its row; "accuracy vs clean" compares
it with the fault-free run of the same scripted replies. Faults are seeded
(``--seed``), so a table can be reproduced.

- llm-http: a share of model requests answered 429, 500, 503, a truncated JSON body,
  or an HTML error page;
- llm-outage: some tasks' every request answered 500 (they end in ``error``), then a
  resume with the server back;
- llm-timeouts: replies later than llm.timeout_seconds=2, and replies that never come;
- tool-faults: the fault tool server crashing mid-call, hanging past its timeout,
  writing garbage on the wire, answering 4 MiB (over a 1 MiB cap) or failing;
- tool-start: the tool server cannot start;
- sigkill: `deepledger bench` SIGKILLed at seeded requests, resumed with the same
  command until it ends ("faults" = kills that landed).

A full disk is covered by tests/faults/test_full_disk.py, not here (it needs root).

"faults" counts the model requests faulted, the tool calls that reached the server with
a fault (a crash also fails the calls in flight with it: those show in "retries" only),
start failures and kills that landed; "retries" counts model requests that repeated a
failed one plus failed tool calls the model called again; "outcomes" are the recorded
tasks (finished/error) after the first run and, where there is one, after the resume.

    .venv/bin/python benchmarks/perf/faults.py [--tasks 20] [--seed 7]

Writes benchmarks/perf/results/faults.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import _checkout  # noqa: F401  (the checkout on sys.path: tests.support.doubles)
from tests.support.doubles.fake_llm_server import FakeLLMServer, RecordedRequest, Step
from tests.support.doubles.faults import (
    FaultInjector,
    ResearchModel,
    accuracy,
    bench_overrides,
    latest_outcomes,
    message_texts,
    read_tool_calls,
    run_in_process,
    task_key,
    write_suite,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).with_name("results") / "faults.json"
TOOL_FAULTS = ["crash", "hang", "garbage", "huge", "error"]
TOOL_SETTINGS = {"call_timeout_seconds": 2, "max_message_bytes": 1024 * 1024}


def outcome(run_dir: Path) -> str:
    records = latest_outcomes(run_dir).values()
    finished = sum(r["status"] == "finished" for r in records)
    return f"{finished}/{sum(r['status'] == 'error' for r in records)}"


def tool_retries(server: FakeLLMServer) -> int:
    """Failed tool calls the model called again, from the tool results in each task's last
    request (a crash fails the calls in flight with it, planned or not)."""
    last: dict[str | None, RecordedRequest] = {}
    for request in server.requests:
        last[task_key(request)] = request
    again = 0
    for request in last.values():
        results = [t for t in message_texts(request)[2:] if t.startswith("[faulty.lookup ")]
        failed = [t.startswith("[faulty.lookup error]") for t in results]
        again += sum(failed[:-1])  # each result but the last was followed by a call
    return again


def row(name, tasks, injected, retries, first, after, acc, clean, seconds) -> dict:
    return {
        "scenario": name,
        "tasks": tasks,
        "faults_injected": injected,
        "retries": retries,
        "outcomes_first_run": first,
        "outcomes_after_resume": after,
        "accuracy": acc,
        "accuracy_vs_clean": None if acc is None or clean is None else round(acc - clean, 3),
        "seconds": round(seconds, 1),
    }


async def in_process(
    name: str,
    tasks: int,
    seed: int,
    clean: float | None,
    *,
    tools: bool = False,
    faults: dict | None = None,
    tool_faults: dict | None = None,
    tool_args: tuple[str, ...] = (),
    extra: tuple[str, ...] = (),
    resume: Callable[[FaultInjector], None] | None = None,
) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_suite(root / "data", tasks)
        model = ResearchModel(use_tools=tools, tool_faults=tool_faults or {})
        injector = FaultInjector(model, seed=seed, **(faults or {}))
        started = time.monotonic()
        with FakeLLMServer(responder=injector) as server:
            overrides = bench_overrides(
                root / "data",
                server.openai_base_url,
                tools=tools,
                tool_log=root / "tools.jsonl",
                tool_args=tool_args,
                tool_settings=TOOL_SETTINGS,
                extra=extra,
            )
            await run_in_process(overrides, root / "run")
            first, after = outcome(root / "run"), None
            if resume is not None:
                resume(injector)
                injector.new_run()
                await run_in_process(overrides, root / "run")
                after = outcome(root / "run")
            retries = injector.retries + tool_retries(server)
        injected = injector.total_injected + sum(
            c["fault"] != "none" for c in read_tool_calls(root / "tools.jsonl")
        )
        if tool_args:  # a server that never starts: one start failure per run
            injected += 1 + (resume is not None)
        return row(
            name,
            tasks,
            injected,
            retries,
            first,
            after,
            accuracy(root / "run"),
            clean,
            time.monotonic() - started,
        )


class Killer:
    """Kills the run's process group on its ``at``-th request."""

    def __init__(self, inner) -> None:
        self.inner, self.lock = inner, threading.Lock()
        self.group = self.at = None
        self.seen = 0

    def __call__(self, request: RecordedRequest) -> Step:
        with self.lock:
            self.seen += 1
            if self.seen == self.at and self.group:
                os.killpg(self.group, signal.SIGKILL)
        return self.inner(request)


def sigkill(tasks: int, seed: int, clean: float | None, kills: int = 3) -> dict:
    draw = random.Random(seed)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_suite(root / "data", tasks)
        killer = Killer(ResearchModel(use_tools=True, delay=0.05))
        started, first, done = time.monotonic(), None, 0
        with FakeLLMServer(responder=killer) as server:
            overrides = bench_overrides(
                root / "data",
                server.openai_base_url,
                tools=True,
                tool_log=root / "tools.jsonl",
                extra=["benchmark.execution.max_concurrent=3", f"hydra.run.dir={root / 'run'}"],
            )
            for run in range(kills + 1):
                left = 3 * (
                    tasks
                    - sum(r["status"] == "finished" for r in latest_outcomes(root / "run").values())
                )
                at = draw.randint(left // 3 + 1, max(left, 2)) if run < kills else None
                process = subprocess.Popen(
                    [sys.executable, "-m", "deepledger", "bench", *overrides],
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
                with killer.lock:
                    killer.group, killer.at, killer.seen = process.pid, at, 0
                process.wait(timeout=600)
                done += process.returncode == -signal.SIGKILL
                first = first or outcome(root / "run")
        return row(
            "sigkill",
            tasks,
            done,
            0,
            first,
            outcome(root / "run"),
            accuracy(root / "run"),
            clean,
            time.monotonic() - started,
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    n, seed = args.tasks, args.seed
    print(f"seed {seed}, {n} tasks per scenario", file=sys.stderr)
    draw = random.Random(seed)
    keys = [f"k{i:02d}" for i in range(1, n + 1)]
    tool_plan = {k: [draw.choice(TOOL_FAULTS)] for k in keys if draw.random() < 0.5}
    clean_rows = [await in_process("clean", n, seed, None)]
    clean = clean_rows[0]["accuracy"]
    clean_rows.append(await in_process("clean+tools", n, seed, None, tools=True))
    clean_tools = clean_rows[1]["accuracy"]
    rows = [
        *clean_rows,
        await in_process(
            "llm-http 20%",
            n,
            seed,
            clean,
            faults={"rate": 0.2},
            resume=lambda f: setattr(f, "rate", 0.0),
        ),
        await in_process(
            "llm-outage",
            n,
            seed,
            clean,
            faults={"outage": set(keys[:3])},
            extra=("llm.retry.max_attempts=3",),
            resume=lambda f: f.outage.clear(),
        ),
        await in_process(
            "llm-timeouts",
            n,
            seed,
            clean,
            extra=("llm.timeout_seconds=2",),
            faults={
                "plan": {(keys[0], 0): "timeout", (keys[1], 0): "hang", (keys[2], 1): "timeout"},
                "slow_seconds": 5,
            },
        ),
        await in_process("tool-faults", n, seed, clean_tools, tools=True, tool_faults=tool_plan),
        await in_process(
            "tool-start", n, seed, clean_tools, tools=True, tool_args=("--fail-start",)
        ),
        sigkill(n, seed, clean_tools),
    ]
    print_table(rows)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"seed": seed, "tasks": n, "rows": rows}, indent=2) + "\n")
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")


def print_table(rows: list[dict]) -> None:
    header = (
        "scenario",
        "tasks",
        "faults",
        "retries",
        "finished/error",
        "after resume",
        "accuracy",
        "vs clean",
        "s",
    )
    lines = [header] + [
        (
            r["scenario"],
            str(r["tasks"]),
            str(r["faults_injected"]),
            str(r["retries"]),
            r["outcomes_first_run"],
            r["outcomes_after_resume"] or "-",
            "-" if r["accuracy"] is None else f"{r['accuracy']:.3f}",
            "-" if r["accuracy_vs_clean"] is None else f"{r['accuracy_vs_clean']:+.3f}",
            f"{r['seconds']:.1f}",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))


if __name__ == "__main__":
    asyncio.run(main())
