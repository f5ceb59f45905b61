"""One agent journal: where it and the folders beside it are, and a full disk."""

from __future__ import annotations

import pytest

from deepledger.errors import RunDirectoryError
from deepledger.messages import Message
from deepledger.records.events import AssistantTurn, TaskStarted
from deepledger.store.journal import Journal
from tests.support.disks import whole_lines


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
