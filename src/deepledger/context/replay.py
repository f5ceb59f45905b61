"""Policy replay: what a finished run's requests would have cost under another policy.

No model is called. Each attempt's journal is read back into the history the agent
had at every model call (its system prompt, the task, every kept reply, every tool
result, what the window guard dropped), and each call's request is rebuilt with the
policy under study (``agent.context.*``, ``agent.keep_tool_result``) by the same
:class:`RequestBuilder` the runtime uses. Per call we count the request's tokens, the
part it shares with the previous request (what a prompt cache can serve), and what the
policy left out or blanked.

Assumptions, stated because they bound what a replay can say:

- The model's replies are the recorded ones whatever the policy: a real run under
  another policy would have taken other turns. Replay compares the cost of carrying
  the same work, not what the model would have done.
- When the window guard would have fired under the policy, that attempt's replay stops
  there (the run would have ended); the turn is reported.
- A compaction the recorded run made is replayed with its recorded notes. One it did
  not make is simulated: notes of ``min(summary_max_tokens, a tenth of what they
  replace)`` tokens, and a summary call reading the replaced rounds.
- Tokens are counted with the run's model's counter (the GGUF vocabulary for
  ``llm=local``, tiktoken otherwise) plus a few tokens of framing per message; the
  replay of the recorded policy against the recorded counts states the error.
- Journals keep no image data (only each image's type, source, size and digest), so an
  image counts as the runtime's fixed estimate (``IMAGE_TOKENS``), as the guard does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepledger.context.compaction import Compaction
from deepledger.context.guard import WindowEstimate, check_window, drop_last_exchange
from deepledger.context.strategy import RequestBuilder, make_strategy, split_rounds
from deepledger.errors import ConfigError
from deepledger.llm.tokens import PER_MESSAGE_OVERHEAD, TokenCounter, count_messages
from deepledger.llm.usage import Price
from deepledger.messages import (
    ImagePart,
    Message,
    MessageKind,
    Role,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    Usage,
)
from deepledger.prompts import render
from deepledger.store.run_store import read_jsonl
from deepledger.tools.protocol import make_protocol

SUMMARY_CALL_OVERHEAD = 300  # the compaction prompt's own words, in tokens


@dataclass(frozen=True)
class Policy:
    """One context policy: ``agent.context`` settings plus ``agent.keep_tool_result``."""

    name: str
    context: Any  # a ContextConfig (or any object with its fields)
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


@dataclass
class PolicyReplay:
    policy: Policy
    calls: list[ReplayedCall] = field(default_factory=list)
    guard_fired: list[tuple[str, int]] = field(default_factory=list)  # (journal, turn)
    compactions: int = 0

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
        read = self.cached_tokens if cached else 0
        return price.cost(Usage(self.input_tokens, self.output_tokens, cache_read_tokens=read))

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
    events: list[dict[str, Any]]
    system_prompt: str
    task: str
    protocol: str
    task_images: tuple[ImagePart, ...] = ()  # placeholders: journals keep no image data


RUN_JOURNAL = "journal.jsonl"  # `deepledger run`'s one journal, at its folder's root


def journal_paths(run_dir: Path) -> list[Path]:
    """A bench run's attempt journals (``tasks/*/attempt-*.jsonl``), else a ``deepledger
    run`` folder's ``journal.jsonl``."""
    journals = sorted(
        path
        for path in (run_dir / "tasks").glob("*/attempt-*.jsonl")
        if ".interrupted-" not in path.name  # a killed run's, redone in its own journal
    )
    if not journals and (run_dir / RUN_JOURNAL).is_file():
        journals = [run_dir / RUN_JOURNAL]
    if not journals:
        raise ConfigError(
            f"{run_dir} has no journals to replay: neither tasks/*/attempt-*.jsonl "
            f"(deepledger bench) nor {RUN_JOURNAL} (deepledger run)."
        )
    return journals


