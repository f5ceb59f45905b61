"""Compaction's notes: what they are written from, who writes them, and the transcript.

The compaction strategy (``strategies/compaction.py``) decides when older rounds are
replaced and by how much; the notes that replace them come from a :class:`NotesWriter`:
:class:`ModelNotes` asks a model (the agent's own, or ``agent.context.summary_llm``'s);
the replay (``replay.py``) gives the same strategy a double that writes notes of a
plausible size without a model, so the decisions it replays are these very ones.

An endpoint that rejects the key or the model (401/403/404) is not a failed summary call:
every call of the run would meet it, so it is raised, and the runner stops the run
naming the model (:class:`NotesModelRejectedError` for ``agent.context.summary_llm``'s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from deepledger.errors import EndpointRejectedError, LLMError
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.endpoints import RouterEvents
from deepledger.llm.tokens import TokenCounter
from deepledger.llm.usage import Price, UsageLedger
from deepledger.messages import Message, MessageKind, Role
from deepledger.prompts import render
from deepledger.records.events import ClosingCall
from deepledger.store.journal import Journal

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
            RouterEvents(journal.write).failed(turn, exc, "compaction")  # llm.endpoints
            return "", f"the summary call failed: {exc}"
        self.ledger.record_aside(response, price)  # the guard's last usage stays the loop's
        closing = ClosingCall(
            purpose="compaction",
            turn=turn,
            message=response.message,
            usage=response.usage,
            stop_reason=response.stop_reason,
        )
        RouterEvents(journal.write).answered(closing, response.routing)  # llm.endpoints
        text = response.text.split("</think>")[-1].strip()
        return (text, "") if text else ("", "the summary came back empty")
