"""``keep_tool_result``: blank old tool results in the copy sent to the model.

The stored history is never changed; :func:`trim_tool_results` returns a new list. Only
messages of kind ``TOOL_RESULTS`` are candidates — the task, the system prompt, the
model's replies and the prompts the runtime injects (summarize, post-mortem) are never
blanked, whatever N is. A blanked message keeps its place, role and tool-call ids (so
every call still has its result on the wire); its content is replaced and its images
are dropped.

- ``keep = -1``: everything is sent as it is
- ``keep =  0``: every tool result is blanked
- ``keep =  N``: the newest N tool-result messages keep their content

One tool-result message is one turn's results, in both protocols, so N counts turns.

Batched cuts (``agent.context.cut_batch = K``): every blanked result changes the
request from its place on, so a provider's prompt cache can serve only what comes
before it. Blanking one more result every turn (K = 1, the reference runtime's way)
moves that point every turn; with K > 1 results pile up until K more than N are shown,
and then the oldest K are blanked at once, so the request only grows at its end
between cuts. Which results are blanked follows from the history alone
(:func:`batched_cut`), so a resumed attempt blanks what the uninterrupted one did; only
an urgent cut (the window guard would otherwise end the loop) moves the schedule, and it
is journaled (``context_cut``) so a replay or a resume can take it back
(:meth:`ToolResultTrimmer.adopt`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from deepledger.messages import Message, MessageKind, Role

OMITTED_PLACEHOLDER = "[Tool result omitted to save context.]"


def trim_tool_results(
    messages: Sequence[Message], keep: int, placeholder: str = OMITTED_PLACEHOLDER
) -> list[Message]:
    return ToolResultTrimmer(keep, placeholder)(messages)


def batched_cut(total: int, keep: int, batch: int, floor: int = 0) -> int:
    """How many of the oldest of ``total`` items are cut when at most ``keep`` are kept,
    cut ``batch`` at a time, ``floor`` of them cut already (an urgent cut): none until
    ``keep + batch`` are shown, then down to ``keep``. ``batch = 1`` keeps the newest
    ``keep`` on every call."""
    over = total - floor - keep
    if over < batch:
        return floor
    return floor + over // batch * batch


class ToolResultTrimmer:
    """``trim_tool_results`` for one conversation, remembering what it blanked.

    A turn's request blanks every old result again; over hundreds of turns building
    those copies would dominate the loop's own cost, so each blanked copy is built once
    and reused for as long as its original is in the history, and the history's results
    are found once (the history only grows at its end; one that does not is read anew).

    ``batch``: blank ``batch`` results at a time (``agent.context.cut_batch``, see the
    module docstring). The results counted are the history's, so a strategy that leaves
    rounds out does not move the schedule; the request's results blanked are those
    among the history's oldest. Batched, what was blanked stays blanked when the window
    guard takes the newest exchange back, rather than a whole batch coming back into
    the closing call.
    """

    def __init__(self, keep: int, placeholder: str = OMITTED_PLACEHOLDER, batch: int = 1) -> None:
        if keep < -1:
            raise ValueError(f"keep_tool_result must be -1, 0 or positive, not {keep}")
        if batch < 1:
            raise ValueError(f"cut_batch must be at least 1, not {batch}")
        self.keep = keep
        self.batch = batch
        self.placeholder = placeholder
        self._blanked: dict[int, tuple[Message, Message]] = {}  # id(original) -> pair
        self._copies: set[int] = set()  # ids of the blanked copies
        self.last_blanked = 0
        # Where in the last request the oldest result still shown is (None: none is).
        self.last_first_shown: int | None = None
        self.floor = 0  # the history's results an urgent cut (or an adopted one) blanked
        self.high = 0  # batched: the most results a request blanked (kept on)
        # The history's tool-result positions as last read: the list read, how far, and
        # the message there (a history that no longer has it is read anew).
        self._positions: list[int] = []
        self._read = 0
        self._read_last: Message | None = None
        self._first_user: int | None = None
        self._old: set[int] = set()  # ids of the history's oldest results, blanked
        self._old_count = 0

    def due(self, history: Sequence[Message]) -> int:
        """How many of the history's oldest tool-result messages are blanked now."""
        if self.keep == -1:
            return 0
        return batched_cut(len(self._results(history)), self.keep, self.batch, self.floor)

    def pending(self, history: Sequence[Message]) -> int:
        """How many more results an urgent cut would blank (down to ``keep``)."""
        if self.keep == -1:
            return 0
        return max(0, len(self._results(history)) - self.keep - self.due(history))

    def cut_now(self, history: Sequence[Message]) -> None:
        """Blank down to ``keep`` at once, and count the schedule's batches from here."""
        if self.keep != -1:
            self.floor = max(self.floor, len(self._results(history)) - self.keep)

    def adopt(self, blanked_total: int) -> None:
        """Take a cut a recorded run made: its oldest ``blanked_total`` results blanked."""
        self.floor = max(self.floor, blanked_total)

    def __call__(
        self, messages: Sequence[Message], history: Sequence[Message] | None = None
    ) -> list[Message]:
        """``messages`` with the old results blanked; ``history``: what they were picked
        from (None: ``messages`` themselves)."""
        trimmed = list(messages)
        self.last_blanked = 0  # how many tool-result messages the last call blanked
        self.last_first_shown = None
        if self.keep == -1:
            return trimmed
        if history is None:
            history = trimmed
        positions = self._results(history)
        cut = self.due(history)
        if self.batch > 1:
            cut = max(cut, min(self.high, len(positions)))
            self.high = cut
        old = self._oldest(history, positions, cut)
        first_user = _first_user(trimmed)
        tool_results = MessageKind.TOOL_RESULTS  # looked up once: an enum member's lookup
        # is a descriptor call, and this loop reads every message of every request
        blanked, copies = self._blanked, self._copies
        for i, message in enumerate(trimmed):
            if message.kind is not tool_results or i == first_user:
                continue
            if id(message) in old:
                pair = blanked.get(id(message))
                trimmed[i] = pair[1] if pair and pair[0] is message else self._blank(message)
                self.last_blanked += 1
            elif self.last_first_shown is None and id(message) not in copies:
                self.last_first_shown = i
        return trimmed

    def blanked_between(
        self, history: Sequence[Message], start: int, stop: int
    ) -> list[tuple[Message, Message]]:
        """(original, blanked copy) of the history's tool results ``start`` to ``stop``
        (oldest first): what a cut from ``start`` to ``stop`` blanked."""
        positions = self._results(history)[start:stop]
        return [(history[i], self._blank(history[i])) for i in positions]

    def _results(self, history: Sequence[Message]) -> list[int]:
        """The positions of ``history``'s tool-result messages, read on from where the
        last call stopped when it is the same history grown at its end."""
        read = self._read
        if read > len(history) or (read and history[read - 1] is not self._read_last):
            self._positions, read, self._first_user = [], 0, None
            self._old, self._old_count = set(), 0
        for i in range(read, len(history)):
            message = history[i]
            if self._first_user is None and message.role is Role.USER:
                self._first_user = i  # the task, even if a caller mislabelled it
            elif message.kind is MessageKind.TOOL_RESULTS:
                self._positions.append(i)
        self._read = len(history)
        self._read_last = history[-1] if history else None
        return self._positions

    def _oldest(self, history: Sequence[Message], positions: list[int], cut: int) -> set[int]:
        """The ids of the history's oldest ``cut`` results, grown as cuts are."""
        cut = min(cut, len(positions))
        if cut < self._old_count:
            self._old, self._old_count = set(), 0
        for i in positions[self._old_count : cut]:
            self._old.add(id(history[i]))
        self._old_count = cut
        return self._old

    def _blank(self, message: Message) -> Message:
        cached = self._blanked.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        blanked = _blank(message, self.placeholder)
        self._blanked[id(message)] = (message, blanked)  # holding the original pins its id
        self._copies.add(id(blanked))
        return blanked


def _first_user(messages: Sequence[Message]) -> int | None:
    return next((i for i, m in enumerate(messages) if m.role is Role.USER), None)


def _blank(message: Message, placeholder: str) -> Message:
    # Images go with the text: a blanked result's images are its bulk (some 765 tokens each).
    results = tuple(replace(r, content=placeholder, images=()) for r in message.tool_results)
    content = placeholder if message.content else ""
    return replace(message, content=content, tool_results=results, images=())
