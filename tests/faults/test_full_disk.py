"""The run directory's disk fills up in the middle of a `deepledger bench`.

The run directory lives on a small tmpfs mounted for the test (the machine runs as
root; without the right to mount, the tests skip and say so). The model fake fills the
disk on a seeded request of the run, so the disk runs out in the middle of the work.
The run must stop with a clear message at the first write the disk refuses, start no
task after it and record none as an error; once space is freed, the same command
resumes, every task ends recorded, and no task that finished is redone.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.disks import small_tmpfs
from tests.support.doubles.fake_llm_server import FakeLLMServer, RecordedRequest, Step
from tests.support.doubles.faults import (
    SUMMARY_MARK,
    ResearchModel,
    bench_overrides,
    finished_keys,
    latest_outcomes,
    message_texts,
    task_key,
    write_suite,
)

ROOT = Path(__file__).resolve().parents[2]
TASKS = 8
DISK_SIZE = "8m"  # above the 1 MiB a run needs free to start (store/lock.py)


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of DISK_SIZE at tmp_path/disk, unmounted afterwards."""
    with small_tmpfs(tmp_path / "disk", DISK_SIZE) as mount_point:
        yield mount_point


class DiskFillingModel:
    """The research model, which fills the disk of ``filler`` on its ``fill_at``-th
    request, before answering it (with ``after_a_record``: on the first request from
    then on that comes after a task's record was written)."""

    def __init__(self, filler: Path, fill_at: int, after_a_record: bool = False) -> None:
        self.model = ResearchModel(use_tools=True, delay=0.02)
        self.filler, self.fill_at, self.after_a_record = filler, fill_at, after_a_record
        self.results = filler.parent / "run" / "benchmark_results.jsonl"
        self.seen = 0
        self.filled = False
        self.lock = threading.Lock()
        self.asked_before: set[str | None] = set()  # tasks that asked until the disk filled
        self.asked_after: set[str | None] = set()  # and those that asked from then on

    def __call__(self, request: RecordedRequest) -> Step:
        with self.lock:
            self.seen += 1
            recorded = self.results.exists() and self.results.stat().st_size > 0
            due = self.seen >= self.fill_at and (recorded or not self.after_a_record)
            # The filling request's task started before the disk was full.
            (self.asked_after if self.filled else self.asked_before).add(task_key(request))
            if due and not self.filled:
                fill(self.filler)
                self.filled = True
        return self.model(request)

    def started_after_the_fill(self) -> set[str | None]:
        """Tasks whose first request came once the disk was full."""
        return self.asked_after - self.asked_before


def fill(path: Path) -> None:
    with path.open("wb", buffering=0) as out:
        block = b"\0" * 65536
        try:
            while True:
                out.write(block)
        except OSError:  # ENOSPC: full, as intended; then the last bytes one by one
            pass
        try:
            while True:
                out.write(b"\0")
        except OSError:
            return


def unparsable_lines(path: Path) -> list[str]:
    bad = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        try:
            json.loads(line)
        except ValueError:
            bad.append(line[:80])
    return bad


