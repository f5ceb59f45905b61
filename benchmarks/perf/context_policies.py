"""What context policies cost on recorded runs of the offline suite (WorldFacts dev).

Records two runs with `deepledger bench` — the real CLI, the real `search` tool over the
WorldFacts corpus — driven by a scripted researcher behind the loopback OpenAI-compatible
fake, which reports usage as a provider would (the prompt counted with tiktoken):

- short: 20 tasks of 14 turns; each searches for its question from several angles and
  opens the pages it found (whole pages, at most 2.4 kB), then answers;
- long: 5 tasks of 100 turns, each turn a 20-result search (about 5.4 kB, 1,400 tokens).

Then `deepledger replay` prices each run under keep-everything, keep 5 tool results
(one cut a turn, as MiroThinker does, and in batches of the default
agent.context.cut_batch), a 5-round window (likewise) and compaction keeping 5 rounds,
with and without caching, at gpt-4.1-mini prices (its 1M window); the short run also on
a model with a 6k window and the long one on a 128k window, where the work does not fit
whole (keep-everything is cut short by the window guard, compaction acts). A sweep of
cut_batch for keep 5 on both runs shows why the default is what it is. "between cuts":
the share of input a prompt cache serves in the calls whose request only grew at its
end. Tables and figures go to benchmarks/perf/results/context_policies.json.

    .venv/bin/python benchmarks/perf/context_policies.py [--tasks 20] [--turns 14]
        [--long-tasks 5] [--long-turns 100]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _checkout  # noqa: F401  (the checkout on sys.path: tests.support.doubles)
from tests.support.doubles.fake_llm_server import FakeLLMServer, FakeUsage, Reply

from deepledger.config import ContextConfig
from deepledger.llm.tokens import default_counter
from deepledger.store.layout import RunLayout

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "perf" / "results" / "context_policies.json"
PRICE_AS = "gpt-4.1-mini"
SMALL_WINDOW = 6_000  # WorldFacts pages are short (at most 2.4 kB): a small window is small
LONG_WINDOW = 1_000_000  # gpt-4.1-mini's: 100 turns of 1,400 tokens fit whole
LONG_SMALL_WINDOW = 128_000  # where they do not: compaction acts
SWEEP = (1, 2, 3, 5, 8, 10, 15, 20)
COUNTER = default_counter()
_COUNTS: dict[str, int] = {}  # the fake's counts, by message text: prompts repeat


def count(text: str) -> int:
    if text not in _COUNTS:
        _COUNTS[text] = COUNTER.count(text)
    return _COUNTS[text]


def call(tool: str, arguments: dict) -> str:
    return (
        f"<use_mcp_tool><server_name>search</server_name><tool_name>{tool}</tool_name>"
        f"<arguments>{json.dumps(arguments)}</arguments></use_mcp_tool>"
    )


def rotated_query(task: str, done: int) -> str:
    words = re.findall(r"[A-Z][\w-]+", task) or task.split()[:3]
    turn = done % len(words)
    return " ".join(words[turn:] + words[:turn]) + f" {done}"


def next_step(messages: list[dict], turns: int, long: bool) -> str:
    """Short: search from several angles, open each page found once, then answer.
    Long: a wide search every turn, then answer."""
    task, last = messages[1]["content"], messages[-1]["content"] or ""
    done = sum(1 for m in messages if m["role"] == "assistant")
    if "The work on this task is over" in last or "Your previous reply" in last:
        return "From the pages above: \\boxed{42}"
    if done >= turns:
        return "I have what I need. \\boxed{42}"
    if long:
        return f"Searching wider. {call('search', {'query': rotated_query(task, done), 'k': 20})}"
    texts = [m["content"] or "" for m in messages]
    found = set(re.findall(r"doc_id: ([\w/.-]+)", "\n".join(texts)))
    mine = "\n".join(m["content"] or "" for m in messages if m["role"] == "assistant")
    unopened = sorted(found - set(re.findall(r'"doc": "([\w/.-]+)"', mine)))
    if done % 3 == 0 or not unopened:
        return f"Searching. {call('search', {'query': rotated_query(task, done), 'k': 5})}"
    return f"Reading. {call('open', {'doc': unopened[0]})}"


def researcher(turns: int, long: bool):
    def respond(request) -> Reply:
        reply = next_step(request.messages, turns, long)
        prompt = sum(count(m["content"] or "") + 4 for m in request.messages)
        return Reply(reply, usage=FakeUsage(prompt, COUNTER.count(reply)))

    return respond


def deepledger(*args: str, timeout: float = 3600) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "deepledger", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        sys.exit(f"deepledger {args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def record(run_dir: Path, tasks: int, turns: int, *, long: bool) -> float:
    """Run the suite against the scripted researcher; the seconds it took."""
    started = time.monotonic()
    window = LONG_WINDOW if long else 128_000
    with FakeLLMServer(responder=researcher(turns, long)) as server:
        deepledger(
            "bench",
            "benchmark=worldfacts",
            "benchmark.data.metadata_file=dev.jsonl",
            f"benchmark.execution.max_tasks={tasks}",
            "benchmark.execution.report=false",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            f"llm.model_name={PRICE_AS}",
            f"llm.max_context_length={window}",
            "llm.max_tokens=1024",
            "agent.max_final_answer_retries=1",
            f"hydra.run.dir={run_dir}",
        )
    return time.monotonic() - started


def replay(run_dir: Path, *overrides: str) -> tuple[str, dict]:
    table = deepledger("replay", str(run_dir), *overrides, "--price", PRICE_AS)
    figures = json.loads(RunLayout(run_dir).replay.read_text())
    for policy in figures["policies"]:
        policy["between_cuts_cached"] = between_cuts(policy.pop("calls"))
    return table, figures


def between_cuts(calls: list[dict]) -> float | None:
    """The share of input served from cache in the loop calls that cut nothing."""
    steady = [c for c in calls if c["purpose"] == "loop" and not c.get("prefix_broken")]
    total = sum(c["input_tokens"] for c in steady)
    return sum(c["cached_tokens"] for c in steady) / total if total else None


def rows(figures: dict) -> list[dict]:
    """One row per policy, the recorded one left out (it is keep-everything here)."""
    policies = figures["policies"][1:]
    everything = policies[0]["cost_with_cache"]
    return [
        {
            "policy": p["name"],
            "input_tokens": p["input_tokens"],
            "cacheable": p["cacheable_tokens"] / p["input_tokens"],
            "between_cuts_cached": p["between_cuts_cached"],
            "cost_with_cache": p["cost_with_cache"],
            "vs_keep_everything": p["cost_with_cache"] / everything,
            "cuts": p.get("cuts", 0),
            "guard_fired": len(p["guard_fired"]),
        }
        for p in policies
    ]


def sweep(run_dir: Path) -> list[dict]:
    """keep 5 tool results at each cut_batch: cost with caching, share cacheable."""
    found = []
    for batch in SWEEP:
        _, figures = replay(run_dir, "agent.keep_tool_result=5", f"agent.context.cut_batch={batch}")
        policy = figures["policies"][1]
        found.append(
            {
                "cut_batch": batch,
                "input_tokens": policy["input_tokens"],
                "cacheable": policy["cacheable_tokens"] / policy["input_tokens"],
                "between_cuts_cached": policy["between_cuts_cached"],
                "cost_with_cache": policy["cost_with_cache"],
                "keep_everything_cost_with_cache": figures["policies"][0]["cost_with_cache"],
            }
        )
    return found


def markdown(short: list[dict], long: list[dict]) -> str:
    lines = [
        "| policy | short: cost cached | vs keep all | cacheable | long: cost cached "
        "| vs keep all | cacheable | between cuts |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s, g in zip(short, long, strict=True):
        between = g["between_cuts_cached"]
        lines.append(
            f"| {s['policy']} | ${s['cost_with_cache']:.4f} | {s['vs_keep_everything']:.2f} "
            f"| {s['cacheable']:.0%} | ${g['cost_with_cache']:.4f} "
            f"| {g['vs_keep_everything']:.2f} | {g['cacheable']:.0%} "
            f"| {'n/a' if between is None else f'{between:.0%}'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--turns", type=int, default=14)
    parser.add_argument("--long-tasks", type=int, default=5)
    parser.add_argument("--long-turns", type=int, default=100)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="deepledger-policies-"))
    short_dir, long_dir = root / "short", root / "long"
    short_seconds = record(short_dir, args.tasks, args.turns, long=False)
    long_seconds = record(long_dir, args.long_tasks, args.long_turns, long=True)
    table, figures = replay(short_dir)
    small_table, small_figures = replay(short_dir, f"llm.max_context_length={SMALL_WINDOW}")
    long_table, long_figures = replay(long_dir)
    long_small_table, long_small_figures = replay(
        long_dir, f"llm.max_context_length={LONG_SMALL_WINDOW}"
    )
    short_rows, long_rows = rows(figures), rows(long_figures)
    summary = markdown(short_rows, long_rows)
    print(table, small_table, long_table, long_small_table, summary, sep="\n\n")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "default_cut_batch": ContextConfig().batch,
                "summary_table": summary,
                "short": {
                    "tasks": args.tasks,
                    "turns": args.turns,
                    "record_seconds": round(short_seconds, 1),
                    "run_dir": str(short_dir),
                    "table": table,
                    "rows": short_rows,
                    "cut_batch_sweep": sweep(short_dir),
                    "replay": figures,
                    "small_window": SMALL_WINDOW,
                    "small_window_table": small_table,
                    "small_window_replay": small_figures,
                },
                "long": {
                    "tasks": args.long_tasks,
                    "turns": args.long_turns,
                    "record_seconds": round(long_seconds, 1),
                    "run_dir": str(long_dir),
                    "table": long_table,
                    "rows": long_rows,
                    "cut_batch_sweep": sweep(long_dir),
                    "replay": long_figures,
                    "small_window": LONG_SMALL_WINDOW,
                    "small_window_table": long_small_table,
                    "small_window_replay": long_small_figures,
                },
            },
            indent=1,
        )
    )
    print(f"written: {RESULTS}")


if __name__ == "__main__":
    main()
