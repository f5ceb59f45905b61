"""The window guard: stop the loop one step before the context window overflows.

Before each turn we estimate how large the *final* request would be if the agent had
to answer now (the summarize prompt appended to the history)::

    estimate = last call's input tokens + last call's output tokens
             + 1.5 x tokens of the newest message (the tool results added since)
             + 1.5 x tokens of the summarize prompt
             + max_tokens (room for the answer)
             + 1000 (slack)

The last call's usage is exact (the provider counted it); only what was added since is
estimated, with a 1.5 safety factor, so the check is cheap and conservative. Before the
first call there is no usage yet, so the whole history is estimated instead, plus the
tokens the request's tools add that no message holds (``tools_tokens``: the tools block a
local model's template writes, ``LLMClient.tools_prompt_tokens``); after a compaction,
the context strategy's pick of it, plus those tokens. :class:`WindowGuard` holds one
conversation's terms, and its context policy (``policy.py``) asks it before each turn.

At or over ``max_context_length`` the newest tool results (which pushed the window over)
and the assistant reply that asked for them are dropped, and the verdict says the window
is exhausted — a different outcome from running out of turns (:class:`EndReason`).

The server has the last word. When it refuses a request as too long anyway (our count
was short, or ``llm.max_context_length`` is larger than the window it really serves),
the window it states in its message ("maximum context length is N tokens") becomes the
limit for the rest of the task (:class:`ContextWindow`).

Whether a closing request *cannot* fit is decided on the plain count of what it sends
plus its reply budget (:func:`request_tokens`, no safety factor and no slack): the guard
drops the newest exchanges until it fits, and a request that does not fit even reduced
to the system prompt, the task and the closing prompt is never sent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from deepledger.llm.tokens import TokenCounter, count_messages
from deepledger.messages import EndReason, Message, MessageKind, Role, Usage


class _Utf8Bytes:
    """An upper bound on any byte-level tokenizer's count: its UTF-8 length."""

    name = "utf8-bytes"

    def count(self, text: str) -> int:
        return len(text.encode("utf-8", "surrogatepass"))


UTF8_BYTES = _Utf8Bytes()
SAFETY_FACTOR = 1.5
SLACK_TOKENS = 1000


@dataclass(frozen=True)
class WindowEstimate:
    """The terms of the estimate, kept for the journal."""

    prior_tokens: int  # last call's input + output (or the estimated history before it)
    newest_message_tokens: int
    summary_prompt_tokens: int
    reply_budget: int
    slack: int = SLACK_TOKENS

    @property
    def total(self) -> int:
        return (
            self.prior_tokens
            + math.ceil(SAFETY_FACTOR * self.newest_message_tokens)
            + math.ceil(SAFETY_FACTOR * self.summary_prompt_tokens)
            + self.reply_budget
            + self.slack
        )


@dataclass(frozen=True)
class WindowVerdict:
    fits: bool
    estimate: WindowEstimate  # when it fits, possibly the byte bound, not the token count
    limit: int
    history: tuple[Message, ...]  # the history to continue from (pair removed if it did not fit)
    dropped: tuple[Message, ...] = ()

    @property
    def end_reason(self) -> EndReason | None:
        return None if self.fits else EndReason.WINDOW_EXHAUSTED


def check_window(
    history: Sequence[Message],
    *,
    last_usage: Usage | None,
    summary_prompt: str,
    max_context_length: int,
    max_tokens: int,
    counter: TokenCounter,
    tools_tokens: int = 0,
    continue_from: Sequence[Message] | None = None,
) -> WindowVerdict:
    """Whether ``history`` (the request) fits the window. The verdict's history is the
    one to continue from: ``continue_from`` (the whole history a trimmed request was
    picked from; None: the request itself), without its newest exchange if it does not
    fit."""
    # A token is at least one byte, so counting bytes bounds the estimate from above: when
    # even the bound fits, so does the real count, and tokenizing can wait until the
    # window is nearly full (it was a tenth of the loop's own CPU under load).
    bound = estimate_final_request(
        history,
        last_usage=last_usage,
        summary_prompt=summary_prompt,
        max_tokens=max_tokens,
        counter=UTF8_BYTES,
        tools_tokens=tools_tokens,
    )
    kept = tuple(history if continue_from is None else continue_from)
    if bound.total < max_context_length:
        return WindowVerdict(True, bound, max_context_length, kept)
    estimate = estimate_final_request(
        history,
        last_usage=last_usage,
        summary_prompt=summary_prompt,
        max_tokens=max_tokens,
        counter=counter,
        tools_tokens=tools_tokens,
    )
    if estimate.total < max_context_length:
        return WindowVerdict(True, estimate, max_context_length, kept)
    shorter, dropped = drop_last_exchange(history if continue_from is None else continue_from)
    return WindowVerdict(False, estimate, max_context_length, shorter, dropped)


def estimate_final_request(
    history: Sequence[Message],
    *,
    last_usage: Usage | None,
    summary_prompt: str,
    max_tokens: int,
    counter: TokenCounter,
    tools_tokens: int = 0,
) -> WindowEstimate:
    """``tools_tokens``: what the request's tools add to its prompt beyond its messages,
    counted with the history when there is no usage (which holds them) to stand for it."""
    if not history:
        raise ValueError("the window guard needs a history with at least the task in it")
    newest = count_messages(counter, [history[-1]])
    if last_usage is not None:
        prior = last_usage.input_tokens + last_usage.output_tokens
    else:
        prior = count_messages(counter, list(history[:-1])) + tools_tokens
    return WindowEstimate(prior, newest, counter.count(summary_prompt), max_tokens)


