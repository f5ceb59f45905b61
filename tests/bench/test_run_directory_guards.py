"""The run directory refuses what it cannot hold, before writing anything into it: a live
run's folder, a file, a read-only folder, a full disk, a resume with other settings.

Real mounts make the read-only and full-disk cases real (the tests run as root, whose
writes pass permission bits): a read-only bind mount and a small tmpfs, unmounted after.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deepledger.bench.hydra_hooks import safe_folder_name, sweep_subdir, swept_keys
from deepledger.errors import RunDirectoryError
from deepledger.store.files import read_jsonl
from deepledger.store.run_store import RunStore
from tests.support.bench import bench_command, results
from tests.support.cli import ROOT
from tests.support.doubles.bench_model import respond_http
from tests.support.doubles.fake_llm_server import FakeLLMServer

TASKS = {"easy/1", "hard #2", "näive 3", "open-4"}


def bench(server: FakeLLMServer, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        bench_command(server.openai_base_url, run_dir, *extra),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` (itself included) with its mtime, size and content."""
    seen = {}
    for path in [root, *sorted(root.rglob("*"))]:
        stat = path.lstat()
        digest = hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else None
        seen[str(path.relative_to(root))] = (stat.st_mtime_ns, stat.st_size, digest)
    return seen


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount here ({done.stderr.strip()}): needs root in a machine that allows mounts"
        )


@contextlib.contextmanager
def mounted(where: Path, *args: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only folder or a small disk needs root")
    where.mkdir(parents=True, exist_ok=True)
    _mount(*args, str(where))
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(disk: Path) -> Path:
    """Write into ``disk`` until it is full, the last page too; the file that did it."""
    filler = disk / "filler"
    for chunk in (65536, 1):
        with contextlib.suppress(OSError), filler.open("ab") as out:
            while True:
                out.write(b"\0" * chunk)
                out.flush()
    return filler


@pytest.fixture(scope="module")
def server():
    with FakeLLMServer(responder=respond_http) as fake:
        yield fake


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, server) -> Path:
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    done = bench(server, run_dir)
    assert done.returncode == 0, done.stderr
    return run_dir


# -- a live run directory ------------------------------------------------------------


def test_a_second_bench_on_a_live_run_directory_is_refused_and_changes_nothing(
    server, finished_run
):
    held = RunStore(finished_run)  # what a running bench holds
    try:
        before = snapshot(finished_run)
        second = bench(server, finished_run)
        after = snapshot(finished_run)
    finally:
        held.close()
    assert second.returncode == 2, second.stderr
    assert f"Another deepledger process is running in {finished_run}" in second.stderr
    assert "Traceback" not in second.stderr
    assert after == before  # .hydra/*.yaml, the lock, the log: nothing touched


# -- a file, a read-only folder, a full disk -----------------------------------------


def test_a_run_directory_that_is_a_file_is_refused_naming_it(tmp_path, server):
    path = tmp_path / "results.txt"
    path.write_text("not a folder")
    done = bench(server, path)
    assert done.returncode == 2
    assert f"hydra.run.dir={path} is a file, not a folder" in done.stderr
    assert "Traceback" not in done.stderr
    assert path.read_text() == "not a folder"


def test_a_read_only_run_directory_is_refused_and_nothing_is_written(tmp_path, server):
    source = tmp_path / "source"
    source.mkdir()
    with mounted(tmp_path / "read-only", "--bind", "-o", "ro", str(source)) as folder:
        with pytest.raises(OSError) as probe:
            (folder / "probe").write_text("x")
        assert probe.value.errno == errno.EROFS  # the mount really is read-only
        for run_dir in (folder, folder / "new-run"):
            done = bench(server, run_dir)
            assert done.returncode == 2, done.stderr
            assert str(run_dir) in done.stderr and "read-only" in done.stderr
            assert "Traceback" not in done.stderr
    assert list(source.iterdir()) == []


def test_a_folder_made_immutable_is_refused_as_read_only(tmp_path, server):
    folder = tmp_path / "immutable"
    folder.mkdir()
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        done = bench(server, folder)
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert done.returncode == 2 and "read-only" in done.stderr
    assert list(folder.iterdir()) == []


