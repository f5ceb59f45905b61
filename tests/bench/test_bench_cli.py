"""`deepledger bench` as a user runs it: a real subprocess against the loopback fake."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

from tests.support.bench import SUITE, bench_command, results
from tests.support.cli import ROOT, deepledger
from tests.support.doubles.bench_model import respond_http
from tests.support.doubles.fake_llm_server import FakeLLMServer
from tests.support.processes import Descendants, command_line, takes_ctrl_c
from tests.support.report import embedded


def test_bench_produces_the_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=respond_http) as server:
        done = subprocess.run(
            bench_command(server.openai_base_url, run_dir),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    assert "accuracy       1.000 (3/3)" in done.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tasks"] == {"total": 4, "finished": 4, "errors": 0, "judged": 3, "expected": 4}
    assert summary["post_mortems"]["with"]["attempts"] == 1
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["agent"]["context_compress_limit"] == 2
    assert f"Report: {run_dir / 'report.html'}" in done.stdout
    assert 'id="report-data"' in (run_dir / "report.html").read_text()
    assert manifest["runs"][0]["versions"]["deepledger"] and manifest["runs"][0]["finished_at"]
    assert {r["task_id"] for r in results(run_dir)} == {"easy/1", "hard #2", "näive 3", "open-4"}
    journals = sorted(p.name for p in (run_dir / "tasks").glob("hard_2-*/attempt-*.jsonl"))
    assert journals == [f"attempt-1-retry-{n}.jsonl" for n in range(3)]
    report = deepledger("report", str(run_dir))
    assert report.returncode == 0 and "tiny: 4 tasks of 4 expected" in report.stdout


def test_a_run_killed_with_sigkill_resumes_without_redoing_or_losing_work(tmp_path):
    run_dir = tmp_path / "run"
    hard_progress = None

    def slow(request):  # slow enough to kill the run in the middle of the hard task
        if request.messages[1]["content"].startswith("HARD"):
            # Held until the live report due once easy/1 finished is on disk, however
            # slowly the loaded machine gets there: the kill below must find one.
            deadline = time.monotonic() + 120
            while not (run_dir / "report.html").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return dataclasses.replace(respond_http(request), delay=0.3)

    with FakeLLMServer(responder=slow) as server:
        command = bench_command(
            server.openai_base_url, run_dir, "benchmark.execution.max_concurrent=1"
        )
        first = subprocess.Popen(
            [*command, "benchmark.execution.report_every_seconds=0.2"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # kill once the hard task finished one retry
            found = list((run_dir / "tasks").glob("hard_2-*/progress.jsonl"))
            if found and "retry_finished" in found[0].read_text():
                hard_progress = found[0]
                break
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert hard_progress is not None, "the run never reached the hard task"
        # The report written while the run went, and the one rebuilt after the kill.
        live, _ = embedded(run_dir / "report.html")
        assert live["run"]["state"] == "running" and live["tasks"]
        rebuilt = deepledger("report", str(run_dir), timeout=300)
        assert rebuilt.returncode == 0, rebuilt.stderr
        after, _ = embedded(run_dir / "report.html")
        assert after["run"]["state"] == "stopped"
        assert {t["id"]: t["status"] for t in after["tasks"]}["hard #2"] == "unfinished"
        done_before = {r["task_id"] for r in results(run_dir)}
        seen_before = len(server.requests)
        second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        later = [r.messages[1]["content"] for r in server.requests[seen_before:]]

    assert second.returncode == 0, second.stderr
    assert "easy/1" in done_before and "hard #2" not in done_before
    ids = [r["task_id"] for r in results(run_dir)]
    assert sorted(ids) == sorted({"easy/1", "hard #2", "näive 3", "open-4"})  # each once
    assert not any("France" in text for text in later)  # finished: no new model calls
    hard = [text for text in later if text.startswith("HARD")]
    assert hard and all("[Attempt 1]" in text for text in hard)  # post-mortem recovered
    (record,) = [r for r in results(run_dir) if r["task_id"] == "hard #2"]
    assert record["final_answer"] == "Danube"
    assert [r["carried_post_mortems"] for r in record["attempts"][0]["retries"]] == [0, 1, 2]
    assert len(json.loads((run_dir / "manifest.json").read_text())["runs"]) == 2


def test_missing_data_and_missing_judge_keys_fail_before_any_work(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepledger",
            "bench",
            "benchmark=gaia-validation",
            "llm=openai_compatible",
            f"hydra.run.dir={tmp_path}/a",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert (
        missing.returncode == 2 and "data/gaia-2023-validation' is not a folder" in missing.stderr
    )
    no_key = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepledger",
            "bench",
            "benchmark=simpleqa",
            f"benchmark.data.data_dir={SUITE}",
            "llm=openai_compatible",
            f"hydra.run.dir={tmp_path}/b",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert no_key.returncode == 2 and "OPENAI_API_KEY" in no_key.stderr
    assert "Traceback" not in missing.stderr + no_key.stderr
    assert not (tmp_path / "a" / "manifest.json").exists()
    assert not (tmp_path / "b" / "benchmark_results.jsonl").exists()


def test_ctrl_c_stops_cleanly_without_orphans_and_says_how_to_resume(tmp_path):
    sandbox = "deepledger.tools.servers.python_sandbox"  # the real server to clean up

    def slow(request):
        return dataclasses.replace(respond_http(request), delay=2.0)

    with FakeLLMServer(responder=slow) as server:
        command = bench_command(server.openai_base_url, tmp_path / "run")
        command = [c for c in command if not c.startswith("agent.main_agent.tools")]
        command.append("agent.main_agent.tools=[python]")  # a real server to clean up
        run = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=takes_ctrl_c,
        )
        # Only what this run started: other tests' and runs' servers may be running too.
        started = Descendants(run.pid)
        try:
            deadline = time.monotonic() + 60
            # The server may still be starting when the first request goes out (its
            # tool list cached by an earlier run): wait for its process as well.
            while not (server.requests and started.ran(sandbox)) and time.monotonic() < deadline:
                time.sleep(0.1)
            run.send_signal(signal.SIGINT)
            _, stderr = run.communicate(timeout=60)
        finally:
            started.stop()
    assert run.returncode == 130
    assert "interrupted" in stderr and "resume" in stderr and "Traceback" not in stderr
    assert started.ran(sandbox), f"no python tool server, nothing checked: {started.commands}"
    leftover = [command_line(process) for process in started.still_running()]
    assert leftover == []
    named = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert named.stdout.strip() == ""


def test_a_sweep_names_each_run_by_its_swept_keys_and_report_compares_them(tmp_path):
    sweep_dir = tmp_path / "sweep"
    with FakeLLMServer(responder=respond_http) as server:
        command = bench_command(server.openai_base_url, tmp_path / "unused")
        command = [c for c in command if not c.startswith("hydra.run.dir")]
        done = subprocess.run(
            [*command[:4], "-m", *command[4:], f"hydra.sweep.dir={sweep_dir}",
             "agent.keep_tool_result=1,5"],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Only the swept key names the folders: not the data path, not the server's URL.
    runs = sorted(p.name for p in sweep_dir.iterdir() if p.is_dir())
    assert runs == ["0_agent.keep_tool_result=1", "1_agent.keep_tool_result=5"]
    assert all((sweep_dir / run / ".hydra" / "overrides.yaml").is_file() for run in runs)
    report = deepledger("report", str(sweep_dir), timeout=300)
    assert report.returncode == 0, report.stderr
    assert "2 of 2 runs compared" in report.stdout and "not averaged" in report.stdout
    assert f"Comparison: {sweep_dir / 'comparison.html'}" in report.stdout
    compared, _ = embedded(sweep_dir / "comparison.html")
    labels = [run["label"] for run in compared["runs"]]
    assert labels == ["agent.keep_tool_result=1", "agent.keep_tool_result=5"]
