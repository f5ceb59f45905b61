"""The one retry policy, wrapped around any provider.

- Retried: :class:`TransientLLMError` — HTTP 429, 408, 409 and 5xx, timeouts, dropped
  connections, response bodies that did not parse; and (``llm.retry.aborted_or_empty``,
  on unless false) a reply the server aborted (vLLM's and SGLang's ``finish_reason:
  abort``, a partial reply) or that holds nothing at all (no text, no thinking, no tool
  call; unless the request is greedy, temperature 0, which would get it again), as
  MiroThinker retries them (:class:`IncompleteReplyError`). When the attempts
  are spent, an aborted reply raises as any transient error does; an empty one is
  returned, for the agent to end on as the reply it is (``cut_or_empty``). Neither's
  tokens are in the task's totals (as a 5xx's are not).
- Waits: exponential backoff from ``initial_wait_seconds``, doubling, capped at
  ``max_wait_seconds``, plus up to ``jitter_seconds`` of random jitter. A 429 that says
  ``Retry-After`` is waited exactly that long (capped at ``max_retry_after_seconds``).
- Not retried: :class:`FatalLLMError` (bad request, auth, unknown model, prompt too long)
  — the same request would fail the same way.
- Gives up after ``max_attempts`` attempts in all and raises the last error; when that
  is a connection that could not be made at all (refused, no such host:
  ``LLMConnectionError.never_connected``) and no call of this client (one per process:
  the driver's, or one Ray worker's) has ever reached the server, it raises
  :class:`EndpointUnreachableError` instead: the address is wrong or the server is down,
  and every other call would fail the same way (a suite stops on it, as on a 401). Such
  a call is first retried past ``max_attempts`` until the waits between its attempts add
  up to ``unreachable_after_seconds`` (:data:`UNREACHABLE_AFTER_SECONDS`): a server
  still starting (vLLM binds its port only once the model is loaded) is waited for, not
  taken as down. Once one call has been answered, a lost connection is the passing
  trouble it is retried as.

Providers turn their SDK's retries off; nothing else in deepledger retries model calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    wait_exponential_jitter,
)

from deepledger.errors import (
    EndpointUnreachableError,
    IncompleteReplyError,
    LLMConnectionError,
    LLMError,
    RateLimitedError,
    TransientLLMError,
)
from deepledger.llm.base import GenerationSettings, LLMCapabilities, LLMClient
from deepledger.llm.tokens import TokenCounter
from deepledger.messages import LLMResponse, Message, StopReason, ToolSpec

if TYPE_CHECKING:
    from deepledger.config import RetryConfig

log = logging.getLogger(__name__)

# How long a server never reached must have refused connections (counted in the waits
# between a call's attempts) before it is taken as unreachable: long enough for a local
# server to load its model and bind its port (llm.retry.unreachable_after_seconds).
UNREACHABLE_AFTER_SECONDS = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    initial_wait_seconds: float = 1.0
    max_wait_seconds: float = 60.0
    jitter_seconds: float = 1.0
    max_retry_after_seconds: float = 120.0
    unreachable_after_seconds: float = UNREACHABLE_AFTER_SECONDS
    aborted_or_empty: bool = True  # such replies are retried (IncompleteReplyError)

    @classmethod
    def from_config(cls, cfg: RetryConfig) -> RetryPolicy:
        return cls(
            max_attempts=cfg.max_attempts,
            initial_wait_seconds=cfg.initial_wait_seconds,
            max_wait_seconds=cfg.max_wait_seconds,
            jitter_seconds=cfg.jitter_seconds,
            max_retry_after_seconds=cfg.max_retry_after_seconds,
            unreachable_after_seconds=cfg.unreachable_after_seconds,
            aborted_or_empty=cfg.aborted_or_empty is not False,
        )

    def wait_seconds(self, state: RetryCallState) -> float:
        """How long to wait before the next attempt (tenacity's ``wait`` callback)."""
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, RateLimitedError) and error.retry_after is not None:
            return min(max(error.retry_after, 0.0), self.max_retry_after_seconds)
        backoff = wait_exponential_jitter(
            multiplier=self.initial_wait_seconds,
            max=self.max_wait_seconds,
            jitter=self.jitter_seconds,
        )
        return backoff(state)


# Stops after which an empty reply is not retried: the budget or the window ran out (the
# agent asks again with more room, or ends on the window), or the provider withheld it.
_EMPTY_IS_AN_ANSWER = (
    StopReason.MAX_TOKENS,
    StopReason.CONTEXT_OVERFLOW,
    StopReason.CONTENT_FILTER,
)


def incomplete(response: LLMResponse, settings: GenerationSettings | None) -> str | None:
    """Why ``response`` is no reply at all (aborted by the server, or empty), or None.
    An empty reply to a greedy request (temperature 0) is the reply: the same request
    would get it again."""
    if response.raw_stop_reason == "abort":
        return "aborted the reply (finish_reason: abort)"
    if settings is not None and settings.temperature == 0:
        return None
    message = response.message
    said = message.content.strip() or message.tool_calls or message.thinking
    thought = (message.reasoning or "").strip()
    if not said and not thought and response.stop_reason not in _EMPTY_IS_AN_ANSWER:
        return "sent an empty reply (no text, thinking or tool call)"
    return None


