"""The context policy of one conversation: what each request sends, and when to compact.

One :class:`ContextPolicy` per conversation (the main agent's, each sub-agent's, each
attempt a replay rebuilds) owns everything that decides what the model sees:

- the strategy (``agent.context.strategy``: keep every message, a window of rounds, or
  compaction), which picks from the stored history without changing it;
- ``keep_tool_result``, which blanks old tool results in what is sent;
- the window guard's estimate (``guard.py``);
- the compaction decision: due at ``compact_at`` of the window, worth it at
  ``min_saving``, urgent when the guard would otherwise end the loop (``compaction.py``).

Callers ask one thing, :meth:`ContextPolicy.prepare`, and get a :class:`Request`: the
messages to send and what the policy did to them. The turn loop, the answer generator
and the replay all call it; the replay gives it a notes writer that calls no model, so
the decisions it replays are the runtime's own.

The guard counts as the turn loop always has: the history as it stands, the last call's
usage standing for all of it but its newest message (with no call made yet, the whole
history is counted). After a compaction that usage describes a request no longer sent,
so until the next request is built the strategy's pick is counted instead, without it.
A conversation whose calls report no usage at all (a replay of another policy) has the
pick counted every turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deepledger.context.compaction import Compaction, ModelNotes, NotesWriter, NoteWriter
from deepledger.context.guard import ContextWindow, WindowGuard, WindowVerdict
from deepledger.context.pairing import PairingProblem
from deepledger.context.strategy import ContextStrategy, KeepToolResults, RequestBuilder
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.usage import UsageLedger
from deepledger.messages import Message, ToolSpec, Usage, forget_wire
from deepledger.store.journal import Journal


@dataclass(frozen=True)
class Request:
    """One request as the policy prepared it.

    ``messages`` is what to send (empty when the window guard ruled the turn out: then
    ``window`` says why, and the history to continue from). ``left_out``: history
    messages the strategy did not pick; ``blanked``: tool-result messages
    ``keep_tool_result`` blanked; ``prefix_kept``: leading messages shared with the
    request before it (what a prompt cache can reuse); ``prefix_broken_by``: what broke
    that prefix, ``context_strategy`` or ``keep_tool_result`` (None: it held);
    ``repairs``: the pairing breaks fixed; ``compacted``: older rounds were replaced by
    notes while preparing it.
    """

    messages: list[Message]
    left_out: int = 0
    blanked: int = 0
    prefix_kept: int = 0
    prefix_broken_by: str | None = None
    repairs: tuple[PairingProblem, ...] = ()
    window: WindowVerdict | None = None  # the guard's verdict; None for closing calls
    compacted: bool = False

    @property
    def prefix_broken(self) -> bool:
        return self.prefix_broken_by is not None

    @property
    def fits(self) -> bool:
        return self.window is None or self.window.fits


class ContextPolicy:
    """The strategy, ``keep_tool_result``, the window guard and compaction of one
    conversation (see the module docstring).

    ``guard``: without one, no turn is ruled out and nothing is ever due for compaction
    (callers that only build closing requests). ``notes``: who writes compaction notes;
    needed by the compaction strategy only. ``journal``: where compaction is journaled.
    ``usage_reported``: False for a conversation whose calls never report their usage
    (a replay of another policy), whose guard counts the strategy's pick every turn.
    A conversation with a model is made by :meth:`for_model`.
    """

    def __init__(
        self,
        strategy: ContextStrategy | None = None,
        *,
        keep_tool_result: int = -1,
        guard: WindowGuard | None = None,
        notes: NotesWriter | None = None,
        journal: Journal | None = None,
        usage_reported: bool = True,
    ) -> None:
        self.strategy = strategy or KeepToolResults()
        self.keep_tool_result = keep_tool_result
        self.guard = guard
        self._notes = notes
        self._journal = journal if journal is not None else Journal(None)
        self._usage_reported = usage_reported
        self._builder = RequestBuilder(self.strategy, keep_tool_result)
        compaction = self.strategy if isinstance(self.strategy, Compaction) else None
        self._compaction = compaction if notes is not None and guard is not None else None
        self._usage_stale = False  # a compaction came after the last request was built

    @classmethod
    def for_model(
        cls,
        strategy: ContextStrategy | None,
        *,
        keep_tool_result: int,
        llm: LLMClient,
        settings: GenerationSettings,
        window: ContextWindow,
        summary_prompt: str,
        journal: Journal,
        ledger: UsageLedger,
        note_writer: NoteWriter | None = None,
        tools: Sequence[ToolSpec] = (),
    ) -> ContextPolicy:
        """The policy of one conversation with ``llm``: guarded against ``window`` (the
        task's, shared by its agents) with ``settings.max_tokens`` of reply room and
        ``summary_prompt`` as the closing prompt; compaction notes written by
        ``note_writer``'s model, else ``llm``. Their spend goes to ``ledger``, the
        conversation's own, so it counts in the task's cost and budgets. ``tools``: the
        specs each request carries, for what they add to the prompt (the guard's count
        before the first usage)."""
        guard = WindowGuard(
            llm.token_counter,
            window,
            settings.max_tokens,
            summary_prompt,
            tools_tokens=llm.tools_prompt_tokens(tools),
        )
        notes = ModelNotes(llm, settings, journal, ledger, note_writer)
        return cls(
            strategy,
            keep_tool_result=keep_tool_result,
            guard=guard,
            notes=notes,
            journal=journal,
        )

    @property
    def compacts(self) -> bool:
        """Whether this policy can replace older rounds with notes."""
        return self._compaction is not None

    async def prepare(
        self,
        history: Sequence[Message],
        last_usage: Usage | None = None,
        *,
        turn: int = 0,
        closing: Sequence[Message] | None = None,
    ) -> Request:
        """The request for ``history``.

        A turn of the loop (``closing`` None): compact if due, then the window guard's
        verdict (``last_usage``: the call before, None before the first), then the
        request.
        ``turn`` is the turn it asks for, for the journal. A closing call (``closing``:
        its prompts, after the pick, possibly none): the request only; fitting it to
        the window is the caller's (it drops exchanges, with reasons of its own).
        """
        if closing is not None:
            return self._build(history, self.strategy.select(history), closing)
        # The last usage is not of this conversation's requests (after a compaction,
        # or in a replay): only the pick can be counted. Otherwise the history with
        # that usage is, as the loop always counted (see the module docstring).
        recount = self._usage_stale or not self._usage_reported
        usage = None if recount else last_usage
        compacted = await self._compact_if_due(history, usage, turn)
        recount = recount or compacted
        picked = self.strategy.select(history)
        verdict = None
        if self.guard is not None:
            counted = picked if recount else history
            verdict = self.guard.check(history, counted, None if recount else usage)
        if verdict is not None and not verdict.fits:
            return Request([], window=verdict, compacted=compacted)
        self._usage_stale = False
        request = self._build(history, picked, (), window=verdict, compacted=compacted)
        _forget_unsent(history, request.messages)
        return request

    async def compact_now(self, history: Sequence[Message], *, turn: int) -> bool:
        """Replace older rounds with notes, for any saving (the server refused the
        request as too long); whether the request changed. False for a policy that
        does not compact."""
        return await self._compact(history, turn, urgent=True)

    def adopt_notes(self, history: Sequence[Message], summary: str, rounds_kept: int) -> bool:
        """Take the notes a recorded run wrote (a replay of its own policy); False for a
        policy that does not compact."""
        if not isinstance(self.strategy, Compaction):
            return False
        self.strategy.adopt(history, summary, rounds_kept)
        return True

    async def _compact_if_due(
        self, history: Sequence[Message], usage: Usage | None, turn: int
    ) -> bool:
        """Compact when the request nears the window's end; urgently (any saving) when
        the guard would end the loop otherwise."""
        if self._compaction is None or self.guard is None:
            return False
        estimate = self.guard.estimate(self._compaction.select(history), usage).total
        window = self.guard.window.limit
        if not self._compaction.due(estimate, window):
            return False
        return await self._compact(history, turn, urgent=estimate >= window)

    async def _compact(self, history: Sequence[Message], turn: int, *, urgent: bool) -> bool:
        if self._compaction is None or self._notes is None or self.guard is None:
            return False
        changed = await self._compaction.compact(
            history,
            notes_writer=self._notes,
            counter=self.guard.counter,
            window=self.guard.window.limit,
            journal=self._journal,
            turn=turn,
            keep_tool_result=self.keep_tool_result,
            urgent=urgent,
        )
        self._usage_stale = self._usage_stale or changed
        return changed

    def _build(
        self,
        history: Sequence[Message],
        picked: list[Message],
        closing: Sequence[Message],
        *,
        window: WindowVerdict | None = None,
        compacted: bool = False,
    ) -> Request:
        builder = self._builder
        messages = builder(history, closing, picked)
        return Request(
            messages,
            left_out=builder.last_dropped,
            blanked=builder.last_blanked,
            prefix_kept=builder.last_prefix_kept,
            prefix_broken_by=builder.last_prefix_broken_by,
            repairs=tuple(builder.last_repairs),
            window=window,
            compacted=compacted,
        )


def _forget_unsent(history: Sequence[Message], sent: Sequence[Message]) -> None:
    """History messages this turn's request does not send (a blanked result's original,
    rounds the strategy dropped or notes replaced) give back the wire bytes a client
    kept on them (``messages.forget_wire``): none is sent again, and a 300-turn task
    would otherwise hold its whole history twice. One that is sent again after all is
    only encoded again."""
    sending = {id(m) for m in sent}
    for message in history:
        if id(message) not in sending:
            forget_wire(message)
