"""One agent journal: where it and the folders beside it are, a full disk, and its one
writer at a time."""

from __future__ import annotations

import asyncio
import json

import pytest

from deepledger.errors import RunDirectoryError
from deepledger.messages import Message
from deepledger.records.events import AssistantTurn, TaskStarted
from deepledger.store.journal import Journal, JournalBusyError, writers_seconds
from tests.support.disks import whole_lines
from tests.support.late_writer import LateWriter


def test_a_line_the_disk_cannot_take_is_cut_back_and_stops_the_run(small_disk):
    journal = Journal(small_disk / "journal.jsonl")
    journal.write(TaskStarted(task="a question"))
    with pytest.raises(RunDirectoryError, match="the disk is full"):
        journal.write(AssistantTurn(turn=1, message=Message.assistant("x" * 3_000_000)))
    journal.close()
    events = [e["event"] for e in whole_lines(small_disk / "journal.jsonl")]
    assert events == ["journal_opened", "task_started"]


def test_a_sub_agent_journals_beside_its_caller_with_folders_of_its_own(tmp_path):
    journal = Journal(tmp_path / "attempt-2-retry-1.jsonl")
    child = journal.child("browsing-1")
    assert child.path == tmp_path / "attempt-2-retry-1.subagents" / "browsing-1.jsonl"
    assert child.path.is_file()  # created, with its schema line
    assert journal.memory_folder == tmp_path / "memory" / "attempt-2"
    assert journal.archive_folder == tmp_path / "archive" / "attempt-2-retry-1"
    assert child.archive_folder == child.path.parent / "archive" / "browsing-1"
    child.close()
    journal.close()


def test_a_journal_in_memory_has_no_folders_on_disk():
    journal = Journal(None)
    journal.write(TaskStarted(task="a question"))
    assert journal.child("x").path is None
    assert journal.memory_folder is None and journal.archive_folder is None
    assert [type(e) for e in journal.events] == [TaskStarted]


def test_each_line_is_stamped_with_the_utc_time_to_the_millisecond(tmp_path, monkeypatch):
    from deepledger.store import journal as module

    moments = iter(
        [1_767_225_599_999_600_000, 1_767_225_600_000_100_000, 1_767_225_600_120_000_000]
    )
    monkeypatch.setattr(module, "time_ns", lambda: next(moments))
    journal = Journal(tmp_path / "journal.jsonl")  # its header: the first moment
    journal.write(TaskStarted(task="a question"))
    journal.write(TaskStarted(task="another"))
    journal.close()
    stamps = [line["ts"] for line in whole_lines(tmp_path / "journal.jsonl")]
    # As datetime.isoformat(timespec="milliseconds") writes them: milliseconds cut, not
    # rounded, across a second (and a year) that changed between two lines.
    assert stamps == [
        "2025-12-31T23:59:59.999+00:00",
        "2026-01-01T00:00:00.000+00:00",
        "2026-01-01T00:00:00.120+00:00",
    ]


def test_a_journal_another_process_still_writes_is_refused_naming_that_process(tmp_path):
    path = tmp_path / "attempt-1-retry-0.jsonl"
    with LateWriter(path) as writer:
        with pytest.raises(JournalBusyError) as refused:
            Journal.reopen(path)
        assert refused.value.holder == writer.pid
        assert f"process {writer.pid}" in str(refused.value)
        writer.finish()  # its call in flight written, the lock goes with it
    journal = Journal.reopen(path)
    journal.write(TaskStarted(task="goes on"))
    journal.close()
    events = [e["event"] for e in whole_lines(path)]
    assert events == ["journal_opened", "llm_call", "task_started"]