def drop_last_exchange(
    history: Sequence[Message],
) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """Remove the newest tool results and the reply that asked for them.

    Returns (kept, dropped). Only a trailing tool-results message (and the reply before
    it) is removed: a history ending in anything else — the task, an injected prompt, a
    final answer — is returned whole.
    """
    kept = list(history)
    if len(kept) < 2 or kept[-1].kind is not MessageKind.TOOL_RESULTS:
        return tuple(kept), ()
    results = kept.pop()
    reply = kept[-1]
    if reply.kind is MessageKind.MODEL:
        return tuple(kept[:-1]), (reply, results)
    return tuple(kept), (results,)


# How servers state their window when they refuse a prompt: OpenAI, vLLM ("maximum
# context length is 32768 tokens"; its V1 engine: "longer than the maximum model length
# of 32768"), SGLang ("... maximum context length of 32768 tokens"), Anthropic ("prompt
# is too long: 210000 tokens > 200000 maximum", "exceed context limit: 198000 + 8192 >
# 200000"), llama.cpp's llama-server ("exceeds the available context size (4096
# tokens)", older: "larger than the max context size (4096 tokens)").
_STATED_LIMITS = (
    re.compile(r"maximum context length (?:is|of) (\d[\d,]*)", re.IGNORECASE),
    re.compile(r"\d[\d,]* tokens? > (\d[\d,]*) maximum", re.IGNORECASE),
    re.compile(r"context limit: \d[\d,]* \+ \d[\d,]* > (\d[\d,]*)", re.IGNORECASE),
    re.compile(r"maximum model length of (\d[\d,]*)", re.IGNORECASE),
    re.compile(r"context size \((\d[\d,]*) tokens\)", re.IGNORECASE),
)


def stated_limit(server_message: str) -> int | None:
    """The window a server's context-length error states, in tokens; None if it states none."""
    for pattern in _STATED_LIMITS:
        match = pattern.search(server_message)
        if match:
            value = int(match.group(1).replace(",", ""))
            return value if value > 0 else None
    return None


@dataclass
class ContextWindow:
    """The window the guard works against: ``llm.max_context_length``, lowered for the
    rest of the task once the server refuses a request and states a smaller window."""

    configured: int
    stated: int | None = None  # what the server said, when it was smaller

    @property
    def limit(self) -> int:
        return min(self.configured, self.stated) if self.stated else self.configured

    @property
    def source(self) -> str:
        """Where :attr:`limit` comes from, for messages."""
        if self.stated and self.stated < self.configured:
            return "the window the server stated"
        return "llm.max_context_length"

    def learn(self, server_message: str) -> int | None:
        """Take the window the server states when it is below the current limit; the
        new limit, or None when the message taught nothing."""
        stated = stated_limit(server_message)
        if stated is None or stated >= self.limit:
            return None
        self.stated = stated
        return stated


@dataclass(frozen=True)
class WindowGuard:
    """The window guard of one conversation: the window it works against and the terms
    its estimate adds to the request (the summarize prompt the agent may have to be
    sent, the reply budget)."""

    counter: TokenCounter
    window: ContextWindow
    reply_budget: int  # llm.max_tokens
    summary_prompt: str
    tools_tokens: int = 0  # what the tools add to each prompt beyond its messages

    def estimate(self, request: Sequence[Message], last_usage: Usage | None) -> WindowEstimate:
        return estimate_final_request(
            request,
            last_usage=last_usage,
            summary_prompt=self.summary_prompt,
            max_tokens=self.reply_budget,
            counter=self.counter,
            tools_tokens=self.tools_tokens,
        )

    def check(
        self, history: Sequence[Message], request: Sequence[Message], last_usage: Usage | None
    ) -> WindowVerdict:
        """The verdict on ``request``: ``history`` itself, or the strategy's pick of it.
        ``last_usage`` (the call before, when it was of the same request) stands for all
        but the newest message. When it does not fit, the history to continue from is
        ``history`` without its newest exchange."""
        return check_window(
            request,
            last_usage=last_usage,
            summary_prompt=self.summary_prompt,
            max_context_length=self.window.limit,
            max_tokens=self.reply_budget,
            counter=self.counter,
            tools_tokens=self.tools_tokens,
            continue_from=history,
        )


def request_tokens(messages: Sequence[Message], *, reply_budget: int, counter: TokenCounter) -> int:
    """What a request takes of the window by our count: its messages plus the room its
    reply may use (servers refuse prompt + ``max_tokens`` over the window)."""
    return count_messages(counter, list(messages)) + reply_budget


def fits_window(
    messages: Sequence[Message], *, reply_budget: int, limit: int, counter: TokenCounter
) -> tuple[bool, int]:
    """(whether the request fits ``limit`` by our plain count, the tokens counted). The
    byte count bounds any byte-level tokenizer's from above: when it fits, tokenizing
    can be skipped."""
    bound = request_tokens(messages, reply_budget=reply_budget, counter=UTF8_BYTES)
    if bound <= limit:
        return True, bound
    tokens = request_tokens(messages, reply_budget=reply_budget, counter=counter)
    return tokens <= limit, tokens


def smallest_closing_request(
    history: Sequence[Message], prompts: Sequence[Message]
) -> list[Message]:
    """What a closing call sends with everything droppable gone: the system prompt(s), the
    task, and the closing prompts."""
    head = []
    for message in history:
        if message.role is Role.SYSTEM:
            head.append(message)
        elif message.kind is MessageKind.TASK:
            head.append(message)
            break
        else:
            break
    return [*head, *prompts]
