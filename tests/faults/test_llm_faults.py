"""Model servers that fail: 429, 5xx, bodies that do not parse, replies that come too
late or never. Every task ends with a recorded outcome, a resume finishes the rest, and
no task that finished is asked about again."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.doubles.fake_llm_server import FakeLLMServer
from tests.support.doubles.faults import (
    FaultInjector,
    ResearchModel,
    accuracy,
    bench_overrides,
    finished_keys,
    latest_outcomes,
    run_in_process,
    task_key,
    write_suite,
)

# However the faults fall, a run may not take longer than this (a hang would).
RUN_BOUND_SECONDS = 180


async def bench(server: FakeLLMServer, data, run_dir, *extra: str, protocol: str = "openai"):
    url = server.openai_base_url if protocol == "openai" else server.base_url
    preset = "openai_compatible" if protocol == "openai" else "anthropic"
    overrides = bench_overrides(data, url, llm=preset, extra=extra)
    return await asyncio.wait_for(run_in_process(overrides, run_dir), RUN_BOUND_SECONDS)


def keys_asked(server: FakeLLMServer, since: int) -> set[str | None]:
    return {task_key(r) for r in server.requests[since:]}


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_quarter_of_requests_failing_loses_no_task_and_no_accuracy(
    protocol, seed, tmp_path, monkeypatch
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    keys = write_suite(tmp_path / "data", 12)
    faults = FaultInjector(ResearchModel(), seed=seed, rate=0.25)
    with FakeLLMServer(responder=faults) as server:
        await bench(server, tmp_path / "data", tmp_path / "run", protocol=protocol)
        first = latest_outcomes(tmp_path / "run")
        print(f"injected {dict(faults.injected)}, retries {faults.retries}")
        assert set(first) == set(keys)  # every task has a recorded outcome
        assert {r["status"] for r in first.values()} <= {"finished", "error"}
        for record in first.values():  # an error is the server's, after all retries
            assert (
                record["status"] == "finished"
                or "HTTP" in record["error"]
                or ("could not be read" in record["error"])
            )
        done, seen = finished_keys(tmp_path / "run"), len(server.requests)
        faults.rate = 0.0
        faults.new_run()
        await bench(server, tmp_path / "data", tmp_path / "run", protocol=protocol)
        assert not keys_asked(server, seen) & done  # nothing finished is redone
        server.assert_all_consumed()
    assert faults.total_injected > 0 and faults.retries > 0
    assert finished_keys(tmp_path / "run") == set(keys)
    assert accuracy(tmp_path / "run") == 1.0  # what the fault-free run scores


async def test_a_task_whose_server_is_down_ends_in_error_and_resumes(seed, tmp_path):
    keys = write_suite(tmp_path / "data", 5)
    down = {keys[1], keys[3]}
    faults = FaultInjector(ResearchModel(), seed=seed, outage=set(down))
    with FakeLLMServer(responder=faults) as server:
        summary = await bench(
            server, tmp_path / "data", tmp_path / "run", "llm.retry.max_attempts=3"
        )
        first = latest_outcomes(tmp_path / "run")
        assert {k: r["status"] for k, r in first.items()} == {
            k: "error" if k in down else "finished" for k in keys
        }
        assert all("HTTP 500" in first[k]["error"] for k in down)
        assert summary["tasks"]["errors"] == 2
        assert faults.requests[keys[1]] == 3  # llm.retry.max_attempts, then given up
        seen = len(server.requests)
        faults.outage.clear()
        faults.new_run()
        summary = await bench(server, tmp_path / "data", tmp_path / "run")
        assert keys_asked(server, seen) == down  # only the failed tasks run again
    assert summary["tasks"]["errors"] == 0 and finished_keys(tmp_path / "run") == set(keys)
    assert accuracy(tmp_path / "run") == 1.0


async def test_a_reply_too_late_and_one_that_never_comes_are_cut_at_the_timeout(seed, tmp_path):
    keys = write_suite(tmp_path / "data", 3)
    # llm.timeout_seconds=5: the late reply comes at 60 s, the hung one never. The limit
    # also covers every ordinary reply, which must never hit it on a loaded machine
    # (the retry count below is exact).
    plan = {(keys[0], 0): "timeout", (keys[1], 0): "hang", (keys[1], 1): "timeout"}
    faults = FaultInjector(ResearchModel(), seed=seed, plan=plan, slow_seconds=60)
    with FakeLLMServer(responder=faults) as server:
        await bench(server, tmp_path / "data", tmp_path / "run", "llm.timeout_seconds=5")
    outcomes = latest_outcomes(tmp_path / "run")
    assert {k: r["status"] for k, r in outcomes.items()} == dict.fromkeys(keys, "finished")
    assert faults.injected == {"timeout": 2, "hang": 1} and faults.retries == 3
    assert accuracy(tmp_path / "run") == 1.0
