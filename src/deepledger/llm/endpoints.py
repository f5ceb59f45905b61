"""Several servers of one model (``llm.endpoints``), behind one client.

:class:`RoutedClient` holds one provider client per endpoint and sends each request to
one of them. It sits inside the retry policy (``RetryingClient(RoutedClient(...))``), so
every HTTP attempt is routed on its own and its outcome seen here.

- **Sticky routing.** A task attempt's requests all go to one endpoint, so the prompt
  it re-sends each turn (its growing prefix) keeps hitting that server's prefix cache.
  The endpoint is chosen by rendezvous (highest-random-weight) hashing of the route key
  (task id and attempt number) over the endpoints: each endpoint gets a score from a
  hash of (key, URL) and the highest healthy score wins. The choice depends on nothing
  but the key and the URLs, so every process (each Ray worker) makes the same one, and
  draining an endpoint moves only the tasks it was first for — to their second choice.
  The bench runner sets the key per attempt with :func:`routed_as`; sub-agents run in
  their caller's context and inherit it. Calls without a key (``deepledger run``) hash
  :data:`UNROUTED_KEY`: they too stay on one endpoint.
- **Health.** :data:`DRAIN_AFTER_FAILURES` failures of an endpoint with no success
  between them (server errors, timeouts, connections refused or dropped:
  :class:`TransientLLMError` other than a 429) drain it: its requests go to their
  next-ranked endpoint. A failure counts only when its request was sent after the
  endpoint's last counted failure: requests in flight together that fail together (one
  blip, one restart) are one piece of evidence, not several. After
  :data:`COOL_DOWN_SECONDS` the next request ranking it first is let through as a probe;
  a success makes it healthy again (its tasks come back), a failure drains it again. A
  429 is a busy server, not a broken one, and a 4xx is the request's fault: neither
  counts. With every endpoint drained, a request is sent as the probe of the one whose
  cool-down ends first (the retry policy's backoff paces these probes, so one server
  restarting behaves as with ``llm.base_url``); only when each has a probe in flight
  does it fail at once, unsent, with the last error seen, as a transient error.
- **Cap.** ``llm.endpoint_max_concurrent`` requests in flight per endpoint, counted in
  this router: each process (each Ray worker) and each model preset (the judge's, the
  notes', the extraction model's) has its own.
- **Journal.** Each reply carries a :class:`~deepledger.messages.Routing` (the endpoint,
  its latency, the endpoints of the attempts that failed before it, the moves). A caller
  does not read it: it tells a :class:`RouterEvents` (the hook this layer offers, made
  with an observer, the caller's journal write) that its call answered or failed, and
  the hook hands the observer the router's lines for that call: a line for each move,
  then the call's own line with where it went (:func:`routed_events`), or an
  ``llm_call_failed`` line when it failed on every attempt (:func:`failed_call`). A new
  router event is written here and in the journal's records; no caller changes.

URLs are journaled as configured; ``config.validate`` refuses one with credentials, a
query or a fragment (a key belongs in ``llm.api_key_env``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TypeVar

from deepledger.errors import (
    ContextOverflowError,
    EndpointRejectedError,
    LLMConnectionError,
    LLMError,
    RateLimitedError,
    TransientLLMError,
)
from deepledger.llm.base import GenerationSettings, LLMCapabilities, LLMClient
from deepledger.llm.tokens import TokenCounter
from deepledger.messages import EndpointMove, LLMResponse, Message, Routing, ToolSpec
from deepledger.records.events import ClosingCall, EndpointMoved, Event, LLMCall, LLMCallFailed

log = logging.getLogger(__name__)

# Three failures, each of a request sent after the one before had failed, with no success
# between them: one dropped connection or one 502 from a restarting proxy is noise and
# must not move a task off its warm cache, even when it fails every request in flight at
# that moment (those count once); three rounds of failure, spaced by the retry policy's
# backoff, is a server that is down.
DRAIN_AFTER_FAILURES = 3
# Long enough that a restarting vLLM/SGLang server is not hammered by probes, short
# enough that its tasks come back to their cache within a minute of it recovering.
COOL_DOWN_SECONDS = 30.0
# The key of calls made outside any task attempt (``deepledger run``).
UNROUTED_KEY = "deepledger"


@dataclass
class Route:
    """The route of one task attempt: its key, and the endpoint its last request went
    to (to notice a move). Shared by the attempt's sub-agents, who inherit it."""

    key: str
    last_endpoint: str | None = None


