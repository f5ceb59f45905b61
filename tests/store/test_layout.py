"""The run directory's names, and journal names read back."""

from __future__ import annotations

from pathlib import Path

from deepledger.store.layout import (
    JournalName,
    RunLayout,
    attempt_journals,
    child_journal,
    journal_name,
    memory_folder,
    parse_journal_name,
    safe_name,
    set_aside,
    subagent_journals,
    subagents_folder,
)


def test_a_journal_name_reads_back_as_its_attempt_and_retry():
    assert journal_name(2, 1) == "attempt-2-retry-1.jsonl"
    assert parse_journal_name(journal_name(2, 1)) == JournalName(2, 1)
    interrupted = set_aside(Path(journal_name(12, 0)), "20260101T000000").name
    assert interrupted == "attempt-12-retry-0.interrupted-20260101T000000.jsonl"
    assert parse_journal_name(interrupted) == JournalName(12, 0, "20260101T000000")
    for other in ("progress.jsonl", "journal.jsonl", "attempt-x-retry-0.jsonl", "attempt-1.jsonl"):
        assert parse_journal_name(other) is None


def test_format_retries_of_an_attempt_share_its_notes_and_attempts_do_not():
    task = Path("run/tasks/t1")
    assert memory_folder(task / "attempt-2-retry-1.jsonl") == task / "memory" / "attempt-2"
    assert memory_folder(task / "attempt-2-retry-0.jsonl") == task / "memory" / "attempt-2"
    assert memory_folder(Path("run/journal.jsonl")) == Path("run/memory/journal")


def test_what_a_redone_retry_sets_aside_keeps_its_kind_of_name():
    journal = Path("t/attempt-1-retry-0.jsonl")
    assert subagents_folder(journal) == Path("t/attempt-1-retry-0.subagents")
    assert set_aside(subagents_folder(journal), "S") == Path(
        "t/attempt-1-retry-0.interrupted-S.subagents"
    )
    assert set_aside(Path("t/memory/attempt-1"), "S") == Path("t/memory/attempt-1.interrupted-S")
    nested = child_journal(child_journal(journal, "browsing-1"), "coder-2")
    assert nested == Path("t/attempt-1-retry-0.subagents/browsing-1.subagents/coder-2.jsonl")


def test_a_tasks_journals_come_in_attempt_order_and_interrupted_ones_apart(tmp_path):
    for name in (
        "attempt-10-retry-0.jsonl",
        "attempt-2-retry-1.jsonl",
        "attempt-2-retry-0.jsonl",
        "attempt-2-retry-0.interrupted-S.jsonl",
        "progress.jsonl",
    ):
        (tmp_path / name).write_text("")
    assert [(a, r) for a, r, _ in attempt_journals(tmp_path)] == [(2, 0), (2, 1), (10, 0)]
    (interrupted,) = attempt_journals(tmp_path, interrupted=True)
    assert interrupted[2].name == "attempt-2-retry-0.interrupted-S.jsonl"


def test_a_run_lists_the_journals_in_use_of_every_task(tmp_path):
    layout = RunLayout(tmp_path)
    for task in ("b", "a"):
        layout.journal(task, 1, 0).parent.mkdir(parents=True)
        layout.journal(task, 1, 0).write_text("")
        set_aside(layout.journal(task, 1, 0), "S").write_text("")
    assert layout.attempt_journals() == sorted(
        [layout.journal("a", 1, 0), layout.journal("b", 1, 0)]
    )
    assert list(layout.task_dirs()) == sorted(safe_name(t) for t in ("a", "b"))


def test_any_task_id_gets_a_readable_folder_name_of_its_own():
    assert safe_name("hard #2").startswith("hard_2-")
    assert safe_name("../../etc") != safe_name("etc") and "/" not in safe_name("../../etc")
    assert safe_name("").startswith("task-") and len(safe_name("x" * 500)) <= 71


def test_sub_agent_journals_come_after_their_caller_in_natural_order(tmp_path):
    journal = tmp_path / "attempt-1-retry-0.jsonl"
    made = [
        child_journal(journal, "browsing-10"),
        child_journal(journal, "browsing-2"),
        child_journal(child_journal(journal, "browsing-2"), "coding-1"),
    ]
    for path in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    found = subagent_journals(journal)
    assert [j.names for j in found] == [
        ("browsing-2",),
        ("browsing-2", "coding-1"),
        ("browsing-10",),
    ]
    assert [j.path for j in found] == [made[1], made[2], made[0]]
    assert subagent_journals(tmp_path / "attempt-2-retry-0.jsonl") == []  # none called
