"""Fault injection for whole benchmark runs on loopback: a suite, a model, and faults.

The pieces, used by ``tests/faults/`` and ``benchmarks/perf/faults.py``:

- :func:`write_suite` writes a task file whose task ``k`` asks for the code word of key
  ``k``; the ground truth is ``code-k`` (what ``fault_tool_server``'s ``lookup`` answers).
- :class:`ResearchModel` is a responder for :class:`~tests.support.doubles.fake_llm_server.
  FakeLLMServer`, a function of the conversation: without tools it answers at once; with
  tools it calls ``faulty.lookup`` (XML protocol), with the tool fault its plan names for
  that call, calls again after a failed call (up to ``max_calls``), and answers from what
  the tool returned (``unknown`` when nothing came back).
- :class:`FaultInjector` wraps a responder and turns a seeded share of the requests into
  HTTP faults (429, 5xx, bodies that do not parse, replies slower than the client's
  timeout, replies that never come). Whether a request is faulted depends only on the
  seed, the task and how many requests that task made before, never on the order in
  which concurrent tasks reach the server, so a run is reproducible.

Tasks are told apart at the server by the key in their task text: :func:`task_key`.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepledger.store.layout import RunLayout
from tests.support.doubles.fake_llm_server import (
    Fault,
    RecordedRequest,
    Reply,
    Step,
    malformed_body,
    rate_limited,
    server_error,
    slow,
)
from tests.support.doubles.fault_tool_server import LoggedCall, answer_for

SUMMARY_MARK = "The work on this task is over"  # the closing call's prompt (summarize.md)
POST_MORTEM_MARK = "This attempt at the task is over"  # post_mortem.md
TOOL_SERVER = "faulty"
_KEY = re.compile(r"code word for key ([\w-]+)\?")

# LLM faults by name. "timeout" answers after the client gave up (``slow_seconds`` must
# exceed llm.timeout_seconds); "hang" never answers while the server runs.
LLM_FAULTS = ("429", "500", "503", "garbage", "html", "timeout", "hang")
HANG_SECONDS = 3600.0


def write_suite(folder: Path, count: int, prefix: str = "k") -> list[str]:
    """A task file of ``count`` tasks in ``folder``; returns their keys (= task ids)."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = [f"{prefix}{n:02d}" for n in range(1, count + 1)]
    lines = [
        json.dumps(
            {
                "task_id": key,
                "task_question": f"What is the code word for key {key}?",
                "ground_truth": answer_for(key),
            }
        )
        for key in keys
    ]
    (folder / "standardized_data.jsonl").write_text("\n".join(lines) + "\n")
    return keys


def message_texts(request: RecordedRequest) -> list[str]:
    """Each message's text, in either protocol (blocks and tool results flattened)."""
    texts = []
    for message in request.messages:
        content = message.get("content") if isinstance(message, dict) else None
        texts.append(_flatten(content))
    return texts


def _flatten(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_flatten(part) for part in content)
    if isinstance(content, dict):
        return _flatten(content.get("text") or content.get("content") or "")
    return ""


def task_key(request: RecordedRequest) -> str | None:
    """The key of the task a request belongs to (None for a request of no task)."""
    for text in message_texts(request):
        found = _KEY.search(text)
        if found:
            return found.group(1)
    return None


def _roles(request: RecordedRequest) -> list[str]:
    return [m.get("role", "") if isinstance(m, dict) else "" for m in request.messages]


def lookup_call(key: str, fault: str) -> str:
    """The XML tool call a MiroThinker-style model writes for ``faulty.lookup``."""
    arguments = json.dumps({"key": key, "fault": fault})
    return (
        f"I will look it up.\n<use_mcp_tool>\n<server_name>{TOOL_SERVER}</server_name>\n"
        f"<tool_name>lookup</tool_name>\n<arguments>\n{arguments}\n</arguments>\n</use_mcp_tool>"
    )