def test_a_disk_too_full_for_a_run_is_refused_before_it_starts(tmp_path, server):
    with mounted(tmp_path / "disk", "-t", "tmpfs", "-o", "size=512k", "tmpfs") as disk:
        done = bench(server, disk / "run")
        assert done.returncode == 2, done.stderr
        assert f"The disk holding hydra.run.dir={disk / 'run'} is full" in done.stderr
        assert not (disk / "run" / "manifest.json").exists()


def test_a_disk_that_fills_mid_run_stops_it_and_the_run_resumes_once_freed(tmp_path):
    run_dir_recorded = threading.Event()
    filled = threading.Event()

    def held_until_the_disk_is_full(request):
        # Once a task is recorded, every further request waits for the test to fill the
        # disk: what is recorded before the fill and what fails after are both certain.
        if run_dir_recorded.is_set():
            filled.wait(120)
        return respond_http(request)

    with (
        mounted(tmp_path / "disk", "-t", "tmpfs", "-o", "size=2m", "tmpfs") as disk,
        FakeLLMServer(responder=held_until_the_disk_is_full) as server,
    ):
        run_dir = disk / "run"
        command = bench_command(
            server.openai_base_url,
            run_dir,
            "benchmark.execution.max_concurrent=1",
            "benchmark.execution.report=false",
        )
        first = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while not results(run_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        run_dir_recorded.set()
        assert results(run_dir), "no task was recorded"
        filler = fill(disk)
        filled.set()
        _, stderr = first.communicate(timeout=300)
        recorded = {r["task_id"] for r in read_jsonl(run_dir / "benchmark_results.jsonl")
                    if r.get("status") == "finished"}  # fmt: skip
        seen = len(server.requests)

        print(stderr)
        assert first.returncode == 2, stderr
        said = stderr.strip().splitlines()  # what the run ends by saying: why, then how
        assert any("the disk is full" in s and "run the same command again" in s for s in said)
        assert said[-1].strip() == f"deepledger resume {run_dir}"
        assert recorded and recorded < TASKS
        json.loads((run_dir / "manifest.json").read_text())  # whole, not torn
        filler.unlink()
        second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        later = [r.messages[1]["content"] for r in server.requests[seen:]]
        latest = {r["task_id"]: r for r in read_jsonl(run_dir / "benchmark_results.jsonl")}

    assert second.returncode == 0, second.stderr
    assert set(latest) == TASKS and all(r["status"] == "finished" for r in latest.values())
    redone = [t for t in recorded if any(latest[t]["question"] in text for text in later)]
    assert redone == []  # what was recorded before the disk filled was not run again


# -- a resume with other settings ----------------------------------------------------


def test_a_resume_with_other_settings_is_refused_naming_the_keys(server, finished_run):
    before = snapshot(finished_run)
    done = bench(server, finished_run, "agent.keep_tool_result=3", "llm.temperature=0.2")
    assert done.returncode == 2
    assert "agent.keep_tool_result: -1 -> 3" in done.stderr
    assert "llm.temperature: 1.0 -> 0.2" in done.stderr
    assert "resume.allow_config_change=true" in done.stderr
    assert snapshot(finished_run) == before  # the manifest and .hydra/ included


def test_a_judge_change_is_refused_even_when_changes_are_allowed(server, finished_run):
    before = snapshot(finished_run)
    done = bench(
        server, finished_run, "benchmark.judge.name=exact", "+resume.allow_config_change=true"
    )
    assert done.returncode == 2
    assert "benchmark.judge.name: 'normalized' -> 'exact'" in done.stderr
    assert "never mixes two judges" in done.stderr
    assert snapshot(finished_run) == before


def test_harmless_changes_resume_and_allowed_changes_are_counted_apart(tmp_path, server):
    run_dir = tmp_path / "run"
    first = bench(server, run_dir, "benchmark.execution.max_tasks=2")
    assert first.returncode == 0, first.stderr
    # More tasks, more concurrency, a budget: nothing a task does changes.
    harmless = bench(
        server,
        run_dir,
        "benchmark.execution.max_tasks=3",
        "benchmark.execution.max_concurrent=2",
        "benchmark.execution.max_tokens=100000",
    )
    assert harmless.returncode == 0, harmless.stderr
    assert "other settings" not in harmless.stderr
    assert "configs" not in json.loads((run_dir / "summary.json").read_text())
    # The same key, written without Hydra's "+": accepted too.
    allowed = bench(server, run_dir, "agent.keep_tool_result=3", "resume.allow_config_change=true")
    assert allowed.returncode == 0, allowed.stderr
    assert "agent.keep_tool_result: -1 -> 3" in allowed.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text())
    ids = [run["config_id"] for run in manifest["runs"]]
    assert ids[0] == ids[1] != ids[2]
    by_task = {r["task_id"]: r["config_id"] for r in results(run_dir)}
    assert sorted(by_task.values()).count(ids[2]) == 1  # the one task the resume ran
    configs = json.loads((run_dir / "summary.json").read_text())["configs"]
    assert configs["ids"] == {
        ids[0]: {"tasks": 3, "runs": [1, 2]},
        ids[2]: {"tasks": 1, "runs": [3]},
    }
    assert "2 settings" in allowed.stdout


