"""The context-policy evidence table: one model, the same WorldFacts dev questions, six
ways of keeping the context, each run as `deepledger bench` runs it.

    .venv/bin/python benchmarks/worldfacts/context_table.py [--llm local_qwen1.5b]
        [--tasks 20] [--only SETTING ...] [--table-only] [hydra overrides ...]

The questions are the first ``--tasks`` of ``benchmarks/worldfacts/dev.jsonl``
(``benchmark.execution.max_tasks``), the same ones for every setting. Each setting runs
in ``logs/context_table/<llm>/<setting>``, one task at a time (a local model serves one
request at a time): running the same command again resumes what an interruption left
and redoes nothing finished, so the six runs (10-20 minutes each with a 1.5B model on
2 cores) can be spread over several sittings. ``--table-only`` reads what is there.
Extra arguments are Hydra overrides given to every setting (e.g. a turn cap).

The table is printed and written to ``benchmarks/worldfacts/results/context_table-<llm>.json``:
per setting, correct answers, how the tasks ended, input and output tokens, and the
tasks' time summed (a resumed run's time is the time its tasks took, not the pauses).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What each row changes; every row gets the questions and the model from run_setting.
# The trimming rows cut one result (round) a turn (cut_batch=1): the row shows the policy
# itself, not how its cuts are batched for a provider's cache.
SETTINGS: dict[str, list[str]] = {
    "keep everything": ["agent.keep_tool_result=-1", "agent.context_compress_limit=1"],
    "keep_tool_result=1": [
        "agent.keep_tool_result=1",
        "agent.context.cut_batch=1",
        "agent.context_compress_limit=1",
    ],
    # keep_tool_result also sets how often a missing \boxed{} is asked for again (null:
    # 3 with every result kept, 1 otherwise): this row asks 3 times, as keeping all does.
    "keep_tool_result=1, 3 answer retries": [
        "agent.keep_tool_result=1",
        "agent.context.cut_batch=1",
        "agent.context_compress_limit=1",
        "agent.max_final_answer_retries=3",
    ],
    "round_window, 2 rounds": [
        "agent.context.strategy=round_window",
        "agent.context.keep_rounds=2",
        "agent.context.cut_batch=1",
        "agent.context_compress_limit=1",
    ],
    "compaction, 4,096-token window": [
        "agent.context.strategy=compaction",
        "llm.max_context_length=4096",
        "agent.context_compress_limit=1",
    ],
    "keep everything, no retry": ["agent.keep_tool_result=-1", "agent.context_compress_limit=0"],
}


def folder_name(setting: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in setting).strip("-").replace("--", "-")


def run_setting(run_dir: Path, setting: str, llm: str, tasks: int, extra: list[str]) -> int:
    command = [
        str(ROOT / ".venv" / "bin" / "deepledger"),
        "bench",
        f"hydra.run.dir={run_dir}",
        "benchmark=worldfacts",
        "benchmark.data.metadata_file=dev.jsonl",
        f"benchmark.execution.max_tasks={tasks}",
        "benchmark.execution.max_concurrent=1",
        f"llm={llm}",
        *SETTINGS[setting],
        *extra,
    ]
    print(f"context_table: {setting}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
    return subprocess.run(command, cwd=ROOT, check=False).returncode


def row(run_dir: Path, setting: str) -> dict[str, object]:
    """What the run directory says, or that it has no finished run yet."""
    from deepledger.records.results import SummaryRecord
    from deepledger.store.run_store import RunStore

    if not (run_dir / "summary.json").exists():
        return {"setting": setting, "run_dir": str(run_dir), "finished": False}
    summary = SummaryRecord.model_validate_json((run_dir / "summary.json").read_text())
    records = RunStore(run_dir).finished_results().values()
    seconds = sum(r.elapsed_seconds or 0.0 for r in records)
    tokens = summary.tokens.total
    return {
        "setting": setting,
        "overrides": SETTINGS[setting],
        "run_dir": str(run_dir.relative_to(ROOT)) if run_dir.is_relative_to(ROOT) else str(run_dir),
        "finished": summary.tasks.finished == summary.tasks.total,
        "tasks": summary.tasks.total,
        "correct": summary.correct_first_attempt,
        "accuracy": summary.accuracy,
        "end_reasons": summary.end_reasons,
        "input_tokens": tokens.input,
        "cache_read_tokens": tokens.cache_read,
        "output_tokens": tokens.output,
        "task_seconds": round(seconds, 1),
    }


def markdown(rows: list[dict[str, object]]) -> str:
    lines = [
        "| setting | correct | ended | input tokens | output tokens | time |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "tasks" not in r:
            lines.append(f"| {r['setting']} | not run yet | | | | |")
            continue
        reasons = dict(r["end_reasons"])  # type: ignore[call-overload]
        ended = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()) if n)
        minutes = float(r["task_seconds"]) / 60  # type: ignore[arg-type]
        lines.append(
            f"| {r['setting']} | {r['correct']}/{r['tasks']} | {ended} "
            f"| {int(r['input_tokens']):,} | {int(r['output_tokens']):,} | {minutes:.0f} min |"  # type: ignore[call-overload]
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", default="local_qwen1.5b", help="an llm preset (conf/llm/)")
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--only", nargs="+", choices=sorted(SETTINGS), metavar="SETTING")
    parser.add_argument("--table-only", action="store_true", help="run nothing; read the runs")
    parser.add_argument("--logs", type=Path, default=ROOT / "logs" / "context_table")
    args, overrides = parser.parse_known_args()
    chosen = args.only or list(SETTINGS)
    failed = 0
    if not args.table_only:
        for setting in chosen:
            run_dir = args.logs / args.llm / folder_name(setting)
            failed += run_setting(run_dir, setting, args.llm, args.tasks, overrides) != 0
    rows = [row(args.logs / args.llm / folder_name(s), s) for s in SETTINGS]
    table = markdown(rows)
    print(table)
    out = ROOT / "benchmarks" / "worldfacts" / "results" / f"context_table-{args.llm}.json"
    out.parent.mkdir(exist_ok=True)
    record = {
        "what": "WorldFacts dev, the first N questions, one model, six context settings",
        "command": " ".join(["benchmarks/worldfacts/context_table.py", *sys.argv[1:]]),
        "llm": args.llm,
        "questions": args.tasks,
        "overrides_for_every_setting": overrides,
        "rows": rows,
        "table": table,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
