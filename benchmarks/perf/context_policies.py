"""What context policies cost on one recorded run of the offline suite (WorldFacts dev).

Records a run with `deepledger bench` — the real CLI, the real `search` tool over the
WorldFacts corpus — driven by a scripted researcher behind the loopback OpenAI-compatible
fake: each task searches for its question from several angles and opens the pages it
found (whole pages), then answers. The fake reports usage as a provider would (the
prompt counted with tiktoken). Then `deepledger replay` prices that run under
keep-everything, keep 5 tool results, a 5-round window and compaction keeping 5 rounds,
with and without caching, at gpt-4.1-mini prices: once at the run's window (128k), and
once on a model with a 6k window, where the work does not fit whole: keep-everything is
cut short by the window guard and compaction acts. Tables and figures go to
benchmarks/perf/results/context_policies.json.

    .venv/bin/python benchmarks/perf/context_policies.py [--tasks 20] [--turns 14]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from deepledger.llm.tokens import default_counter
from deepledger.store.layout import RunLayout
from deepledger.testing.fake_llm_server import FakeLLMServer, FakeUsage, Reply

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "perf" / "results" / "context_policies.json"
PRICE_AS = "gpt-4.1-mini"
SMALL_WINDOW = 6_000  # WorldFacts pages are short (at most 2.4 kB): a small window is small
COUNTER = default_counter()


def call(tool: str, arguments: dict) -> str:
    return (
        f"<use_mcp_tool><server_name>search</server_name><tool_name>{tool}</tool_name>"
        f"<arguments>{json.dumps(arguments)}</arguments></use_mcp_tool>"
    )


def next_step(messages: list[dict], turns: int) -> str:
    """Search from several angles, open each page found once, then answer."""
    task, last = messages[1]["content"], messages[-1]["content"] or ""
    done = sum(1 for m in messages if m["role"] == "assistant")
    if "The work on this task is over" in last or "Your previous reply" in last:
        return "From the pages above: \\boxed{42}"
    if done >= turns:
        return "I have what I need. \\boxed{42}"
    texts = [m["content"] or "" for m in messages]
    found = set(re.findall(r"doc_id: ([\w/.-]+)", "\n".join(texts)))
    mine = "\n".join(m["content"] or "" for m in messages if m["role"] == "assistant")
    unopened = sorted(found - set(re.findall(r'"doc": "([\w/.-]+)"', mine)))
    if done % 3 == 0 or not unopened:
        words = re.findall(r"[A-Z][\w-]+", task) or task.split()[:3]
        turn = done % len(words)
        query = " ".join(words[turn:] + words[:turn])
        return f"Searching. {call('search', {'query': f'{query} {done}', 'k': 5})}"
    return f"Reading. {call('open', {'doc': unopened[0]})}"


def researcher(turns: int):
    def respond(request) -> Reply:
        reply = next_step(request.messages, turns)
        prompt = sum(COUNTER.count(m["content"] or "") + 4 for m in request.messages)
        return Reply(reply, usage=FakeUsage(prompt, COUNTER.count(reply)))

    return respond


def deepledger(*args: str, timeout: float = 1800) -> str:
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


def replay(run_dir: Path, *overrides: str) -> tuple[str, dict]:
    table = deepledger("replay", str(run_dir), *overrides, "--price", PRICE_AS)
    figures = json.loads(RunLayout(run_dir).replay.read_text())
    for policy in figures["policies"]:
        policy.pop("calls")
    return table, figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--turns", type=int, default=14)
    args = parser.parse_args()
    run_dir = Path(tempfile.mkdtemp(prefix="deepledger-policies-")) / "run"
    with FakeLLMServer(responder=researcher(args.turns)) as server:
        deepledger(
            "bench",
            "benchmark=worldfacts",
            "benchmark.data.metadata_file=dev.jsonl",
            f"benchmark.execution.max_tasks={args.tasks}",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            f"llm.model_name={PRICE_AS}",
            "llm.max_context_length=128000",
            "llm.max_tokens=1024",
            "agent.max_final_answer_retries=1",
            f"hydra.run.dir={run_dir}",
        )
    table, figures = replay(run_dir)
    small_table, small_figures = replay(run_dir, f"llm.max_context_length={SMALL_WINDOW}")
    print(table, small_table, sep="\n\n")
    summary = json.loads(RunLayout(run_dir).summary.read_text())
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "tasks": args.tasks,
                "turns": args.turns,
                "run_dir": str(run_dir),
                "token_economics": summary.get("token_economics"),
                "table": table,
                "replay": figures,
                "small_window": SMALL_WINDOW,
                "small_window_table": small_table,
                "small_window_replay": small_figures,
            },
            indent=1,
        )
    )
    print(f"written: {RESULTS}")


if __name__ == "__main__":
    main()