# -- sweep folder names --------------------------------------------------------------


def test_a_sweep_job_folder_is_named_by_the_swept_keys_only(monkeypatch):
    overrides = [
        "benchmark.data.data_dir=/a/b",
        "llm.base_url=http\\://127.0.0.1\\:8000/v1",
        "agent.keep_tool_result=1,5",
        "agent=default,keep5_compress5",
    ]
    keys = swept_keys(overrides)
    assert keys == ["agent.keep_tool_result", "agent"]
    monkeypatch.setenv("DEEPLEDGER_SWEPT_KEYS", json.dumps(keys))
    job = [*overrides[:2], "agent.keep_tool_result=5", "agent=keep5_compress5"]
    assert sweep_subdir(3, job) == "3_agent.keep_tool_result=5,agent=keep5_compress5"
    monkeypatch.setenv("DEEPLEDGER_SWEPT_KEYS", json.dumps(["llm.base_url"]))
    name = sweep_subdir(0, job)
    assert name == "0_llm.base_url=http_127.0.0.1_8000_v1"
    assert "/" not in name and "\\" not in name


def test_folder_names_are_safe_and_bounded():
    assert safe_folder_name("../x/y\\z") == "_x_y_z"
    long = safe_folder_name("k=" + "v" * 500)
    assert len(long) <= 120 and long != safe_folder_name("k=" + "v" * 499)


# -- the disk fills while tasks run ----------------------------------------------------


@pytest.mark.parametrize("where", ["journal", "progress"])
async def test_the_first_write_a_full_disk_refuses_stops_the_run_and_a_resume_finishes(
    tmp_path, monkeypatch, where
):
    """With one task at a time, the second task's first journal event (a plain file
    write) or its first progress line (append_progress) meets a full disk: no later task
    starts, nothing is recorded as an error, and the resume runs what is not done."""
    from deepledger.store.files import disk_trouble
    from deepledger.store.journal import Journal
    from tests.support.bench import config, model, run, task_texts

    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    real_write, real_progress = Journal.write, RunStore.append_progress

    def journal_write(self, event, **data):
        if self.path is not None and "hard" in self.path.parent.name:
            raise full
        return real_write(self, event, **data)

    def append_progress(self, task_id, line, **how):
        if task_id == "hard #2":
            raise disk_trouble(self.task_dir(task_id) / "progress.jsonl", full)
        return real_progress(self, task_id, line, **how)

    if where == "journal":
        monkeypatch.setattr(Journal, "write", journal_write)
    else:
        monkeypatch.setattr(RunStore, "append_progress", append_progress)
    cfg = config("benchmark.execution.max_concurrent=1", "agent.context_compress_limit=0")
    first = model()
    with pytest.raises(RunDirectoryError, match="the disk is full") as stopped:
        await run(cfg, first, tmp_path)
    assert "run the same command again" in str(stopped.value)
    recorded = read_jsonl(tmp_path / "benchmark_results.jsonl")
    assert [(r["task_id"], r["status"]) for r in recorded] == [("easy/1", "finished")]
    asked = " ".join(task_texts(first))
    assert "animal" not in asked and "Anything" not in asked  # no task started after it
    monkeypatch.undo()  # space freed
    second = model()
    records = await run(cfg, second, tmp_path)
    assert [r["status"] for r in records] == ["finished"] * 4
    assert not any("France" in t for t in task_texts(second))  # nothing finished is redone
