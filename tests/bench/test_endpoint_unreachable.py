"""An llm.base_url nothing listens at stops the suite after the first task's retries,
with one message naming it and exit code 2; once a call has reached the server, a
connection that cannot be made is retried and fails one task only, as before."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from deepledger.errors import EndpointUnreachableError, LLMConnectionError
from deepledger.llm.classify import connection_error, never_connected
from deepledger.llm.retry import UNREACHABLE_AFTER_SECONDS, RetryingClient, RetryPolicy
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import Message
from tests.support.bench import arithmetic_suite
from tests.support.doubles.faults import FAST_RETRY

ROOT = Path(__file__).resolve().parents[2]
TASKS = 3


def closed_port() -> int:
    """A loopback port nothing listens at (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def suite(folder: Path) -> Path:
    return arithmetic_suite(folder, TASKS)


def test_an_unreachable_base_url_stops_the_suite_with_one_message_and_exit_2(tmp_path):
    data, run_dir = suite(tmp_path / "data"), tmp_path / "run"
    url = f"http://127.0.0.1:{closed_port()}/v1"
    command = [
        sys.executable, "-m", "deepledger", "bench",
        f"benchmark.data.data_dir={data}", "benchmark.name=tiny",
        "benchmark.judge.name=normalized", "llm=openai_compatible", f"llm.base_url={url}",
        "agent.main_agent.tools=[]", "benchmark.execution.max_concurrent=1",
        "llm.retry.max_attempts=3", *FAST_RETRY, f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    env = {**os.environ, "DEEPLEDGER_PLAIN_PROGRESS": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    messages = [line for line in done.stderr.splitlines() if line.startswith("deepledger:")]
    assert len(messages) == 1, done.stderr
    assert f"llm.base_url='{url}'" in messages[0] and "could not be reached" in messages[0]
    assert f"{TASKS} tasks are not done" in messages[0]
    assert "Traceback" not in done.stderr
    # one task's three attempts, then the stop: no other task asked
    assert done.stderr.count("call failed (attempt") == 2, done.stderr
    results = run_dir / "benchmark_results.jsonl"
    assert not results.exists() or results.read_text() == ""


def retrying(script: list, window: float = 0.0, waits: list[float] | None = None) -> RetryingClient:
    async def no_wait(seconds: float) -> None:
        if waits is not None:
            waits.append(seconds)

    policy = RetryPolicy(max_attempts=2, unreachable_after_seconds=window)
    return RetryingClient(ScriptedLLM(script), policy, sleep=no_wait)


def refused() -> LLMConnectionError:
    return connection_error(
        "openai", "http://127.0.0.1:9/v1", "refused", cause=ConnectionRefusedError()
    )


async def test_never_reached_the_client_gives_up_as_unreachable():
    client = retrying([refused(), refused()])
    with pytest.raises(EndpointUnreachableError) as caught:
        await client.generate([Message.task("hi")])
    assert isinstance(caught.value.__cause__, LLMConnectionError)


async def test_a_connection_lost_or_timed_out_is_never_taken_as_unreachable():
    reset = connection_error("openai", "http://x/v1", "reset", cause=ConnectionResetError())
    client = retrying([reset, reset])
    with pytest.raises(LLMConnectionError) as caught:
        await client.generate([Message.task("hi")])
    assert not isinstance(caught.value, EndpointUnreachableError)


def test_refused_and_unknown_hosts_are_connections_never_made():
    assert never_connected(socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    # a resolver that failed for now is no proof the host does not exist
    assert not never_connected(
        socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    )
    wrapped = OSError("cannot connect")
    wrapped.__cause__ = ConnectionRefusedError()
    assert never_connected(wrapped)
    assert not never_connected(ConnectionResetError()) and not never_connected(TimeoutError())


async def test_once_reached_a_refused_connection_stays_a_transient_error():
    client = retrying(["hello", refused(), refused()])
    await client.generate([Message.task("hi")])
    with pytest.raises(LLMConnectionError) as caught:
        await client.generate([Message.task("again")])
    assert not isinstance(caught.value, EndpointUnreachableError)


async def test_a_server_still_starting_is_waited_for_past_max_attempts():
    # vLLM binds its port once the model is loaded: refusals for a while, then answers.
    waits: list[float] = []
    client = retrying([refused()] * 5 + ["hello"], window=60.0, waits=waits)
    reply = await client.generate([Message.task("hi")])
    assert reply.text == "hello" and len(waits) == 5


async def test_an_endpoint_is_unreachable_only_once_it_refused_for_the_whole_window():
    waits: list[float] = []
    client = retrying([refused()] * 50, window=60.0, waits=waits)
    with pytest.raises(EndpointUnreachableError) as caught:
        await client.generate([Message.task("hi")])
    assert sum(waits) >= 60.0 > sum(waits[:-1])
    assert "No call from this process" in str(caught.value)
    assert "llm.retry.unreachable_after_seconds" in str(caught.value)


def test_the_config_default_window_is_the_policys():
    from deepledger.config import RetryConfig

    assert RetryPolicy.from_config(RetryConfig()) == RetryPolicy()
    assert RetryPolicy().unreachable_after_seconds == UNREACHABLE_AFTER_SECONDS == 60.0