_ROUTE: ContextVar[Route | None] = ContextVar("deepledger_route", default=None)


@dataclass(frozen=True)
class _Pending:
    """What happened to a call's attempts before it answered: the endpoints of the ones
    that failed, the moves made, and how many were refused unsent."""

    failed: tuple[str, ...] = ()
    moves: tuple[EndpointMove, ...] = ()
    unsent: int = 0  # every endpoint drained, each with its probe in flight


# Since this asyncio task's last reply: the retries of one call run in the caller's task,
# one after another, so they accumulate here and go out with the reply (or with
# :func:`failed_call`). Immutable: a sub-agent's task copies the context, never shares.
_NOTHING_PENDING = _Pending()
_PENDING: ContextVar[_Pending] = ContextVar("deepledger_route_pending", default=_NOTHING_PENDING)


@contextmanager
def routed_as(task_id: str, attempt: int) -> Iterator[Route]:
    """Route the model calls made inside the block (sub-agents' included) as the
    ``attempt``-th attempt of ``task_id``."""
    route = Route(route_key(task_id, attempt))
    token = _ROUTE.set(route)
    pending = _PENDING.set(_NOTHING_PENDING)  # nothing left by a call outside carries in, or out
    try:
        yield route
    finally:
        _PENDING.reset(pending)
        _ROUTE.reset(token)


def route_key(task_id: str, attempt: int) -> str:
    return f"{task_id}\x1f{attempt}"  # a separator: ("a1", 1) and ("a", 11) stay apart