def attempts(run_dir: Path) -> Iterator[RecordedAttempt]:
    """Every finished or interrupted attempt journal of ``run_dir``."""
    for path in journal_paths(run_dir):
        events = read_jsonl(path)  # a line a crash cut short is skipped
        started = next((e for e in events if e["event"] == "task_started"), None)
        if started is None:
            continue  # the attempt never began its loop
        if "system_prompt" not in started:
            raise ConfigError(
                f"{path} was written by an older deepledger whose journals do not record the "
                "system prompt; replay needs a run made by this version."
            )
        name = f"{path.parent.name}/{path.stem}"
        protocol = started.get("protocol", "xml")
        images = decode_images(started.get("task_images"))
        yield RecordedAttempt(
            name, events, started["system_prompt"], started["task"], protocol, images
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
        self.window = max_context_length
        self.max_tokens = max_tokens
        self.summary_prompt = summary_prompt
        self.recorded_policy = recorded_policy
        self.strategy = make_strategy(policy.context)
        self.builder = RequestBuilder(self.strategy, policy.keep_tool_result)
        self.protocol = make_protocol(attempt.protocol)
        self.history = [
            Message.system(attempt.system_prompt),
            Message.task(attempt.task, attempt.task_images),
        ]
        self._sizes: dict[int, tuple[Message, int]] = {}  # id -> (message, its tokens)

    def run(self) -> None:
        for event in self.attempt.events:
            kind = event["event"]
            if kind == "assistant":
                self.history.append(decode_message(event["message"]))
            elif kind == "tool_results":
                calls = [ToolCall(**c) for c in event["calls"]]
                results = [decode_result(r) for r in event["results"]]
                self.history.append(self.protocol.results_message(results, calls))
            elif kind == "window_exhausted":
                self.history = list(drop_last_exchange(self.history)[0])
            elif kind == "compacted" and self.recorded_policy:
                self._adopt_notes(event)
            elif kind == "llm_call":
                if not self._call(event, "loop", ()):
                    return  # the guard would have ended this attempt here
            elif kind == "closing_call" and event.get("purpose") == "compaction":
                if self.recorded_policy:  # its notes call, as the provider counted it
                    self._recorded_call(event)
            elif kind == "closing_call":
                prompts = [decode_message(m) for m in event.get("prompts") or ()]
                self._call(event, event.get("purpose", "closing"), prompts)

    def _recorded_call(self, event: dict[str, Any]) -> None:
        usage = event.get("usage") or {}
        self.result.calls.append(
            ReplayedCall(
                self.attempt.name,
                event.get("turn") or 0,
                "compaction",
                usage.get("input_tokens") or 0,
                0,
                usage.get("output_tokens") or 0,
                None,
            )
        )

    def _call(self, event: dict[str, Any], purpose: str, closing: Sequence[Message]) -> bool:
        turn = event.get("turn") or 0
        if purpose == "loop" and not self.recorded_policy:  # the recorded run is the truth
            if isinstance(self.strategy, Compaction):
                self._simulate_compaction(turn)
            if not self._fits():
                self.result.guard_fired.append((self.attempt.name, turn))
                return False
        request = self.builder(self.history, closing=closing)
        sizes = [self._size(m) for m in request]
        usage = event.get("usage") or {}
        self.result.calls.append(
            ReplayedCall(
                journal=self.attempt.name,
                turn=turn,
                purpose=purpose,
                input_tokens=sum(sizes),
                cached_tokens=sum(sizes[: self.builder.last_prefix_kept]),
                output_tokens=usage.get("output_tokens") or 0,
                recorded_input_tokens=usage.get("input_tokens") if self.recorded_policy else None,
                left_out_messages=self.builder.last_dropped - len(closing),
                blanked_tool_results=self.builder.last_blanked,
            )
        )
        return True

    def _fits(self) -> bool:
        """The window guard's verdict on the request this policy would send."""
        selected = self.strategy.select(self.history)
        return check_window(
            selected,
            last_usage=None,
            summary_prompt=self.summary_prompt,
            max_context_length=self.window,
            max_tokens=self.max_tokens,
            counter=self.counter,
        ).fits

    def _size(self, message: Message) -> int:
        # Keyed by identity (messages repeat in every request), holding the message so
        # its id is never reused by another one.
        entry = self._sizes.get(id(message))
        if entry is None:
            entry = self._sizes[id(message)] = (message, count_messages(self.counter, [message]))
        return entry[1]

    def _adopt_notes(self, event: dict[str, Any]) -> None:
        strategy = self.strategy
        if not isinstance(strategy, Compaction):
            return
        _, rounds = split_rounds(self.history)
        strategy.notes = Message.injected(render("compacted.md", summary=event.get("notes", "")))
        strategy.covered = max(0, len(rounds) - int(event.get("rounds_kept", 0)))
        self.result.compactions += 1

    def _simulate_compaction(self, turn: int) -> None:
        strategy = self.strategy
        assert isinstance(strategy, Compaction)
        request = strategy.select(self.history)
        # The guard's own formula, from the sizes counted once per message here.
        estimate = WindowEstimate(
            prior_tokens=sum(self._size(m) for m in request[:-1]),
            newest_message_tokens=self._size(request[-1]),
            summary_prompt_tokens=self.counter.count(self.summary_prompt),
            reply_budget=self.max_tokens,
        ).total
        head, rounds = split_rounds(self.history)
        upto = len(rounds) - strategy.keep_rounds
        if not strategy.due(estimate, self.window) or upto <= strategy.covered:
            return
        old = [m for r in rounds[strategy.covered : upto] for m in r]
        old_tokens = sum(self._size(m) for m in old)
        urgent = not self._fits()  # the guard would end the loop: any saving goes
        if not urgent and old_tokens < strategy.min_saving * sum(self._size(m) for m in request):
            return
        notes_tokens = min(strategy.summary_max_tokens, max(50, old_tokens // 10))
        placeholder = " ".join(["note"] * max(1, notes_tokens - 2 * PER_MESSAGE_OVERHEAD))
        strategy.notes = Message.injected(render("compacted.md", summary=placeholder))
        strategy.covered = upto
        self.result.compactions += 1
        reading = old_tokens + SUMMARY_CALL_OVERHEAD + self._size(head[-1])
        self.result.calls.append(
            ReplayedCall(self.attempt.name, turn, "compaction", reading, 0, notes_tokens, None)
        )


def decode_message(data: dict[str, Any]) -> Message:
    """A message as the journal wrote it (``journal.to_jsonable``), back as a Message."""
    return Message(
        role=Role(data["role"]),
        kind=MessageKind(data["kind"]),
        content=data.get("content") or "",
        tool_calls=tuple(ToolCall(**c) for c in data.get("tool_calls") or ()),
        tool_results=tuple(decode_result(r) for r in data.get("tool_results") or ()),
        reasoning=data.get("reasoning"),
        images=decode_images(data.get("images")),
        thinking=tuple(ThinkingBlock.from_record(t) for t in data.get("thinking") or ()),
    )


def decode_result(data: dict[str, Any]) -> ToolResult:
    """A tool result as the journal wrote it; journals from before images load too."""
    return ToolResult(**(data | {"images": decode_images(data.get("images"))}))


def decode_images(records: Sequence[dict[str, Any]] | None) -> tuple[ImagePart, ...]:
    """Placeholders for the images a journal names (it keeps no image data): they are
    counted like any image (``IMAGE_TOKENS``) when a request is rebuilt."""
    return tuple(ImagePart(r.get("mime_type", ""), "", r.get("source", "")) for r in records or ())


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
