"""Journal events: every class written and read back the same, old lines still read."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from deepledger.messages import (
    EndReason,
    ImagePart,
    Message,
    StopReason,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    Usage,
)
from deepledger.records.base import SCHEMA_VERSION
from deepledger.records.codec import decode, encode, read_journal, read_journal_file
from deepledger.records.events import (
    EVENT_CLASSES,
    AnswerSkipped,
    AssistantTurn,
    ClosingCall,
    ClosingCallFailed,
    ClosingCallSkipped,
    Compacted,
    CompactionFailed,
    CompactionSkipped,
    ContextCut,
    ContextOverflow,
    EndpointMoved,
    Event,
    ExtractionCall,
    FinalAnswer,
    FirstCallSkipped,
    JournalOpened,
    LimitReached,
    LLMCall,
    LLMCallFailed,
    LoopEnded,
    Looping,
    PairingRepaired,
    PostMortem,
    ReplyCut,
    Resumed,
    ResumeFellBack,
    RetryStarted,
    Rollback,
    RollbackCapReached,
    RollbackRepeated,
    SubagentFinished,
    TaskFinished,
    TaskStarted,
    ToolCallRepaired,
    ToolResults,
    ToolServerUnavailable,
    UnknownEvent,
    WindowExhausted,
)
from deepledger.records.parts import SHAPES, ImageRecord, RecordedImage, UsageRecord, image_record
from deepledger.store.journal import Journal

SCHEMA1 = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "schema1"
PNG = ImagePart("image/png", base64.b64encode(b"\x89PNG" + bytes(300)).decode(), "shot.png")
CALL = ToolCall("c1", "search", {"q": "Danube", "n": [1, 2]}, server_name="web", raw_arguments="{}")
RESULT = ToolResult("c1", "a page \ud83d", is_error=True, name="search", images=(PNG,), cached=True)
REPLY = Message.assistant("I will search. \\boxed{x}", [CALL])
THOUGHT = Message(
    REPLY.role, REPLY.kind, "thinking aloud", reasoning="why", thinking=(ThinkingBlock("t", "s"),)
)
USAGE = Usage(120, 30, 100, 5)


def samples() -> list[Event]:
    """One of each event class, with every kind of field filled in."""
    return [
        JournalOpened(schema_version=SCHEMA_VERSION),
        RetryStarted(
            task_id="t/1",
            attempt=1,
            retry=2,
            carried_post_mortems=2,
            final_retry=True,
            config_id="0123abcd",
        ),
        Resumed(resumed_at_turn=4, replayed_reply=True, lost_tool_state=["python"]),
        ResumeFellBack(reason="the settings changed since"),
        TaskStarted(
            task="Q?", task_images=[PNG], tools=["web.search"], system_prompt="S", protocol="native"
        ),
        LoopEnded(end_reason=EndReason.TURNS_EXHAUSTED, turns=3),
        TaskFinished(
            answer="x",
            provenance="summary",
            end_reason=EndReason.MODEL_FINISHED,
            end_detail=None,
            turns=3,
            tool_calls=2,
            rollbacks=1,
            usage=USAGE,
            cost=0.25,
        ),
        SubagentFinished(
            agent="browsing", journal="/r/a.subagents/browsing-1.jsonl", turns=2, usage=USAGE
        ),
        ToolServerUnavailable(server="web", reason="did not start"),
        FirstCallSkipped(tool="web.search", reason="no prefill"),
        LLMCall(
            turn=1,
            messages=4,
            left_out_messages=1,
            prefix_kept_messages=2,
            prefix_broken=True,
            prefix_broken_by="compaction",
            blanked_tool_results=1,
            forced_call=True,
            usage=USAGE,
            stop_reason=StopReason.TOOL_USE,
        ),
        LLMCall(
            turn=2,
            usage=USAGE,
            endpoint="http://gpu-2:8000/v1",
            seconds=0.5,
            failed_endpoints=["http://gpu-1:8000/v1"],
        ),
        LLMCallFailed(turn=3, failed_endpoints=["http://gpu-2:8000/v1"], error="HTTP 502"),
        ReplyCut(
            turn=3,
            attempt=1,
            max_tokens=100,
            next_max_tokens=110,
            message=Message.assistant("<think>half"),
            usage=USAGE,
        ),
        ReplyCut(
            purpose="summary",
            attempt=2,
            max_tokens=110,
            next_max_tokens=121,
            message=Message.assistant(""),
            usage=USAGE,
        ),
        ToolCallRepaired(
            turn=2,
            call_id="t2c1",
            kind="unknown_server",
            written="search.lookup",
            ran="kb.lookup",
            detail="search.lookup is no tool here",
        ),
        EndpointMoved(
            turn=2,
            from_endpoint="http://gpu-1:8000/v1",
            to_endpoint="http://gpu-2:8000/v1",
            reason="drained: HTTP 502",
        ),
        AssistantTurn(turn=1, message=REPLY, boxed="x"),
        AssistantTurn(turn=2, message=THOUGHT),
        ToolResults(turn=1, calls=[CALL], results=[RESULT]),
        PairingRepaired(turn=2, problems=[{"index": 3, "kind": "orphan_result", "call_id": "c9"}]),
        Rollback(turn=2, reason="duplicate_call", detail="seen", reply="<use_mcp_tool>"),
        RollbackCapReached(turn=3),
        RollbackRepeated(turn=3, reason="empty_reply"),
        Looping(turn=4, repeats=2),
        LimitReached(turn=4, kind="max_cost_usd", limit=0.5, spent=0.51),
        WindowExhausted(turn=5, limit=8192, dropped_messages=2, estimate=9000),
        WindowExhausted(
            turn=5, purpose="summary", limit=None, dropped_messages=2, provider_said="no"
        ),
        ContextOverflow(
            turn=5,
            purpose="turn",
            provider_said="too long",
            estimated_tokens=9000,
            limit=8192,
            server_limit=4096,
            action="ended_loop",
            dropped_messages=2,
        ),
        ContextCut(
            turn=6,
            results_blanked=5,
            blanked_total=10,
            tokens_freed=4000,
            uncached_tokens=1200,
            urgent=True,
        ),
        Compacted(
            turn=6, rounds_replaced=3, rounds_kept=2, tokens_before=900, tokens_after=300, notes="N"
        ),
        CompactionSkipped(turn=6, reason="small", request_tokens=900, without_older_rounds=850),
        CompactionFailed(turn=6, reason="empty", rounds=3),
        ClosingCall(purpose="compaction", turn=6, message=Message.assistant("notes"), usage=USAGE),
        ClosingCall(
            purpose="summary",
            prompts=[Message.injected("Answer.")],
            message=REPLY,
            prefill="\\boxed{",
            usage=USAGE,
            stop_reason=StopReason.END_TURN,
        ),
        ClosingCallSkipped(
            purpose="summary", reason="too big", task_alone=True, estimated_tokens=9, limit=8
        ),
        ClosingCallFailed(purpose="summary", reason="refused"),
        AnswerSkipped(reason="context management on"),
        FinalAnswer(answer=None, provenance="none"),
        PostMortem(text="Failure type: blocked", failure_type="blocked", prefilled=True),
        ExtractionCall(
            url="https://a.example/p",
            part=1,
            parts=2,
            page_chars=5000,
            model="m",
            usage=USAGE,
            stop_reason=StopReason.MAX_TOKENS,
            reply_chars=40,
        ),
    ]


def test_every_event_class_has_a_sample():
    assert {type(e) for e in samples()} == set(EVENT_CLASSES.values())


def test_every_event_is_read_back_as_it_was_written(tmp_path):
    path = tmp_path / "attempt-1-retry-0.jsonl"
    journal = Journal(path)
    written = [e for e in samples() if not isinstance(e, JournalOpened)]
    for event in written:
        journal.write(event)
    journal.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"ts": lines[0]["ts"], "event": "journal_opened", "schema_version": 2}
    assert lines[1:] == [encode(e) for e in written]  # the line is the encoding, field for field
    recorded = read_journal_file(path)  # the header is no event of the run
    assert [type(e) for e in recorded.events] == [type(e) for e in written]
    assert [encode(e) for e in recorded.events] == lines[1:]


def test_read_back_fields_are_the_runtimes_own_types(tmp_path):
    journal = Journal(tmp_path / "j.jsonl")
    for event in samples()[1:]:
        journal.write(event)
    journal.close()
    events = read_journal(tmp_path / "j.jsonl")
    (turn,) = [e for e in events if isinstance(e, ToolResults)]
    assert turn.calls == [CALL]
    (result,) = turn.results
    assert (result.content, result.is_error, result.cached) == (RESULT.content, True, True)
    (image,) = result.images
    assert isinstance(image, RecordedImage) and image.data == ""  # journals keep no image data
    assert image_record(image) == image_record(PNG)  # ...but its size and digest
    reply, thought = [e.message for e in events if isinstance(e, AssistantTurn)]
    assert reply == REPLY
    assert thought.thinking == THOUGHT.thinking and thought.reasoning == "why"
    (started,) = [e for e in events if isinstance(e, TaskStarted)]
    assert [i.source for i in started.task_images] == ["shot.png"]
    call, routed = [e for e in events if isinstance(e, LLMCall)]
    assert call.usage == USAGE and call.stop_reason is StopReason.TOOL_USE
    assert routed.failed_endpoints == ["http://gpu-1:8000/v1"] and routed.seconds == 0.5


def test_a_field_left_to_its_default_is_not_written():
    line = encode(ClosingCall(purpose="compaction", turn=2, message=REPLY, usage=USAGE))
    assert "prompts" not in line and "prefill" not in line and "stop_reason" not in line
    assert decode(line).prompts == []  # type: ignore[attr-defined]


def test_a_misspelt_or_missing_field_is_refused_when_writing():
    with pytest.raises(ValidationError, match="tokens"):
        LLMCall(turn=1, usage=USAGE, tokens=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="usage"):
        LLMCall(turn=1)  # type: ignore[call-arg]


def test_a_line_whose_fields_do_not_fit_is_an_error_not_a_guess():
    with pytest.raises(ValueError, match="usage"):
        decode({"event": "llm_call", "turn": 1, "usage": "not a dict"})
    with pytest.raises(ValueError):
        decode({"event": "assistant", "turn": 1, "message": {"role": "robot", "kind": "model"}})
    with pytest.raises(ValueError, match="event name"):
        decode({"turn": 1})


def test_an_unknown_event_name_is_kept_with_its_fields(tmp_path):
    line = {"ts": "2030-01-01T00:00:00.000+00:00", "event": "from_a_newer_release", "x": [1]}
    event = decode(line)
    assert isinstance(event, UnknownEvent) and event.data == {"x": [1]}
    assert encode(event) == line
    known = decode({"event": "looping", "turn": 2, "repeats": 2, "added_later": True})
    assert isinstance(known, Looping) and encode(known)["added_later"] is True


def test_a_torn_last_line_and_non_events_are_skipped(tmp_path):
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    journal.write(Looping(turn=1, repeats=2))
    journal.close()
    with path.open("a") as out:
        out.write('["not an event"]\n{"no": "event name"}\n{"ts": "2026-12-01", "event": "llm_ca')
    assert [type(e) for e in read_journal(path)] == [Looping]
    assert read_journal(tmp_path / "absent.jsonl") == []


def test_a_journal_of_the_release_before_typed_records_reads_as_schema_1():
    journals = sorted(SCHEMA1.glob("tasks/*/attempt-*.jsonl"))
    assert len(journals) == 6
    for path in journals:
        assert '"journal_opened"' not in path.read_text()  # schema 1: no header
        recorded = read_journal_file(path)
        assert not [e for e in recorded.events if isinstance(e, UnknownEvent)]
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert [encode(e) for e in recorded.events] == lines  # read and written the same


def test_the_journal_shapes_name_the_dataclasses_fields():
    for cls, shape in SHAPES.items():
        assert set(shape.__annotations__) == {f.name for f in dataclasses.fields(cls)}, cls
    assert set(ImageRecord.__annotations__) == set(image_record(PNG))
    assert set(UsageRecord.__annotations__) == {f.name for f in dataclasses.fields(Usage)}


def test_numbers_are_written_as_they_were_given():
    line = encode(LimitReached(turn=4, kind="max_turns", limit=10, spent=10))
    assert json.dumps(line).endswith('"limit": 10, "spent": 10}')
    assert encode(decode(line)) == line