def test_one_process_holds_one_journal_once(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    with pytest.raises(JournalBusyError, match="still being written"):
        Journal(tmp_path / "journal.jsonl")
    journal.close()
    Journal(tmp_path / "journal.jsonl").close()  # closed, it is free again


def test_a_reopened_journal_cuts_the_line_a_kill_left_torn(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.write(TaskStarted(task="a question"))
    journal.close()
    with path.open("a") as out:
        out.write('{"ts": "2026-12-01T00:00:00.000+00:00", "event": "assis' + "x" * 100_000)
    journal = Journal.reopen(path)
    journal.write(AssistantTurn(turn=1, message=Message.assistant("after the kill")))
    assert [type(e) for e in journal.events] == [AssistantTurn]  # its own lines
    journal.close()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == [
        "journal_opened",
        "task_started",
        "assistant",
    ]


def test_a_journals_writers_time_is_each_runs_first_line_to_its_last(tmp_path):
    path = tmp_path / "journal.jsonl"
    stamps = [
        ("00:00:00.000", "journal_opened"),
        ("00:00:10.000", "llm_call"),  # killed after 10 s
        ("01:00:00.000", "resumed"),  # an hour later
        ("01:00:02.500", "llm_call"),  # killed again after 2.5 s
    ]
    lines = [f'{{"ts":"2026-12-01T{t}+00:00","event":"{e}"}}' for t, e in stamps]
    path.write_text("\n".join(lines) + '\n{"ts":"2026-12-01T02:00')  # and a torn line
    assert writers_seconds(path) == 12.5
    assert writers_seconds(tmp_path / "absent.jsonl") == 0.0


def _lines(path) -> list[str]:
    return [json.loads(line)["event"] for line in path.read_text().splitlines()]


def _writes_counted(monkeypatch) -> list[bytes]:
    """Every write a journal makes to its file, from now on."""
    import deepledger.store.journal as journal_module

    writes: list[bytes] = []
    real = journal_module.append_whole

    def counted(handle: int, data: bytes, *, sync: bool) -> None:
        writes.append(data)
        real(handle, data, sync=sync)

    monkeypatch.setattr(journal_module, "append_whole", counted)
    return writes


def test_on_an_event_loop_a_steps_lines_go_in_one_write_when_the_task_lets_the_loop_go_on(
    tmp_path, monkeypatch
):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    writes = _writes_counted(monkeypatch)

    async def step() -> list[str]:
        journal.write(TaskStarted(task="a question"))
        journal.write(AssistantTurn(turn=1, message=Message.assistant("one")))
        journal.write(AssistantTurn(turn=2, message=Message.assistant("two")))
        before = _lines(path)  # the task has not let the loop go on yet
        await asyncio.sleep(0)
        return before

    before = asyncio.run(step())
    assert before == ["journal_opened"]
    assert _lines(path) == ["journal_opened", "task_started", "assistant", "assistant"]
    assert len(writes) == 1
    journal.close()


def test_flush_writes_at_once_and_close_writes_what_is_left(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)

    async def step() -> tuple[list[str], list[str]]:
        journal.write(TaskStarted(task="a question"))
        journal.flush()  # as the agent loop does before a model request
        flushed = _lines(path)
        journal.write(AssistantTurn(turn=1, message=Message.assistant("one")))
        unflushed = _lines(path)
        journal.close()
        return flushed, unflushed

    flushed, unflushed = asyncio.run(step())
    assert flushed == unflushed == ["journal_opened", "task_started"]
    assert _lines(path) == ["journal_opened", "task_started", "assistant"]


def test_off_an_event_loop_each_line_is_written_at_once(tmp_path, monkeypatch):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    writes = _writes_counted(monkeypatch)
    journal.write(TaskStarted(task="a question"))
    assert _lines(path) == ["journal_opened", "task_started"]
    journal.write(AssistantTurn(turn=1, message=Message.assistant("one")))
    assert len(writes) == 2
    journal.close()


def test_a_write_the_disk_refuses_on_the_loops_turn_stops_the_task_at_its_next_write(
    small_disk,
):
    journal = Journal(small_disk / "journal.jsonl")

    async def task() -> None:
        journal.write(TaskStarted(task="a question"))
        journal.write(AssistantTurn(turn=1, message=Message.assistant("x" * 3_000_000)))
        await asyncio.sleep(0)  # the flush fails here, out of the task's way
        with pytest.raises(RunDirectoryError, match="the disk is full"):
            journal.write(AssistantTurn(turn=2, message=Message.assistant("after")))
        # Swallowed there (a tool's own error handling), it is raised again: a journal
        # with a hole in it does not go on.
        journal.write(AssistantTurn(turn=3, message=Message.assistant("later")))

    with pytest.raises(RunDirectoryError, match="the disk is full"):
        asyncio.run(task())
    journal.close()  # told already: the close does not raise it once more
    events = [e["event"] for e in whole_lines(small_disk / "journal.jsonl")]
    assert events == ["journal_opened"]  # the step's lines went together or not at all


def test_a_write_refused_on_the_loops_turn_that_nothing_wrote_after_is_raised_by_the_close(
    small_disk,
):
    journal = Journal(small_disk / "journal.jsonl")

    async def task() -> None:
        journal.write(AssistantTurn(turn=1, message=Message.assistant("x" * 3_000_000)))
        await asyncio.sleep(0)
        journal.close()

    with pytest.raises(RunDirectoryError, match="the disk is full"):
        asyncio.run(task())
