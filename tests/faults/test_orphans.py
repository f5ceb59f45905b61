"""No process deepledger started outlives it: a `deepledger bench` killed with SIGKILL
(nothing of it runs to stop its servers) while its stdio tool server is blocked in a
call, frozen whole so it cannot even notice its stdin closing. The server runs in a
session of its own, so only the kernel's parent-death signal can end it
(``deepledger/processes.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deepledger.testing.fake_llm_server import FakeLLMServer
from deepledger.testing.faults import ResearchModel, bench_overrides, read_tool_calls, write_suite

ROOT = Path(__file__).resolve().parents[2]
START_BOUND_SECONDS = 120  # the bench's start and first turn, on a loaded machine
GONE_BOUND_SECONDS = 10


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (dead, not yet reaped by whoever adopted it) has
    ended."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_blocked_tool_server_dies_with_a_sigkilled_bench(tmp_path):
    (key,) = write_suite(tmp_path / "data", 1)
    tool_log = tmp_path / "tool_calls.jsonl"
    model = ResearchModel(use_tools=True, tool_faults={key: ["freeze"]})
    server_pid = None
    with FakeLLMServer(responder=model) as server:
        overrides = bench_overrides(
            tmp_path / "data",
            server.openai_base_url,
            tools=True,
            tool_log=tool_log,
            tool_settings={"call_timeout_seconds": 3600},  # the call waits for ever
            extra=[f"hydra.run.dir={tmp_path / 'run'}"],
        )
        bench = subprocess.Popen(
            [sys.executable, "-m", "deepledger", "bench", *overrides],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # the kill below is for deepledger alone, not its group
        )
        try:
            # The server logs the call, with its pid, before it freezes.
            assert wait_for(lambda: read_tool_calls(tool_log), START_BOUND_SECONDS), (
                f"the tool call never reached the server (bench exit: {bench.poll()})"
            )
            server_pid = read_tool_calls(tool_log)[0]["pid"]
            assert alive(server_pid) and bench.poll() is None
            os.kill(bench.pid, signal.SIGKILL)
            bench.wait()
            assert wait_for(lambda: not alive(server_pid), GONE_BOUND_SECONDS), (
                f"tool server {server_pid} outlived the killed bench"
            )
        finally:
            if bench.poll() is None:
                bench.kill()
                bench.wait()
            if server_pid is not None and alive(server_pid):
                os.kill(server_pid, signal.SIGKILL)  # the orphan this test found
