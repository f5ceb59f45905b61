"""benchmark.execution.resume=turn: an unfinished retry goes on from its journal, sending
byte for byte what the uninterrupted run sent next; what it cannot rebuild falls back.

Each twin test runs one scripted multi-turn task against the fake OpenAI server with the
fault tool server (stateless, ``scope: shared``), then cuts a copy of the run directory
back as a crash leaves it (the journal truncated after a turn, a torn line after it, the
task's progress and result gone) and resumes it: the request bodies the second server
receives are the first run's from the cut on.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from deepledger.records.codec import decode
from deepledger.testing.fake_llm_server import (
    FakeLLMServer,
    FakeToolCall,
    FakeUsage,
    RecordedRequest,
    Reply,
)
from deepledger.testing.faults import (
    SUMMARY_MARK,
    TOOL_SERVER,
    answer_for,
    bench_overrides,
    lookup_call,
    message_texts,
    run_in_process,
    task_key,
    write_suite,
)

STEPS = 5  # tool turns before the model says it is done
PROMPT_TOKENS_A_MESSAGE = 300
COMPACTION_MARK = "You keep the notes of a research agent"  # compact.md
# Compaction due at 2,000 tokens, about the request of turn 3 (seven messages).
COMPACTION = (
    "agent.context.strategy=compaction",
    "agent.context.keep_rounds=1",
    "agent.context.compact_at=0.5",
    "agent.context.min_saving=0",
    "llm.max_context_length=4000",
    "llm.max_tokens=100",
)


def task_dir(run: Path) -> Path:
    [folder] = (run / "tasks").glob("k01*")
    return folder


def journal_path(run: Path) -> Path:
    return task_dir(run) / "attempt-1-retry-0.jsonl"


class Researcher:
    """Looks up a new key each turn (XML calls, or native ones with fixed ids, so the
    twin runs' replies are the same), then answers."""

    def __init__(self, native: bool) -> None:
        self.native = native

    def __call__(self, request: RecordedRequest) -> Reply:
        reply = self.reply(request)
        # A prompt that grows a known amount a message: compaction comes when it is due.
        usage = FakeUsage(input_tokens=PROMPT_TOKENS_A_MESSAGE * len(request.messages))
        return dataclasses.replace(reply, usage=usage)

    def reply(self, request: RecordedRequest) -> Reply:
        key = task_key(request) or "?"
        texts = message_texts(request)
        if any(COMPACTION_MARK in text for text in texts):
            return Reply(f"Notes: looked up {key} a few times.")
        if SUMMARY_MARK in texts[-1]:
            return Reply(f"\\boxed{{{answer_for(key)}}}")
        done = sum(m.get("role") == "assistant" for m in request.messages)
        if done >= STEPS:
            return Reply("I have what I need.")
        if not self.native:
            return Reply(f"Step {done}.\n" + lookup_call(f"{key}-{done}", "none"))
        arguments = {"key": f"{key}-{done}", "fault": "none"}
        call = FakeToolCall(f"{TOOL_SERVER}__lookup", arguments, id=f"call-{done}")
        return Reply(f"Step {done}.", tool_calls=(call,), finish_reason="tool_calls")


def overrides(data: Path, url: str, run: Path, *extra: str) -> list[str]:
    return [
        *bench_overrides(data, url, tools=True),
        f"hydra.run.dir={run}",
        "agent.context_compress_limit=0",
        *extra,
    ]


async def bench(data: Path, run: Path, native: bool, *extra: str) -> list[dict]:
    """One run of the suite; the bodies of the requests it made."""
    with FakeLLMServer(responder=Researcher(native)) as server:
        await run_in_process(overrides(data, server.openai_base_url, run, *extra), run)
        assert not server.unexpected
        return [r.body for r in server.requests]


def crash_after(run: Path, kept: int, *, before_results: bool = False) -> None:
    """Leave ``run`` as a kill after turn ``kept`` would: the journal up to that turn's
    results (or its reply alone), half a line after it, no progress or result lines."""
    path = journal_path(run)
    lines = path.read_bytes().splitlines(keepends=True)
    cut = None
    for index, line in enumerate(lines):
        event = decode(json.loads(line))
        if getattr(event, "turn", None) == kept and event.event == (
            "assistant" if before_results else "tool_results"
        ):
            cut = index + 1
    assert cut is not None
    path.write_bytes(b"".join(lines[:cut]) + b'{"ts": "2026-')
    (task_dir(run) / "progress.jsonl").unlink()
    (run / "benchmark_results.jsonl").unlink()
    (run / "summary.json").unlink()


def requests_through(run: Path, kept: int) -> int:
    """How many model calls the journal of ``run`` records up to turn ``kept``'s results
    (loop calls, rolled-back ones included, and compaction notes)."""
    count = 0
    for event in journal_events(run):
        count += event.event in ("llm_call", "closing_call")
        if event.event == "tool_results" and event.turn == kept:
            return count
    raise AssertionError(f"no turn {kept} in {run}")


def journal_events(run: Path) -> list:
    return [decode(json.loads(line)) for line in journal_path(run).read_text().splitlines()]


def results(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "benchmark_results.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("native", "extra", "kept"),
    [
        (False, (), 3),
        (True, ("llm.tool_protocol=native",), 3),
        (False, ("agent.context.strategy=round_window", "agent.context.keep_rounds=2"), 3),
        (
            True,
            (
                "llm.tool_protocol=native",
                "agent.context.strategy=round_window",
                "agent.context.keep_rounds=2",
            ),
            3,
        ),
        (False, COMPACTION, 3),  # notes at turn 3, then rollbacks and a cycle
        # Notes too long to help at turn 3 (compaction_failed), written at turn 4.
        (True, ("llm.tool_protocol=native", *COMPACTION), 4),
    ],
    ids=[
        "xml-keep",
        "native-keep",
        "xml-round-window",
        "native-round-window",
        "xml-compaction",
        "native-compaction",
    ],
)
async def test_a_resumed_retry_sends_what_the_uninterrupted_one_did(tmp_path, native, extra, kept):
    data = tmp_path / "data"
    write_suite(data, 1)
    clean = await bench(data, tmp_path / "clean", native, *extra)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    sent_before = requests_through(tmp_path / "clean", kept)
    crash_after(tmp_path / "killed", kept)
    resumed = await bench(
        data, tmp_path / "killed", native, *extra, "benchmark.execution.resume=turn"
    )
    assert resumed == clean[sent_before:]  # turn 4 on, the closing call included
    events = journal_events(tmp_path / "killed")
    if COMPACTION[0] in extra:  # the notes were written before the kill, and rebuilt
        assert next(e.turn for e in events if e.event == "compacted") <= kept
    [marker] = [e for e in events if e.event == "resumed"]
    assert (marker.resumed_at_turn, marker.replayed_reply) == (kept + 1, False)
    assert sum(e.event == "task_started" for e in events) == 1
    [record] = results(tmp_path / "killed")
    [clean_record] = results(tmp_path / "clean")
    assert record["correct"] is True and record.get("interrupted_calls", 0) == 0
    assert record["usage"] == clean_record["usage"]  # the killed run's calls, counted once
    assert not list(task_dir(tmp_path / "killed").glob("*.interrupted-*"))


async def test_a_reply_whose_tools_did_not_finish_is_replayed(tmp_path):
    data = tmp_path / "data"
    write_suite(data, 1)
    clean = await bench(data, tmp_path / "clean", False)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    crash_after(tmp_path / "killed", 2, before_results=True)
    resumed = await bench(data, tmp_path / "killed", False, "benchmark.execution.resume=turn")
    assert resumed == clean[2:]  # turn 2's calls ran again, then turn 3 was asked
    [marker] = [e for e in journal_events(tmp_path / "killed") if e.event == "resumed"]
    assert (marker.resumed_at_turn, marker.replayed_reply) == (2, True)


async def test_other_settings_fall_back_to_the_first_turn(tmp_path, caplog):
    data = tmp_path / "data"
    write_suite(data, 1)
    clean = await bench(data, tmp_path / "clean", False)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    crash_after(tmp_path / "killed", 3)
    resumed = await bench(
        data,
        tmp_path / "killed",
        False,
        "benchmark.execution.resume=turn",
        "agent.main_agent.max_turns=40",  # changes the settings' config_id
        "+resume.allow_config_change=true",
    )
    assert len(resumed) == len(clean)  # from the first turn again
    events = journal_events(tmp_path / "killed")
    [fell_back] = [e for e in events if e.event == "resume_fell_back"]
    assert "settings changed" in fell_back.reason
    assert "starts afresh: the settings changed" in caplog.text
    [_aside] = list(task_dir(tmp_path / "killed").glob("*.interrupted-*.jsonl"))
    [record] = results(tmp_path / "killed")
    assert record["interrupted_calls"] == 3  # the killed run's calls, counted once


async def test_a_journal_edited_in_the_middle_falls_back(tmp_path):
    data = tmp_path / "data"
    write_suite(data, 1)
    clean = await bench(data, tmp_path / "clean", False)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    crash_after(tmp_path / "killed", 3)
    path = journal_path(tmp_path / "killed")
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = "not json\n"
    path.write_text("".join(lines))
    resumed = await bench(data, tmp_path / "killed", False, "benchmark.execution.resume=turn")
    assert len(resumed) == len(clean)
    [fell_back] = [e for e in journal_events(tmp_path / "killed") if e.event == "resume_fell_back"]
    assert "line 4" in fell_back.reason


async def test_a_task_scoped_servers_lost_state_is_said_in_the_next_result(tmp_path):
    data = tmp_path / "data"
    write_suite(data, 1)
    scoped = "+tools.faulty.scope=task"
    clean = await bench(data, tmp_path / "clean", False, scoped)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    sent_before = requests_through(tmp_path / "clean", 3)
    crash_after(tmp_path / "killed", 3)
    resumed = await bench(
        data, tmp_path / "killed", False, scoped, "benchmark.execution.resume=turn"
    )
    events = journal_events(tmp_path / "killed")
    [marker] = [e for e in events if e.event == "resumed"]
    assert marker.lost_tool_state == ["faulty"]
    assert resumed[0] == clean[sent_before]  # the note comes with the next result, not before
    told = next(e for e in events if e.event == "tool_results" and e.turn == 4).results[-1]
    assert told.content.endswith(
        "the state of faulty (variables, open sessions) is gone: set up again what you still need]"
    )
    assert "is gone" in resumed[1]["messages"][-1]["content"]
    assert "is gone" not in json.dumps(clean)


def test_a_journal_of_another_schema_or_release_is_not_rebuilt(tmp_path):
    from deepledger.agent.resume import read_unfinished

    path = tmp_path / "attempt-1-retry-0.jsonl"
    started = '{"ts": "t", "event": "retry_started", "task_id": "k", "attempt": 1, "retry": 0}\n'
    path.write_text(started)  # schema 1: no journal_opened line
    assert "older release" in read_unfinished(path, config_id="c", task="q")
    opened = '{"ts": "t", "event": "journal_opened", "schema_version": 99}\n'
    path.write_text(opened + started)
    assert read_unfinished(path, config_id="c", task="q") == "the journal is of schema 99, not 2"
    opened = opened.replace("99", "2")
    path.write_text(opened + started + '{"ts": "t", "event": "from_the_future"}\n')
    assert "from_the_future" in read_unfinished(path, config_id="c", task="q")
    path.write_text(opened + started)  # no config_id: written before resume=turn
    assert "settings" in read_unfinished(path, config_id="c", task="q")


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("tools", ["lookup.gone"], "the tools differ"),
        ("tool_specs_sha256", "0" * 64, "descriptions or parameters differ"),
    ],
    ids=["a-server-missing", "a-tool-changed"],
)
async def test_other_tools_than_the_journaled_ones_fall_back(tmp_path, field, value, reason):
    """With the native protocol the tools are not in the prompt: the journaled names and
    the digest of their specs are what tell the killed run's tools from today's."""
    data = tmp_path / "data"
    write_suite(data, 1)
    clean = await bench(data, tmp_path / "clean", True, "llm.tool_protocol=native")
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    crash_after(tmp_path / "killed", 3)
    path = journal_path(tmp_path / "killed")
    lines = path.read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if '"task_started"' in line)
    started = json.loads(lines[index])
    assert started["tool_specs_sha256"]  # journaled by this release
    lines[index] = json.dumps({**started, field: value}) + "\n"
    path.write_text("".join(lines))
    resumed = await bench(data, tmp_path / "killed", True, "llm.tool_protocol=native")
    assert len(resumed) == len(clean)  # from the first turn again
    [fell_back] = [e for e in journal_events(tmp_path / "killed") if e.event == "resume_fell_back"]
    assert reason in fell_back.reason


