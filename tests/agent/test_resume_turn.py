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
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from deepledger.agent.refused import Refused
from deepledger.records.codec import decode, encode
from tests.support.doubles.fake_llm_server import (
    FakeLLMServer,
    FakeToolCall,
    FakeUsage,
    RecordedRequest,
    Reply,
)
from tests.support.doubles.faults import (
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
from tests.support.late_writer import LATE_CALL_MARK, LateWriter

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


class Looper(Researcher):
    """Looks up the same key again and again (XML calls): rolled back as a duplicate,
    then kept when it says the same again, until the loop check ends it as looping."""

    def reply(self, request: RecordedRequest) -> Reply:
        key = task_key(request) or "?"
        if SUMMARY_MARK in message_texts(request)[-1]:
            return Reply(f"\\boxed{{{answer_for(key)}}}")
        if not self.native:
            return Reply("Again.\n" + lookup_call(f"{key}-0", "none"))
        call = FakeToolCall(f"{TOOL_SERVER}__lookup", {"key": f"{key}-0", "fault": "none"}, id="c")
        return Reply("Again.", tool_calls=(call,), finish_reason="tool_calls")


class Alternator(Researcher):
    """Native calls: looks up two keys, then asks for them again and again, alternately,
    in two texts: each ask is rolled back as a duplicate, and the rolled-back replies go
    round a cycle of two. The requests of a rollback's asking again are the same, so it
    counts its calls (``start``: the calls a killed run made before)."""

    def __init__(self, start: int = 0) -> None:
        super().__init__(native=True)
        self.calls = start

    def reply(self, request: RecordedRequest) -> Reply:
        key = task_key(request) or "?"
        if SUMMARY_MARK in message_texts(request)[-1]:
            return Reply(f"\\boxed{{{answer_for(key)}}}")
        n, self.calls = self.calls, self.calls + 1
        text = "Look." if n < 2 else ("Again.", "Once more.")[n % 2]
        arguments = {"key": f"{key}-{n % 2}", "fault": "none"}
        call = FakeToolCall(f"{TOOL_SERVER}__lookup", arguments, id=f"call-{n}")
        return Reply(text, tool_calls=(call,), finish_reason="tool_calls")


async def bench(
    data: Path, run: Path, native: bool, *extra: str, responder: Researcher | None = None
) -> list[dict]:
    """One run of the suite; the bodies of the requests it made."""
    with FakeLLMServer(responder=responder or Researcher(native)) as server:
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


def loop_calls(run: Path, *, after: int) -> list[dict]:
    """The journal's llm_call lines of the turns after ``after``, as written (no time)."""
    return [
        {k: v for k, v in encode(e).items() if k != "ts"}
        for e in journal_events(run)
        if e.event == "llm_call" and e.turn > after
    ]


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
        # Batched cuts (context_cut lines) before the kill: the schedule goes on.
        (False, ("agent.keep_tool_result=1", "agent.context.cut_batch=2"), 4),
        (
            True,
            (
                "llm.tool_protocol=native",
                "agent.context.strategy=round_window",
                "agent.context.keep_rounds=1",
                "agent.context.cut_batch=2",
            ),
            4,
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
        "xml-keep-results-batched",
        "native-round-window-batched",
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
    if "agent.context.cut_batch=2" in extra:  # a cut before the kill, its schedule rebuilt
        assert next(e.turn for e in events if e.event == "context_cut") <= kept
    [marker] = [e for e in events if e.event == "resumed"]
    assert (marker.resumed_at_turn, marker.replayed_reply) == (kept + 1, False)
    assert sum(e.event == "task_started" for e in events) == 1
    # Each call from the cut on journaled as the uninterrupted run journaled it: the
    # first one's prefix_kept is counted against the killed run's last request.
    assert loop_calls(tmp_path / "killed", after=kept) == loop_calls(tmp_path / "clean", after=kept)
    [record] = results(tmp_path / "killed")
    [clean_record] = results(tmp_path / "clean")
    assert record["correct"] is True
    assert record["usage"] == clean_record["usage"]  # the killed run's calls, counted once
    [retry] = record["attempts"][0]["retries"]
    assert record["interrupted_calls"] == retry["interrupted_calls"] == sent_before  # shown
    assert "interrupted_calls" not in clean_record["attempts"][0]["retries"][0]
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


async def test_a_journal_another_process_still_writes_is_set_aside_not_continued(tmp_path):
    """A late writer (a Ray worker of a killed driver) holds the journal through the
    resume's bounded wait: the retry starts afresh in a new file, and what the late
    writer writes after goes to the one set aside."""
    data = tmp_path / "data"
    write_suite(data, 1)
    clean = await bench(data, tmp_path / "clean", False)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    crash_after(tmp_path / "killed", 3)
    with LateWriter(journal_path(tmp_path / "killed")) as writer:
        resumed = await bench(data, tmp_path / "killed", False, "benchmark.execution.resume=turn")
        writer.finish()
    assert len(resumed) == len(clean)  # from the first turn again
    events = journal_events(tmp_path / "killed")
    [fell_back] = [e for e in events if e.event == "resume_fell_back"]
    assert fell_back.reason.startswith(f"process {writer.pid} still writes the journal")
    assert not any(e.event == "llm_call" and e.turn == 99 for e in events)
    [aside] = list(task_dir(tmp_path / "killed").glob("*.interrupted-*.jsonl"))
    # The late call (after the torn line this test's "kill" left: no real writer tears).
    assert LATE_CALL_MARK in aside.read_text().splitlines()[-1]


async def test_what_was_said_before_the_kill_is_not_said_again(tmp_path):
    """A tool server that did not start and a first call that cannot be forced are
    journaled once, by the run that met them; the resume meets them again, silently."""
    data = tmp_path / "data"
    write_suite(data, 1)
    extra = (
        f"agent.main_agent.tools=[{TOOL_SERVER},broken]",
        "+tools.broken={command: /nonexistent/deepledger-test-server, args: []}",
        "llm.first_call=nosuch",
    )
    clean = await bench(data, tmp_path / "clean", False, *extra)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    sent_before = requests_through(tmp_path / "clean", 3)
    crash_after(tmp_path / "killed", 3)
    resumed = await bench(data, tmp_path / "killed", False, *extra)
    assert resumed == clean[sent_before:]
    said = [e.event for e in journal_events(tmp_path / "killed")]
    assert said.count("resumed") == 1
    assert said.count("tool_server_unavailable") == said.count("first_call_skipped") == 1


async def test_a_cycle_of_rolled_back_native_replies_across_the_kill_is_seen_as_before(
    tmp_path,
):
    """The rolled-back replies differ only in their native calls: the cycle check's keys
    of those before the kill are rebuilt from the whole replies the journal keeps, so the
    cycle is found at the same reply as without the kill (not rounds later)."""
    extra = ("llm.tool_protocol=native", "agent.main_agent.max_consecutive_rollbacks=10")
    data = tmp_path / "data"
    write_suite(data, 1)
    clean = await bench(data, tmp_path / "clean", True, *extra, responder=Alternator())
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    path = journal_path(tmp_path / "killed")
    lines = path.read_bytes().splitlines(keepends=True)
    rollbacks = [i for i, line in enumerate(lines) if b'"event":"rollback"' in line]
    assert len(rollbacks) == 6  # A-B-A-B-A-B: ended as looping at the sixth
    kept = lines[: rollbacks[2] + 1]  # killed after the third
    sent_before = sum(b'"event":"llm_call"' in line for line in kept)
    path.write_bytes(b"".join(kept))
    (task_dir(tmp_path / "killed") / "progress.jsonl").unlink()
    (tmp_path / "killed" / "benchmark_results.jsonl").unlink()
    resumed = await bench(
        data, tmp_path / "killed", True, *extra, responder=Alternator(start=sent_before)
    )
    assert resumed == clean[sent_before:]
    [looping] = [e for e in journal_events(tmp_path / "killed") if e.event == "looping"]
    assert (looping.cycle_length, looping.with_rollbacks) == (2, True)


async def test_the_time_the_killed_run_spent_counts_toward_the_tasks_time_limit(tmp_path):
    """The killed run's lines say it worked 1,000 s on the retry (its first line's stamp
    moved back): resumed under a 500 s limit, the task is over it at the first turn."""
    limit = ("benchmark.execution.task_time_limit_seconds=500",)
    data = tmp_path / "data"
    write_suite(data, 1)
    await bench(data, tmp_path / "clean", False, *limit)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    crash_after(tmp_path / "killed", 3)
    path = journal_path(tmp_path / "killed")
    first, rest = path.read_text().split("\n", 1)
    opened = json.loads(first)
    moment = datetime.fromisoformat(opened["ts"]) - timedelta(seconds=1_000)
    path.write_text(
        json.dumps({**opened, "ts": moment.isoformat(timespec="milliseconds")}) + "\n" + rest
    )
    await bench(data, tmp_path / "killed", False, *limit)
    [record] = results(tmp_path / "killed")
    assert record["end_reason"] == "limit"
    assert record["limit"]["kind"] == "task_time_limit_seconds"
    assert record["limit"]["spent"] >= 1_000
    [retry] = record["attempts"][0]["retries"]
    assert retry["elapsed_seconds"] >= 1_000  # the retry's time, the killed run's included
    assert [e.event for e in journal_events(tmp_path / "killed")].count("resumed") == 1


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

    def refusal(point: object) -> str:
        assert isinstance(point, Refused), point
        return point.reason

    path = tmp_path / "attempt-1-retry-0.jsonl"
    started = '{"ts": "t", "event": "retry_started", "task_id": "k", "attempt": 1, "retry": 0}\n'
    path.write_text(started)  # schema 1: no journal_opened line
    assert "older release" in refusal(read_unfinished(path, config_id="c", task="q"))
    opened = '{"ts": "t", "event": "journal_opened", "schema_version": 99}\n'
    path.write_text(opened + started)
    assert read_unfinished(path, config_id="c", task="q") == Refused(
        "the journal is of schema 99, not 2"
    )
    opened = opened.replace("99", "2")
    path.write_text(opened + started + '{"ts": "t", "event": "from_the_future"}\n')
    assert "from_the_future" in refusal(read_unfinished(path, config_id="c", task="q"))
    path.write_text(opened + started)  # no config_id: written before resume=turn
    assert "settings" in refusal(read_unfinished(path, config_id="c", task="q"))


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


@pytest.mark.parametrize("before_loop_ended", [False, True], ids=["ended", "ending"])
@pytest.mark.parametrize(
    ("end", "native", "extra"),
    [
        ("model_finished", False, ()),
        ("model_finished", True, ("llm.tool_protocol=native",)),
        ("turns_exhausted", False, ("agent.main_agent.max_turns=3",)),
        ("looping", False, ()),
    ],
    ids=["answered-xml", "answered-native", "max-turns", "looping"],
)
async def test_a_kill_at_the_loops_end_goes_on_at_the_closing_calls(
    tmp_path, end, native, extra, before_loop_ended
):
    """Killed after the loop ended (``ended``: its loop_ended line written; ``ending``:
    not yet, after the reply or the results that ended it), the resumed retry asks no
    turn: it makes the closing calls alone, as the uninterrupted one sent them."""
    responder = Looper(native) if end == "looping" else None
    data = tmp_path / "data"
    write_suite(data, 1)
    clean = await bench(data, tmp_path / "clean", native, *extra, responder=responder)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    path = journal_path(tmp_path / "killed")
    lines = path.read_bytes().splitlines(keepends=True)
    ended = next(i for i, line in enumerate(lines) if b'"loop_ended"' in line)
    assert decode(json.loads(lines[ended])).end_reason == end
    closing = sum(b'"closing_call"' in line for line in lines[ended:])
    kept = lines[:ended] if before_loop_ended else lines[: ended + 1]
    path.write_bytes(b"".join(kept) + b'{"ts": "2026-')
    (task_dir(tmp_path / "killed") / "progress.jsonl").unlink()
    (tmp_path / "killed" / "benchmark_results.jsonl").unlink()
    resumed = await bench(data, tmp_path / "killed", native, *extra, responder=responder)
    assert closing and resumed == clean[-closing:]  # the closing calls alone, as sent before
    events = journal_events(tmp_path / "killed")
    assert [e.end_reason for e in events if e.event == "loop_ended"] == [end]
    assert [e.event for e in events if e.event.startswith("resume")] == ["resumed"]
    [marker] = [e for e in events if e.event == "resumed"]
    last_turn = max(e.turn for e in events if e.event == "assistant")
    assert (marker.resumed_at_turn, marker.at_closing, marker.replayed_reply) == (
        last_turn,
        True,
        False,
    )
    [record], [clean_record] = results(tmp_path / "killed"), results(tmp_path / "clean")
    assert record["correct"] is True and record["usage"] == clean_record["usage"]
    assert record["turns"] == clean_record["turns"] and record["end_reason"] == end


@pytest.mark.parametrize("native", [False, True], ids=["xml", "native"])
async def test_a_kill_after_the_closing_call_goes_on_at_the_closing_call(tmp_path, native):
    """Killed after its summary call was journaled (closing_call written) and before the
    retry's result: the resumed retry asks the summary call again, as sent before, and
    no turn; the killed call counts in the usage as well as the one made again."""
    extra = ("llm.tool_protocol=native",) if native else ()
    data = tmp_path / "data"
    write_suite(data, 1)
    clean = await bench(data, tmp_path / "clean", native, *extra)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    path = journal_path(tmp_path / "killed")
    lines = path.read_bytes().splitlines(keepends=True)
    closing = next(i for i, line in enumerate(lines) if b'"closing_call"' in line)
    assert b'"summary"' in lines[closing]
    path.write_bytes(b"".join(lines[: closing + 1]) + b'{"ts": "2026-')
    (task_dir(tmp_path / "killed") / "progress.jsonl").unlink()
    (tmp_path / "killed" / "benchmark_results.jsonl").unlink()
    resumed = await bench(data, tmp_path / "killed", native, *extra)
    assert resumed == clean[-1:]  # exactly the closing call again, not turn 1
    events = journal_events(tmp_path / "killed")
    assert [e.event for e in events if e.event.startswith("resume")] == ["resumed"]
    [marker] = [e for e in events if e.event == "resumed"]
    assert (marker.at_closing, marker.replayed_reply) == (True, False)
    assert [e.purpose for e in events if e.event == "closing_call"] == ["summary", "summary"]
    [record], [clean_record] = results(tmp_path / "killed"), results(tmp_path / "clean")
    assert record["correct"] is True and record["turns"] == clean_record["turns"]
    summary = [e for e in events if e.event == "closing_call"][-1].usage
    for kind in ("input_tokens", "output_tokens"):
        expected = clean_record["usage"][kind] + getattr(summary, kind)
        assert record["usage"][kind] == expected, kind


async def test_a_cut_reply_asked_again_before_the_kill_is_counted_once(tmp_path):
    """A reply_cut line (agent/cut.py) before the kill: its tokens are in the resumed
    retry's totals once, and it is a call the killed run made."""
    data = tmp_path / "data"
    write_suite(data, 1)
    await bench(data, tmp_path / "clean", False)
    shutil.copytree(tmp_path / "clean", tmp_path / "killed")
    path = journal_path(tmp_path / "killed")
    lines = path.read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if '"llm_call"' in line)
    cut = {
        "ts": "2026-01-01T00:00:00.000Z",
        "event": "reply_cut",
        "turn": 1,
        "attempt": 1,
        "max_tokens": 16384,
        "next_max_tokens": 18022,
        "message": {"role": "assistant", "kind": "model", "content": "<think>half"},
        "usage": {"input_tokens": 1000, "output_tokens": 16384},
    }
    lines.insert(index, json.dumps(cut) + "\n")
    path.write_text("".join(lines))
    crash_after(tmp_path / "killed", 3)
    await bench(data, tmp_path / "killed", False)
    events = journal_events(tmp_path / "killed")
    assert [e.event for e in events if e.event.startswith("resume")] == ["resumed"]
    [clean] = results(tmp_path / "clean")
    [killed] = results(tmp_path / "killed")
    usage = [r["attempts"][0]["retries"][0]["usage"] for r in (clean, killed)]
    assert usage[1]["output_tokens"] == usage[0]["output_tokens"] + 16384
    assert usage[1]["input_tokens"] == usage[0]["input_tokens"] + 1000
