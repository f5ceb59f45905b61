"""Mid-attempt resume: a retry a killed run left unfinished, rebuilt from its journal.

With ``benchmark.execution.resume=turn`` the runner holds the journal of an unfinished
retry and reads it back (:func:`reopen_unfinished`), and the turn loop goes on from it
(:func:`rebuild`) instead of from its first turn: the history (system prompt and task
as journaled, every kept reply and tool result, the compaction notes and the cuts'
schedule), the usage so far, the intermediate boxes, the turn counter, the rollbacks,
the loop check's replies (rolled-back ones whole) and the request builder's last
request. The next request is then the one the uninterrupted run would have sent, and it
is journaled as that run would have journaled it.

One writer a journal: the journal is read only once this process holds it
(``Journal.reopen``, its ``flock``). A process that still writes it (a Ray worker of a
killed driver) is waited for a moment (``WRITER_WAIT_SECONDS``), then left to it: the
retry starts afresh beside the journal, which the runner sets aside.

What the journal cannot give back is said: a ``scope: task`` tool server's state is
gone (the next tool result tells the model, and ``resumed`` lists the servers); a kept
reply whose tool calls had not all finished has them run again (``replayed_reply``).
What the killed run already said before its loop (a tool server that did not start, a
first call that cannot be forced) is not said again.

A journal this module cannot rebuild exactly gets a reason instead of a point, and the
retry starts afresh as with ``resume=retry``: a line torn before the last one, another
schema, other settings (the run's ``config_id``), another task text, images (journals
keep no image data), an event this module does not rebuild (sub-agents, a context
overflow, a loop ended by the window guard or a limit).

A kill after the loop's end goes on at its closing: the summary (and any boxed retry or
post-mortem) is asked again from the rebuilt state, also when the killed run had made
some of those calls already (their ``closing_call`` lines count in the usage, once).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from deepledger.agent.cycles import reply_key
from deepledger.agent.refused import Refused
from deepledger.agent.rollback import Rollback, RollbackReason, call_key
from deepledger.agent.state import RunState
from deepledger.context.policy import ContextPolicy
from deepledger.context.replay import follow_history
from deepledger.llm.usage import CallRecord, Price, UsageLedger
from deepledger.messages import EndReason, LLMResponse, Message, StopReason
from deepledger.records.base import SCHEMA_VERSION
from deepledger.records.codec import decode
from deepledger.records.events import (
    AnswerSkipped,
    AssistantTurn,
    ClosingCall,
    Compacted,
    CompactionFailed,
    CompactionSkipped,
    ContextCut,
    EndpointMoved,
    Event,
    ExtractionCall,
    FinalAnswer,
    FirstCallSkipped,
    JournalOpened,
    LLMCall,
    LoopEnded,
    Looping,
    PairingRepaired,
    PostMortem,
    ReplyCut,
    Resumed,
    ResumeFellBack,
    RetryStarted,
    RollbackCapReached,
    RollbackRepeated,
    TaskStarted,
    ToolCallRepaired,
    ToolResults,
    ToolServerUnavailable,
)
from deepledger.records.events import Rollback as RollbackEvent
from deepledger.store.journal import Journal, JournalBusyError, writers_seconds
from deepledger.tools.protocols import ToolProtocol, specs_digest
from deepledger.tools.types import ToolInfo

# The events a rebuild reads (or knows it may pass over); any other stops it.
_REBUILT: tuple[type[Event], ...] = (
    RetryStarted,
    TaskStarted,
    LLMCall,
    ReplyCut,  # a cut reply asked again with more room: in the totals
    EndpointMoved,
    AssistantTurn,
    ToolResults,
    ToolCallRepaired,  # a repaired call: its results are in tool_results
    RollbackEvent,
    RollbackCapReached,
    RollbackRepeated,
    PairingRepaired,
    ToolServerUnavailable,
    FirstCallSkipped,
    Compacted,
    CompactionSkipped,
    CompactionFailed,
    ContextCut,  # batched or urgent cuts: an urgent one moves the schedule (adopted)
    ClosingCall,  # compaction notes; after loop_ended, a closing call made again
    ExtractionCall,  # the page extractor's calls: in the totals
    Looping,  # the loop ended on a cycle
    LoopEnded,  # for the ends whose closing calls start from the state alone (below)
    # What the closing journals after loop_ended: it is made again from the state.
    FinalAnswer,
    AnswerSkipped,
    PostMortem,
    Resumed,
    ResumeFellBack,
)
# How the loop check's replies come back: a kept reply is journaled whole, a rolled-back
# one whole too when its text is not all of it (native calls, thinking): every key exact.
# (A journal of an earlier release kept a rolled-back reply's text alone.)
CYCLE_STATE = "rebuilt"
# The ends whose closing calls are made from the history and the answers alone: a kill
# between the loop's end and its closing summary goes on at the summary. (A window or a
# limit that ended the loop leaves state of its own to the closing: not rebuilt.)
_ENDS_REBUILT = (
    EndReason.MODEL_FINISHED,
    EndReason.CUT_OR_EMPTY,
    EndReason.TURNS_EXHAUSTED,
    EndReason.LOOPING,
)
# How long a resume waits for a process that still writes the journal: a Ray worker of
# a killed driver ends itself within 0.2 s of its node's Ray going (bench/ray_backend.py)
# and Ray ends a dead driver's actors soon after, so a resume started right
# after the kill goes on in the file rather than throwing its turns away. Not longer: a
# writer that runs on (an unreachable worker) would hold up every resume of the run.
WRITER_WAIT_SECONDS = 2.0
_WRITER_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class ResumePoint:
    """An unfinished retry's journal, read back and checked: the loop goes on from it."""

    path: Path
    started: TaskStarted
    events: list[Event]  # every event after task_started, in order
    turns: int  # kept turns
    pending: AssistantTurn | None  # the last kept reply, when its results were not written
    before: list[Event] = field(default_factory=list)  # the events before task_started
    # The time the killed run(s) worked on the retry, from the stamps of their lines
    # (``store.journal.writers_seconds``): the retry's record counts it.
    killed_seconds: float = 0.0

    def said(self, event: ToolServerUnavailable | FirstCallSkipped) -> bool:
        """Whether the killed run journaled ``event`` already (a tool server that did not
        start, the first call that cannot be forced): said once, not at each resume.
        (A rebuild only goes on with the same tools, so the same servers are missing.)"""
        if isinstance(event, ToolServerUnavailable):
            return any(
                isinstance(e, ToolServerUnavailable) and e.server == event.server
                for e in self.before
            )
        return any(isinstance(e, FirstCallSkipped) and e.tool == event.tool for e in self.before)

    @property
    def killed_calls(self) -> int:
        """The model calls the killed run(s) made (the loop's and the closing ones, as a
        journal set aside counts them): the rebuilt usage holds them once."""
        return sum(isinstance(e, LLMCall | ClosingCall | ReplyCut) for e in self.events)


