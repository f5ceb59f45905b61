"""The context policy of one conversation: what each request sends, and when to compact.

One :class:`ContextPolicy` per conversation (the main agent's, each sub-agent's, each
attempt a replay rebuilds) owns everything that decides what the model sees:

- the strategy (``agent.context.strategy``: keep every message, a window of rounds, or
  compaction), which picks from the stored history without changing it;
- ``keep_tool_result``, which blanks old tool results in what is sent;
- batched cuts (``agent.context.cut_batch``): ``keep_tool_result`` and ``round_window``
  cut several results or rounds at once, so the prompt cache keeps hitting in between,
  and at once, down to the limit, when the window guard would otherwise end the loop;
  each cut is journaled (``context_cut``) with the tokens it freed and the cache it broke;
- the window guard's estimate (``guard.py``);
- the compaction decision: due at ``compact_at`` of the window, worth it at
  ``min_saving``, urgent when the guard would otherwise end the loop
  (``strategies/compaction.py``).

Callers ask one thing, :meth:`ContextPolicy.prepare`, and get a :class:`Request`: the
messages to send and what the policy did to them. The turn loop, the answer generator
and the replay all call it; the replay gives it a notes writer that calls no model, so
the decisions it replays are the runtime's own.

The guard counts as the turn loop always has: the history as it stands, the last call's
usage standing for all of it but its newest message (with no call made yet, the whole
history is counted). After a compaction that usage describes a request no longer sent,
so until the next request is built the strategy's pick (as ``keep_tool_result`` trims
it) is counted instead, without it. A conversation whose calls report no usage at all
(a replay of another policy) has the trimmed pick counted every turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from deepledger.context.compaction import ModelNotes, NotesWriter, NoteWriter
from deepledger.context.guard import ContextWindow, WindowGuard, WindowVerdict, drop_last_exchange
from deepledger.context.pairing import PairingProblem
from deepledger.context.rounds import split_rounds
from deepledger.context.strategies.keep_tool_results import KeepToolResults
from deepledger.context.strategy import ContextStrategy, RequestBuilder
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.tokens import CharCounter, count_messages
from deepledger.llm.usage import UsageLedger
from deepledger.messages import Message, ToolSpec, Usage, forget_wire
from deepledger.records.events import ContextCut
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
    notes while preparing it; ``cut``: the cut this request made (journaled as it is),
    None when it cut nothing new; ``stable_prefix``: the leading messages no later cut
    or compaction will change, where a provider's cache breakpoint pays off longest.
    """

    messages: list[Message]
    left_out: int = 0
    blanked: int = 0
    prefix_kept: int = 0
    prefix_broken_by: str | None = None
    repairs: tuple[PairingProblem, ...] = ()
    window: WindowVerdict | None = None  # the guard's verdict; None for closing calls
    compacted: bool = False
    cut: ContextCut | None = None
    stable_prefix: int = 0

    @property
    def prefix_broken(self) -> bool:
        return self.prefix_broken_by is not None

    @property
    def fits(self) -> bool:
        return self.window is None or self.window.fits