@dataclass
class ResearchModel:
    """The scripted model: a function of the request (see the module docstring).

    ``tool_faults`` maps a key to the faults of its successive tool calls ("none" after
    the list ends); ``use_tools=False`` answers every task without calling a tool.
    """

    use_tools: bool = False
    tool_faults: dict[str, list[str]] = field(default_factory=dict)
    max_calls: int = 3
    delay: float = 0.0

    def __call__(self, request: RecordedRequest) -> Reply:
        return Reply(self.decide(request), delay=self.delay)

    def decide(self, request: RecordedRequest) -> str:
        key = task_key(request) or "?"
        texts, roles = message_texts(request), _roles(request)
        last = texts[-1] if texts else ""
        if POST_MORTEM_MARK in last:
            return "Failure type: blocked\nWhat happened: the lookup failed.\nUseful findings: none"
        found = answer_for(key) in "\n".join(
            text for text, role in zip(texts[1:], roles[1:], strict=True) if role != "assistant"
        )
        if SUMMARY_MARK in last:
            if found or not self.use_tools:
                return f"\\boxed{{{answer_for(key)}}}"
            return "\\boxed{unknown}"
        if not self.use_tools or found:
            return "I have what I need."
        calls = sum(
            "<use_mcp_tool>" in t for t, r in zip(texts, roles, strict=True) if r == "assistant"
        )
        if calls >= self.max_calls:
            return "The lookup keeps failing; I will stop here."
        planned = self.tool_faults.get(key, [])
        return lookup_call(key, planned[calls] if calls < len(planned) else "none")


def fault_step(kind: str, reply: Reply, slow_seconds: float) -> Step:
    """The HTTP fault named ``kind`` in place of ``reply``."""
    if kind == "429":
        return rate_limited(0)
    if kind in ("500", "503"):
        return server_error(int(kind))
    if kind == "garbage":
        return malformed_body()
    if kind == "html":  # a proxy's error page where JSON was expected
        return Fault(status=502, body="<html><body>502 Bad Gateway</body></html>")
    if kind == "timeout":
        return slow(slow_seconds, reply)
    if kind == "hang":
        return slow(HANG_SECONDS, reply)
    raise ValueError(f"unknown LLM fault {kind!r}; use one of {', '.join(LLM_FAULTS)}")


@dataclass
class FaultInjector:
    """A responder that faults a seeded share ``rate`` of requests with ``kinds``.

    ``outage`` keys get a 500 on every request (their tasks end in ``error``) until the
    set is emptied; ``plan`` names the fault of a key's request number n (from 0),
    besides the random ones. ``injected`` counts faults by kind, ``retries`` the requests that
    repeated a faulted one, ``requests`` the requests of each key.
    """

    inner: Callable[[RecordedRequest], Reply]
    seed: int
    rate: float = 0.0
    kinds: Iterable[str] = ("429", "500", "503", "garbage", "html")
    slow_seconds: float = 5.0
    outage: set[str] = field(default_factory=set)
    plan: dict[tuple[str, int], str] = field(default_factory=dict)
    injected: Counter[str] = field(default_factory=Counter)
    requests: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    _faulted: dict[str, int] = field(default_factory=dict)  # key -> messages of its fault
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: RecordedRequest) -> Step:
        key = task_key(request) or "?"
        reply = self.inner(request)
        with self._lock:
            number = self.requests[key]
            self.requests[key] += 1
            if self._faulted.pop(key, None) == len(request.messages):
                self.retries += 1
            kind = self._choose(key, number)
            if kind is None:
                return reply
            self.injected[kind] += 1
            self._faulted[key] = len(request.messages)
        return fault_step(kind, reply, self.slow_seconds) if kind != "outage" else server_error()

    def new_run(self) -> None:
        """Before a resume: its first request of a task repeats none of the last run's."""
        with self._lock:
            self._faulted.clear()

    def _choose(self, key: str, number: int) -> str | None:
        if key in self.outage:
            return "outage"
        if (key, number) in self.plan:
            return self.plan[key, number]
        draw = random.Random(f"{self.seed}:{key}:{number}")
        if draw.random() >= self.rate:
            return None
        return draw.choice(list(self.kinds))

    @property
    def total_injected(self) -> int:
        with self._lock:
            return sum(self.injected.values())


# Lines as the file holds them, so a test sees exactly what was written; the typed view
# of the same lines is records.results.TaskRecord.
ResultLine = dict[str, object]


def read_results(run_dir: Path) -> list[ResultLine]:
    """``benchmark_results.jsonl`` of a run, every line (a resumed task has several)."""
    path = RunLayout(run_dir).results
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def latest_outcomes(run_dir: Path) -> dict[str, ResultLine]:
    """The last record of each task: what a resume and the summary go by."""
    return {str(record["task_id"]): record for record in read_results(run_dir)}


def finished_keys(run_dir: Path) -> set[str]:
    return {k for k, r in latest_outcomes(run_dir).items() if r["status"] == "finished"}


def read_tool_calls(log: Path) -> list[LoggedCall]:
    """The calls ``fault_tool_server`` logged (``DEEPLEDGER_FAULT_TOOL_LOG``)."""
    if not log.exists():
        return []
    calls: list[LoggedCall] = [
        json.loads(line) for line in log.read_text().splitlines() if line.strip()
    ]
    return calls


