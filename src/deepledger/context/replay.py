"""Policy replay: what a finished run's requests would have cost under another policy.

No model is called. Each attempt's journal is read back into the history the agent
had at every model call (its system prompt, the task, every kept reply, every tool
result, what the window guard dropped), and each call's request is rebuilt with the
policy under study (``agent.context.*``, ``agent.keep_tool_result``) by the same
:class:`~deepledger.context.policy.ContextPolicy` the runtime uses: its window guard,
its compaction decisions, its requests. Per call we count the request's tokens, the
part it shares with the previous request (what a prompt cache can serve), and what the
policy left out or blanked.

Assumptions, stated because they bound what a replay can say:

- The model's replies are the recorded ones whatever the policy: a real run under
  another policy would have taken other turns. Replay compares the cost of carrying
  the same work, not what the model would have done.
- When the window guard would have fired under the policy, that attempt's replay stops
  there (the run would have ended); the turn is reported.
- A cut the recorded run journaled (``context_cut``) is taken back for its own policy,
  so an urgent one (the guard would have ended the loop) is replayed; another policy
  decides its cuts, urgent ones included, as the runtime does.
- A compaction the recorded run made is replayed with its recorded notes. One it did
  not make is decided as the runtime decides it, and the notes are simulated
  (:class:`SimulatedNotes`): ``min(summary_max_tokens, a tenth of what they replace)``
  tokens, and a summary call reading the replaced rounds.
- Tokens are counted with the run's model's counter (the GGUF vocabulary for
  ``llm=local``, tiktoken otherwise) plus a few tokens of framing per message; the
  replay of the recorded policy against the recorded counts states the error.
- Journals keep no image data (only each image's type, source, size and digest), so an
  image counts as the runtime's fixed estimate (``IMAGE_TOKENS``), as the guard does.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from deepledger.config import ContextConfig
from deepledger.context.compaction import NotesJob
from deepledger.context.guard import ContextWindow, WindowGuard, drop_last_exchange
from deepledger.context.policy import ContextPolicy
from deepledger.context.strategies import make_strategy
from deepledger.errors import ConfigError
from deepledger.llm.tokens import PER_MESSAGE_OVERHEAD, TokenCounter, count_messages
from deepledger.llm.usage import Price
from deepledger.messages import ImagePart, Message, Usage
from deepledger.records.codec import read_journal
from deepledger.records.events import (
    AssistantTurn,
    ClosingCall,
    Compacted,
    ContextCut,
    Event,
    LLMCall,
    TaskStarted,
    ToolResults,
    WindowExhausted,
)
from deepledger.store.layout import ATTEMPT_JOURNALS, RUN_JOURNAL, RunLayout
from deepledger.tools.protocols import ToolProtocol, make_protocol

SUMMARY_CALL_OVERHEAD = 300  # the compaction prompt's own words, in tokens


@dataclass(frozen=True)
class Policy:
    """One context policy: ``agent.context`` settings plus ``agent.keep_tool_result``."""

    name: str
    context: ContextConfig
    keep_tool_result: int


@dataclass
class ReplayedCall:
    journal: str
    turn: int
    purpose: str  # loop | summary | post_mortem | boxed | compaction
    input_tokens: int
    cached_tokens: int  # shared with the previous request of the same conversation
    output_tokens: int
    recorded_input_tokens: int | None  # what the provider counted, for the recorded policy
    left_out_messages: int = 0
    blanked_tool_results: int = 0
    prefix_broken: bool = False  # the request changed before its end: a cut, a compaction


@dataclass
class PolicyReplay:
    policy: Policy
    calls: list[ReplayedCall] = field(default_factory=list)
    guard_fired: list[tuple[str, int]] = field(default_factory=list)  # (journal, turn)
    compactions: int = 0
    cuts: int = 0  # requests that blanked results or left rounds out beyond the one before

    @property
    def input_tokens(self) -> int:
        return sum(c.input_tokens for c in self.calls)

    @property
    def cached_tokens(self) -> int:
        return sum(c.cached_tokens for c in self.calls)

    @property
    def output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.calls)

    def cost(self, price: Price | None, cached: bool) -> float | None:
        if price is None:
            return None
        # call by call: a long-context tier applies to a call's prompt, not to the sum
        return sum(
            price.cost(
                Usage(
                    c.input_tokens,
                    c.output_tokens,
                    cache_read_tokens=c.cached_tokens if cached else 0,
                )
            )
            for c in self.calls
        )

    def per_turn(self, recorded: bool = False) -> list[float]:
        """Mean prompt tokens of the loop calls at each turn, over the attempts: as
        replayed, or (``recorded``) as the provider counted them."""
        by_turn: dict[int, list[int]] = {}
        for c in self.calls:
            tokens = c.recorded_input_tokens if recorded else c.input_tokens
            if c.purpose == "loop" and tokens:
                by_turn.setdefault(c.turn, []).append(tokens)
        return [round(sum(v) / len(v), 1) for _, v in sorted(by_turn.items())]


@dataclass
class RecordedAttempt:
    """One attempt's journal, decoded."""

    name: str
    events: list[Event]
    system_prompt: str
    task: str
    protocol: str
    task_images: tuple[ImagePart, ...] = ()  # placeholders: journals keep no image data


