"""One writer a journal: a resume continues a journal only once no other process writes
it (a Ray worker of a killed driver may go on for a moment), waiting a bounded time."""

from __future__ import annotations

import asyncio

from deepledger.agent.refused import Refused
from deepledger.agent.resume import ResumePoint, reopen_unfinished
from deepledger.messages import Usage
from deepledger.records.events import LLMCall, RetryStarted, TaskStarted
from deepledger.store.journal import Journal
from tests.support.late_writer import LATE_TOKENS, LateWriter


def killed_journal(path):
    """A retry's journal as a kill leaves it: started, one call made."""
    journal = Journal(path)
    journal.write(RetryStarted(task_id="t", attempt=1, retry=0, config_id="c"))
    journal.write(TaskStarted(task="q", system_prompt="You research."))
    journal.write(LLMCall(turn=1, usage=Usage(input_tokens=100)))
    journal.close()


async def test_a_resume_waits_for_the_late_writer_and_reads_what_it_wrote(tmp_path):
    path = tmp_path / "attempt-1-retry-0.jsonl"
    killed_journal(path)
    loop, tried = asyncio.get_running_loop(), asyncio.Event()

    def reopen() -> Journal:  # on a worker thread
        loop.call_soon_threadsafe(tried.set)
        return Journal.reopen(path)

    with LateWriter(path) as writer:
        resuming = asyncio.create_task(
            reopen_unfinished(reopen, path, config_id="c", task="q", wait_seconds=120)
        )
        await tried.wait()  # it tried, and was turned away: the writer holds the journal
        await asyncio.sleep(0)
        assert not resuming.done()
        writer.finish()
        resumed = await resuming
    assert not isinstance(resumed, str), resumed
    point, journal = resumed
    journal.close()
    assert isinstance(point, ResumePoint)
    calls = [e for e in point.events if isinstance(e, LLMCall)]
    assert [c.usage.input_tokens for c in calls] == [100, LATE_TOKENS]  # read once it ended


async def test_a_writer_that_goes_on_is_left_to_its_journal_with_a_reason_naming_it(tmp_path):
    path = tmp_path / "attempt-1-retry-0.jsonl"
    killed_journal(path)
    with LateWriter(path) as writer:
        reason = await reopen_unfinished(
            lambda: Journal.reopen(path), path, config_id="c", task="q", wait_seconds=0
        )
        assert isinstance(reason, Refused)
        assert reason.reason.startswith(f"process {writer.pid} still writes the journal")
        writer.finish()
