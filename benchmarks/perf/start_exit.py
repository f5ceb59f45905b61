"""What a one-task, one-turn ``deepledger bench`` spends before its first request and
after its last.

The real CLI (``.venv/bin/deepledger bench``) runs as a subprocess against the loopback
fake model (zero latency; one reply with a ``\\boxed{}`` answer), on a one-line JSONL
suite, with the default agent's tools (search, reader, python from
``conf/tools/default.yaml``). The fake notes when each request arrives; the script notes
when it launched the process and when the process exited. Three figures per run:
launch -> first request, last request -> exit, total; the median of ``--runs`` runs,
with the report written (the default) and with ``benchmark.execution.report=false``.
Targets: first request <= 1.0 s, exit <= 0.5 s after the last request.

The machine these numbers come from is shared: the load average is recorded with them.
The command runs with Python's bytecode cache on (``PYTHONDONTWRITEBYTECODE``, set in
some shells here, is removed from its environment), as on a user's machine; one unmeasured
run first fills the caches. Three of them are deepledger's own, in its cache folder: the
report's library bundle, made by the first report, the tool servers' tool lists
(``tool_lists/``, from the last run of each server: with them the first request goes
out while the servers are still starting), and the parsed tokenizer (``tokenizers/``).
``default_cold_cache`` measures a run that makes the bundle (a fresh
``DEEPLEDGER_CACHE_DIR`` that keeps the search index, the tool lists and the parsed
tokenizer); ``uncached_tool_lists`` a run whose servers have
never run before (a fresh one that keeps all but the tool lists: it waits for every
server's list);
``no_tool_servers`` the same run with ``agent.main_agent.tools=[]`` (how much of the
start is the servers').

    .venv/bin/python benchmarks/perf/start_exit.py [--runs 7] [--label after] [--out FILE]
    # beside another source tree, e.g. the last commit, the two taking turns:
    git archive HEAD | tar -x -C /tmp/before
    .venv/bin/python benchmarks/perf/start_exit.py --compare before /tmp/before

Each label keeps its own entry in the results file, with the time it was measured and
the tree it ran; other entries are kept.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import _checkout  # noqa: F401  (the checkout on sys.path: tests.support.doubles)
from tests.support.doubles.fake_llm_server import FakeLLMServer, RecordedRequest, Reply

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / ".venv" / "bin" / "deepledger"
RESULTS = ROOT / "benchmarks" / "perf" / "results" / "start_exit.json"
TASK = {"task_id": "t1", "task_question": "What is six times seven?", "ground_truth": "42"}
TARGET_START_SECONDS = 1.0
TARGET_EXIT_SECONDS = 0.5


class Arrivals:
    """The fake's responder: answers every request at once and notes when it came."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.times.append(time.monotonic())
        return Reply(text="Six times seven is \\boxed{42}.")


DEFAULT_SERVERS = ("search", "reader", "python")


