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


class ToolResultTrimmer:
    """``trim_tool_results`` for one conversation, remembering what it blanked.

    A turn's request blanks every old result again; over hundreds of turns building
    those copies would dominate the loop's own cost, so each blanked copy is built once
    and reused for as long as its original is in the history.
    """

    def __init__(self, keep: int, placeholder: str = OMITTED_PLACEHOLDER) -> None:
        if keep < -1:
            raise ValueError(f"keep_tool_result must be -1, 0 or positive, not {keep}")
        self.keep = keep
        self.placeholder = placeholder
        self._blanked: dict[int, tuple[Message, Message]] = {}  # id(original) -> pair
        self.last_blanked = 0

    def __call__(self, messages: Sequence[Message]) -> list[Message]:
        trimmed = list(messages)
        self.last_blanked = 0  # how many tool-result messages the last call blanked
        if self.keep == -1:
            return trimmed
        candidates = _tool_result_positions(trimmed)
        to_blank = candidates[: max(0, len(candidates) - self.keep)]
        for i in to_blank:
            trimmed[i] = self._blank(trimmed[i])
        self.last_blanked = len(to_blank)
        return trimmed

    def _blank(self, message: Message) -> Message:
        cached = self._blanked.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        blanked = _blank(message, self.placeholder)
        self._blanked[id(message)] = (message, blanked)  # holding the original pins its id
        return blanked


def _tool_result_positions(messages: list[Message]) -> list[int]:
    first_user = next((i for i, m in enumerate(messages) if m.role is Role.USER), None)
    return [
        i
        for i, m in enumerate(messages)
        # The first user message is the task even if a caller mislabelled it.
        if m.kind is MessageKind.TOOL_RESULTS and i != first_user
    ]


def _blank(message: Message, placeholder: str) -> Message:
    # Images go with the text: a blanked result's images are its bulk (some 765 tokens each).
    results = tuple(replace(r, content=placeholder, images=()) for r in message.tool_results)
    content = placeholder if message.content else ""
    return replace(message, content=content, tool_results=results, images=())