@dataclass
class Rebuilt:
    """What :func:`rebuild` gives the turn loop to start from."""

    state: RunState
    rejected_reply: str | None = None  # the reply the last rollback refused
    pending: Message | None = None  # the kept reply whose tool calls run again
    # The servers whose state the kill took (set by the caller, which knows the scopes).
    lost_tool_state: list[str] = field(default_factory=list)
    loop_ended: bool = False  # the journal holds loop_ended: only the closing is left
    # Why the model stopped the last reply the journal holds: a kept reply without calls
    # ends the loop as answered only when it was not cut (orchestrator.end_without_calls).
    pending_stop: StopReason = StopReason.END_TURN


async def reopen_unfinished(
    open_journal: Callable[[], Journal],
    path: Path,
    *,
    config_id: str | None,
    task: str,
    wait_seconds: float = WRITER_WAIT_SECONDS,
) -> tuple[ResumePoint, Journal] | Refused:
    """The journal at ``path`` held by this process (``open_journal``: the run store's
    ``journal(..., resume=True)``) and the point its retry goes on from; or the reason it
    cannot, the journal closed. It is read only once held: a process still writing it
    (:class:`JournalBusyError`) is waited for up to ``wait_seconds``, then left to it."""
    journal = await _held(open_journal, wait_seconds)
    if isinstance(journal, Refused):
        return journal
    point = await asyncio.to_thread(read_unfinished, path, config_id=config_id, task=task)
    if isinstance(point, Refused):
        journal.close()
        return point
    return point, journal


