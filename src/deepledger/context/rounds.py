"""Rounds: the unit a context strategy keeps or drops whole.

A round is the user message that prompted a reply, if there is one (the task, an
injected prompt), the model's reply, and the results of that reply's tool calls. In a
research loop most rounds start at the reply, since the previous round's results are
what prompt it. Cutting between rounds never separates a call from its result, in
either protocol. The head before the first round (the system prompt and the task) is
always kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from deepledger.messages import Message, MessageKind, Role


def split_rounds(history: Sequence[Message]) -> tuple[list[Message], list[list[Message]]]:
    """(the head that is always kept: system prompts and the task, the rounds after it)."""
    head: list[Message] = []
    index = 0
    while index < len(history) and history[index].role is Role.SYSTEM:
        head.append(history[index])
        index += 1
    if index < len(history) and history[index].kind is MessageKind.TASK:
        head.append(history[index])
        index += 1
    rounds: list[list[Message]] = []
    for message in history[index:]:
        if not rounds or _starts_round(message, rounds[-1]):
            rounds.append([message])
        else:
            rounds[-1].append(message)
    return head, rounds


def _starts_round(message: Message, current: list[Message]) -> bool:
    if message.is_tool_results:
        return False  # results belong to the reply before them
    if message.role is Role.ASSISTANT:
        return any(m.role is Role.ASSISTANT for m in current)
    return True  # a user message (task, injected prompt) or another system message