async def test_the_page_extractors_calls_before_the_kill_are_counted_once(tmp_path):
    data = tmp_path / "data"
    write_suite(data, 1)
    await bench(data, tmp_path / "clean", False)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    path = journal_path(tmp_path / "killed")
    lines = path.read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if '"tool_results"' in line)
    extraction = {
        "ts": "2026-01-01T00:00:00.000Z",
        "event": "extraction_call",
        "url": "https://example.com/page",
        "part": 1,
        "parts": 1,
        "page_chars": 5000,
        "model": "extractor",
        "usage": {"input_tokens": 1234, "output_tokens": 56},
        "reply_chars": 200,
    }
    lines.insert(index + 1, json.dumps(extraction) + "\n")
    path.write_text("".join(lines))
    crash_after(tmp_path / "killed", 3)
    await bench(data, tmp_path / "killed", False)
    events = journal_events(tmp_path / "killed")
    assert [e.event for e in events if e.event.startswith("resume")] == ["resumed"]
    [record] = results(tmp_path / "killed")
    [retry] = record["attempts"][0]["retries"]
    assert retry["extraction_usage"]["input_tokens"] == 1234  # once, from the journal


@pytest.mark.parametrize("native", [False, True], ids=["xml", "native"])
async def test_a_kill_between_the_loops_end_and_its_summary_goes_on_at_the_summary(
    tmp_path, native
):
    extra = ("llm.tool_protocol=native",) if native else ()
    data = tmp_path / "data"
    write_suite(data, 1)
    clean = await bench(data, tmp_path / "clean", native, *extra)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    path = journal_path(tmp_path / "killed")
    lines = path.read_bytes().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if b'"loop_ended"' in line)
    closing = sum(b'"closing_call"' in line for line in lines[end:])
    path.write_bytes(b"".join(lines[: end + 1]) + b'{"ts": "2026-')
    (task_dir(tmp_path / "killed") / "progress.jsonl").unlink()
    (tmp_path / "killed" / "benchmark_results.jsonl").unlink()
    resumed = await bench(data, tmp_path / "killed", native, *extra)
    assert closing and resumed == clean[-closing:]  # the closing calls alone, as sent before
    events = journal_events(tmp_path / "killed")
    assert sum(e.event == "loop_ended" for e in events) == 1
    assert [e.event for e in events if e.event.startswith("resume")] == ["resumed"]
    [record], [clean_record] = results(tmp_path / "killed"), results(tmp_path / "clean")
    assert record["correct"] is True and record["usage"] == clean_record["usage"]