def journal_paths(run_dir: Path) -> list[Path]:
    """A bench run's attempt journals (``tasks/*/attempt-*.jsonl``; not those a killed run
    left, redone in their own journal), else a ``deepledger run`` folder's
    ``journal.jsonl``."""
    layout = RunLayout(run_dir)
    journals = layout.attempt_journals()
    if not journals and layout.run_journal.is_file():
        journals = [layout.run_journal]
    if not journals:
        raise ConfigError(
            f"{run_dir} has no journals to replay: neither {ATTEMPT_JOURNALS} "
            f"(deepledger bench) nor {RUN_JOURNAL} (deepledger run)."
        )
    return journals


def attempts(run_dir: Path) -> Iterator[RecordedAttempt]:
    """Every finished or interrupted attempt journal of ``run_dir``."""
    for path in journal_paths(run_dir):
        events = read_journal(path)  # a line a crash cut short is skipped
        started = next((e for e in events if isinstance(e, TaskStarted)), None)
        if started is None:
            continue  # the attempt never began its loop
        if started.system_prompt is None:
            raise ConfigError(
                f"{path} was written by an older deepledger whose journals do not record the "
                "system prompt; replay needs a run made by this version."
            )
        name = f"{path.parent.name}/{path.stem}"
        images = tuple(started.task_images)  # placeholders: journals keep no image data
        yield RecordedAttempt(
            name, events, started.system_prompt, started.task, started.protocol, images
        )


def replay(
    recorded: Sequence[RecordedAttempt],
    policy: Policy,
    *,
    counter: TokenCounter,
    max_context_length: int,
    max_tokens: int,
    summary_prompt: str,
    recorded_policy: bool = False,
) -> PolicyReplay:
    """Rebuild every request of ``recorded`` under ``policy``. With ``recorded_policy``
    the recorded input counts are kept beside the replayed ones, and recorded
    compactions are replayed with their notes."""
    result = PolicyReplay(policy)
    for attempt in recorded:
        _Conversation(
            attempt,
            policy,
            result,
            counter=counter,
            max_context_length=max_context_length,
            max_tokens=max_tokens,
            summary_prompt=summary_prompt,
            recorded_policy=recorded_policy,
        ).run()
    return result


class _Conversation:
    def __init__(
        self,
        attempt: RecordedAttempt,
        policy: Policy,
        result: PolicyReplay,
        *,
        counter: TokenCounter,
        max_context_length: int,
        max_tokens: int,
        summary_prompt: str,
        recorded_policy: bool,
    ) -> None:
        self.attempt = attempt
        self.result = result
        self.counter = counter
        self.recorded_policy = recorded_policy
        guard = WindowGuard(counter, ContextWindow(max_context_length), max_tokens, summary_prompt)
        # The recorded policy's compactions are the recorded ones (adopted from the
        # journal); another policy's are decided here, with notes made up.
        notes = None if recorded_policy else SimulatedNotes(attempt.name, self._size, result)
        self.policy = ContextPolicy(
            make_strategy(policy.context),
            keep_tool_result=policy.keep_tool_result,
            guard=guard,
            notes=notes,
            usage_reported=False,  # the recorded usage is of the recorded policy's requests
        )
        self.protocol = make_protocol(attempt.protocol)
        self.history = [
            Message.system(attempt.system_prompt),
            Message.task(attempt.task, attempt.task_images),
        ]
        self._sizes: dict[int, tuple[Message, int]] = {}  # id -> (message, its tokens)

    def run(self) -> None:
        for event in self.attempt.events:
            if follow_history(self.history, event, self.protocol):
                continue
            if isinstance(event, ContextCut) and self.recorded_policy:
                self.policy.adopt_cut(event)
            elif isinstance(event, Compacted) and self.recorded_policy:
                if self.policy.adopt_notes(self.history, event.notes, event.rounds_kept):
                    self.result.compactions += 1
            elif isinstance(event, LLMCall):
                if not self._call(event.turn, event.usage, "loop", ()):
                    return  # the guard would have ended this attempt here
            elif isinstance(event, ClosingCall) and event.purpose == "compaction":
                if self.recorded_policy:  # its notes call, as the provider counted it
                    self._recorded_call(event)
            elif isinstance(event, ClosingCall):
                self._call(event.turn or 0, event.usage, event.purpose, list(event.prompts))

    def _recorded_call(self, event: ClosingCall) -> None:
        usage = event.usage
        self.result.calls.append(
            ReplayedCall(
                self.attempt.name,
                event.turn or 0,
                "compaction",
                usage.input_tokens,
                0,
                usage.output_tokens,
                None,
            )
        )

    def _call(self, turn: int, usage: Usage, purpose: str, closing: Sequence[Message]) -> bool:
        # The recorded run's own decisions are the truth for it: only the request is
        # rebuilt. Under another policy, the policy decides each loop turn.
        decides = purpose == "loop" and not self.recorded_policy
        prepared = self.policy.prepare(
            self.history, None, turn=turn, closing=None if decides else closing
        )
        request = at_once(prepared)
        self.result.compactions += request.compacted
        self.result.cuts += request.cut is not None
        if not request.fits:
            self.result.guard_fired.append((self.attempt.name, turn))
            return False
        sizes = [self._size(m) for m in request.messages]
        self.result.calls.append(
            ReplayedCall(
                journal=self.attempt.name,
                turn=turn,
                purpose=purpose,
                input_tokens=sum(sizes),
                cached_tokens=sum(sizes[: request.prefix_kept]),
                output_tokens=usage.output_tokens,
                recorded_input_tokens=usage.input_tokens if self.recorded_policy else None,
                left_out_messages=request.left_out,
                blanked_tool_results=request.blanked,
                prefix_broken=request.prefix_broken,
            )
        )
        return True

    def _size(self, message: Message) -> int:
        # Keyed by identity (messages repeat in every request), holding the message so
        # its id is never reused by another one.
        entry = self._sizes.get(id(message))
        if entry is None:
            entry = self._sizes[id(message)] = (message, count_messages(self.counter, [message]))
        return entry[1]