def environment(tree: Path | None, cache_dir: Path | None) -> tuple[dict[str, str], list[str]]:
    """The command's environment, and the overrides that hand a source tree's path to
    the tool servers too (they get only the variables their config names)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    overrides = []
    if tree is not None:
        env["PYTHONPATH"] = str(tree / "src")
        overrides = [f"+tools.{name}.env.PYTHONPATH={tree / 'src'}" for name in DEFAULT_SERVERS]
    if cache_dir is not None:
        env["DEEPLEDGER_CACHE_DIR"] = str(cache_dir)
    return env, overrides


def cold_cache(folder: Path, keep: tuple[str, ...]) -> Path:
    """A cache folder with nothing made yet but the parts named in ``keep`` (e.g. the
    search index: building it is the search server's first-run cost, not the report's)."""
    cache = folder / "cold-cache"
    cache.mkdir(parents=True)
    home = os.environ.get("DEEPLEDGER_CACHE_DIR") or Path.home() / ".cache" / "deepledger"
    for part in keep:
        if (Path(home) / part).exists():
            (cache / part).symlink_to(Path(home) / part)
    return cache


def one_run(
    folder: Path,
    number: int | str,
    extra: list[str],
    tree: Path | None,
    cache_dir: Path | None = None,
) -> dict[str, float]:
    arrivals = Arrivals()
    run_dir = folder / f"run-{number}"
    env, tree_overrides = environment(tree, cache_dir)
    with FakeLLMServer(responder=arrivals) as server:
        command = [
            str(CLI),
            "bench",
            f"benchmark.data.data_dir={folder}",
            "benchmark.data.metadata_file=suite.jsonl",
            "benchmark.name=start_exit",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            f"hydra.run.dir={run_dir}",
            *tree_overrides,
            *extra,
        ]
        launched = time.monotonic()
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        exited = time.monotonic()
    if done.returncode != 0 or not arrivals.times:
        raise SystemExit(f"the bench failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    report = run_dir / "report.html"
    return {
        "start_seconds": arrivals.times[0] - launched,
        "exit_seconds": exited - arrivals.times[-1],
        "total_seconds": exited - launched,
        "requests": len(arrivals.times),
        "report_written": report.is_file(),
        "report_announced": f"Report: {report}" in done.stdout,
    }


# name: (overrides, the parts of deepledger's cache folder it keeps; None: all of it)
VARIANTS: dict[str, tuple[list[str], tuple[str, ...] | None]] = {
    "default": ([], None),
    "report_false": (["benchmark.execution.report=false"], None),
    "default_cold_cache": ([], ("search", "tool_lists", "tokenizers")),  # the bundle is made
    "uncached_tool_lists": ([], ("search", "report", "tokenizers")),  # servers never ran
    # What the command costs without its tool servers (how much of the start is theirs).
    "no_tool_servers": (["agent.main_agent.tools=[]"], None),
}


def measure(runs: int, trees: dict[str, Path | None]) -> dict[str, dict[str, dict]]:
    """Every variant on every tree, the trees taking turns run by run so that a change in
    the machine's load falls on all of them alike."""
    samples: dict[str, dict[str, list]] = {label: {v: [] for v in VARIANTS} for label in trees}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "suite.jsonl").write_text(json.dumps(TASK) + "\n")
        for label, tree in trees.items():  # warm the file cache and bytecode: not counted
            one_run(folder, f"warm-{label}", [], tree)
        number = 0
        for variant, (extra, keep) in VARIANTS.items():
            for _ in range(max(1, runs // 2) if keep is not None else runs):
                for label, tree in trees.items():
                    number += 1
                    cache = cold_cache(folder / f"cache-{number}", keep) if keep else None
                    samples[label][variant].append(one_run(folder, number, extra, tree, cache))
    return {
        label: {v: summarize(VARIANTS[v][0], runs) for v, runs in by_variant.items()}
        for label, by_variant in samples.items()
    }


def summarize(extra: list[str], samples: list[dict]) -> dict[str, object]:
    figures = {
        key: round(statistics.median(s[key] for s in samples), 3)
        for key in ("start_seconds", "exit_seconds", "total_seconds")
    }
    spread = {
        f"{key}_min_max": [
            round(min(s[key] for s in samples), 3),
            round(max(s[key] for s in samples), 3),
        ]
        for key in ("start_seconds", "exit_seconds")
    }
    return {
        "overrides": extra,
        "runs": len(samples),
        **{f"median_{k}": v for k, v in figures.items()},
        **spread,
        "requests_per_run": samples[0]["requests"],
        "report_written": all(s["report_written"] for s in samples),
        "report_announced": all(s["report_announced"] for s in samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--label", default="after", help="this tree's entry, e.g. after")
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("LABEL", "TREE"),
        help="also measure another source tree, taking turns with this one",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    # This tree too is named by path, so that its tool servers import it as well (not
    # whatever deepledger the venv has installed) when the script runs from a copy.
    trees: dict[str, Path | None] = {args.label: ROOT}
    if args.compare:
        trees = {args.compare[0]: Path(args.compare[1]).resolve(), **trees}
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.UTC)
    measured = measure(args.runs, trees)
    context = {
        "measured_at": started.isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average_1_5_15_before": [round(x, 2) for x in load_before],
        "load_average_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "interleaved_with": list(trees),
    }
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    results["targets"] = {
        "start_seconds": TARGET_START_SECONDS,
        "exit_seconds": TARGET_EXIT_SECONDS,
    }
    results["what"] = (
        "one-task, one-turn `deepledger bench` (default tools: search, reader, python) "
        "against the zero-latency FakeLLMServer; start = launch -> first request, "
        "exit = last request -> process exit; medians"
    )
    for label, tree in trees.items():
        results[label] = {**context, "tree": str(tree or ROOT), **measured[label]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    for label in trees:
        default = measured[label]["default"]
        met = (
            default["median_start_seconds"] <= TARGET_START_SECONDS
            and default["median_exit_seconds"] <= TARGET_EXIT_SECONDS
        )
        figures = {
            v: (m["median_start_seconds"], m["median_exit_seconds"])
            for v, m in measured[label].items()
        }
        print(f"{label}: (start s, exit s) {figures}; targets {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
