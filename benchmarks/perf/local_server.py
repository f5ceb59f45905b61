"""How fast the bundled model server generates, with llama.cpp's thread defaults and with
deepledger's, on a quiet machine and beside two busy processes.

Each variant starts the real server (``deepledger.llm.local.LlamaServer``, the bundled
SmolLM2-135M unless ``--model`` names another GGUF), sends one request to evaluate the
prompt, then ``--requests`` more of the same prompt: llama.cpp reuses the evaluated
prefix, so their time is generation. Tokens per second = completion tokens / seconds,
median over the requests. "loaded": two ``yes > /dev/null`` processes (bounded by
``timeout``) run beside the server, as the tool servers, a judge or a test suite would.
"quiet" is only as quiet as the machine: the load average is recorded before and after.

    .venv/bin/python benchmarks/perf/local_server.py [--requests 3] [--max-tokens 48]

Numbers go to benchmarks/perf/results/local_server.json, with the load average.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deepledger.llm.local import LlamaServer, ServerThreads, bundled_model, usable_cores

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "perf" / "results" / "local_server.json"
PROMPT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "Write a long story about a lighthouse keeper who finds a message in a bottle.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def variants() -> dict[str, ServerThreads]:
    cores = usable_cores()
    return {
        # What the server did before deepledger set anything: llama.cpp's own defaults.
        "llama_cpp_defaults": ServerThreads(),
        "deepledger_defaults": ServerThreads.tuned(),  # PASSIVE, every usable core
        "passive_one_thread": ServerThreads(1, cores, "PASSIVE"),
        "active_every_core": ServerThreads(cores, cores, None),  # spinning, for contrast
    }


def complete(base_url: str, max_tokens: int) -> tuple[int, float]:
    body = {
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 1,
    }
    request = urllib.request.Request(
        f"{base_url}/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=900) as response:
        reply = json.load(response)
    return int(reply["usage"]["completion_tokens"]), time.perf_counter() - started


@contextmanager
def busy_neighbours(count: int, seconds: int) -> Iterator[None]:
    """``count`` processes that keep a core busy, each ended after ``seconds`` at most
    (``timeout`` passes our SIGTERM on to its ``yes``)."""
    procs = [
        subprocess.Popen(["timeout", str(seconds), "yes"], stdout=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


def measure(model: Path, threads: ServerThreads, requests: int, max_tokens: int) -> dict:
    server = LlamaServer(model, context_size=2048, threads=threads)
    server.start()
    try:
        complete(server.base_url, 1)  # evaluates the prompt; the rest reuse it
        rates, tokens = [], []
        for _ in range(requests):
            count, seconds = complete(server.base_url, max_tokens)
            tokens.append(count)
            rates.append(count / seconds)
    finally:
        server.stop()
    return {
        "tokens_per_second": round(statistics.median(rates), 2),
        "all": [round(r, 2) for r in rates],
        "completion_tokens": tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    model = args.model or bundled_model()
    load_before = os.getloadavg()
    results: dict[str, dict[str, dict]] = {"quiet": {}, "loaded": {}}
    for condition in ("quiet", "loaded"):
        for name, threads in variants().items():
            if condition == "loaded":
                with busy_neighbours(2, 900):
                    row = measure(model, threads, args.requests, args.max_tokens)
            else:
                row = measure(model, threads, args.requests, args.max_tokens)
            results[condition][name] = {
                "generation_threads": threads.generation,
                "batch_threads": threads.batch,
                "omp_wait_policy": threads.omp_wait_policy,
                **row,
            }
            print(condition, name, row["tokens_per_second"], "tokens/s", flush=True)
    document = {
        "what": (
            "tokens per second of the bundled model server (generation: the prompt is "
            "evaluated by a first request and reused), per thread setting, quiet and beside "
            "two `yes > /dev/null`; null settings are llama.cpp's own"
        ),
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "model": model.name,
        "usable_cores": usable_cores(),
        "max_tokens": args.max_tokens,
        "load_average_1_5_15_before": [round(x, 2) for x in load_before],
        "load_average_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        **results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