def bench(command: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """The command run to its end; a run still going after ``timeout`` is killed and
    reported with returncode None."""
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        stderr += f"\n[killed: still running after {timeout:g}s]"
        return subprocess.CompletedProcess(command, None, stdout, stderr)  # type: ignore[arg-type]
    finally:
        # A tool server the bench left behind would keep the disk busy: end its group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def run_until_the_disk_fills(seed: int, tmp_path: Path, disk: Path, after_a_record=False):
    """The first run (it meets the full disk) and what the resume needs."""
    draw = random.Random(seed)
    fill_at = draw.randint(2, TASKS * 3 - 2)
    print(f"the disk fills on request {fill_at} (after a record: {after_a_record})")
    keys = write_suite(tmp_path / "data", TASKS)
    model = DiskFillingModel(disk / "filler", fill_at, after_a_record)
    server = FakeLLMServer(responder=model).start()
    overrides = bench_overrides(
        tmp_path / "data",
        server.openai_base_url,
        tools=True,
        extra=["benchmark.execution.max_concurrent=2", f"hydra.run.dir={disk / 'run'}"],
    )
    command = [sys.executable, "-m", "deepledger", "bench", *overrides]
    return keys, server, model, command, bench(command)


@pytest.mark.parametrize("after_a_record", [True, False], ids=["after_a_record", "anytime"])
def test_a_disk_that_fills_mid_run_stops_it_clearly_and_a_resume_finishes(
    seed, tmp_path, small_disk, after_a_record
):
    # after_a_record: filled once a record is on disk, so the next one appended is cut
    # where the disk ends; anytime: on the seeded request, whatever is written by then.
    keys, server, model, command, first = run_until_the_disk_fills(
        seed, tmp_path, small_disk, after_a_record
    )
    try:
        assert first.returncode == 2, first.stderr[-2000:]
        assert "the disk is full" in first.stderr and "run the same command" in first.stderr
        assert "Traceback" not in first.stderr and "Logging error" not in first.stderr
        assert " failed |" not in first.stderr  # no task failed for want of space
        # Of the two slots, the filling request's task holds one: at most the other task
        # was started, and it had not asked yet; none started after the disk filled.
        assert len(model.started_after_the_fill()) <= 1, model.started_after_the_fill()
        run_dir = small_disk / "run"
        assert unparsable_lines(run_dir / "benchmark_results.jsonl") == []  # nothing half-written
        assert {r["status"] for r in latest_outcomes(run_dir).values()} <= {"finished"}
        for progress in run_dir.glob("tasks/*/progress.jsonl"):
            assert unparsable_lines(progress) == [], progress
        recorded = finished_keys(run_dir)
        (small_disk / "filler").unlink()
        seen = len(server.requests)
        second = bench(command)
        asked = {task_key(r) for r in server.requests[seen:]}
    finally:
        server.close()
    assert second.returncode == 0, second.stderr[-3000:]
    assert not asked & recorded  # nothing finished is redone
    outcomes = latest_outcomes(run_dir)
    assert set(outcomes) == set(keys) and {r["status"] for r in outcomes.values()} == {"finished"}
    assert all(r["final_answer"] == f"code-{r['task_id']}" for r in outcomes.values())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tasks"]["finished"] == TASKS


def test_a_full_disk_while_another_task_waits_on_a_tool_ends_the_run(tmp_path, small_disk):
    """k01 waits on a tool call that never answers; k02 fills the disk with its closing
    call and cannot be recorded. The run must end then, with the message, not wait on k01."""
    write_suite(tmp_path / "data", 2)
    model = ResearchModel(use_tools=True, tool_faults={"k01": ["hang"]})

    def filling(request: RecordedRequest) -> Step:
        if task_key(request) == "k02" and SUMMARY_MARK in message_texts(request)[-1]:
            fill(small_disk / "filler")
        return model(request)

    with FakeLLMServer(responder=filling) as server:
        overrides = bench_overrides(
            tmp_path / "data",
            server.openai_base_url,
            tools=True,
            tool_settings={"call_timeout_seconds": 3600},
            extra=[f"hydra.run.dir={small_disk / 'run'}"],
        )
        first = bench([sys.executable, "-m", "deepledger", "bench", *overrides], timeout=20)
    assert first.returncode == 2, first.stderr[-2000:]
    assert "the disk is full" in first.stderr


def test_a_disk_too_full_for_the_report_says_so_in_one_line_and_exits_2(tmp_path, small_disk):
    """The disk fills at the task's closing call, leaving room for its records and the
    summary but not for the HTML report: one line says what was not written, where, and
    that the results are complete; no traceback; exit code 2."""
    write_suite(tmp_path / "data", 1)
    model = ResearchModel(use_tools=False)

    def filling(request: RecordedRequest) -> Step:
        if SUMMARY_MARK in message_texts(request)[-1]:
            with (small_disk / "filler").open("wb") as out:
                room = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
                out.write(b"\0" * max(0, room - 64 * 1024))  # the records' room, not more
        return model(request)

    run_dir = small_disk / "run"
    with FakeLLMServer(responder=filling) as server:
        overrides = [
            "benchmark.execution.report=true" if o == "benchmark.execution.report=false" else o
            for o in bench_overrides(
                tmp_path / "data", server.openai_base_url, extra=[f"hydra.run.dir={run_dir}"]
            )
        ]
        done = bench([sys.executable, "-m", "deepledger", "bench", *overrides], timeout=60)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if line.startswith("deepledger:")]
    assert f"{run_dir / 'report.html'} could not be written" in line
    assert "the results are complete" in line and f"deepledger report {run_dir}" in line
    assert {r["status"] for r in latest_outcomes(run_dir).values()} == {"finished"}
    assert json.loads((run_dir / "summary.json").read_text())["tasks"]["finished"] == 1
    assert not (run_dir / "report.html").exists()
