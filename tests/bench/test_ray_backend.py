"""benchmark.execution.backend=ray: the same suite on Ray actors as on asyncio, a worker
killed under its task, a killed driver resumed, and what bad input gets.

The workers reach the scripted model over loopback (``FakeLLMServer``). The in-process
runs share one local Ray (``local_ray``, tests/support/ray.py: started once a session,
~3 s); the CLI runs start their own."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from deepledger.agent.limits import Spending
from deepledger.bench import ray_backend
from deepledger.bench.ray_backend import MAX_WORKER_LOSSES, RayTasks, shared_folder_problem
from deepledger.bench.suite import run_suite
from deepledger.bench.tasks import Task
from deepledger.config import RayConfig, validate
from deepledger.errors import (
    ConfigError,
    RayBackendError,
    RunDirectoryError,
    RunRejectedError,
)
from deepledger.store.run_store import RunStore
from tests.support.bench import bench_command, results
from tests.support.cli import ROOT
from tests.support.config import CONF, composed
from tests.support.doubles.bench_model import respond_http
from tests.support.doubles.fake_llm_server import FakeLLMServer, Fault, RecordedRequest, Reply
from tests.support.processes import Descendants

# Eight tasks for the scripted model (tests.support.doubles.bench_model): EASY ones answered
# at once, HARD ones on the format-retry that carries two post-mortems, one with a wrong
# ground truth, one without.
SUITE_TASKS = [
    ("easy-1", "EASY: What is the capital of France?", "Paris"),
    ("easy-2", "EASY: Name the capital of France, again.", "Paris"),
    ("hard-3", "HARD: Which river flows through Vienna?", "Danube"),
    ("easy-4", "EASY: Which river flows through Vienna? Quickly.", "Danube"),
    ("wrong-5", "EASY: What is the capital of France, once more?", "Rome"),
    ("open-6", "EASY: Anything without ground truth?", None),
    ("hard-7", "HARD: The capital of France, after thought?", "Paris"),
    ("easy-8", "EASY: Anything at all?", "42"),
]
KILLED = "hard-3"  # the task whose worker is killed mid-task


def suite_dir(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"task_id": i, "task_question": q, "ground_truth": g}) for i, q, g in SUITE_TASKS
    ]
    (folder / "standardized_data.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def overrides(base_url: str, data: Path, *extra: str) -> list[str]:
    return [
        f"benchmark.data.data_dir={data}",
        "benchmark.name=ray-suite",
        "llm=openai_compatible",
        f"llm.base_url={base_url}",
        "agent.context_compress_limit=2",
        "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1",
        "benchmark.execution.max_concurrent=2",
        "benchmark.execution.report_every_seconds=0",
        *extra,
    ]


def bench_in_process(run_dir: Path, given: list[str]):
    return asyncio.run(run_suite(composed(*given), run_dir, CONF, ["bench", *given]))


def comparable(record: dict) -> dict:
    """A result line without what differs from run to run: times and timestamps."""
    if isinstance(record, dict):
        return {
            k: comparable(v)
            for k, v in record.items()
            if k not in ("elapsed_seconds", "ts", "started_at", "finished_at")
        }
    if isinstance(record, list):
        return [comparable(v) for v in record]
    return record


def test_the_same_suite_on_ray_and_on_asyncio_gives_the_same_records(local_ray, tmp_path):
    data = suite_dir(tmp_path / "data")
    with FakeLLMServer(responder=respond_http) as server:
        given = overrides(server.openai_base_url, data)
        # Three workers on a Ray of two CPUs: they take none (each waits on the model).
        on_ray = bench_in_process(
            tmp_path / "ray",
            [*given, "benchmark.execution.backend=ray", "benchmark.execution.ray.num_workers=3"],
        )
        on_asyncio = bench_in_process(tmp_path / "asyncio", given)
    assert on_ray.accuracy == on_asyncio.accuracy
    assert on_ray.tasks == on_asyncio.tasks and on_ray.tasks.finished == len(SUITE_TASKS)
    ray_lines, asyncio_lines = results(tmp_path / "ray"), results(tmp_path / "asyncio")
    ids = [r["task_id"] for r in ray_lines]
    assert sorted(ids) == sorted(i for i, _, _ in SUITE_TASKS)  # each task ended once
    by_id = {r["task_id"]: comparable(r) for r in asyncio_lines}
    for line in ray_lines:
        assert comparable(line) == by_id[line["task_id"]], line["task_id"]
    # The workers wrote each task's journals and progress into the same run directory.
    hard = next((tmp_path / "ray" / "tasks").glob("hard-3-*"))
    assert sorted(p.name for p in hard.glob("attempt-*.jsonl")) == [
        f"attempt-1-retry-{n}.jsonl" for n in range(3)
    ]
    assert not (tmp_path / "ray" / ".shared-check").exists()  # the driver's token is gone
    assert not local_ray.util.list_named_actors()  # the workers were ended


def test_a_worker_killed_mid_task_has_its_task_rerun_elsewhere_and_recorded(local_ray, tmp_path):
    """The HARD task's second format-retry is held at the fake until the test has killed
    the worker running it; the task is run again from its finished first retry."""
    data = suite_dir(tmp_path / "data")
    run_dir = tmp_path / "run"
    held, killed = threading.Event(), threading.Event()

    def respond(request: RecordedRequest) -> Reply:
        task = request.messages[1]["content"]
        second_retry = "Vienna" in task and task.startswith("HARD") and "[Attempt 1]" in task
        if second_retry and not killed.is_set():
            held.set()
            killed.wait(120)  # answered to nobody: its worker is dead by then
        return respond_http(request)

    def kill_the_worker_of(task_id: str) -> None:
        assert held.wait(120), "the held request never came"
        for actor in local_ray.util.list_named_actors(all_namespaces=True):
            handle = local_ray.get_actor(actor["name"], namespace=actor["namespace"])
            if task_id in local_ray.get(handle.tasks_running.remote()):
                os.kill(local_ray.get(handle.pid.remote()), signal.SIGKILL)
                break
        killed.set()

    with FakeLLMServer(responder=respond) as server:
        killer = threading.Thread(target=kill_the_worker_of, args=(KILLED,), daemon=True)
        killer.start()
        try:
            summary = bench_in_process(
                run_dir,
                [
                    *overrides(server.openai_base_url, data),
                    "benchmark.execution.backend=ray",
                    "benchmark.execution.ray.num_workers=2",
                ],
            )
        finally:
            killed.set()
            killer.join(10)
        hard_tasks = [
            t
            for r in server.requests
            if "Vienna" in (t := r.messages[1]["content"]) and t.startswith("HARD")
        ]

    lines = results(run_dir)
    assert sorted(r["task_id"] for r in lines) == sorted(i for i, _, _ in SUITE_TASKS)
    assert summary.tasks.finished == len(SUITE_TASKS) and summary.tasks.errors == 0
    (record,) = [r for r in lines if r["task_id"] == KILLED]
    assert record["worker_lost"] == 1 and record["final_answer"] == "Danube"
    assert [r["carried_post_mortems"] for r in record["attempts"][0]["retries"]] == [0, 1, 2]
    # A task the same worker was running beside it, if any, was rerun the same way.
    assert {r.get("worker_lost", 0) for r in lines} <= {0, 1}
    # Its finished first retry was not redone; the killed one went on from its journal
    # (benchmark.execution.resume=turn, the default), which holds where.
    held_at = next(i for i, text in enumerate(hard_tasks) if "[Attempt 1]" in text)
    assert all("[Attempt 1]" in text for text in hard_tasks[held_at:])
    task_dir = next((run_dir / "tasks").glob("hard-3-*"))
    assert '"event":"resumed"' in (task_dir / "attempt-1-retry-1.jsonl").read_text()
    assert not list(task_dir.glob("attempt-1-retry-1.interrupted-*.jsonl"))


class _FirstCallFails(RayTasks):
    """The driver's executor with the first task's dispatch failing as ``fail`` says
    (everything else real): what a broken connection or a bug in the worker gives."""

    first_actor = None

    def fail(self, actor, task, recorded):
        raise NotImplementedError

    async def _run_on(self, actor, task, recorded):
        if type(self).first_actor is None:
            type(self).first_actor = actor
            return await self.fail(actor, task, recorded)
        return await super()._run_on(actor, task, recorded)


def test_a_worker_ray_calls_unavailable_is_killed_before_its_task_runs_again(
    local_ray, tmp_path, monkeypatch
):
    """ActorUnavailableError: the actor may still be running the task. It is killed (and
    known dead) before the task runs on its replacement: one writer per journal."""

    class Unavailable(_FirstCallFails):
        async def fail(self, actor, task, recorded):
            raise local_ray.exceptions.ActorUnavailableError("the connection broke", None)

    monkeypatch.setattr(ray_backend, "RayTasks", Unavailable)
    data = suite_dir(tmp_path / "data")
    with FakeLLMServer(responder=respond_http) as server:
        given = overrides(server.openai_base_url, data, "benchmark.execution.max_tasks=1")
        summary = bench_in_process(
            tmp_path / "run",
            [*given, "benchmark.execution.backend=ray", "benchmark.execution.ray.num_workers=1"],
        )
    (record,) = results(tmp_path / "run")
    assert summary.tasks.finished == 1 and record["final_answer"] == "Paris"
    assert record["worker_lost"] == 1
    with pytest.raises(local_ray.exceptions.ActorDiedError):  # killed, not left running
        local_ray.get(Unavailable.first_actor.pid.remote(), timeout=60)


def test_a_task_that_raises_in_its_worker_is_an_error_record_and_the_run_goes_on(
    local_ray, tmp_path, monkeypatch
):
    class Broken(_FirstCallFails):
        async def fail(self, actor, task, recorded):  # run_task gets no task: AttributeError
            return await super(_FirstCallFails, self)._run_on(actor, None, recorded)

    monkeypatch.setattr(ray_backend, "RayTasks", Broken)
    data = suite_dir(tmp_path / "data")
    with FakeLLMServer(responder=respond_http) as server:
        given = overrides(server.openai_base_url, data, "benchmark.execution.max_tasks=3")
        summary = bench_in_process(
            tmp_path / "run",
            [*given, "benchmark.execution.backend=ray", "benchmark.execution.ray.num_workers=1"],
        )
    lines = results(tmp_path / "run")
    assert sorted(r["task_id"] for r in lines) == ["easy-1", "easy-2", "hard-3"]
    (failed,) = [r for r in lines if r["status"] == "error"]
    assert "AttributeError" in json.dumps(failed) and "worker_lost" not in failed
    assert summary.tasks.errors == 1 and summary.tasks.finished == 2


def test_a_task_cancelled_on_the_driver_is_cancelled_in_its_busy_worker(local_ray, tmp_path):
    """One worker running one task at most (max_concurrent=1), busy with it: its control
    calls still answer, and cancelling the task here ends it there."""
    data = suite_dir(tmp_path / "data")
    held, release = threading.Event(), threading.Event()

    def hold(request: RecordedRequest) -> Reply:
        held.set()
        release.wait(60)
        return respond_http(request)

    task = Task("easy-1", SUITE_TASKS[0][1], "Paris")

    async def cancel_while_it_runs(cfg) -> list[str]:
        run_dir = RunStore(tmp_path / "run")
        executor = await ray_backend.start_workers(cfg, run_dir, CONF, "c0ffee", judged=False)
        try:
            job = asyncio.create_task(executor(task, Spending()))
            assert await asyncio.to_thread(held.wait, 60), "the task never reached the model"
            actor = executor.workers[0].actor
            running = await asyncio.wait_for(actor.tasks_running.remote(), 30)
            assert running == ["easy-1"]  # answered beside the task that fills the worker
            job.cancel()
            with pytest.raises(asyncio.CancelledError):
                await job
            for _ in range(100):  # up to ~10 s: the worker's task is cancelled, not left
                if not (running := await actor.tasks_running.remote()):
                    break
                await asyncio.sleep(0.1)
            return running
        finally:
            release.set()
            await executor.close()
            run_dir.close()

    with FakeLLMServer(responder=hold) as server:
        given = overrides(server.openai_base_url, data, "benchmark.execution.max_concurrent=1")
        cfg = composed(
            *given, "benchmark.execution.backend=ray", "benchmark.execution.ray.num_workers=1"
        )
        assert asyncio.run(cancel_while_it_runs(cfg)) == []


def test_a_worker_that_cannot_start_is_refused_before_the_manifest_changes(
    local_ray, tmp_path, monkeypatch
):
    """The key variable is set here, after the session's Ray started: its workers lack
    it. Refused before the manifest and .hydra/ are written."""
    monkeypatch.setenv("DL_RAY_WORKERS_LACK_THIS", "sk-only-on-the-driver")
    data = suite_dir(tmp_path / "data")
    run_dir = tmp_path / "run"
    given = [
        *overrides("http://127.0.0.1:9/v1", data),
        "llm.api_key_env=DL_RAY_WORKERS_LACK_THIS",
        "llm.api_key_required=true",
        "benchmark.execution.backend=ray",
    ]
    with pytest.raises(RayBackendError) as refused:
        asyncio.run(run_suite(composed(*given), run_dir, CONF, ["bench"], hydra_config={}))
    assert "DL_RAY_WORKERS_LACK_THIS" in str(refused.value)
    assert "sk-only-on-the-driver" not in str(refused.value)
    assert not (run_dir / "manifest.json").exists() and not (run_dir / ".hydra").exists()
    assert not (run_dir / ".shared-check").exists()
    assert not local_ray.util.list_named_actors()  # the workers that did start were ended


def test_a_run_directory_that_refuses_the_shared_check_is_a_run_directory_error(
    local_ray, tmp_path
):
    data = suite_dir(tmp_path / "data")
    run_dir = tmp_path / "run"
    (run_dir / ".shared-check").mkdir(parents=True)  # where the driver's token goes
    given = [*overrides("http://127.0.0.1:9/v1", data), "benchmark.execution.backend=ray"]
    with pytest.raises(RunDirectoryError) as refused:
        bench_in_process(run_dir, given)
    assert f"hydra.run.dir={run_dir}" in str(refused.value)
    assert not (run_dir / "manifest.json").exists()


def test_ray_with_the_local_model_is_refused_naming_both_keys():
    cfg = composed("llm=local", "benchmark.execution.backend=ray")
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    assert "benchmark.execution.backend=ray" in str(refused.value)
    assert "llm=local" in str(refused.value)
    validate(composed("llm=local"))  # on asyncio it is fine


def test_a_ray_that_cannot_start_for_any_reason_is_refused_naming_the_address(monkeypatch):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'deepledger[ray]')")

    def times_out(**_):
        raise TimeoutError("the GCS did not come up in time")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", times_out)
    with pytest.raises(RayBackendError) as refused:
        ray_backend.connect(RayConfig(address=None))
    assert "benchmark.execution.ray.address=null" in str(refused.value)
    assert "TimeoutError" in str(refused.value) or "did not come up" in str(refused.value)


def test_a_worker_death_costs_each_task_on_it_a_share_of_one_loss():
    alone, beside_one = ray_backend._Losses(), ray_backend._Losses()
    for _ in range(MAX_WORKER_LOSSES - 1):
        alone.add(running=1)
    assert not alone.too_many
    alone.add(running=1)
    assert alone.too_many and alone.deaths == MAX_WORKER_LOSSES
    for _ in range(2 * MAX_WORKER_LOSSES - 1):  # a neighbour that keeps killing the worker
        beside_one.add(running=2)
    assert not beside_one.too_many
    beside_one.add(running=2)
    assert beside_one.too_many
    thirds = ray_backend._Losses()
    for _ in range(3 * MAX_WORKER_LOSSES):  # 1/3 + 1/3 + 1/3 is one loss, not a hair less
        thirds.add(running=3)
    assert thirds.too_many


def test_a_run_begun_on_asyncio_resumes_on_ray_without_redoing_finished_tasks(local_ray, tmp_path):
    data = suite_dir(tmp_path / "data")
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=respond_http) as server:
        given = overrides(server.openai_base_url, data)
        bench_in_process(run_dir, [*given, "benchmark.execution.max_tasks=3"])
        begun = len(server.requests)
        summary = bench_in_process(run_dir, [*given, "benchmark.execution.backend=ray"])
        later = [r.messages[1]["content"] for r in server.requests[begun:]]
    assert summary.tasks.finished == len(SUITE_TASKS)
    ids = [r["task_id"] for r in results(run_dir)]
    assert sorted(ids) == sorted(i for i, _, _ in SUITE_TASKS)  # each task ended once
    first_three = [q for _, q, _ in SUITE_TASKS[:3]]
    assert later and not any(q in text for q in first_three for text in later)


def test_the_driver_stops_dispatching_once_the_workers_spent_the_run_budget(local_ray, tmp_path):
    """One worker, one task at a time: the first task's spending, counted by the driver
    when it comes back, keeps the other seven from starting."""
    data = suite_dir(tmp_path / "data")
    with FakeLLMServer(responder=respond_http) as server:
        given = overrides(
            server.openai_base_url,
            data,
            "benchmark.execution.backend=ray",
            "benchmark.execution.ray.num_workers=1",
            "benchmark.execution.max_concurrent=1",
            "benchmark.execution.max_tokens=1",
        )
        summary = bench_in_process(tmp_path / "run", given)
    budget = summary.budget
    assert budget is not None and budget.exhausted
    assert len(results(tmp_path / "run")) + budget.tasks_stopped == 1
    assert budget.tasks_not_started == len(SUITE_TASKS) - 1 and budget.spent_tokens > 1


def test_an_endpoint_that_rejects_a_worker_stops_the_run_naming_the_model(local_ray, tmp_path):
    data = suite_dir(tmp_path / "data")
    with FakeLLMServer([Fault(status=401)] * 20) as server:
        url = server.openai_base_url
        given = overrides(url, data, "benchmark.execution.backend=ray")
        with pytest.raises(RunRejectedError) as refused:
            bench_in_process(tmp_path / "run", given)
    message = str(refused.value)
    assert "HTTP 401" in message and "llm.model_name=" in message
    assert f"llm.base_url='{url}'" in message and "The server said:" in message
    assert results(tmp_path / "run") == []  # none of the tasks was recorded


def test_a_killed_ray_driver_resumes_on_asyncio_without_redoing_finished_work(tmp_path):
    """`deepledger bench` with backend=ray, SIGKILLed once a task is recorded and the hard
    one has a finished retry; the same command on asyncio finishes the rest."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'deepledger[ray]')")
    run_dir = tmp_path / "run"

    def slow(request: RecordedRequest) -> Reply:
        if request.messages[1]["content"].startswith("HARD"):  # after easy/1 is recorded
            deadline = time.monotonic() + 120
            while not results(run_dir) and time.monotonic() < deadline:
                time.sleep(0.05)
        return dataclasses.replace(respond_http(request), delay=0.3)

    # The killed driver cannot remove its local Ray's temporary folder: this test does.
    # (A short one: Ray's socket paths inside must stay under ~100 characters.)
    ray_temp = Path(tempfile.mkdtemp(prefix="dlrt-"))
    with FakeLLMServer(responder=slow) as server:
        command = bench_command(
            server.openai_base_url, run_dir, "benchmark.execution.max_concurrent=1"
        )
        first = subprocess.Popen(
            [*command, "benchmark.execution.backend=ray", "benchmark.execution.ray.num_workers=2"],
            cwd=ROOT,
            env={**os.environ, "TMPDIR": str(ray_temp)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        family = Descendants(first.pid)
        deadline, ready = time.monotonic() + 180, False
        while time.monotonic() < deadline and first.poll() is None:
            found = list((run_dir / "tasks").glob("hard_2-*/progress.jsonl"))
            if found and "retry_finished" in found[0].read_text() and results(run_dir):
                ready = True
                break
            time.sleep(0.05)
        # The job's process group, as a terminal's kill does: Ray 2.60's local agents
        # (DashboardAgent, RuntimeEnvAgent) outlive a SIGKILL of the driver alone.
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert ready, "the run never reached the hard task"
        leftovers = family.still_running(grace_seconds=30)
        family.stop()
        for pid, _ in leftovers:  # do not leave them to the machine
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_temp, ignore_errors=True)
        done_before = {r["task_id"] for r in results(run_dir)}
        at_kill = found[0].read_text()
        seen_before = len(server.requests)
        second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        later = [r.messages[1]["content"] for r in server.requests[seen_before:]]

    assert second.returncode == 0, second.stderr
    assert not leftovers, f"outlived the killed driver: {[family.commands[p] for p in leftovers]}"
    assert "easy/1" in done_before and "hard #2" not in done_before
    ids = [r["task_id"] for r in results(run_dir)]
    assert sorted(ids) == sorted({"easy/1", "hard #2", "näive 3", "open-4"})  # each once
    assert not any("France" in text for text in later)  # finished: no new model calls
    hard = [text for text in later if text.startswith("HARD")]
    assert hard, f"the hard task was over at the kill:\n{at_kill}"
    assert all("[Attempt 1]" in text for text in hard)  # its finished retry kept
    (record,) = [r for r in results(run_dir) if r["task_id"] == "hard #2"]
    assert record["final_answer"] == "Danube"


def bench_refused(run_dir: Path, *extra: str, prelude: str = "") -> subprocess.CompletedProcess:
    """`deepledger bench` with backend=ray (and ``extra``), ``prelude`` run first in the
    process; no model is reached."""
    args = bench_command("http://127.0.0.1:9/v1", run_dir, "benchmark.execution.backend=ray")
    code = f"{prelude}\nimport sys\nfrom deepledger.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args[3:], *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_ray_installed_backend_ray_says_how_to_install_it(tmp_path):
    done = bench_refused(tmp_path / "run", prelude="import sys; sys.modules['ray'] = None")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'deepledger[ray]'" in lines[0], done.stderr
    assert not (tmp_path / "run" / "manifest.json").exists()  # before any work


def test_an_unreachable_cluster_address_is_refused_naming_the_key(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'deepledger[ray]')")
    started = time.monotonic()
    done = bench_refused(tmp_path / "run", "benchmark.execution.ray.address=127.0.0.1:9")
    assert done.returncode == 2, done.stderr
    assert "benchmark.execution.ray.address='127.0.0.1:9'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "manifest.json").exists()  # before any work
    assert time.monotonic() - started < 60  # bounded: not Ray's own minute-long wait


def test_a_worker_that_cannot_see_the_run_directory_is_refused_naming_it(tmp_path):
    (tmp_path / ".shared-check").write_text("the driver's token")
    assert shared_folder_problem(tmp_path, "the driver's token", "worker-0") is None
    assert list(tmp_path.iterdir()) == [tmp_path / ".shared-check"]  # its reply removed
    elsewhere = tmp_path / "not-shared"  # a node that sees another (or no) folder
    problem = shared_folder_problem(elsewhere, "the driver's token", "worker-0")
    assert problem is not None and f"hydra.run.dir={elsewhere}" in problem
    assert "shared by every node" in problem
    other = shared_folder_problem(tmp_path, "another token", "worker-0")
    assert other is not None and "another run's token" in other
