"""What the model saw, rebuilt from an attempt's journal: each request as the run's
context policy trimmed it, the reply it got, and the whole untrimmed conversation.

No second trimming engine: the history is followed as the replay and a mid-attempt
resume follow it (``context.replay.follow_history``), and each request is built by the
run's own :class:`~deepledger.context.policy.ContextPolicy` (its strategy and
``keep_tool_result`` from the run's configuration), with the run's cuts and compaction
notes adopted from the journal, as ``agent/resume.py`` rebuilds the request builder. A
loop request is the policy's request with no closing prompts (the window guard ruled
on it when it was sent; here only its messages are wanted), a closing call's is the
policy's request with that call's journaled prompts.

What a journal cannot give back is said as a problem and the attempt left out: a
context overflow the server refused (the request it was retried with is not
journaled) and images (journals keep no image data). The tool specs the requests
carried are ``task_started``'s ``tool_specs`` (a journal of an older release has only
their names and digest: its samples carry no ``tools``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepledger.agent.answer import without_unanswered_results
from deepledger.bench.replay import (
    UNREADABLE_CONFIG,
    RecordedRun,
    read_recorded_config,
    recorded_config_source,
)
from deepledger.context.policy import ContextPolicy
from deepledger.context.replay import at_once, follow_history
from deepledger.context.strategies import make_strategy
from deepledger.errors import ConfigError
from deepledger.messages import JSONObject, Message, Role, ToolSpec
from deepledger.records.codec import read_journal
from deepledger.records.events import (
    AssistantTurn,
    ClosingCall,
    Compacted,
    CompactionFailed,
    ContextCut,
    ContextOverflow,
    LLMCall,
    LoopEnded,
    Rollback,
    TaskFinished,
    TaskStarted,
    ToolResults,
)
from deepledger.store.layout import RunLayout
from deepledger.tools.protocols import make_protocol

ANSWER_PURPOSE = "summary"  # the closing call whose reply holds the final answer


@dataclass(frozen=True)
class RunSettings:
    """What rebuilding a run's requests needs of its configuration."""

    context: Any  # ContextConfig
    keep_tool_result: int
    send_back_reasoning: bool = False  # native calls carry their reasoning_content back
    mirothinker: bool = False  # closing requests leave unanswered text results out

    def policy(self) -> ContextPolicy:
        return ContextPolicy(make_strategy(self.context), keep_tool_result=self.keep_tool_result)


def run_settings(run_dir: Path) -> RunSettings:
    """The settings ``run_dir`` ran under: a bench run's ``manifest.json``, else the
    ``.hydra/config.yaml`` of a ``deepledger run`` folder."""
    source = recorded_config_source(run_dir)
    if source is None:
        layout = RunLayout(run_dir)
        raise ConfigError(
            f"{run_dir} has no recorded configuration ({layout.manifest.name} or "
            f"{layout.hydra_config.relative_to(run_dir)}): its requests cannot be rebuilt."
        )
    try:
        config = read_recorded_config(source)
        recorded = RecordedRun.from_config(config)
    except UNREADABLE_CONFIG as exc:
        raise ConfigError(
            f"{run_dir}: the recorded configuration is not one this version reads ({exc})."
        ) from None
    llm, agent = config.get("llm") or {}, config.get("agent") or {}
    return RunSettings(
        recorded.context,
        recorded.keep_tool_result,
        send_back_reasoning=bool(llm.get("send_back_reasoning")),
        mirothinker=agent.get("prompt_profile") == "mirothinker",
    )


@dataclass(frozen=True)
class Exchange:
    """One model call: the request as sent (policy-trimmed) and the kept reply."""

    turn: int
    purpose: str  # "loop", or a closing call's purpose ("summary", ...)
    request: tuple[Message, ...]
    reply: Message


@dataclass
class Trajectory:
    """One attempt's journal, rebuilt. ``conversation``: the untrimmed history (every
    kept reply and whole result) with the answer's closing prompts and reply;
    ``exchanges``: the loop's calls and the answer's, each as the model saw it."""

    path: Path
    protocol: str
    exchanges: list[Exchange] = field(default_factory=list)
    conversation: list[Message] = field(default_factory=list)
    turns: int = 0
    end_reason: str | None = None
    problem: str | None = None  # why it cannot be rebuilt exactly (then left out)
    reasoning_sent: bool = False  # llm.send_back_reasoning: native calls carried it back
    tool_specs: list[ToolSpec] = field(default_factory=list[ToolSpec])  # what requests carried


