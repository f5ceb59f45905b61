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
first call there is no usage yet, so the whole history is estimated instead.

At or over ``max_context_length`` the newest tool results (which pushed the window over)
and the assistant reply that asked for them are dropped, and the verdict says the window
is exhausted — a different outcome from running out of turns (:class:`EndReason`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from deepledger.context.tokens import TokenCounter, count_messages
from deepledger.messages import EndReason, Message, MessageKind, Usage


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
) -> WindowVerdict:
    terms = {"last_usage": last_usage, "summary_prompt": summary_prompt, "max_tokens": max_tokens}
    # A token is at least one byte, so counting bytes bounds the estimate from above: when
    # even the bound fits, so does the real count, and tokenizing can wait until the
    # window is nearly full (it was a tenth of the loop's own CPU under load).
    bound = estimate_final_request(history, counter=UTF8_BYTES, **terms)
    if bound.total < max_context_length:
        return WindowVerdict(True, bound, max_context_length, tuple(history))
    estimate = estimate_final_request(history, counter=counter, **terms)
    if estimate.total < max_context_length:
        return WindowVerdict(True, estimate, max_context_length, tuple(history))
    kept, dropped = drop_last_exchange(history)
    return WindowVerdict(False, estimate, max_context_length, kept, dropped)


def estimate_final_request(
    history: Sequence[Message],
    *,
    last_usage: Usage | None,
    summary_prompt: str,
    max_tokens: int,
    counter: TokenCounter,
) -> WindowEstimate:
    if not history:
        raise ValueError("the window guard needs a history with at least the task in it")
    newest = count_messages(counter, [history[-1]])
    if last_usage is not None:
        prior = last_usage.input_tokens + last_usage.output_tokens
    else:
        prior = count_messages(counter, list(history[:-1]))
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
    if kept[-1].kind is MessageKind.MODEL:
        return tuple(kept[:-1]), (kept[-1], results)
    return tuple(kept), (results,)