# --------------------------------------------------------------------------- running

# The source checkout's conf/ (as the CLI finds it), without importing the CLI.
CONF_DIR = Path(
    os.environ.get("DEEPLEDGER_CONFIG_DIR") or Path(__file__).resolve().parents[3] / "conf"
)

FAULT_TOOL_SERVER = str(Path(__file__).with_name("fault_tool_server.py"))

# Retries as fast as the policy allows, so a fault costs milliseconds, not seconds.
FAST_RETRY = (
    "llm.retry.initial_wait_seconds=0.01",
    "llm.retry.max_wait_seconds=0.05",
    "llm.retry.jitter_seconds=0",
    "llm.retry.unreachable_after_seconds=0",  # a refused port: no wait for it to start
)


def bench_overrides(
    data_dir: Path,
    base_url: str,
    *,
    tools: bool = False,
    tool_log: Path | None = None,
    tool_args: Iterable[str] = (),
    tool_settings: dict[str, object] | None = None,
    llm: str = "openai_compatible",
    extra: Iterable[str] = (),
) -> list[str]:
    """The overrides of a ``deepledger bench`` of the suite in ``data_dir`` against the
    fake at ``base_url`` (the URL the ``llm`` preset's SDK takes), with the fault tool
    server when ``tools`` (``tool_settings``: more keys of its ``tools.faulty`` entry)."""
    overrides = [
        f"benchmark.data.data_dir={data_dir}",
        "benchmark.name=faults",
        "benchmark.execution.report=false",
        "benchmark.execution.report_every_seconds=0",
        f"llm={llm}",
        f"llm.base_url={base_url}",
        "agent.max_final_answer_retries=1",
        *FAST_RETRY,
    ]
    if tools:
        # By its file, not `-m`: the bench's tool server starts wherever the run does,
        # and the checkout's tests/ need not be importable there.
        args = ", ".join([FAULT_TOOL_SERVER, *tool_args])
        env = f"{{DEEPLEDGER_FAULT_TOOL_LOG: '{tool_log}'}}" if tool_log else "{}"
        settings = "".join(f", {k}: {v}" for k, v in (tool_settings or {}).items())
        overrides += [
            f"agent.main_agent.tools=[{TOOL_SERVER}]",
            f"+tools.{TOOL_SERVER}={{command: python, args: [{args}], env: {env}{settings}}}",
        ]
    else:
        overrides.append("agent.main_agent.tools=[]")
    return [*overrides, *extra]


async def run_in_process(overrides: list[str], run_dir: Path) -> dict[str, object]:
    """``deepledger bench`` in this process: the same code path after the command line;
    the summary it wrote, as ``summary.json`` holds it."""
    from deepledger.bench.suite import run_suite
    from deepledger.config import compose, validate
    from deepledger.context.strategies import STRATEGIES

    conf = CONF_DIR
    cfg = compose(conf, overrides)
    validate(cfg, STRATEGIES)  # as the command line does
    await run_suite(cfg, run_dir, conf, ["bench", *overrides])
    loaded: dict[str, object] = json.loads(RunLayout(run_dir).summary.read_text("utf-8"))
    return loaded


def accuracy(run_dir: Path) -> float | None:
    """Correct tasks over tasks with a ground truth, from the latest records."""
    judged = [r for r in latest_outcomes(run_dir).values() if r.get("ground_truth") is not None]
    return sum(r.get("correct") is True for r in judged) / len(judged) if judged else None


class KillAtRequest:
    """Wraps a fake's responder: SIGKILLs the armed process group when the run makes its
    ``kill_at``-th request (that request is never answered), as a crash would land."""

    def __init__(self, responder: Callable[[RecordedRequest], Any]) -> None:
        self.responder = responder
        self.lock = threading.Lock()
        self.group: int | None = None
        self.kill_at: int | None = None
        self.seen = 0
        self.killed = threading.Event()

    def arm(self, group: int, kill_at: int | None) -> None:
        """Count the requests of the run in process group ``group`` from now; None: no kill."""
        with self.lock:
            self.group, self.kill_at, self.seen = group, kill_at, 0
            self.killed.clear()

    def __call__(self, request: RecordedRequest) -> Any:
        with self.lock:
            self.seen += 1
            if self.seen == self.kill_at and self.group is not None:
                os.killpg(self.group, signal.SIGKILL)
                self.killed.set()
        return self.responder(request)