CUT_COUNTER = CharCounter()  # the journal's estimate of what a cut freed and broke


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
        # Compaction needs notes to write and a window to measure against.
        self._compacts = self.strategy.writes_notes and notes is not None and guard is not None
        self._usage_stale = False  # a compaction came after the last request was built
        # (results blanked, rounds left out) of the history when the last loop request
        # was built: a request that cuts more has made a cut.
        self._cut_state: tuple[int, int] | None = None
        self._sizes: dict[int, tuple[Message, int]] = {}  # id -> (message, its tokens)

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
        return self._compacts

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
            # Recounted, the request is what will be sent: the pick as trimmed.
            counted = self._builder.trimmer(picked, history) if recount else history
            verdict = self.guard.check(history, counted, None if recount else usage)
        urgent = verdict is not None and not verdict.fits and self._cut_pending(history)
        if urgent and self.guard is not None:
            # Cut down to the limits now rather than end the loop: the batch the
            # schedule would have waited for is what stands in the way.
            floors = self._floors()
            self._cut_now(history)
            picked = self.strategy.select(history)
            verdict = self.guard.check(history, self._builder.trimmer(picked, history), None)
            if not verdict.fits:  # no use: as if not tried (nothing journaled it)
                self._set_floors(floors)
        if verdict is not None and not verdict.fits:
            return Request([], window=verdict, compacted=compacted)
        self._usage_stale = False
        request = self._build(history, picked, (), window=verdict, compacted=compacted)
        cut = self._journal_cut(history, request, turn, urgent=urgent)
        _forget_unsent(history, request.messages)
        return replace(request, cut=cut)

    async def compact_now(self, history: Sequence[Message], *, turn: int) -> bool:
        """Replace older rounds with notes, for any saving (the server refused the
        request as too long); whether the request changed. False for a policy that
        does not compact."""
        return await self._compact(history, turn, urgent=True)

    def adopt_cut(self, cut: ContextCut) -> None:
        """Take a cut a recorded run journaled (a replay of its own policy, a resume):
        its totals become the floor the schedule counts on from (the cuts the schedule
        made follow from the history anyway; an urgent one does not)."""
        self._builder.trimmer.adopt(cut.blanked_total)
        self.strategy.adopt_cut(cut.dropped_total)

    def _cut_pending(self, history: Sequence[Message]) -> bool:
        """Whether a batch is piling up that an urgent cut could take out now."""
        pending = self._builder.trimmer.pending(history) + self.strategy.pending(history)
        return pending > 0

    def _cut_now(self, history: Sequence[Message]) -> None:
        self._builder.trimmer.cut_now(history)
        self.strategy.cut_now(history)

    def _floors(self) -> tuple[int, ...]:
        """What an urgent cut changes: the trimmer's floor and high mark, the strategy's."""
        trimmer = self._builder.trimmer
        return (trimmer.floor, trimmer.high, *self.strategy.marks())

    def _set_floors(self, floors: tuple[int, ...]) -> None:
        trimmer = self._builder.trimmer
        trimmer.floor, trimmer.high = floors[:2]
        self.strategy.restore_marks(floors[2:])

    def _cuts(self, history: Sequence[Message]) -> tuple[int, int]:
        """(the history's results blanked, its rounds left out) as a request sends it."""
        return self._builder.trimmer.due(history), self.strategy.dropped(history)

    def _journal_cut(
        self, history: Sequence[Message], request: Request, turn: int, *, urgent: bool
    ) -> ContextCut | None:
        """Journal the cut ``request`` made, if it made one. Before the first request of
        this policy (a fresh attempt, or one resumed mid-way) the state before is the
        history without its newest exchange, as the request before it saw it."""
        before = self._cut_state
        if before is None:
            before = self._cuts(drop_last_exchange(history)[0])
        now = self._cuts(history)
        self._cut_state = now
        if now[0] <= before[0] and now[1] <= before[1]:
            return None
        blanked = self._builder.trimmer.blanked_between(history, before[0], now[0])
        freed = sum(self._size(old) - self._size(new) for old, new in blanked)
        if now[1] > before[1]:
            _, rounds = split_rounds(history)
            freed += sum(self._size(m) for round_ in rounds[before[1] : now[1]] for m in round_)
        cut = ContextCut(
            turn=turn,
            results_blanked=max(0, now[0] - before[0]),
            rounds_dropped=max(0, now[1] - before[1]),
            blanked_total=now[0],
            dropped_total=now[1],
            tokens_freed=freed,
            uncached_tokens=sum(self._size(m) for m in request.messages[request.prefix_kept :]),
            urgent=urgent,
        )
        self._journal.write(cut)
        return cut

    def _size(self, message: Message) -> int:
        """``message``'s tokens as the journal states them: estimated at four characters
        a token (tokenizing every result once for the journal would cost the loop more
        than the rest of its trimming; a replay counts exactly), once per message."""
        entry = self._sizes.get(id(message))
        if entry is None or entry[0] is not message:
            entry = self._sizes[id(message)] = (message, count_messages(CUT_COUNTER, [message]))
        return entry[1]

    def adopt_notes(self, history: Sequence[Message], summary: str, rounds_kept: int) -> bool:
        """Take the notes a recorded run wrote (a replay of its own policy); False for a
        policy that does not compact."""
        return self.strategy.adopt_notes(history, summary, rounds_kept)

    def adopt_failed_compaction(self, history: Sequence[Message]) -> None:
        """A compaction a recorded run tried on ``history`` failed: as in the run, it is
        not tried again until another round has been added."""
        self.strategy.adopt_failed_compaction(history)

    def notes_not_rebuildable(self) -> str | None:
        """Why the strategy's notes cannot be rebuilt from the journal (a resume then
        starts the attempt over); None when they can."""
        return self.strategy.notes_not_rebuildable()

    async def _compact_if_due(
        self, history: Sequence[Message], usage: Usage | None, turn: int
    ) -> bool:
        """Compact when the request nears the window's end; urgently (any saving) when
        the guard would end the loop otherwise."""
        if not self._compacts or self.guard is None:
            return False
        estimate = self.guard.estimate(self.strategy.select(history), usage).total
        window = self.guard.window.limit
        if not self.strategy.compaction_due(estimate, window):
            return False
        return await self._compact(history, turn, urgent=estimate >= window)

    async def _compact(self, history: Sequence[Message], turn: int, *, urgent: bool) -> bool:
        if not self._compacts or self._notes is None or self.guard is None:
            return False
        changed = await self.strategy.compact(
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
            stable_prefix=self._stable_prefix(messages),
        )

    def _stable_prefix(self, messages: Sequence[Message]) -> int:
        """How many leading ``messages`` no later cut or compaction changes: the head
        when rounds are cut or replaced after it; before the oldest result still shown
        when ``keep_tool_result`` blanks; the whole request when nothing is ever cut."""
        stable = self.strategy.stable_prefix(messages)
        first_shown = self._builder.trimmer.last_first_shown  # of the request just built
        if self.keep_tool_result != -1 and first_shown is not None:
            stable = min(stable, first_shown)
        return stable


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
