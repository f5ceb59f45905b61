"""No process deepledger started outlives it: a `deepledger bench` killed with SIGKILL
(nothing of it runs to stop its servers) while its stdio tool server is blocked in a
call, frozen whole so it cannot even notice its stdin closing. The server runs in a
session of its own, so only the kernel's parent-death signal can end it
(``deepledger/processes.py``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.doubles.fake_llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.support.doubles.faults import (
    ResearchModel,
    bench_overrides,
    read_tool_calls,
    write_suite,
)

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


def descendants(pid: int) -> dict[int, str]:
    """Every living process under ``pid`` (children, theirs...), with its command line."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in found and alive(child):
                found[child] = _command_line(child)
                frontier.append(child)
    return found


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def launch(overrides: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "deepledger", "bench", *overrides],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the kill below is for deepledger alone, not its group
    )


def killed_leaves_nothing(bench: subprocess.Popen, ready, what: str) -> None:
    """Once ``ready()``, SIGKILL the bench alone; every process under it must end."""
    started: dict[int, str] = {}
    try:
        assert wait_for(ready, START_BOUND_SECONDS), f"{what} never ran (exit {bench.poll()})"
        started = descendants(bench.pid)
        assert any(what in command for command in started.values()), started
        os.kill(bench.pid, signal.SIGKILL)
        bench.wait()
        wait_for(lambda: not any(alive(pid) for pid in started), GONE_BOUND_SECONDS)
        left = {pid: command for pid, command in started.items() if alive(pid)}
        assert not left, f"outlived the killed bench: {left}"
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)  # the orphans this test found


linux_only = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")


@linux_only
def test_a_blocked_tool_server_dies_with_a_sigkilled_bench(tmp_path):
    (key,) = write_suite(tmp_path / "data", 1)
    tool_log = tmp_path / "tool_calls.jsonl"
    model = ResearchModel(use_tools=True, tool_faults={key: ["freeze"]})
    with FakeLLMServer(responder=model) as server:
        overrides = bench_overrides(
            tmp_path / "data",
            server.openai_base_url,
            tools=True,
            tool_log=tool_log,
            tool_settings={"call_timeout_seconds": 3600},  # the call waits for ever
            extra=[f"hydra.run.dir={tmp_path / 'run'}"],
        )
        # The server logs the call, with its pid, before it freezes.
        killed_leaves_nothing(
            launch(overrides), lambda: bool(read_tool_calls(tool_log)), "fault_tool_server"
        )


def python_sleeps(request: RecordedRequest) -> Reply:
    """A model whose first turn runs code that sleeps for an hour in the sandbox."""
    del request
    arguments = json.dumps({"code": "import time\ntime.sleep(3600)"})
    return Reply(
        "<use_mcp_tool>\n<server_name>python</server_name>\n<tool_name>run_python</tool_name>"
        f"\n<arguments>\n{arguments}\n</arguments>\n</use_mcp_tool>"
    )


@linux_only
def test_the_python_sandbox_and_its_worker_die_with_a_sigkilled_bench(tmp_path):
    """The chain: the sandbox server (a stdio tool server) and the worker it starts
    (under bubblewrap when there is one) running model code that sleeps. Each link
    holds on its own: the server, not frozen, also ends when its stdin closes, and the
    worker asks for its own parent-death signal, so this guards the chain, not one fix."""
    write_suite(tmp_path / "data", 1)
    with FakeLLMServer(responder=python_sleeps) as server:
        overrides = [
            o
            for o in bench_overrides(tmp_path / "data", server.openai_base_url)
            if not o.startswith("agent.main_agent.tools=")
        ]
        overrides += [
            "agent.main_agent.tools=[python]",
            "tools.python.call_timeout_seconds=3600",
            f"hydra.run.dir={tmp_path / 'run'}",
        ]
        bench = launch(overrides)

        def running() -> bool:  # the model was asked, and the worker is there
            under = descendants(bench.pid).values()
            return bool(server.requests) and any("_sandbox_worker" in c for c in under)

        killed_leaves_nothing(bench, running, "_sandbox_worker")
