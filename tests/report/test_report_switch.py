"""`benchmark.execution.report`: the default run writes report.html, `false` writes none."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply
from tests.support.report import embedded

ROOT = Path(__file__).resolve().parents[2]


def bench(
    tmp_path: Path, base_url: str, name: str, *extra: str, tasks: int = 1
) -> tuple[Path, str]:
    data = tmp_path / "data"
    data.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"task_id": f"t{n}", "task_question": f"Task {n}: six times seven?"})
        for n in range(1, tasks + 1)
    ]
    (data / "suite.jsonl").write_text("\n".join(lines) + "\n")
    run_dir = tmp_path / name
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepledger",
            "bench",
            f"benchmark.data.data_dir={data}",
            "benchmark.data.metadata_file=suite.jsonl",
            "benchmark.name=switch",
            "llm=openai_compatible",
            f"llm.base_url={base_url}",
            "agent.main_agent.tools=[]",
            f"hydra.run.dir={run_dir}",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return run_dir, done.stdout


@pytest.mark.parametrize("setting", ["default", "report=false"])
def test_the_report_switch(tmp_path, setting):
    extra = ["benchmark.execution.report=false"] if setting == "report=false" else []
    with FakeLLMServer(responder=lambda request: Reply(text="It is \\boxed{42}.")) as server:
        run_dir, stdout = bench(tmp_path, server.openai_base_url, "run", *extra)
    assert json.loads((run_dir / "summary.json").read_text())["tasks"]["finished"] == 1
    report = run_dir / "report.html"
    if extra:
        assert not report.exists() and "Report:" not in stdout
        return
    assert f"Report: {report}" in stdout
    data, trajectories = embedded(report)
    assert [t["id"] for t in data["tasks"]] == ["t1"] and len(trajectories) == 1
    assert set(data["charts"]) == {"prompt_run", "prompt_task", "cumulative", "turns"}
    assert "vegaEmbed" in report.read_text()


HOLD_LIMIT_SECONDS = 240.0  # only a run that is stuck waits this long


def wait_until(condition, limit: float = HOLD_LIMIT_SECONDS) -> None:
    deadline = time.monotonic() + limit
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


class HeldSecondTask:
    """A responder that answers task 1 at once and holds the first request of task 2 in
    ``hold`` (task 1 is then finished, so a live report is due), noting whether
    ``report`` existed when the hold ended."""

    def __init__(self, report: Path, hold) -> None:
        self.report, self.hold = report, hold
        self.arrived_at: float | None = None
        self.held_for: float | None = None
        self.report_while_held: bool | None = None
        self.released = threading.Event()

    def __call__(self, request) -> Reply:
        if "Task 2" in json.dumps(request.body["messages"]) and self.arrived_at is None:
            self.arrived_at = time.monotonic()
            self.hold(self)
            self.held_for = time.monotonic() - self.arrived_at
            self.report_while_held = self.report.exists()
            self.released.set()
        return Reply(text="It is \\boxed{42}.")


def test_report_false_writes_no_live_report_either(tmp_path):
    """Two runs side by side, live report due every 0.1 s, each holding task 2 once
    task 1 is done. The control (report on) is held until its live report appears, which
    shows a live report gets its chance in these conditions; the report=false run, held
    twice as long after its own task 2 began, must have written none."""
    control = HeldSecondTask(
        tmp_path / "control" / "run" / "report.html",
        hold=lambda held: wait_until(held.report.exists),
    )

    def twice_as_long_as_the_control(held: HeldSecondTask) -> None:
        control.released.wait(HOLD_LIMIT_SECONDS)
        enough = max(2 * (control.held_for or 0.0), 1.0)
        wait_until(lambda: time.monotonic() - held.arrived_at >= enough)

    off = HeldSecondTask(tmp_path / "off" / "run" / "report.html", twice_as_long_as_the_control)
    common = (
        "benchmark.execution.report_every_seconds=0.1",
        "benchmark.execution.max_concurrent=1",
    )
    with (
        FakeLLMServer(responder=control) as control_server,
        FakeLLMServer(responder=off) as off_server,
        ThreadPoolExecutor(2) as pool,
    ):
        runs = [
            pool.submit(
                bench, tmp_path / "control", control_server.openai_base_url, "run", *common, tasks=2
            ),
            pool.submit(
                bench,
                tmp_path / "off",
                off_server.openai_base_url,
                "run",
                "benchmark.execution.report=false",
                *common,
                tasks=2,
            ),
        ]
        (control_dir, _), (off_dir, off_stdout) = [run.result() for run in runs]
    assert control.report_while_held, "the control run wrote no live report while held"
    assert off.report_while_held is False
    for run_dir in (control_dir, off_dir):
        assert json.loads((run_dir / "summary.json").read_text())["tasks"]["finished"] == 2
    assert not (off_dir / "report.html").exists() and "Report:" not in off_stdout
