"""The run store: one process per run directory, the manifest, redone retries."""

from __future__ import annotations

import json

import pytest

from deepledger.errors import ConfigError, DeepLedgerError, RunDirectoryError
from deepledger.records.events import TaskStarted
from deepledger.records.results import (
    AttemptRecord,
    JudgementRecord,
    RetryFinished,
    RetryRecord,
    TaskRecord,
)
from deepledger.store.files import read_jsonl
from deepledger.store.layout import attempt_journals, memory_folder, subagents_folder
from deepledger.store.lock import claim, discard_claimed, run_is_live
from deepledger.store.run_config import config_breakdown
from deepledger.store.run_store import RunStore, load_manifest
from deepledger.tools.memory import MemoryStore


def test_a_run_directory_is_used_by_one_process_at_a_time(tmp_path):
    first = RunStore(tmp_path)
    with pytest.raises(ConfigError, match="Another deepledger process is running"):
        RunStore(tmp_path)
    first.close()
    RunStore(tmp_path).close()


def test_a_workers_store_writes_progress_beside_the_drivers_and_nothing_of_the_run(tmp_path):
    driver = RunStore(tmp_path)  # holds the folder's lock
    driver.start({"benchmark": {"name": "x", "execution": {"pass_at_k": 1}}}, ["bench"], tasks=1)
    worker = RunStore.for_worker(tmp_path, driver.config_id)  # no lock: the driver has it
    retry = RetryRecord(retry=0, final_answer="Paris")
    worker.record_progress("t1", retry)
    assert worker.progress("t1").retries[0].config_id == driver.config_id
    for write in (
        lambda: worker.add_result(TaskRecord(task_id="t1")),
        lambda: worker.start({}, [], tasks=1),
        lambda: worker.finish(),
    ):
        with pytest.raises(RuntimeError, match="the driver does"):
            write()
    worker.close()
    driver.close()


def test_a_run_is_live_while_a_store_holds_its_folder(tmp_path):
    assert not run_is_live(tmp_path)  # never run: no lock file
    store = RunStore(tmp_path)
    assert run_is_live(tmp_path)
    store.close()
    assert not run_is_live(tmp_path)


def test_a_resume_with_another_config_names_the_differences(tmp_path):
    rundir = RunStore(tmp_path)
    first = {"agent": {"keep_tool_result": 5}, "llm": {"api_key": "sk-secret"}}
    assert rundir.start(first, ["bench"], tasks=3) == []
    changed = rundir.start({"agent": {"keep_tool_result": 3}, "llm": {}}, ["bench"], tasks=3)
    assert changed[0] == "agent.keep_tool_result: 5 -> 3"
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["config"]["agent"]["keep_tool_result"] == 5  # the first run's stays
    assert [r["config"]["agent"]["keep_tool_result"] for r in manifest["runs"]] == [5, 3]
    assert "sk-secret" not in (tmp_path / "manifest.json").read_text()
    rundir.close()


def test_a_line_cut_short_by_a_crash_does_not_swallow_the_next(tmp_path):
    rundir = RunStore(tmp_path)
    rundir.add_result(TaskRecord(task_id="a", status="finished"))
    with rundir.results_path.open("a") as out:
        out.write('{"task_id": "b", "sta')  # the process died mid-write
    rundir.add_result(TaskRecord(task_id="c", status="finished"))
    assert list(rundir.finished_results()) == ["a", "c"]
    rundir.close()


def test_a_judge_change_before_any_task_was_judged_is_allowed(tmp_path):
    run_dir = RunStore(tmp_path)
    run_dir.start({"benchmark": {"judge": {"name": "exact"}}}, ["bench"], tasks=1)
    changed = {"benchmark": {"judge": {"name": "llm"}}}
    with pytest.raises(RunDirectoryError, match=r"resume\.allow_config_change=true"):
        run_dir.check_resume(changed, allow_change=False)
    assert run_dir.check_resume(changed, allow_change=True) == [
        "benchmark.judge.name: 'exact' -> 'llm'"
    ]
    run_dir.add_result(TaskRecord(task_id="t", judgement=JudgementRecord(correct=True)))
    with pytest.raises(RunDirectoryError, match="never mixes two judges") as refused:
        run_dir.check_resume(changed, allow_change=True)
    assert f"deepledger judge {tmp_path}" in str(refused.value)  # the way to grade apart
    run_dir.close()


