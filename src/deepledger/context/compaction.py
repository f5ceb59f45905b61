"""Compaction: older rounds replaced by notes the model writes, once the window is near full.

The request becomes the system prompt, the task, one message of notes on the earlier
work (task goal, confirmed facts, key decisions, open leads), and the last
``keep_rounds`` rounds unchanged. The stored history is never changed: the strategy
remembers its notes and how many rounds they stand for, and picks from the history
like any other strategy, cutting only at round boundaries.

When. Every compaction rewrites the start of the request, so a provider's prompt cache
starts over; between compactions the request only grows at the end and the cache keeps
hitting. Compacting a little every turn would pay the cache break every turn for small
savings. So compaction waits for the brink, and then takes a large bite:

- it is due when the window guard's estimate of the request (the same terms: the
  prompt, the summarize prompt, the reply budget, slack) reaches ``compact_at`` of the
  window (default 0.8);
- it happens only if the rounds it would replace hold at least ``min_saving`` of the
  request's tokens (default 0.25): a smaller saving does not pay for the cache break;
  except when the window guard would otherwise end the loop, where any saving is taken;
- the notes must be shorter than what they replace, so a compaction never grows the
  request.

Who writes the notes is a :class:`NotesWriter`: :class:`ModelNotes` asks a model (the
agent's own, or ``agent.context.summary_llm``'s); the replay (``replay.py``) gives the
same strategy a double that writes notes of a plausible size without a model, so the
decisions it replays are these very ones.

A summary call that fails or comes back empty leaves the request as it was; this is
journaled, and it is not tried again until another round has been added. An endpoint
that rejects the key or the model (401/403/404) is not such a failure: every call of the
run would meet it, so it is raised, and the runner stops the run naming the model
(:class:`NotesModelRejectedError` for ``agent.context.summary_llm``'s).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from deepledger.context.rounds import split_rounds
from deepledger.context.trim import trim_tool_results
from deepledger.errors import ConfigError, EndpointRejectedError, LLMError
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.endpoints import failed_call, routed_events
from deepledger.llm.tokens import TokenCounter, count_messages
from deepledger.llm.usage import Price, UsageLedger
from deepledger.messages import Message, MessageKind, Role
from deepledger.prompts import render
from deepledger.records.events import ClosingCall, Compacted, CompactionFailed, CompactionSkipped
from deepledger.store.journal import Journal

log = logging.getLogger(__name__)

# A tool result is cut to this many characters in the transcript the notes are written
# from: the notes keep facts, not pages, and the summary call must fit the window too.
RESULT_CHARS = 2000
MIN_RESULT_CHARS = 200


class NotesModelRejectedError(EndpointRejectedError):
    """The endpoint of ``agent.context.summary_llm`` refused its key or model."""

    config_key = "agent.context.summary_llm"  # named in the runner's message


@dataclass(frozen=True)
class NoteWriter:
    """The model that writes compaction notes when it is not the agent's own."""

    llm: LLMClient
    settings: GenerationSettings
    price: Price | None = None
    max_context_length: int = 128_000  # its window: the transcript is cut to fit it


# The names of the agent's memory notes (tools/memory.py), read at each compaction.
MemoryIndex = Callable[[], list[str]]


@dataclass(frozen=True)
class NotesJob:
    """What the notes are written from: the head (system prompt, task), the notes of
    earlier compactions, and the rounds the new notes replace."""

    head: Sequence[Message]
    earlier: Message | None
    old: Sequence[Message]
    turn: int
    max_tokens: int  # agent.context.summary_max_tokens
    counter: TokenCounter  # the agent's model's, and its window
    window: int


class NotesWriter(Protocol):
    async def write(self, job: NotesJob) -> tuple[str, str]:
        """(the notes, or "" and why there are none)."""
        ...


