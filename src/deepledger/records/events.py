"""Every event a journal holds, one class each, in one union told apart by ``event``.

A journal line is ``{"ts": UTC ISO time, "event": name, ...the class's fields}``.
A field with a default may be left out by a writer, and is then not written (a reader
gets the default): the lines stay as short as the runtime always wrote them, and a
journal of an older release, which lacks fields added since, still reads.

To add a field: add it here (with a default if older journals lack it). The writers
pass it, the readers read it, ``records.schema.json`` (``python -m
deepledger.records.schema``) tells the report page about it.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field
from typing_extensions import TypedDict

from deepledger.messages import EndReason, ImagePart, JSONObject, StopReason, Usage
from deepledger.records.base import Record
from deepledger.records.parts import (
    ImagesField,
    MessageField,
    MessagesField,
    ToolCallsField,
    ToolResultsField,
)


class Event(Record):
    """What every journal line has. ``ts`` is stamped by the journal as it writes;
    each class narrows ``event`` to its own name."""

    ts: str = ""
    event: str


# -- the journal itself -----------------------------------------------------------------
class JournalOpened(Event):
    """The first line of a journal since typed records: the layout it is written in. A
    journal without it is of schema 1 (every release before)."""

    event: Literal["journal_opened"] = "journal_opened"
    schema_version: int


# -- a run of the loop: start and end ---------------------------------------------------
class RetryStarted(Event):
    event: Literal["retry_started"] = "retry_started"
    task_id: str
    attempt: int
    retry: int
    carried_post_mortems: int = 0
    final_retry: bool = False
    # The run's settings (store/run_config.py config_id): a resume rebuilds the retry from
    # this journal only under the same ones (None: an older release did not record it).
    config_id: str | None = None


class Resumed(Event):
    """The retry was rebuilt from this journal after a kill and goes on at
    ``resumed_at_turn`` (benchmark.execution.resume=turn). ``replayed_reply``: the last
    kept reply's tool calls had not all finished, so they run again. ``at_closing``: the
    loop had ended (answered, out of turns or looping) after turn ``resumed_at_turn``, so
    no turn is asked: the closing calls come next. ``lost_tool_state``: the servers whose
    state the kill took (a ``scope: task`` server), which the next tool result tells the
    model about. ``cycle_state``: how the loop check's replies were rebuilt
    (``rebuilt``: every reply's key, rolled-back ones too, exactly)."""

    event: Literal["resumed"] = "resumed"
    resumed_at_turn: int
    replayed_reply: bool = False
    at_closing: bool = False
    lost_tool_state: list[str] = Field(default_factory=list[str])
    cycle_state: str = "rebuilt"


class ResumeFellBack(Event):
    """benchmark.execution.resume=turn could not rebuild the retry from the journal a
    killed run left (``reason``): it starts from its first turn, the old journal set
    aside as ``.interrupted-*`` and its calls counted once."""

    event: Literal["resume_fell_back"] = "resume_fell_back"
    reason: str


class TaskStarted(Event):
    """The task as sent, with what a replay needs to rebuild every request."""

    event: Literal["task_started"] = "task_started"
    task: str
    task_images: ImagesField = Field(default_factory=list[ImagePart])
    tools: list[str] = Field(default_factory=list[str])
    system_prompt: str | None = None  # None: an older release did not record it
    protocol: str = "xml"
    # A digest of the tool specs the requests carry (native function calls, or the
    # tools a template writes): a resume refuses to continue with other tools.
    tool_specs_sha256: str | None = None
    # Those specs, each ``{"name", "description", "parameters"}`` (the digest's form),
    # once a journal: a training export gives them back as the samples' ``tools``. None:
    # the requests carry none (the XML protocol's schemas are in the system prompt), or
    # an older release did not record them.
    tool_specs: list[JSONObject] | None = None


class LoopEnded(Event):
    event: Literal["loop_ended"] = "loop_ended"
    end_reason: EndReason
    turns: int


class TaskFinished(Event):
    event: Literal["task_finished"] = "task_finished"
    answer: str | None
    provenance: str
    end_reason: EndReason
    end_detail: str | None = None
    turns: int
    tool_calls: int
    rollbacks: int
    usage: Usage
    cost: int | float | None


class SubagentFinished(Event):
    """A sub-agent's run ended; ``journal``: the path of its own (None: in memory)."""

    event: Literal["subagent_finished"] = "subagent_finished"
    agent: str
    journal: str | None
    turns: int
    usage: Usage


class ToolServerUnavailable(Event):
    event: Literal["tool_server_unavailable"] = "tool_server_unavailable"
    server: str
    reason: str


class FirstCallSkipped(Event):
    event: Literal["first_call_skipped"] = "first_call_skipped"
    tool: str
    reason: str


# -- turns ------------------------------------------------------------------------------
class LLMCall(Event):
    """One model call of the loop, with what the context strategy did to its request."""

    event: Literal["llm_call"] = "llm_call"
    turn: int
    messages: int = 0
    left_out_messages: int = 0
    prefix_kept_messages: int = 0
    prefix_broken: bool = False
    prefix_broken_by: str | None = None
    blanked_tool_results: int = 0
    forced_call: bool = False
    usage: Usage
    stop_reason: StopReason | None = None
    # With llm.endpoints (llm/endpoints.py): the server that answered, the reply's
    # latency, and the servers of the HTTP attempts that failed before it.
    endpoint: str | None = None
    seconds: float | None = None
    failed_endpoints: list[str] = Field(default_factory=list)


class ReplyCut(Event):
    """A reply cut at its reply budget and asked again with more room (``agent/cut.py``,
    agent.recovery.cut_reply_attempts): the cut reply, what it used (in the totals), the
    budget it was cut at and the one the next attempt gets."""

    event: Literal["reply_cut"] = "reply_cut"
    turn: int | None = None  # the loop's next turn; None: a closing call
    purpose: str | None = None  # a closing call's (as in closing_call); None: the loop's
    attempt: int
    max_tokens: int
    next_max_tokens: int
    message: MessageField
    usage: Usage


class LLMCallFailed(Event):
    """With llm.endpoints: a model call that failed on every attempt (a loop call: the
    task ends in error; a closing call: as its caller decides), the servers those attempts
    went to, for their error counts, and how many were refused unsent."""

    event: Literal["llm_call_failed"] = "llm_call_failed"
    turn: int | None = None  # the loop's turn, or the notes'; None: another closing call
    purpose: str | None = None  # a closing call's (as in closing_call); None: the loop's
    failed_endpoints: list[str]
    unsent: int = 0  # every server drained, each with its probe in flight
    error: str


class EndpointMoved(Event):
    """A task attempt's calls went to another of ``llm.endpoints``: the one before was
    drained after repeated failures, or came back and the attempt returned to it."""

    event: Literal["endpoint_moved"] = "endpoint_moved"
    turn: int | None = None  # None: before a closing call (the summary, a post-mortem)
    from_endpoint: str
    to_endpoint: str
    reason: str


class AssistantTurn(Event):
    event: Literal["assistant"] = "assistant"
    turn: int
    message: MessageField
    boxed: str | None = None


class ToolResults(Event):
    """The calls of a turn and their results, in order (results of malformed calls
    come after those of the calls that ran)."""

    event: Literal["tool_results"] = "tool_results"
    turn: int
    calls: ToolCallsField
    results: ToolResultsField


class ToolCallRepaired(Event):
    """A call the model wrote wrong, run as it meant it (``tools/repair.py``,
    agent.recovery): which call, what was repaired (``python_arguments``:
    tool-python's arguments; ``unknown_server``: a server the agent lacks, the tool's
    name unique), the tool named and the tool run, and what changed."""

    event: Literal["tool_call_repaired"] = "tool_call_repaired"
    turn: int
    call_id: str
    kind: str
    written: str  # server.tool (or tool) as the model wrote it
    ran: str  # server.tool that ran
    detail: str


class PairingProblem(TypedDict):
    index: int
    kind: str
    call_id: str


class PairingRepaired(Event):
    event: Literal["pairing_repaired"] = "pairing_repaired"
    turn: int
    problems: list[PairingProblem]


class Rollback(Event):
    """A reply thrown away and asked again (``agent/rollback.py``): its text, and the
    whole message when the text alone is not all the loop check compares (native tool
    calls, thinking): a resume rebuilds the reply's cycle key from it exactly."""

    event: Literal["rollback"] = "rollback"
    turn: int
    reason: str
    detail: str
    reply: str
    message: MessageField | None = None


class RollbackCapReached(Event):
    event: Literal["rollback_cap_reached"] = "rollback_cap_reached"
    turn: int


class RollbackRepeated(Event):
    event: Literal["rollback_repeated"] = "rollback_repeated"
    turn: int
    reason: str


# -- why a loop stops -------------------------------------------------------------------
class Looping(Event):
    """The newest replies went round a cycle of ``cycle_length`` turns, repeated
    ``repeats`` times after its first round (agent.main_agent.max_cycle_repeats), which
    began at ``since_turn``. ``with_rollbacks``: the cycle was found among all replies,
    rolled-back ones included (a rolled-back reply's turn is the one it was asked for).
    Journals before cycles were looked for hold only ``turn`` and ``repeats``: the same
    turn, over and over."""

    event: Literal["looping"] = "looping"
    turn: int
    repeats: int
    cycle_length: int = 1
    since_turn: int | None = None
    with_rollbacks: bool = False


class LimitReached(Event):
    event: Literal["limit_reached"] = "limit_reached"
    turn: int
    kind: str
    limit: int | float  # a count (max_turns) stays an int, as it was written
    spent: int | float


class WindowExhausted(Event):
    """The window guard dropped the newest exchange: by our ``estimate``, or because
    the provider refused the request (``provider_said``). ``purpose``: the closing call
    it was for (none: the loop's)."""

    event: Literal["window_exhausted"] = "window_exhausted"
    turn: int
    purpose: str | None = None
    limit: int | None
    dropped_messages: int
    estimate: int | None = None
    provider_said: str | None = None


class ContextOverflow(Event):
    """The provider refused a request as too long; ``action``: compacted, ended_loop,
    retry or gave_up."""

    event: Literal["context_overflow"] = "context_overflow"
    turn: int
    purpose: str
    provider_said: str
    estimated_tokens: int
    limit: int | None
    server_limit: int | None
    action: str
    dropped_messages: int


# -- trimming ---------------------------------------------------------------------------
class ContextCut(Event):
    """``keep_tool_result`` blanked older tool results, or ``round_window`` left older
    rounds out, in the request of ``turn`` (agent.context.cut_batch at a time, or all at
    once when ``urgent``: the window guard would have ended the loop otherwise).
    ``blanked_total`` / ``dropped_total``: the history's oldest results blanked and
    rounds left out from then on (what a resume or a replay takes back).
    ``tokens_freed``: what the cut took out of the request; ``uncached_tokens``: the
    request after the prefix it shares with the one before, which a prompt cache cannot
    serve (the cache the cut broke, and the newest message); both estimated at four
    characters a token (``deepledger replay`` counts exactly)."""

    event: Literal["context_cut"] = "context_cut"
    turn: int
    results_blanked: int = 0
    rounds_dropped: int = 0
    blanked_total: int = 0
    dropped_total: int = 0
    tokens_freed: int = 0
    uncached_tokens: int = 0
    urgent: bool = False


# -- compaction -------------------------------------------------------------------------
class Compacted(Event):
    event: Literal["compacted"] = "compacted"
    turn: int
    rounds_replaced: int
    rounds_kept: int
    tokens_before: int
    tokens_after: int
    notes: str


class CompactionSkipped(Event):
    event: Literal["compaction_skipped"] = "compaction_skipped"
    turn: int
    reason: str
    request_tokens: int
    without_older_rounds: int


class CompactionFailed(Event):
    event: Literal["compaction_failed"] = "compaction_failed"
    turn: int
    reason: str
    rounds: int


# -- finalization -----------------------------------------------------------------------
class ClosingCall(Event):
    """A model call outside the loop: the summary, a boxed retry, the post-mortem, a
    sub-agent's report, or compaction notes (``turn`` and no prompts: the notes)."""

    event: Literal["closing_call"] = "closing_call"
    purpose: str
    turn: int | None = None
    prompts: MessagesField = Field(default_factory=list)
    message: MessageField
    prefill: str | None = None
    usage: Usage
    stop_reason: StopReason | None = None
    # With llm.endpoints, as in llm_call.
    endpoint: str | None = None
    seconds: float | None = None
    failed_endpoints: list[str] = Field(default_factory=list)


class ClosingCallSkipped(Event):
    event: Literal["closing_call_skipped"] = "closing_call_skipped"
    purpose: str
    reason: str
    task_alone: bool
    estimated_tokens: int
    limit: int | None


class ClosingCallFailed(Event):
    """Written by releases before refused closing calls were retried; read only."""

    event: Literal["closing_call_failed"] = "closing_call_failed"
    purpose: str
    reason: str


class AnswerSkipped(Event):
    event: Literal["answer_skipped"] = "answer_skipped"
    reason: str


class FinalAnswer(Event):
    event: Literal["final_answer"] = "final_answer"
    answer: str | None
    provenance: str


class PostMortem(Event):
    event: Literal["post_mortem"] = "post_mortem"
    text: str | None
    failure_type: str | None
    prefilled: bool = False


# -- tools ------------------------------------------------------------------------------
class ExtractionCall(Event):
    """A model call a scraping tool made to extract what was asked from a page."""

    event: Literal["extraction_call"] = "extraction_call"
    url: str
    part: int
    parts: int
    page_chars: int
    model: str
    usage: Usage
    stop_reason: StopReason | None = None
    reply_chars: int
    # On a page's first part: which reader served it (jina | direct | corpus), why the
    # Jina reader did not when the page was fetched directly after it failed, and the
    # model's custom headers that were not sent (web/model_input.py). Left out by
    # journals of earlier releases.
    reader: str | None = None
    jina_error: str | None = None
    dropped_headers: list[str] | None = None


class UnknownEvent(Event):
    """A line with an event name this release does not know (a newer release wrote
    it): kept with its fields, so a report still shows it."""

    model_config = Record.model_config | {"extra": "allow"}
    event: str

    @property
    def data(self) -> JSONObject:
        return dict(self.__pydantic_extra__ or {})


JournalEvent = Annotated[
    JournalOpened
    | RetryStarted
    | Resumed
    | ResumeFellBack
    | TaskStarted
    | LoopEnded
    | TaskFinished
    | SubagentFinished
    | ToolServerUnavailable
    | FirstCallSkipped
    | LLMCall
    | ReplyCut
    | LLMCallFailed
    | EndpointMoved
    | AssistantTurn
    | ToolResults
    | ToolCallRepaired
    | PairingRepaired
    | Rollback
    | RollbackCapReached
    | RollbackRepeated
    | Looping
    | LimitReached
    | WindowExhausted
    | ContextOverflow
    | ContextCut
    | Compacted
    | CompactionSkipped
    | CompactionFailed
    | ClosingCall
    | ClosingCallSkipped
    | ClosingCallFailed
    | AnswerSkipped
    | FinalAnswer
    | PostMortem
    | ExtractionCall,
    Field(discriminator="event"),
]

# Each class by its event name.
EVENT_CLASSES: dict[str, type[Event]] = {
    cls.model_fields["event"].default: cls for cls in get_args(get_args(JournalEvent)[0])
}