class RetryingClient(LLMClient):
    """Wraps a provider; ``generate`` retries transient failures per :class:`RetryPolicy`."""

    def __init__(
        self,
        inner: LLMClient,
        policy: RetryPolicy,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(inner.model)
        self.inner = inner
        self.policy = policy
        self._sleep = sleep  # swappable so tests can check waits without waiting
        self.provider = inner.provider
        self.retries = 0  # retries made over this client's life, for the journal
        # A call of this client reached the server (an answer, or an error it sent):
        # from then on a connection that cannot be made is a passing trouble.
        self.reached = False

    async def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        settings: GenerationSettings | None = None,
    ) -> LLMResponse:
        # The first attempt goes outside tenacity: nearly every call succeeds at once,
        # and building and stepping its retry machinery was 3 % of a turn's CPU with
        # 2,048 tasks. A failure is handed to tenacity as its first attempt's outcome,
        # so waits, logs and the attempt count are exactly tenacity's.
        try:
            return await self._once(messages, tools, settings)
        except TransientLLMError as error:
            first_failure: TransientLLMError | None = error
        try:
            response = await self._retried(first_failure, messages, tools, settings)
        except IncompleteReplyError as error:
            if error.aborted:
                raise
            return error.response  # empty each time: that is the model's reply
        except LLMConnectionError as error:
            if self.reached or not error.never_connected:
                raise
            raise EndpointUnreachableError(
                f"{error} No call from this process (with backend=ray: this worker) has "
                f"reached it, and it refused for {self.policy.unreachable_after_seconds:g}s "
                "(llm.retry.unreachable_after_seconds), so it is taken as unreachable "
                "rather than busy or starting.",
                provider=error.provider,
            ) from error
        return response

    async def _once(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None,
        settings: GenerationSettings | None,
    ) -> LLMResponse:
        """One attempt, noting whether the server was reached."""
        try:
            response = await self.inner.generate(messages, tools, settings)
        except LLMConnectionError:
            raise
        except LLMError:  # the server answered, if only with an error
            self.reached = True
            raise
        self.reached = True
        if self.policy.aborted_or_empty:
            problem = incomplete(response, settings)
            if problem is not None:
                raise IncompleteReplyError(
                    f"{self.provider} {problem}", response=response, provider=self.provider
                )
        return response

    async def _retried(
        self,
        first_failure: TransientLLMError | None,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None,
        settings: GenerationSettings | None,
    ) -> LLMResponse:
        """The call retried after ``first_failure`` as tenacity's first attempt."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(TransientLLMError),
            stop=self._stop,
            wait=self.policy.wait_seconds,
            before_sleep=self._note_retry,
            sleep=self._sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                if first_failure is not None:
                    failure, first_failure = first_failure, None
                    raise failure
                return await self._once(messages, tools, settings)
        raise AssertionError("unreachable: tenacity either returns or reraises")

    def _stop(self, state: RetryCallState) -> bool:
        """Whether to give up (tenacity's ``stop`` callback): after ``max_attempts``,
        unless the server may still be starting (``_may_be_starting``)."""
        return state.attempt_number >= self.policy.max_attempts and not self._may_be_starting(state)

    def _may_be_starting(self, state: RetryCallState) -> bool:
        """A server no call has reached that refuses connections (or whose name does not
        resolve), for less than ``unreachable_after_seconds`` of waits so far."""
        error = state.outcome.exception() if state.outcome else None
        return (
            not self.reached
            and isinstance(error, LLMConnectionError)
            and error.never_connected
            and state.idle_for < self.policy.unreachable_after_seconds
        )

    async def _call(  # pragma: no cover
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> LLMResponse:
        raise NotImplementedError("RetryingClient delegates through generate()")

    def _note_retry(self, state: RetryCallState) -> None:
        self.retries += 1
        error = state.outcome.exception() if state.outcome else None
        # Errors end in a sentence's full stop; "...address.; retrying" read as a typo.
        error_text = str(error).rstrip(".")
        wait = state.next_action.sleep if state.next_action else 0.0
        if state.attempt_number >= self.policy.max_attempts:  # waiting for it to start
            log.warning(
                "%s call failed (attempt %d; the server may be starting: retried until it "
                "has refused for %gs): %s; retrying in %.1fs",
                self.provider,
                state.attempt_number,
                self.policy.unreachable_after_seconds,
                error_text,
                wait,
            )
            return
        log.warning(
            "%s call failed (attempt %d of %d): %s; retrying in %.1fs",
            self.provider,
            state.attempt_number,
            self.policy.max_attempts,
            error_text,
            wait,
        )

    @property
    def capabilities(self) -> LLMCapabilities:
        return self.inner.capabilities

    @property
    def token_counter(self) -> TokenCounter:
        return self.inner.token_counter

    def tools_prompt_tokens(self, tools: Sequence[ToolSpec]) -> int:
        return self.inner.tools_prompt_tokens(tools)

    async def aclose(self) -> None:
        await self.inner.aclose()
