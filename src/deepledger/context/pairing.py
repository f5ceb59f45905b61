"""The pairing invariant: every tool call has its result, every result its call.

A reply's calls are answered by the tool-results message right after it (one per reply,
parallel calls together). OpenAI-compatible servers reject a history that breaks this
with HTTP 400, and a model shown results for calls it cannot see is misled even where
the wire would accept them. :func:`pairing_problems` finds every break;
:func:`repair_pairing` fixes them deterministically, so a strategy that cuts history in
the wrong place can never send a broken request:

- a results message with no reply before it (its reply was cut away) is dropped;
- a native result whose id no call of the reply before it has is dropped (a results
  message left empty goes too). XML results are text: a result there may have no call,
  because malformed tool markup is answered with a notice of its own;
- a call with no result gets an "interrupted" error result, added to the results message
  after it, or in a new one. The newest reply is the exception when nothing follows it
  but user prompts: the loop ended before its calls ran (max turns, the window guard),
  and the closing prompts are sent after it as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from deepledger.messages import Message, Role, ToolResult

INTERRUPTED = "[No result: this call was interrupted before it ran.]"


class Break(StrEnum):
    ORPHAN_RESULTS = "orphan_results"  # a results message with no reply before it
    RESULT_WITHOUT_CALL = "result_without_call"  # a native result no call asked for
    CALL_WITHOUT_RESULT = "call_without_result"  # a call nothing answered


@dataclass(frozen=True)
class PairingProblem:
    """One break of the invariant: where (message index), what, and which call id."""

    index: int
    kind: Break
    call_id: str = ""


def pairing_problems(messages: Sequence[Message], start: int = 0) -> list[PairingProblem]:
    """Every break of the invariant in ``messages`` at index ``start`` or later; empty
    when the history is sound. (A caller that knows ``messages[:start]`` was sound and
    unchanged since, with its last reply at ``start`` or later, checks only the rest.)"""
    problems: list[PairingProblem] = []
    last_reply = last_reply_index(messages)
    for index in range(start, len(messages)):
        message = messages[index]
        if message.is_tool_results:
            reply = messages[index - 1] if index else None
            if reply is None or reply.role is not Role.ASSISTANT:
                problems.append(PairingProblem(index, Break.ORPHAN_RESULTS))
                continue
            called = {c.id for c in reply.tool_calls}
            if message.role is Role.TOOL:
                problems += [
                    PairingProblem(index, Break.RESULT_WITHOUT_CALL, r.call_id)
                    for r in message.tool_results
                    if r.call_id not in called
                ]
        elif message.role is Role.ASSISTANT and message.tool_calls:
            following = messages[index + 1] if index + 1 < len(messages) else None
            answered = (
                {r.call_id for r in following.tool_results}
                if following is not None and following.is_tool_results
                else set()
            )
            if following is not None and not following.is_tool_results and index == last_reply:
                continue  # the loop ended before these calls ran; closing prompts follow
            if following is None and index == last_reply:
                continue  # a request never ends here, but a history being built does
            problems += [
                PairingProblem(index, Break.CALL_WITHOUT_RESULT, c.id)
                for c in message.tool_calls
                if c.id not in answered
            ]
    return problems


def repair_pairing(messages: Sequence[Message]) -> tuple[list[Message], list[PairingProblem]]:
    """``messages`` with every break fixed (see the module docstring), and the breaks found.

    Sound input comes back as an equal list, and repairing twice changes nothing more.
    """
    problems = pairing_problems(messages)
    if not problems:
        return list(messages), []
    orphans = {p.index for p in problems if p.kind is Break.ORPHAN_RESULTS}
    unasked = {(p.index, p.call_id) for p in problems if p.kind is Break.RESULT_WITHOUT_CALL}
    missing: dict[int, list[str]] = {}
    for p in problems:
        if p.kind is Break.CALL_WITHOUT_RESULT:
            missing.setdefault(p.index, []).append(p.call_id)
    repaired: list[Message] = []
    for index, message in enumerate(messages):
        if index in orphans:
            continue
        if message.is_tool_results:
            kept = tuple(r for r in message.tool_results if (index, r.call_id) not in unasked)
            message = replace(message, tool_results=kept)
            if index - 1 in missing:
                message = _with_interrupted(message, missing.pop(index - 1))
            if not message.tool_results:
                continue  # every result in it answered a call that is not there
        repaired.append(message)
        if index in missing and not _answers_next(messages, index):
            repaired.append(_interrupted_results(message, missing.pop(index)))
    return repaired, problems


def last_reply_index(messages: Sequence[Message]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role is Role.ASSISTANT:
            return index
    return -1


def _answers_next(messages: Sequence[Message], index: int) -> bool:
    """Whether the message after ``index`` is a results message (kept, not an orphan)."""
    return index + 1 < len(messages) and messages[index + 1].is_tool_results


def _with_interrupted(results: Message, call_ids: list[str]) -> Message:
    added = tuple(ToolResult(call_id, INTERRUPTED, is_error=True) for call_id in call_ids)
    content = results.content
    if results.role is not Role.TOOL:  # XML results are read as text
        content = "\n\n".join([content, _interrupted_text(call_ids)]).strip()
    return replace(results, content=content, tool_results=results.tool_results + added)


def _interrupted_results(reply: Message, call_ids: list[str]) -> Message:
    results = [ToolResult(call_id, INTERRUPTED, is_error=True) for call_id in call_ids]
    if _is_native(reply):
        return Message.native_tool_results(results)
    return Message.text_tool_results(_interrupted_text(call_ids), results)


def _interrupted_text(call_ids: list[str]) -> str:
    return "\n\n".join(f"[tool call {call_id} error]\n{INTERRUPTED}" for call_id in call_ids)


def _is_native(reply: Message) -> bool:
    """Native calls carry no server name (the wire knows functions only); XML calls do."""
    return all(not call.server_name for call in reply.tool_calls)