@dataclass
class Compaction:
    keep_rounds: int
    compact_at: float = 0.8
    min_saving: float = 0.25
    summary_max_tokens: int = 1024
    # The index goes into every compaction's notes, so the agent knows what it can read
    # back (None: the agent has no memory tool).
    memory_index: MemoryIndex | None = None
    cut_batch: int = 1  # keep_tool_result's batches (trim.py); compaction has its own rule
    name: str = "compaction"
    notes: Message | None = field(default=None, init=False)
    covered: int = field(default=0, init=False)  # rounds of the history the notes replace
    compactions: int = field(default=0, init=False)
    _failed_at_rounds: int = field(default=-1, init=False)

    def __post_init__(self) -> None:
        if self.keep_rounds < 1:
            raise ConfigError(f"agent.context.keep_rounds={self.keep_rounds} must be at least 1.")
        if not 0 < self.compact_at < 1:
            raise ConfigError(
                f"agent.context.compact_at={self.compact_at} must be between 0 and 1 "
                "(a fraction of llm.max_context_length)."
            )
        if not 0 <= self.min_saving < 1:
            raise ConfigError(
                f"agent.context.min_saving={self.min_saving} must be at least 0 and below 1."
            )

    def select(self, history: Sequence[Message]) -> list[Message]:
        head, rounds = split_rounds(history)
        notes = [self.notes] if self.notes is not None else []
        return head + notes + [m for round_ in rounds[self.covered :] for m in round_]

    def due(self, estimated_tokens: int, window: int) -> bool:
        return estimated_tokens >= self.compact_at * window

    def adopt(self, history: Sequence[Message], summary: str, rounds_kept: int) -> None:
        """Take notes a recorded run wrote (``summary``, with ``rounds_kept`` rounds of
        ``history`` after them) as if this strategy had written them."""
        _, rounds = split_rounds(history)
        self.notes = Message.injected(render("compacted.md", summary=summary))
        self.covered = max(0, len(rounds) - rounds_kept)
        self.compactions += 1

    async def compact(
        self,
        history: Sequence[Message],
        *,
        notes_writer: NotesWriter,
        counter: TokenCounter,
        window: int,
        journal: Journal,
        turn: int,
        keep_tool_result: int = -1,
        urgent: bool = False,
    ) -> bool:
        """Replace older rounds with notes; whether the request changed. Sizes are
        those of the request as sent, after ``keep_tool_result``. ``urgent``: the window
        guard would end the loop otherwise, so any saving is worth it."""
        head, rounds = split_rounds(history)
        upto = len(rounds) - self.keep_rounds
        if upto <= self.covered or self._failed_at_rounds == len(rounds):
            return False  # nothing old enough to replace, or this very state just failed
        recent = [m for round_ in rounds[upto:] for m in round_]

        def sent_tokens(notes: Message | None) -> int:
            """The request's size with ``notes`` in place of the older rounds, as sent
            (after keep_tool_result)."""
            picked = head + ([notes] if notes else []) + recent
            return count_messages(counter, trim_tool_results(picked, keep_tool_result))

        before = count_messages(counter, trim_tool_results(self.select(history), keep_tool_result))
        if not urgent and before - sent_tokens(self.notes) < self.min_saving * before:
            journal.write(
                CompactionSkipped(
                    turn=turn,
                    reason="saving below agent.context.min_saving",
                    request_tokens=before,
                    without_older_rounds=sent_tokens(self.notes),
                )
            )
            return False
        old = [m for round_ in rounds[self.covered : upto] for m in round_]
        job = NotesJob(head, self.notes, old, turn, self.summary_max_tokens, counter, window)
        text, why = await notes_writer.write(job)
        notes = Message.injected(self._notes_text(text)) if text else None
        if notes is not None and sent_tokens(notes) >= before:
            notes, why = None, "the notes were not shorter than the rounds they replace"
        if notes is None:
            log.warning("compaction at turn %d left the history as it was: %s", turn, why)
            journal.write(CompactionFailed(turn=turn, reason=why, rounds=upto - self.covered))
            self._failed_at_rounds = len(rounds)
            return False
        replaced = upto - self.covered
        self.notes, self.covered = notes, upto
        self.compactions += 1
        journal.write(
            Compacted(
                turn=turn,
                rounds_replaced=replaced,
                rounds_kept=len(rounds) - upto,
                tokens_before=before,
                tokens_after=sent_tokens(notes),
                notes=text,
            )
        )
        return True

    def _notes_text(self, summary: str) -> str:
        text = render("compacted.md", summary=summary)
        names = self.memory_index() if self.memory_index else []
        if names:
            text += "\n\n" + render("compacted_memory.md", names=", ".join(names))
        return text