def follow_history(history: list[Message], event: Event, protocol: ToolProtocol) -> bool:
    """Bring ``history`` (the agent's, as it stood before ``event``) past one journaled
    event: a kept reply is appended, a turn's results as ``protocol`` writes them, an
    exchange the window guard dropped is dropped. Whether ``event`` was one of these.
    The replay and a mid-attempt resume (``agent/resume.py``) read journals this way."""
    if isinstance(event, AssistantTurn):
        history.append(event.message)
    elif isinstance(event, ToolResults):
        history.append(protocol.results_message(list(event.results), list(event.calls)))
    elif isinstance(event, WindowExhausted):
        history[:] = drop_last_exchange(history)[0]
    else:
        return False
    return True


class SimulatedNotes:
    """The notes writer of a replay: no model is asked. The notes are filler of
    ``min(summary_max_tokens, a tenth of what they replace)`` tokens (at least 50), and
    the summary call that would have written them, reading the replaced rounds, is
    added to the replay's calls."""

    def __init__(self, journal: str, size: Callable[[Message], int], result: PolicyReplay) -> None:
        self.journal = journal
        self.size = size  # a message's tokens, counted once per message
        self.result = result

    async def write(self, job: NotesJob) -> tuple[str, str]:
        old_tokens = sum(self.size(m) for m in job.old)
        notes_tokens = min(job.max_tokens, max(50, old_tokens // 10))
        filler = " ".join(["note"] * max(1, notes_tokens - 2 * PER_MESSAGE_OVERHEAD))
        reading = old_tokens + SUMMARY_CALL_OVERHEAD + self.size(job.head[-1])
        self.result.calls.append(
            ReplayedCall(self.journal, job.turn, "compaction", reading, 0, notes_tokens, None)
        )
        return filler, ""


T = TypeVar("T")


def at_once(step: Coroutine[object, None, T]) -> T:
    """The result of ``step``, which never waits: a replay calls no model (its notes
    writer answers at once), so a policy's ``prepare`` finishes in its first step, with
    no event loop (replay runs inside one in tests, and outside one from the CLI)."""
    try:
        step.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    step.close()
    raise RuntimeError("a replayed request waited on something, but replay calls no model")


def counting_error(replayed: PolicyReplay) -> dict[str, float] | None:
    """How far the replayed counts of the recorded policy are from what the provider
    counted: the mean and largest relative error per call, and the error of the total."""
    pairs = [
        (c.input_tokens, c.recorded_input_tokens)
        for c in replayed.calls
        if c.recorded_input_tokens and c.purpose != "compaction"
    ]
    if not pairs:
        return None
    errors = [abs(mine - theirs) / theirs for mine, theirs in pairs]
    total_mine, total_theirs = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    return {
        "calls_compared": len(pairs),
        "mean_relative_error": sum(errors) / len(errors),
        "max_relative_error": max(errors),
        "total_relative_error": (total_mine - total_theirs) / total_theirs,
    }
