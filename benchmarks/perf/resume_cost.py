"""What a crash costs: `deepledger bench` SIGKILLed at seeded points and resumed, with
``benchmark.execution.resume=turn`` (a killed retry goes on at its next turn) and
``resume=retry`` (it starts again from its first turn), against a clean run.

The suite has 30 tasks; the scripted model (behind the loopback OpenAI-compatible fake)
looks a new key up each turn for 19 turns, answers on turn 20, then writes the closing
summary: 21 model calls a task. Each mode's run is killed 10 times (the whole process
group, by the fake itself on the n-th request of a run, as tests/faults/test_kill_resume.py
does, so where a kill lands depends on progress, not the machine's speed) and resumed with
the same command until it ends. Kill n lands at a seeded share (1/3 to 1) of the requests
the run still has to make, the same shares for both modes.

"calls" are the requests the fake received (those in flight at a kill included: a
provider bills them), "input tokens" the sum of the prompt tokens the fake reported (300
a message); ``record_input_tokens`` in the JSON is the tasks' records' ``usage`` (killed
runs' answered calls included, the ones in flight at a kill not: no reply came back),
and ``record_interrupted_calls`` how many of those answered calls the records show apart
(``interrupted_calls``: the set-aside journals' and those a resumed retry went on from).
Target: ``turn`` at most 1.1x the clean run's calls.

    .venv/bin/python benchmarks/perf/resume_cost.py [--tasks 30] [--turns 20] [--kills 10]
        [--concurrent 6] [--seed 7]

Writes benchmarks/perf/results/resume_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import _checkout  # noqa: F401  (the checkout on sys.path: tests.support.doubles)
from tests.support.doubles.fake_llm_server import FakeLLMServer, FakeUsage, RecordedRequest, Reply
from tests.support.doubles.faults import (
    SUMMARY_MARK,
    KillAtRequest,
    answer_for,
    bench_overrides,
    finished_keys,
    latest_outcomes,
    lookup_call,
    message_texts,
    task_key,
    write_suite,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).with_name("results") / "resume_cost.json"
PROMPT_TOKENS_A_MESSAGE = 300
DELAY = 0.05  # seconds a reply takes: concurrent tasks are mid-turn when a kill lands


def assistant_turns(request: RecordedRequest) -> int:
    return sum(isinstance(m, dict) and m.get("role") == "assistant" for m in request.messages)


class Researcher:
    """Looks a new key up each turn (``turns - 1`` of them), then answers; its reported
    prompt grows a known amount a message. Counts every request it gets."""

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.lock = threading.Lock()
        self.calls = 0
        self.input_tokens = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        prompt = PROMPT_TOKENS_A_MESSAGE * len(request.messages)
        with self.lock:
            self.calls += 1
            self.input_tokens += prompt
        usage = FakeUsage(input_tokens=prompt)
        return Reply(self.decide(request), delay=DELAY, usage=usage)

    def decide(self, request: RecordedRequest) -> str:
        key = task_key(request) or "?"
        if SUMMARY_MARK in message_texts(request)[-1]:
            return f"\\boxed{{{answer_for(key)}}}"
        done = assistant_turns(request)
        if done >= self.turns - 1:
            return f"The code word is {answer_for(key)}. \\boxed{{{answer_for(key)}}}"
        return f"Step {done}.\n" + lookup_call(f"{key}-{done}", "none")


def requests_left(
    server: FakeLLMServer, run_dir: Path, keys: list[str], calls_a_task: int, mode: str
) -> int:
    """The requests the run still has to make: for each unfinished task, all its calls
    (retry) or those after the turns its last request carried (turn)."""
    finished = finished_keys(run_dir)
    kept: Counter[str] = Counter()
    if mode == "turn":
        for request in server.requests:
            key = task_key(request)
            if key is not None:
                kept[key] = max(kept[key], assistant_turns(request))
    return sum(calls_a_task - kept[k] for k in keys if k not in finished)


def journal_events(run_dir: Path) -> list[dict]:
    journals = [p for p in (run_dir / "tasks").rglob("*.jsonl") if p.name != "progress.jsonl"]
    return [json.loads(line) for p in journals for line in p.read_text().splitlines() if line]


def set_aside_calls(run_dir: Path) -> int:
    """Answered model calls of the retries that started again (their journals set aside
    as ``*.interrupted-*``): the work a kill threw away, besides the calls in flight."""
    journals = (run_dir / "tasks").rglob("*.interrupted-*.jsonl")
    return sum(
        json.loads(line)["event"] in ("llm_call", "closing_call")
        for p in journals
        for line in p.read_text().splitlines()
        if line
    )


def record_input_tokens(run_dir: Path) -> int:
    return sum(int(r["usage"].get("input_tokens", 0)) for r in latest_outcomes(run_dir).values())


def run_mode(mode: str, args: argparse.Namespace, shares: list[float]) -> dict:
    """One suite in ``mode`` ("clean": no kills), killed at ``shares`` of what is left."""
    calls_a_task = args.turns + 1  # the turns and the closing summary
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        keys = write_suite(root / "data", args.tasks)
        run_dir = root / "run"
        model = Researcher(args.turns)
        killer = KillAtRequest(model)  # a kill at the n-th request of a run
        started = time.monotonic()
        kills_landed, runs, kill_points = 0, 0, []
        with FakeLLMServer(responder=killer) as server:
            overrides = bench_overrides(
                root / "data",
                server.openai_base_url,
                tools=True,
                extra=[
                    f"benchmark.execution.max_concurrent={args.concurrent}",
                    f"benchmark.execution.resume={'turn' if mode == 'clean' else mode}",
                    f"agent.main_agent.max_turns={args.turns * 2}",
                    "agent.context_compress_limit=0",
                    f"hydra.run.dir={run_dir}",
                ],
            )
            command = [sys.executable, "-m", "deepledger", "bench", *overrides]
            plan = [] if mode == "clean" else list(shares)
            while True:
                left = requests_left(server, run_dir, keys, calls_a_task, mode)
                kill_at = max(1, round(plan.pop(0) * left)) if plan else None
                process = subprocess.Popen(
                    command,
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,  # its own group: the kill takes the tool server
                )
                killer.arm(process.pid, kill_at)
                _, stderr = process.communicate(timeout=900)
                runs += 1
                if process.returncode == -signal.SIGKILL:
                    kills_landed += 1
                    kill_points.append({"at_request": kill_at, "left": left})
                    continue
                if process.returncode != 0:
                    raise SystemExit(f"{mode}: run {runs} exited {process.returncode}:\n{stderr}")
                if kill_at is not None:  # the run ended before its kill point
                    kill_points.append({"at_request": kill_at, "left": left, "landed": False})
                break
            events = journal_events(run_dir)
        outcomes = latest_outcomes(run_dir)
        reasons = Counter(str(e["reason"]) for e in events if e["event"] == "resume_fell_back")
        return {
            "mode": mode,
            "runs": runs,
            "kills_landed": kills_landed,
            "kill_points": kill_points,
            "calls": model.calls,
            "input_tokens": model.input_tokens,
            "record_input_tokens": record_input_tokens(run_dir),
            # The killed runs' answered calls the records show apart (in their usage
            # once): those of journals set aside, and those resumed retries went on from.
            "record_interrupted_calls": sum(
                int(r.get("interrupted_calls", 0)) for r in outcomes.values()
            ),
            "finished": sum(r["status"] == "finished" for r in outcomes.values()),
            "correct": sum(r.get("correct") is True for r in outcomes.values()),
            "resumed_retries": sum(e["event"] == "resumed" for e in events),
            "replayed_replies": sum(
                e["event"] == "resumed" and bool(e.get("replayed_reply")) for e in events
            ),
            "fell_back": sum(reasons.values()),
            "fell_back_reasons": dict(reasons),
            "set_aside_journals": len(list((run_dir / "tasks").rglob("*.interrupted-*"))),
            "set_aside_calls": set_aside_calls(run_dir),
            "seconds": round(time.monotonic() - started, 1),
        }


def add_ratios(rows: list[dict]) -> None:
    clean = rows[0]
    for row in rows:
        row["calls_vs_clean"] = round(row["calls"] / clean["calls"], 3)
        row["input_tokens_vs_clean"] = round(row["input_tokens"] / clean["input_tokens"], 3)


def print_table(rows: list[dict]) -> None:
    header = ("mode", "kills", "calls", "vs clean", "input tokens", "vs clean", "resumed",
              "fell back", "set aside", "interrupted", "finished", "s")  # fmt: skip
    lines = [header] + [
        (
            r["mode"],
            str(r["kills_landed"]),
            str(r["calls"]),
            f"{r['calls_vs_clean']:.3f}x",
            f"{r['input_tokens']:,}",
            f"{r['input_tokens_vs_clean']:.3f}x",
            str(r["resumed_retries"]),
            str(r["fell_back"]),
            str(r["set_aside_calls"]),
            str(r["record_interrupted_calls"]),
            f"{r['finished']}/{r['correct']}",
            f"{r['seconds']:.0f}",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--concurrent", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    draw = random.Random(args.seed)
    shares = [draw.uniform(1 / 3, 1) for _ in range(args.kills)]
    load_before = os.getloadavg()
    rows = []
    for mode in ("clean", "turn", "retry"):
        rows.append(run_mode(mode, args, shares))
        print(f"{mode}: {rows[-1]['calls']} calls, {rows[-1]['seconds']} s", file=sys.stderr)
    add_ratios(rows)
    print_table(rows)
    result = {
        "command": " ".join([".venv/bin/python", "benchmarks/perf/resume_cost.py", *sys.argv[1:]]),
        "seed": args.seed,
        "tasks": args.tasks,
        "turns": args.turns,
        "kills": args.kills,
        "max_concurrent": args.concurrent,
        "kill_shares": [round(s, 3) for s in shares],
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