def transcript(messages: Sequence[Message], result_chars: int = RESULT_CHARS) -> str:
    """The messages as plain text, tool results cut to ``result_chars`` characters: the
    summary call reads it as a document, so it needs no tool pairing in any protocol."""
    lines = []
    for message in messages:
        if message.kind is MessageKind.TOOL_RESULTS or message.role is Role.TOOL:
            texts = [r.content for r in message.tool_results] or [message.content]
            for text in texts:
                cut = text if len(text) <= result_chars else text[:result_chars] + " [...]"
                lines.append(f"[tool result]\n{cut}")
        elif message.role is Role.ASSISTANT:
            lines.append(f"[agent]\n{message.content}".rstrip())
            lines += [
                f"[agent calls {c.server_name + '.' if c.server_name else ''}{c.name}] "
                f"{c.raw_arguments or c.arguments}"
                for c in message.tool_calls
                # XML calls are written in the text already; native ones travel beside it
                if not (c.raw_arguments and c.raw_arguments in message.content)
            ]
        else:
            lines.append(f"[note to the agent]\n{message.content}")
    return "\n\n".join(lines)


@dataclass(frozen=True)
class ModelNotes:
    """Notes written by a model: the agent's own (``llm``, ``settings``), or the one
    ``writer`` names (``agent.context.summary_llm``). Its call is recorded in ``ledger``
    aside from the loop's and journaled as a ``compaction`` closing call."""

    llm: LLMClient
    settings: GenerationSettings
    journal: Journal
    ledger: UsageLedger
    writer: NoteWriter | None = None

    async def write(self, job: NotesJob) -> tuple[str, str]:
        """(the notes, or "" and why there are none)."""
        # The summary call must fit the window of the model that writes the notes.
        counter, window = job.counter, job.window
        if self.writer is not None:
            counter, window = self.writer.llm.token_counter, self.writer.max_context_length
        prompt = self._prompt(job, counter, window - job.max_tokens)
        return await self._summarize(prompt, job.max_tokens, job.turn)

    def _prompt(self, job: NotesJob, counter: TokenCounter, budget: int) -> str:
        task = next((m.content for m in job.head if m.kind is MessageKind.TASK), "")
        earlier = job.earlier.content if job.earlier is not None else "(none yet)"
        old = job.old
        limit = RESULT_CHARS
        while True:
            text = transcript(old, limit)
            prompt = render("compact.md", task=task, earlier=earlier, transcript=text)
            if counter.count(prompt) < budget or limit <= MIN_RESULT_CHARS:
                return prompt
            limit //= 2

    async def _summarize(self, prompt: str, max_tokens: int, turn: int) -> tuple[str, str]:
        llm, settings, price, journal = self.llm, self.settings, None, self.journal
        if self.writer is not None:
            llm, settings, price = self.writer.llm, self.writer.settings, self.writer.price
        asked = GenerationSettings(
            max_tokens=min(settings.max_tokens, max_tokens),
            temperature=settings.temperature,
            top_p=settings.top_p,
            extra_body=settings.extra_body,
        )
        try:
            response = await llm.generate([Message.task(prompt)], settings=asked)
        except EndpointRejectedError as exc:
            if self.writer is None:
                raise  # the agent's own model: the run stops on it anyway
            raise NotesModelRejectedError(
                str(exc), provider=exc.provider, status=exc.status
            ) from exc
        except LLMError as exc:
            for event in failed_call(turn, exc, "compaction"):  # llm.endpoints: its errors
                journal.write(event)
            return "", f"the summary call failed: {exc}"
        self.ledger.record_aside(response, price)  # the guard's last usage stays the loop's
        closing = ClosingCall(
            purpose="compaction",
            turn=turn,
            message=response.message,
            usage=response.usage,
            stop_reason=response.stop_reason,
        )
        for event in routed_events(closing, response.routing):  # llm.endpoints: where it went
            journal.write(event)
        text = response.text.split("</think>")[-1].strip()
        return (text, "") if text else ("", "the summary came back empty")