def rebuild(path: Path, settings: RunSettings) -> Trajectory:
    """``path``'s attempt as the model saw it (a torn last line is not read)."""
    events = read_journal(path)
    started = next((e for e in events if isinstance(e, TaskStarted)), None)
    trajectory = Trajectory(path, started.protocol if started else "xml")
    trajectory.reasoning_sent = settings.send_back_reasoning
    if started is None or started.system_prompt is None:
        trajectory.problem = "the journal holds no task_started with its system prompt"
        return trajectory
    specs = _tool_specs(started.tool_specs or [])
    if specs is None:
        trajectory.problem = "task_started's tool_specs are not name/description/parameters"
        return trajectory
    trajectory.tool_specs = specs
    if started.task_images:
        trajectory.problem = "the task holds images, which journals keep no data of"
        return trajectory
    _Walk(trajectory, settings, started).run(events[events.index(started) + 1 :])
    return trajectory


def _tool_specs(journaled: list[JSONObject]) -> list[ToolSpec] | None:
    """The journaled specs as the requests carried them (None: not readable)."""
    try:
        return [
            ToolSpec(str(spec["name"]), str(spec["description"]), dict(spec["parameters"]))
            for spec in journaled
        ]
    except (KeyError, TypeError, ValueError):
        return None


class _Walk:
    """The history and the policy of one attempt, brought forward event by event."""

    def __init__(self, trajectory: Trajectory, settings: RunSettings, started: TaskStarted):
        self.t = trajectory
        self.settings = settings
        self.policy = settings.policy()
        self.protocol = make_protocol(started.protocol)
        self.history = [Message.system(started.system_prompt or ""), Message.task(started.task)]
        self.pending: tuple[int, tuple[Message, ...]] | None = None  # a loop call's request
        self.answer: tuple[list[Message], Message] | None = None  # closing prompts, reply

    def run(self, events: list[Any]) -> None:
        for event in events:
            if isinstance(event, AssistantTurn) and self.pending is not None:
                turn, request = self.pending
                self.t.exchanges.append(Exchange(turn, "loop", request, event.message))
                self.pending = None
            if isinstance(event, ToolResults) and any(r.images for r in event.results):
                self.t.problem = "a tool result held images, which journals keep no data of"
                return
            if follow_history(self.history, event, self.protocol):
                continue
            if isinstance(event, LLMCall):
                prepared = at_once(self.policy.prepare(self.history, closing=()))
                self.pending = (event.turn, tuple(prepared.messages))
            elif isinstance(event, Rollback):
                self.pending = None  # the reply was refused: no kept reply for that request
            elif isinstance(event, ContextCut):
                self.policy.adopt_cut(event)
            elif isinstance(event, Compacted):
                if not self.policy.adopt_notes(self.history, event.notes, event.rounds_kept):
                    self.t.problem = "compaction notes under a strategy that does not compact"
                    return
            elif isinstance(event, CompactionFailed):
                self.policy.adopt_failed_compaction(self.history)
            elif isinstance(event, ContextOverflow):
                self.t.problem = "the server refused a request as too long (context_overflow)"
                return
            elif isinstance(event, ClosingCall) and event.purpose != "compaction":
                self._closing(event)
            elif isinstance(event, LoopEnded | TaskFinished):
                self.t.turns, self.t.end_reason = event.turns, str(event.end_reason)
        self.t.conversation = list(self.history)
        if self.answer is not None:
            prompts, reply = self.answer
            self.t.conversation += [*prompts, reply]

    def _closing(self, event: ClosingCall) -> None:
        prompts, reply = list(event.prompts), event.message
        if prompts and prompts[-1].role is Role.ASSISTANT:
            # A prefill: the reply is the model's continuation of it, one reply in a sample.
            prefill = prompts.pop()
            reply = Message.assistant(
                prefill.content + reply.content, reply.tool_calls, reply.reasoning, reply.thinking
            )
        request = at_once(self.policy.prepare(self.history, closing=prompts)).messages
        if self.settings.mirothinker:
            request = without_unanswered_results(request, len(prompts))
        exchange = Exchange(event.turn or self.t.turns, event.purpose, tuple(request), reply)
        if event.purpose == ANSWER_PURPOSE:
            # A later summary call (the box was missing) replaces the one before it.
            self.t.exchanges = [e for e in self.t.exchanges if e.purpose != ANSWER_PURPOSE]
            self.t.exchanges.append(exchange)
            self.answer = (prompts, reply)


def journal_of(run_dir: Path, relative: str | None) -> Path | None:
    """A result's journal path, under ``run_dir`` (None: not recorded or not there)."""
    if not relative:
        return None
    path = run_dir / relative
    return path if path.is_file() else None
