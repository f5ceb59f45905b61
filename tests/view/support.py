"""The viewer as a user starts it (`deepledger view` in a process of its own), a bench
whose model waits where the test says, and a browser that reaches only the viewer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.browser import CHROMIUM_FLAGS, chromium_path
from tests.support.cli import ROOT
from tests.support.doubles.bench_model import decide
from tests.support.doubles.fake_llm_server import FakeUsage, RecordedRequest, Reply

QUESTION = "EASY: What is the capital of France?"


@dataclass
class Viewer:
    url: str
    process: subprocess.Popen[str]


@contextmanager
def viewer(logs: Path, *args: str) -> Iterator[Viewer]:
    """`deepledger view LOGS --no-browser` on a free port; its URL read from its stdout."""
    process = subprocess.Popen(
        [sys.executable, "-m", "deepledger", "view", str(logs), "--no-browser", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()  # blocks until it listens (or ends)
        assert url.startswith("http://"), process.stderr.read() if process.stderr else ""
        yield Viewer(url, process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# Two calls of the `time` tool (agent.main_agent.tools=[time], a local server): the
# trajectory a bench shows then has turns with tool calls and their results.
TOOL_CALLS = tuple(
    f"{said}\n<use_mcp_tool><server_name>time</server_name>"
    "<tool_name>get_current_time</tool_name>"
    f'<arguments>{{"timezone": "{zone}"}}</arguments></use_mcp_tool>'
    for said, zone in (
        ("I will check the time first.", "UTC"),
        ("Now the time in Paris, the city I have in mind.", "Europe/Paris"),
    )
)


@dataclass
class GatedModel:
    """The bench model of tests/support/doubles/bench_model.py, except that the reply
    holding the answer waits until ``release`` (a run held mid-task). With ``tools``,
    its first turns call the time tool (TOOL_CALLS). Each reply's prompt tokens are
    the conversation's characters / 4, so a chart of them climbs turn by turn."""

    gate: threading.Event = field(default_factory=threading.Event)
    waiting: threading.Event = field(default_factory=threading.Event)
    tools: bool = False

    def __call__(self, request: RecordedRequest) -> Reply:
        contents = [m.get("content") or "" for m in request.messages]
        texts = [c if isinstance(c, str) else str(c) for c in contents]
        turns = sum(1 for m in request.messages if m.get("role") == "assistant")
        calling = self.tools and turns < len(TOOL_CALLS)
        text = TOOL_CALLS[turns] if calling else decide(texts)
        if text.startswith("\\boxed"):
            self.waiting.set()
            self.gate.wait(timeout=240)
        usage = FakeUsage(input_tokens=sum(map(len, texts)) // 4, output_tokens=len(text) // 4)
        return Reply(text, usage=usage)

    def release(self) -> None:
        self.gate.set()


def one_task_suite(folder: Path) -> Path:
    folder.mkdir(parents=True)
    line = {"task_id": "capital", "task_question": QUESTION, "ground_truth": "Paris"}
    (folder / "standardized_data.jsonl").write_text(json.dumps(line) + "\n")
    return folder


def bench(base_url: str, data: Path, run_dir: Path, tools: str = "[]") -> subprocess.Popen[str]:
    """`deepledger bench` on ``data`` in the background (``tools``: its agent's)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deepledger",
            "bench",
            f"benchmark.data.data_dir={data}",
            "benchmark.name=tiny",
            "llm=openai_compatible",
            f"llm.base_url={base_url}",
            f"agent.main_agent.tools={tools}",
            "agent.max_final_answer_retries=1",
            f"hydra.run.dir={run_dir}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1"},
    )


@contextmanager
def browser_on(base: str) -> Iterator[tuple[object, list[str]]]:
    """A page in headless Chromium that may reach ``base`` and nothing else; the
    console errors and refused requests are listed."""
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS
        )
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.on(
                "console",
                lambda m: problems.append(f"{m.type}: {m.text}") if m.type == "error" else None,
            )
            page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))

            def only_the_viewer(route) -> None:
                url = route.request.url
                if url.startswith((base, "data:", "blob:")):
                    route.continue_()
                else:
                    problems.append(f"request: {url}")
                    route.abort()

            context.route("**/*", only_the_viewer)
            yield page, problems
        finally:
            browser.close()