async def _held(open_journal: Callable[[], Journal], wait_seconds: float) -> Journal | Refused:
    """The journal once no other process writes it, asking again every moment (on the
    event loop, not a thread: a killed driver leaves every task's journal held at once)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return await asyncio.to_thread(open_journal)
        except JournalBusyError as busy:
            if time.monotonic() >= deadline:
                return Refused(
                    f"{busy.writer} still writes the journal after {wait_seconds:g} s (a "
                    "worker of the killed run?): a file another process appends to is not "
                    "continued"
                )
        await asyncio.sleep(_WRITER_POLL_SECONDS)


def read_unfinished(path: Path, *, config_id: str | None, task: str) -> ResumePoint | Refused:
    """The point ``path``'s retry goes on from, or the reason it cannot (one line). A
    last line a crash cut short is not read (``Journal.reopen`` cuts it off)."""
    data = path.read_bytes()
    *complete, _torn = data.split(b"\n")
    events: list[Event] = []
    for number, line in enumerate(complete, start=1):
        try:
            event = decode(json.loads(line))
        except ValueError:
            return Refused(
                f"line {number} of the journal does not read as an event (edited or torn)"
            )
        events.append(event)
    if not events or not isinstance(events[0], JournalOpened):
        return Refused("the journal has no journal_opened line (written by an older release)")
    if events[0].schema_version != SCHEMA_VERSION:
        return Refused(f"the journal is of schema {events[0].schema_version}, not {SCHEMA_VERSION}")
    return _point(path, events[1:], config_id=config_id, task=task)


def _point(
    path: Path, events: list[Event], *, config_id: str | None, task: str
) -> ResumePoint | Refused:
    ended = False  # past loop_ended: the closing's own lines may follow
    for event in events:
        if not isinstance(event, _REBUILT):
            return Refused(f"its {event.event} event is not rebuilt by resume=turn")
        closing = isinstance(event, FinalAnswer | AnswerSkipped | PostMortem) or (
            isinstance(event, ClosingCall) and event.purpose != "compaction"
        )
        if closing and not ended:
            return Refused(f"its {event.event} line comes before the loop's end")
        if isinstance(event, LoopEnded) and event.end_reason not in _ENDS_REBUILT:
            return Refused(f"its loop ended by {event.end_reason}, whose closing is not rebuilt")
        ended = ended or isinstance(event, LoopEnded)
        if isinstance(event, ToolResults) and any(r.images for r in event.results):
            return Refused("a tool result held images, which journals keep no data of")
    retry = next((e for e in events if isinstance(e, RetryStarted)), None)
    if retry is None:
        return Refused("the journal ends before the retry started")
    if retry.config_id is None:
        return Refused("the journal does not record the settings it ran under")
    if retry.config_id != config_id:
        return Refused(f"the settings changed since (config {retry.config_id}, now {config_id})")
    started = next((e for e in events if isinstance(e, TaskStarted)), None)
    if started is None:
        return Refused("the loop had not started")
    if started.system_prompt is None or started.task != task:
        return Refused("the task text differs from the journaled one")
    if started.task_images:
        return Refused("the task holds images, which journals keep no data of")
    return _with_turns(path, started, events)


def _with_turns(path: Path, started: TaskStarted, events: list[Event]) -> ResumePoint:
    at = events.index(started)
    after = events[at + 1 :]
    turns = [e for e in after if isinstance(e, AssistantTurn)]
    answered = {e.turn for e in after if isinstance(e, ToolResults)}
    last = turns[-1] if turns else None
    pending = last if last is not None and last.turn not in answered else None
    return ResumePoint(
        path,
        started,
        after,
        len(turns),
        pending,
        before=events[:at],
        killed_seconds=writers_seconds(path),
    )


async def rebuild(
    point: ResumePoint,
    *,
    protocol: ToolProtocol,
    policy: ContextPolicy,
    ledger: UsageLedger,
    system_prompt: str,
    tools: list[ToolInfo],
    extraction_price: Price | None = None,
) -> Rebuilt | Refused:
    """The loop's state at ``point``, as the uninterrupted run held it, or why it cannot
    be had: ``system_prompt`` is this run's (the journaled one is sent, and must be it
    but for the date it was written on), and ``tools`` the tools it offers now (the
    native protocol's specs are not in the prompt: a server that did not come back, or
    that changed its tools, is caught here)."""
    started = point.started
    journaled = started.system_prompt or ""
    if _without_dates(journaled, started.ts) != _without_dates(system_prompt, started.ts):
        return Refused("the system prompt differs from the journaled one (tools or prompt changed)")
    if started.tools != [t.qualified_name for t in tools]:
        return Refused("the tools differ from the journaled ones (a server is missing or changed)")
    digest = started.tool_specs_sha256
    if digest is not None and digest != specs_digest(protocol.specs(tools)):
        return Refused("the tools' descriptions or parameters differ from the journaled ones")
    history = [Message.system(journaled), Message.task(started.task)]
    # The calls go to a ledger of their own until the rebuild holds: a refused one must
    # leave ``ledger`` (counted by the task's budget) as it was.
    state = RunState(history=history, ledger=UsageLedger(ledger.price))
    rebuilt = Rebuilt(state)
    for event in point.events:
        if isinstance(event, ExtractionCall):  # priced as the extractor's model is
            price = extraction_price or ledger.price
            cost = price.cost(event.usage) if price else None
            stop = event.stop_reason or StopReason.END_TURN
            state.ledger.extraction.append(CallRecord(event.model, event.usage, cost, stop))
            continue
        problem = _apply(event, rebuilt, protocol, policy)
        if problem is not None:
            return problem
        if isinstance(event, LLMCall):
            # Each request the killed run sent, built again from the history and the
            # strategy as they stood then: the request builder goes on as it would have
            # (the next request's prefix_kept is counted against the last one, and any
            # state a trimming keeps from request to request is the same). A closing
            # with no prompts is the loop's request itself, without the window guard.
            await policy.prepare(state.history, closing=())
    ledger.calls += state.ledger.calls
    ledger.delegated += state.ledger.delegated
    ledger.extraction += state.ledger.extraction
    state.ledger = ledger
    if point.pending is not None:
        rebuilt.pending = state.history[-1]
    return rebuilt


def _without_dates(prompt: str, ts: str) -> str:
    """``prompt`` with today's date and the journal's taken out (a resume on another day
    sends the journaled prompt, as the uninterrupted run would have)."""
    today = datetime.now(UTC).date().isoformat()
    return prompt.replace(today, "").replace(ts[:10], "")


def _apply(
    event: Event, rebuilt: Rebuilt, protocol: ToolProtocol, policy: ContextPolicy
) -> Refused | None:
    state = rebuilt.state
    if isinstance(event, AssistantTurn):
        follow_history(state.history, event, protocol)
        state.turn = event.turn
        state.consecutive_rollbacks = 0
        if event.boxed is not None:
            state.intermediate_answers.append(event.boxed)
    elif isinstance(event, ToolResults):
        _apply_results(event, state, protocol)
    elif isinstance(event, RollbackEvent):
        reason = RollbackReason(event.reason)
        state.rollbacks.append(Rollback(reason, event.detail))
        state.consecutive_rollbacks += 1
        rebuilt.rejected_reply = event.reply
        reply = event.message or Message.assistant(event.reply)  # whole, or all it held
        state.replies.append(reply_key(reply, reason, event.turn))
    elif isinstance(event, LLMCall):
        stop = event.stop_reason or StopReason.END_TURN
        state.ledger.record(LLMResponse(Message.assistant(""), stop, event.usage))
        rebuilt.pending_stop = stop
        state.prefix_breaks += event.prefix_broken
    elif isinstance(event, ReplyCut):  # asked again with more room: in the totals
        state.ledger.record_aside(LLMResponse(event.message, StopReason.MAX_TOKENS, event.usage))
    elif isinstance(event, ClosingCall):  # notes, or a closing made again: in the totals
        stop = event.stop_reason or StopReason.END_TURN
        state.ledger.record_aside(LLMResponse(event.message, stop, event.usage))
    elif isinstance(event, Looping):
        state.end_reason = EndReason.LOOPING
    elif isinstance(event, LoopEnded):
        state.end_reason = event.end_reason
        rebuilt.loop_ended = True
    elif isinstance(event, ContextCut):
        policy.adopt_cut(event)
    elif isinstance(event, Compacted):
        return _adopt(event, state, policy)
    elif isinstance(event, CompactionFailed):
        _adopt_failure(state, policy)
    return None


def _apply_results(event: ToolResults, state: RunState, protocol: ToolProtocol) -> None:
    for call, result in zip(event.calls, event.results, strict=False):
        key = call_key(call)
        if key is not None and not result.is_error:
            state.seen_call_keys.add(key)
    state.tool_calls += len(event.calls)
    follow_history(state.history, event, protocol)
    reply, message = state.history[-2:]
    state.replies.append(reply_key(reply, message, event.turn))


def _adopt(event: Compacted, state: RunState, policy: ContextPolicy) -> Refused | None:
    if reason := policy.notes_not_rebuildable():
        return Refused(reason)
    if not policy.adopt_notes(state.history, event.notes, event.rounds_kept):
        return Refused(
            "the journal holds compaction notes, but this run's strategy does not compact"
        )
    return None


def _adopt_failure(state: RunState, policy: ContextPolicy) -> None:
    """A compaction that failed is not tried again on the same rounds
    (``context/strategies/compaction.py``); nor is it after the rebuild."""
    policy.adopt_failed_compaction(state.history)


def stateful_servers(server_names: list[str], scopes: dict[str, str]) -> list[str]:
    """The servers of this agent whose state a kill takes with it (``scope: task``)."""
    return [name for name in server_names if scopes.get(name) == "task"]


def lost_state_note(servers: list[str]) -> str:
    """The one short note the model reads in the next tool result after a resume."""
    return (
        f"[note: the run was interrupted and resumed; the state of {', '.join(servers)} "
        "(variables, open sessions) is gone: set up again what you still need]"
    )