def test_each_record_carries_the_settings_it_ran_under(tmp_path):
    run_dir = RunStore(tmp_path)
    run_dir.start({"agent": {"keep_tool_result": 5}}, ["bench"], tasks=2)
    old = run_dir.config_id
    run_dir.record_progress("b", RetryRecord(retry=0))
    (resumed,) = read_jsonl(run_dir.task_dir("b") / "progress.jsonl")
    run_dir.add_result(TaskRecord(task_id="a"))
    run_dir.start({"agent": {"keep_tool_result": 3}}, ["bench"], tasks=2)
    fresh = RetryRecord(retry=1)
    attempt = AttemptRecord(attempt=1, retries=[RetryFinished.load(resumed), fresh])
    run_dir.add_result(TaskRecord(task_id="b", attempts=[attempt]))
    (_, record) = read_jsonl(run_dir.results_path)
    assert record["config_id"] == run_dir.config_id != old
    assert [r["config_id"] for r in record["attempts"][0]["retries"]] == [old, run_dir.config_id]
    breakdown = config_breakdown(tmp_path)
    assert breakdown is not None
    assert breakdown.model_dump()["ids"] == {
        old: {"tasks": 1, "runs": [1]},
        run_dir.config_id: {"tasks": 1, "runs": [2]},
    }
    assert breakdown.mixed_tasks == ["b"]
    run_dir.close()


def test_a_folder_that_is_no_run_directory_is_named_as_such(tmp_path):
    with pytest.raises(DeepLedgerError, match="is not a deepledger run directory"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"runs": []}')
    with pytest.raises(DeepLedgerError, match="unreadable or incomplete"):
        load_manifest(tmp_path)


def test_a_redone_retry_keeps_the_killed_runs_journal_and_sub_agents_beside_its_own(tmp_path):
    run = RunStore(tmp_path)
    killed = run.journal("t1", 1, 1)
    killed.write(TaskStarted(task="a question"))
    killed.child("browsing-1").close()
    killed.close()
    again = run.journal("t1", 1, 1)
    again.close()
    task_dir = run.task_dir("t1")
    assert [(a, r) for a, r, _ in attempt_journals(task_dir)] == [(1, 1)]
    (set_aside,) = attempt_journals(task_dir, interrupted=True)
    assert "a question" in set_aside[2].read_text()
    assert not subagents_folder(again.path).exists()
    assert subagents_folder(set_aside[2]).is_dir()
    run.close()


def test_a_redone_attempt_starts_without_the_killed_runs_notes(tmp_path):
    run = RunStore(tmp_path)
    first = run.journal("t1", 1, 0)
    first.write(TaskStarted(task="a question"))
    first.close()
    notes = memory_folder(first.path)
    MemoryStore(notes).write("facts", "from the killed run")
    again = run.journal("t1", 1, 0)  # the retry is redone after a crash
    again.close()
    assert MemoryStore(memory_folder(again.path)).names() == []
    assert [p.name.split(".")[0] for p in notes.parent.iterdir()] == ["attempt-1"]
    run.close()


def test_a_progress_file_a_kill_left_torn_goes_on_a_new_line_and_is_read_back_once(
    tmp_path, monkeypatch
):
    import deepledger.store.files as files

    run_dir = RunStore(tmp_path)
    progress = run_dir.task_dir("t") / "progress.jsonl"
    progress.write_text('{"ts": "2026-01-01T00:00:00+00:00", "event": "retry_fin')  # killed
    reads = []
    real = files._ends_mid_line
    monkeypatch.setattr(files, "_ends_mid_line", lambda path: reads.append(path) or real(path))
    run_dir.record_progress("t", RetryRecord(retry=0, final_answer="Paris"))
    run_dir.record_progress("t", AttemptRecord(attempt=1))  # its last line is this store's
    assert reads == [progress]
    lines = progress.read_text().splitlines()
    assert len(lines) == 3 and lines[0].endswith("retry_fin")
    assert [r["event"] for r in read_jsonl(progress)] == ["retry_finished", "attempt_finished"]
    run_dir.close()


def test_a_refusal_before_the_start_removes_the_new_folder_its_store_let_go(tmp_path):
    root = tmp_path / "made" / "run"
    claim(root)
    RunStore(root).close()  # opened, refused before start: its lock is let go
    discard_claimed(root)
    assert not (tmp_path / "made").exists()


def test_a_folder_whose_run_started_is_never_removed(tmp_path):
    root = tmp_path / "run"
    claim(root)
    store = RunStore(root)
    store.start({"benchmark": {"name": "x"}}, ["bench"], tasks=1)
    store.close()
    discard_claimed(root)  # a refusal met after the start: nothing is undone
    assert (root / "manifest.json").exists()


def test_an_old_folder_refused_before_the_start_loses_only_what_the_claim_made(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    claim(tmp_path)
    RunStore(tmp_path).close()  # made tasks/ and the lock file
    discard_claimed(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