def score(key: str, endpoint: str) -> int:
    """The rendezvous weight of ``endpoint`` for ``key``: the same in every process
    (a cryptographic hash, not Python's salted ``hash``)."""
    digest = hashlib.blake2b(f"{key}\x1e{endpoint}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def ranked(key: str, endpoints: Sequence[str]) -> list[str]:
    """``endpoints`` in the order ``key`` prefers them: first choice first."""
    return list(_ranking(key, tuple(endpoints)))


# Every request of an attempt asks again; a hash per endpoint per turn is worth keeping
# (a pure function of its arguments: the choice stays the same in every process).
@functools.lru_cache(maxsize=16_384)
def _ranking(key: str, endpoints: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(endpoints, key=lambda url: (score(key, url), url), reverse=True))


@dataclass
class EndpointHealth:
    """What the router knows of one endpoint."""

    url: str
    client: LLMClient
    slots: asyncio.Semaphore | None
    failures: int = 0  # counted since its last success
    counted: int = 0  # every failure counted, ever: a request notes it when it is sent
    drained_until: float | None = None  # a clock reading; None: healthy
    probing: bool = False  # a probe request is in flight
    last_error: LLMError | None = None

    def usable(self, now: float) -> bool:
        """Healthy, or drained long enough for a probe and none in flight."""
        if self.drained_until is None:
            return True
        return now >= self.drained_until and not self.probing


@dataclass
class _Chosen:
    endpoint: EndpointHealth
    move: EndpointMove | None = None
    probe: bool = False


@dataclass
class _Sent:
    """When a request went out, after its wait for a slot, and the endpoint's count of
    failures then (a failure observed since means this one is the same outage)."""

    started: float = 0.0
    counted: int = 0


class RoutedClient(LLMClient):
    """One client per endpoint, one endpoint per request; see the module docstring.
    ``clients``: each endpoint's URL, as configured, and its provider client."""

    def __init__(
        self,
        clients: dict[str, LLMClient],
        *,
        max_concurrent: int | None = None,
        drain_after: int = DRAIN_AFTER_FAILURES,
        cool_down_seconds: float = COOL_DOWN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not clients:
            raise ValueError("RoutedClient needs at least one endpoint")
        first = next(iter(clients.values()))
        super().__init__(first.model)
        self.provider = first.provider
        self.max_concurrent = max_concurrent
        self.drain_after = drain_after
        self.cool_down_seconds = cool_down_seconds
        self.clock = clock  # swappable so tests can pass a cool-down without waiting
        self._endpoints = [
            EndpointHealth(url, client, self._slots()) for url, client in clients.items()
        ]
        self._by_url = {e.url: e for e in self._endpoints}
        self._urls = tuple(self._by_url)
        self._unrouted = Route(UNROUTED_KEY)

    def _slots(self) -> asyncio.Semaphore | None:
        return asyncio.Semaphore(self.max_concurrent) if self.max_concurrent else None

    async def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None = None,
        settings: GenerationSettings | None = None,
    ) -> LLMResponse:
        route = _ROUTE.get() or self._unrouted
        pending = _PENDING.get()
        try:
            chosen = self._choose(route)
        except LLMConnectionError:
            _PENDING.set(replace(pending, unsent=pending.unsent + 1))
            raise
        moves = pending.moves if chosen.move is None else (*pending.moves, chosen.move)
        route.last_endpoint = chosen.endpoint.url
        endpoint, sent = chosen.endpoint, _Sent()
        try:
            response = await self._send(endpoint, sent, messages, tools, settings)
        except LLMError as exc:
            if isinstance(exc, EndpointRejectedError) and exc.endpoint is None:
                exc.endpoint = endpoint.url  # the runner's message names it
            self._failed(endpoint, exc, probe=chosen.probe, sent=sent)
            failed = pending.failed
            if not isinstance(exc, ContextOverflowError):  # the request's size, not the server
                failed = (*failed, endpoint.url)
            _PENDING.set(_Pending(failed, moves, pending.unsent))
            raise
        except BaseException:
            if chosen.probe:  # cancelled mid-probe: let the next request probe
                endpoint.probing = False
            raise
        seconds = self.clock() - sent.started
        self._succeeded(endpoint)
        _PENDING.set(_NOTHING_PENDING)
        routing = Routing(endpoint.url, round(seconds, 4), pending.failed, moves)
        return replace(response, routing=routing)

    async def _send(
        self,
        endpoint: EndpointHealth,
        sent: _Sent,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec] | None,
        settings: GenerationSettings | None,
    ) -> LLMResponse:
        if endpoint.slots is None:
            sent.started, sent.counted = self.clock(), endpoint.counted
            return await endpoint.client.generate(messages, tools, settings)
        async with endpoint.slots:  # the wait for a slot is not the server's latency
            sent.started, sent.counted = self.clock(), endpoint.counted
            return await endpoint.client.generate(messages, tools, settings)

    def _choose(self, route: Route) -> _Chosen:
        """The key's best usable endpoint; with none usable, the probe of the drained one
        whose cool-down ends first; raises the last error when each has a probe out."""
        now = self.clock()
        ranking = _ranking(route.key, self._urls)
        for url in ranking:
            endpoint = self._by_url[url]
            if endpoint.usable(now):
                probe = endpoint.drained_until is not None  # its cool-down is over
                if probe:
                    endpoint.probing = True  # the others keep away until it answers
                return _Chosen(endpoint, self._move(route, endpoint), probe)
        waiting = [self._by_url[url] for url in ranking if not self._by_url[url].probing]
        if not waiting:
            raise self._all_drained()
        # Failing at once for the whole cool-down would outlast the retry policy, and
        # turn a server's restart into every running task's error: probe it now instead,
        # as often as the policy's backoff asks.
        soonest = min(waiting, key=lambda e: e.drained_until or 0.0)  # ties: the key's order
        soonest.probing = True
        return _Chosen(soonest, self._move(route, soonest), probe=True)

    def _move(self, route: Route, to: EndpointHealth) -> EndpointMove | None:
        before = route.last_endpoint
        if before is None or before == to.url:
            return None
        left = self._by_url.get(before)
        if left is not None and left.drained_until is not None:
            reason = f"drained: {left.last_error}" if left.last_error else "drained"
        else:
            reason = "back to its first choice, healthy again"
        return EndpointMove(before, to.url, reason)

    def _all_drained(self) -> LLMConnectionError:
        latest = max(self._endpoints, key=lambda e: e.drained_until or 0.0)  # drained last
        return LLMConnectionError(
            f"every server in llm.endpoints is drained after failing, and each is being "
            f"probed by another request now; this one was not sent. "
            f"Last error ({latest.url}): {latest.last_error}",
            provider=self.provider,
        )

    def _failed(self, endpoint: EndpointHealth, exc: LLMError, *, probe: bool, sent: _Sent) -> None:
        if probe:
            endpoint.probing = False
        if not isinstance(exc, TransientLLMError) or isinstance(exc, RateLimitedError):
            if probe:  # the server answered: it is up
                self._succeeded(endpoint)
            return
        endpoint.last_error = exc
        if not probe and sent.counted != endpoint.counted:
            return  # sent before the last counted failure: the same outage, counted once
        endpoint.failures += 1
        endpoint.counted += 1
        if probe or endpoint.failures >= self.drain_after:
            if endpoint.drained_until is None:
                log.warning(
                    "llm.endpoints: draining %s after %d failures with no answer between "
                    "(%s); probing it again in %.0fs",
                    endpoint.url,
                    endpoint.failures,
                    exc,
                    self.cool_down_seconds,
                )
            endpoint.drained_until = self.clock() + self.cool_down_seconds

    def _succeeded(self, endpoint: EndpointHealth) -> None:
        if endpoint.drained_until is not None:
            log.warning("llm.endpoints: %s answered again; its tasks return to it", endpoint.url)
        endpoint.failures = 0
        endpoint.drained_until = None
        endpoint.probing = False

    async def _call(  # pragma: no cover
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> LLMResponse:
        raise NotImplementedError("RoutedClient delegates through generate()")

    @property
    def capabilities(self) -> LLMCapabilities:
        return self._endpoints[0].client.capabilities

    @property
    def token_counter(self) -> TokenCounter:
        return self._endpoints[0].client.token_counter

    def tools_prompt_tokens(self, tools: Sequence[ToolSpec]) -> int:
        return self._endpoints[0].client.tools_prompt_tokens(tools)  # one model everywhere

    async def aclose(self) -> None:
        for endpoint in self._endpoints:
            await endpoint.client.aclose()


CallEvent = TypeVar("CallEvent", LLMCall, ClosingCall)


def routed_events(call: CallEvent, routing: Routing | None) -> list[Event]:
    """The journal lines of a model call: ``call``, with where it went when it was
    routed, after a line for each move made on its way."""
    if routing is None:
        return [call]
    moves: list[Event] = [
        EndpointMoved(
            turn=call.turn,
            from_endpoint=m.from_endpoint,
            to_endpoint=m.to_endpoint,
            reason=m.reason,
        )
        for m in routing.moves
    ]
    fields: dict[str, object] = {"endpoint": routing.endpoint, "seconds": routing.seconds}
    if routing.failed_endpoints:
        fields["failed_endpoints"] = list(routing.failed_endpoints)
    return [*moves, call.model_copy(update=fields)]


def failed_call(turn: int | None, error: LLMError, purpose: str | None = None) -> list[Event]:
    """The journal lines of a call that failed on every attempt: the moves made on its
    way, then an ``llm_call_failed`` naming the servers its attempts went to and how many
    were refused unsent (``purpose``: a closing call's; None: the loop's). None at all
    when no attempt was routed (no ``llm.endpoints``). It takes them: the next call
    starts with none."""
    pending = _PENDING.get()
    if pending == _NOTHING_PENDING:
        return []
    _PENDING.set(_NOTHING_PENDING)
    moves: list[Event] = [
        EndpointMoved(
            turn=turn, from_endpoint=m.from_endpoint, to_endpoint=m.to_endpoint, reason=m.reason
        )
        for m in pending.moves
    ]
    failed = LLMCallFailed(
        turn=turn,
        purpose=purpose,
        failed_endpoints=list(pending.failed),
        unsent=pending.unsent,
        error=str(error),
    )
    return [*moves, failed]


class RouterEvents:
    """The hook through which the router's moves reach a journal: ``observer`` is handed
    each line, in the journal's order (the agent and context layers pass their journal's
    write). Without ``llm.endpoints`` a call's line is handed on as it is."""

    def __init__(self, observer: Callable[[Event], None]) -> None:
        self.observer = observer

    def answered(self, call: CallEvent, routing: Routing | None) -> None:
        """The call answered (``routing``: the reply's, None when not routed): its line,
        after the moves made on its way."""
        for event in routed_events(call, routing):
            self.observer(event)

    def failed(self, turn: int | None, error: LLMError, purpose: str | None = None) -> None:
        """The call failed on every attempt (``purpose``: a closing call's; None: the
        loop's): the moves made on its way and an ``llm_call_failed`` line, if any of its
        attempts was routed."""
        for event in failed_call(turn, error, purpose):
            self.observer(event)
