"""Several model endpoints (llm/endpoints.py): sticky rendezvous routing, draining and
probing, the per-endpoint cap, and what the journal and summary get; end to end against
two loopback fakes."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from deepledger.agent.answer import AnswerGenerator, AnswerPolicy, summary_prompt
from deepledger.agent.state import RunState
from deepledger.bench.judge import LLMJudge
from deepledger.bench.progress import Progress
from deepledger.bench.runner import BenchmarkRunner
from deepledger.bench.suite import run_suite
from deepledger.bench.tasks import load_tasks
from deepledger.config import validate
from deepledger.context.policy import ContextPolicy
from deepledger.context.strategies.compaction import Compaction
from deepledger.errors import (
    ConfigError,
    FatalLLMError,
    LLMConnectionError,
    RateLimitedError,
    TransientLLMError,
)
from deepledger.llm.base import GenerationSettings
from deepledger.llm.endpoints import (
    DRAIN_AFTER_FAILURES,
    RoutedClient,
    RouterEvents,
    failed_call,
    ranked,
    route_key,
    routed_as,
    routed_events,
)
from deepledger.llm.retry import RetryingClient, RetryPolicy
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.usage import UsageLedger
from deepledger.messages import EndpointMove, EndReason, Message, Routing, Usage
from deepledger.records.codec import encode, read_journal
from deepledger.records.events import EndpointMoved, LLMCall, LLMCallFailed
from deepledger.store.journal import Journal
from deepledger.store.run_store import RunStore
from deepledger.tools.pool import ToolManager
from tests.support.browser import open_report
from tests.support.config import CONF, composed
from tests.support.doubles.bench_model import respond_http
from tests.support.doubles.endpoints import (
    Clock,
    HeldLLM,
    answering,
    bad_gateway,
    endpoint_clients,
    failing,
)
from tests.support.doubles.fake_llm_server import FakeLLMServer, Fault
from tests.support.doubles.faults import FAST_RETRY
from tests.support.histories import compact, padded

URLS = ["http://gpu-1:8000/v1", "http://gpu-2:8000/v1", "http://gpu-3:8000/v1"]
HELLO = [Message.task("hello")]


# -- the choice ---------------------------------------------------------------------------
def test_the_choice_is_a_known_function_of_task_and_attempt():
    assert ranked(route_key("task-7", 1), URLS) == [URLS[2], URLS[0], URLS[1]]
    assert ranked(route_key("task-7", 2), URLS) == [URLS[1], URLS[0], URLS[2]]


def test_a_fresh_process_makes_the_same_choice():
    """No salted ``hash``: a Ray worker on another machine routes a task the same way."""
    code = (
        "from deepledger.llm.endpoints import ranked, route_key; "
        f"print([ranked(route_key(f't{{i}}', 1), {URLS!r})[0] for i in range(50)])"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    here = [ranked(route_key(f"t{i}", 1), URLS)[0] for i in range(50)]
    assert other.stdout.strip() == repr(here)


def test_tasks_spread_over_the_endpoints():
    firsts = Counter(ranked(route_key(f"task-{i}", 1), URLS)[0] for i in range(600))
    assert set(firsts) == set(URLS)
    assert all(150 <= n <= 250 for n in firsts.values()), firsts


def test_removing_an_endpoint_moves_only_its_own_tasks():
    keys = [route_key(f"task-{i}", 1) for i in range(300)]
    before = {k: ranked(k, URLS) for k in keys}
    without = [URLS[0], URLS[2]]
    for key in keys:
        after = ranked(key, without)[0]
        if before[key][0] != URLS[1]:
            assert after == before[key][0]  # unaffected tasks stay
        else:
            assert after == before[key][1]  # the drained one's go to their second choice


# -- the router ---------------------------------------------------------------------------
def clients(*down: str, error: Exception | None = None) -> dict[str, ScriptedLLM]:
    return endpoint_clients(URLS, *down, error=error)


def first_choice_of(url: str, attempt: int = 1) -> str:
    """A task id whose first choice over URLS is ``url``."""
    return next(f"t{i}" for i in range(1000) if ranked(route_key(f"t{i}", attempt), URLS)[0] == url)


async def until(condition) -> None:
    """Let the other asyncio tasks run until ``condition()`` holds (no clock involved)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def ask(router: RoutedClient, times: int = 1):
    """``times`` calls; the routing of the one that answered (None: all failed)."""
    for _ in range(times):
        try:
            return (await router.generate(HELLO)).routing
        except TransientLLMError:
            continue
    return None


async def test_an_attempt_sticks_to_its_endpoint_and_the_reply_says_which():
    backends = clients()
    router = RoutedClient(backends)
    task = first_choice_of(URLS[1])
    with routed_as(task, 1):
        for _ in range(4):
            routing = (await router.generate(HELLO)).routing
            assert routing is not None and routing.endpoint == URLS[1]
            assert routing.failed_endpoints == () and routing.moves == ()
    assert [len(c.calls) for c in backends.values()] == [0, 4, 0]


async def test_a_failing_endpoint_is_drained_its_tasks_move_and_come_back_after_a_probe():
    backends = clients(URLS[1])
    clock = Clock()
    router = RoutedClient(backends, drain_after=3, cool_down_seconds=30, clock=clock)
    task = first_choice_of(URLS[1])
    second = ranked(route_key(task, 1), URLS)[1]
    with routed_as(task, 1):
        routing = await ask(router, times=4)  # what the retry policy does
        assert routing is not None and routing.endpoint == second
        assert routing.failed_endpoints == (URLS[1],) * 3
        (move,) = routing.moves
        assert (move.from_endpoint, move.to_endpoint) == (URLS[1], second)
        assert move.reason.startswith("drained: HTTP 502")
        # Drained: no request goes there while it cools down.
        assert (await router.generate(HELLO)).routing.endpoint == second
        assert len(backends[URLS[1]].calls) == 3
        # Recovered: the next request after the cool-down probes it, and the task returns.
        backends[URLS[1]]._responder = lambda messages, tools: "back"
        clock.now += 31
        routing = (await router.generate(HELLO)).routing
        assert routing.endpoint == URLS[1]
        assert [(m.from_endpoint, m.to_endpoint) for m in routing.moves] == [(second, URLS[1])]
    other = first_choice_of(URLS[0])
    with routed_as(other, 1):  # tasks that never ranked it first did not move
        assert (await router.generate(HELLO)).routing.endpoint == URLS[0]


async def test_a_failed_probe_drains_it_again_at_once():
    backends = clients(URLS[1])
    clock = Clock()
    router = RoutedClient(backends, drain_after=3, cool_down_seconds=30, clock=clock)
    with routed_as(first_choice_of(URLS[1]), 1):
        await ask(router, times=4)
        clock.now += 31
        routing = await ask(router, times=2)  # the probe fails; the retry goes elsewhere
        assert routing.failed_endpoints == (URLS[1],)
        assert len(backends[URLS[1]].calls) == 4


async def test_one_server_restarting_behind_endpoints_recovers_as_behind_base_url():
    """Every endpoint drained: the request probes at once, paced by the retry policy's
    backoff, instead of failing for the whole cool-down (longer than the policy tries)."""
    server = ScriptedLLM([bad_gateway(), bad_gateway(), bad_gateway(), "back"])
    router = RoutedClient({URLS[0]: server}, clock=Clock())
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    policy = RetryPolicy(max_attempts=5, initial_wait_seconds=1, jitter_seconds=0)
    reply = await RetryingClient(router, policy, sleep=sleep).generate(HELLO)
    assert reply.text == "back" and reply.routing.failed_endpoints == (URLS[0],) * 3
    assert len(server.calls) == 4 and len(waits) == 3


async def test_every_endpoint_drained_probes_the_one_whose_cool_down_ends_first():
    backends = clients(*URLS)
    clock = Clock()
    router = RoutedClient(backends, drain_after=1, cool_down_seconds=30, clock=clock)
    order = ranked(route_key("t", 1), URLS)
    with routed_as("t", 1):
        for _ in range(3):  # each drained in turn, a second apart: the key's order
            assert await ask(router) is None
            clock.now += 1
        backends[order[0]]._responder = lambda messages, tools: "back"
        routing = (await router.generate(HELLO)).routing
    assert routing.endpoint == order[0]  # drained first, so its cool-down ends first
    assert [len(backends[url].calls) for url in order] == [2, 1, 1]


async def test_with_every_endpoint_probed_already_a_request_fails_at_once_unsent():
    gate = asyncio.Event()
    server = HeldLLM(responder=failing(bad_gateway()))
    router = RoutedClient({URLS[0]: server}, drain_after=1, clock=Clock())
    with routed_as("t", 1):
        assert await ask(router) is None  # drained
        server.gate = gate
        probe = asyncio.create_task(router.generate(HELLO))
        await until(lambda: server.in_flight == 1)
        with pytest.raises(LLMConnectionError, match=r"every server in llm\.endpoints is drained"):
            await router.generate(HELLO)
        (failed,) = failed_call(1, TransientLLMError("gave up"))
        assert failed.unsent == 1 and failed.failed_endpoints == [URLS[0]]
        gate.set()
        with pytest.raises(TransientLLMError):
            await probe
    assert len(server.calls) == 2  # the refused one was not sent


async def test_requests_failing_together_count_once_and_do_not_drain_a_warm_server():
    """Three tasks in flight at one endpoint get a 502 each at the same moment (one blip):
    one failure, not three. Requests sent after a failure count each."""
    backends = {url: HeldLLM(responder=answering()) for url in URLS}
    blipped = backends[URLS[1]]
    router = RoutedClient(backends, drain_after=3, clock=Clock())
    tasks = [first_choice_of(URLS[1], attempt) for attempt in (1, 2, 3)]

    async def blip() -> None:
        async def one(attempt: int):
            with routed_as(tasks[attempt - 1], attempt):
                return await router.generate(HELLO)

        blipped.gate, blipped._responder = asyncio.Event(), failing(bad_gateway())
        calls = [asyncio.create_task(one(attempt)) for attempt in (1, 2, 3)]
        await until(lambda: blipped.in_flight == 3)
        blipped.gate.set()
        for call in calls:
            with pytest.raises(TransientLLMError):
                await call
        blipped.gate = None

    await blip()
    blipped._responder = answering("warm")
    with routed_as(tasks[0], 1):
        assert (await router.generate(HELLO)).routing.endpoint == URLS[1]  # not drained
    await blip()  # one...
    with routed_as(tasks[0], 1):
        assert await ask(router, times=2) is None  # ...two, three: drained
        routing = (await router.generate(HELLO)).routing
    assert routing.endpoint == ranked(route_key(tasks[0], 1), URLS)[1]


@pytest.mark.parametrize("ends", ["cancelled", "failed"])
async def test_a_request_that_was_not_the_probe_ending_leaves_the_probe_alone(ends):
    backends = {url: HeldLLM(responder=answering()) for url in URLS}
    clock = Clock()
    router = RoutedClient(backends, drain_after=1, cool_down_seconds=30, clock=clock)
    task = first_choice_of(URLS[1])
    down = backends[URLS[1]]
    down._responder = failing(bad_gateway())
    with routed_as(task, 1):
        down.gate = slow_gate = asyncio.Event()
        slow = asyncio.create_task(router.generate(HELLO))  # in flight before the drain
        await until(lambda: down.in_flight == 1)
        down.gate = None
        assert await ask(router) is None  # drained
        clock.now += 31
        down.gate = probe_gate = asyncio.Event()
        probe = asyncio.create_task(router.generate(HELLO))
        await until(lambda: down.in_flight == 2)
        if ends == "cancelled":
            slow.cancel()
        slow_gate.set()
        with pytest.raises(asyncio.CancelledError if ends == "cancelled" else TransientLLMError):
            await slow
        down.gate = None
        routing = (await router.generate(HELLO)).routing  # not a second probe
        probe_gate.set()
        with pytest.raises(TransientLLMError):
            await probe
    assert routing.endpoint == ranked(route_key(task, 1), URLS)[1]


@pytest.mark.parametrize(
    "error",
    [
        RateLimitedError("HTTP 429", retry_after=1, provider="openai", status=429),
        FatalLLMError("HTTP 400: bad request", provider="openai", status=400),
    ],
)
async def test_a_busy_server_or_a_bad_request_does_not_drain(error):
    backends = clients(URLS[1], error=error)
    router = RoutedClient(backends, drain_after=2)
    with routed_as(first_choice_of(URLS[1]), 1):
        for _ in range(5):
            with pytest.raises(type(error)):
                await router.generate(HELLO)
    assert len(backends[URLS[1]].calls) == 5


async def test_calls_without_a_route_key_stay_on_one_endpoint():
    backends = clients()
    router = RoutedClient(backends)
    for _ in range(3):
        await router.generate(HELLO)
    assert sorted(len(c.calls) for c in backends.values()) == [0, 0, 3]


async def test_the_cap_bounds_requests_in_flight_per_endpoint():
    release = asyncio.Event()
    backends = {url: HeldLLM(responder=answering(), gate=release) for url in URLS}
    router = RoutedClient(backends, max_concurrent=2)

    async def one(task: str):
        with routed_as(task, 1):
            return await router.generate(HELLO)

    calls = [asyncio.create_task(one(first_choice_of(URLS[0]))) for _ in range(6)]
    await until(lambda: backends[URLS[0]].in_flight == 2)
    for _ in range(20):
        await asyncio.sleep(0)
    assert backends[URLS[0]].in_flight == 2  # four wait for a slot
    release.set()
    await asyncio.gather(*calls)
    assert backends[URLS[0]].most == 2


# -- the journal --------------------------------------------------------------------------
def test_a_routed_call_is_journaled_with_its_endpoint_after_its_moves():
    call = LLMCall(turn=3, usage=Usage(10, 2))
    routing = Routing(
        URLS[0],
        0.25,
        failed_endpoints=(URLS[1],),
        moves=(EndpointMove(URLS[1], URLS[0], "x"),),
    )
    moved, routed = routed_events(call, routing)
    assert isinstance(moved, EndpointMoved) and moved.turn == 3 and moved.reason == "x"
    line = encode(routed)
    assert (line["endpoint"], line["seconds"], line["failed_endpoints"]) == (
        URLS[0],
        0.25,
        [URLS[1]],
    )
    assert routed_events(call, None) == [call]
    assert "endpoint" not in encode(call) and "failed_endpoints" not in encode(call)


async def test_a_call_failing_everywhere_keeps_its_moves_for_the_journal():
    backends = clients()
    router = RoutedClient(backends, drain_after=1, clock=Clock())
    task = first_choice_of(URLS[1])
    order = ranked(route_key(task, 1), URLS)
    with routed_as(task, 1):
        await router.generate(HELLO)  # answered at its first choice
        for backend in backends.values():
            backend._responder = failing(bad_gateway())
        assert await ask(router, times=2) is None  # drained, moved, failed there too
        moved, failed = failed_call(4, TransientLLMError("gave up"))
        assert failed_call(5, TransientLLMError("again")) == []  # taken: none for the next
    assert isinstance(moved, EndpointMoved) and moved.turn == 4
    assert (moved.from_endpoint, moved.to_endpoint) == (order[0], order[1])
    assert isinstance(failed, LLMCallFailed) and failed.failed_endpoints == order[:2]


async def test_the_router_s_lines_reach_the_observer_a_caller_gives_its_hook():
    # A caller tells the hook its call answered or failed; the observer (the agent's
    # journal write) gets the lines routed_events and failed_call make, in that order.
    heard: list[object] = []
    hook = RouterEvents(heard.append)
    call = LLMCall(turn=2, usage=Usage(1, 1))
    routing = Routing(URLS[0], 0.5, moves=(EndpointMove(URLS[1], URLS[0], "x"),))
    hook.answered(call, routing)
    assert heard == routed_events(call, routing)
    heard.clear()
    backends = clients()
    router = RoutedClient(backends, drain_after=1, clock=Clock())
    with routed_as("t", 1):
        for backend in backends.values():
            backend._responder = failing(bad_gateway())
        assert await ask(router) is None
        hook.failed(3, TransientLLMError("gave up"), "summary")
    (failed,) = heard
    assert isinstance(failed, LLMCallFailed) and (failed.turn, failed.purpose) == (3, "summary")


async def test_a_failed_notes_call_journals_its_servers_and_leaves_none_to_the_next_call():
    backends = clients(*URLS)
    router = RoutedClient(backends)
    first = ranked(route_key("t", 1), URLS)[0]
    with routed_as("t", 1):
        changed, journal = await compact(Compaction(1, min_saving=0.0), padded(11), router)
        assert not changed
        (failed,) = journal.of(LLMCallFailed)
        assert (failed.purpose, failed.turn, failed.failed_endpoints) == ("compaction", 9, [first])
        backends[first]._responder = answering()
        assert (await router.generate(HELLO)).routing.failed_endpoints == ()


async def test_a_failed_closing_call_journals_its_servers():
    router = RoutedClient(clients(*URLS))
    state = RunState(
        history=[Message.system("sys"), Message.task("How tall?"), Message.assistant("Tall.")],
        ledger=UsageLedger(),
        end_reason=EndReason.MODEL_FINISHED,
    )
    journal = Journal(None)
    policy = AnswerPolicy(context_management=False, max_final_answer_retries=3)
    generator = AnswerGenerator(policy, summary_prompt=summary_prompt(""))
    with routed_as("t", 1), pytest.raises(TransientLLMError):
        await generator.finalize(state, router, GenerationSettings(), journal, ContextPolicy())
    (failed,) = journal.of(LLMCallFailed)
    assert failed.purpose == "summary"
    assert failed.turn is None and failed.failed_endpoints == [ranked(route_key("t", 1), URLS)[0]]


def small_suite(folder: Path, count: int) -> Path:
    folder.mkdir()
    lines = [
        {"task_id": f"t{n}", "task_question": f"What is {n} + {n}?", "ground_truth": str(2 * n)}
        for n in range(1, count + 1)
    ]
    (folder / "standardized_data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


async def test_the_judges_calls_are_routed_with_their_task(tmp_path):
    """A judge preset with endpoints spreads its calls too (one per task here)."""
    cfg = composed(
        f"benchmark.data.data_dir={small_suite(tmp_path / 'data', 8)}",
        "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1",
    )
    agent = ScriptedLLM(responder=lambda messages, tools: "\\boxed{seven}")  # judged by the model
    judges = clients()
    run_dir = RunStore(tmp_path / "run")
    runner = BenchmarkRunner(
        cfg,
        llm=agent,
        tools=ToolManager({}),
        run_dir=run_dir,
        judge=LLMJudge(RoutedClient(judges), max_asks=1),  # one call per task, read or not
        progress=Progress(plain=True),
    )
    try:
        await runner.run(load_tasks(cfg.benchmark.data).tasks)
    finally:
        run_dir.close()
    asked = {url: len(judge.calls) for url, judge in judges.items()}
    expected = Counter(ranked(route_key(f"t{n}", 1), URLS)[0] for n in range(1, 9))
    assert asked == {url: expected[url] for url in URLS} and len(expected) > 1


# -- end to end: a suite over two loopback fakes -----------------------------------------
TASKS = 16
QUESTIONS = {
    "EASY": ("What is the capital of France?", "Paris"),
    "HARD": ("Which river flows through Vienna?", "Danube"),
}


def write_suite(folder: Path) -> Path:
    """16 tasks, a quarter HARD (answered on the third format-retry: several calls)."""
    folder.mkdir()
    lines = []
    for i in range(TASKS):
        kind = "HARD" if i % 4 == 3 else "EASY"
        question, truth = QUESTIONS[kind]
        lines.append(
            {
                "task_id": f"q{i:02d}",
                "task_question": f"{kind}: [q{i:02d}] {question}",
                "ground_truth": truth,
            }
        )
    (folder / "standardized_data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def task_of(request) -> str:
    return re.search(r"\[(q\d\d)\]", request.messages[1]["content"])[1]


def always(status: int):
    return lambda request: Fault(status=status)


def bench(root: Path, data: Path, *servers, extra=()):
    urls = ",".join(f"'{s.openai_base_url}'" for s in servers)
    cfg = composed(
        f"benchmark.data.data_dir={data}",
        "benchmark.name=endpoints",
        "benchmark.execution.max_concurrent=8",
        "benchmark.execution.report_every_seconds=0",
        "llm=openai_compatible",
        f"llm.endpoints=[{urls}]",
        "llm.endpoint_max_concurrent=2",
        "agent.main_agent.tools=[]",
        "agent.context_compress_limit=2",
        "agent.max_final_answer_retries=1",
        *FAST_RETRY,
        *extra,
    )
    return asyncio.run(run_suite(cfg, root, CONF, ["bench"]))


def journal_events(root: Path, kind):
    return [
        e
        for path in sorted(root.glob("tasks/*/attempt-*.jsonl"))
        for e in read_journal(path)
        if isinstance(e, kind)
    ]


def test_two_endpoints_each_see_whole_tasks_under_the_cap_and_are_counted(tmp_path):
    data = write_suite(tmp_path / "suite")
    with FakeLLMServer(responder=respond_http) as one, FakeLLMServer(responder=respond_http) as two:
        summary = bench(tmp_path / "run", data, one, two)
        seen = {name: {task_of(r) for r in s.requests} for name, s in (("one", one), ("two", two))}
        url_one, url_two = one.openai_base_url, two.openai_base_url
    assert seen["one"] and seen["two"], seen  # both got some tasks...
    assert not seen["one"] & seen["two"], seen  # ...and every task saw one server only
    assert len(seen["one"] | seen["two"]) == TASKS
    assert one.max_in_flight <= 2 and two.max_in_flight <= 2
    assert summary.tasks.finished == TASKS and summary.accuracy == 1.0
    written = json.loads((tmp_path / "run" / "summary.json").read_text())["endpoints"]
    counts = {url_one: len(one.requests), url_two: len(two.requests)}
    assert {url: c["requests"] for url, c in written.items()} == counts
    assert {url: c["tasks"] for url, c in written.items()} == {
        url_one: len(seen["one"]),
        url_two: len(seen["two"]),
    }
    assert all(c["errors"] == 0 and c["latency_p95_seconds"] > 0 for c in written.values())
    with open_report(tmp_path / "run" / "report.html") as visit:
        table = visit.page.wait_for_selector("#endpoints table")
        text = table.inner_text()
        assert url_one in text and url_two in text
        assert not visit.problems, visit.problems


def test_a_failing_endpoint_s_tasks_move_to_the_other_and_finish(tmp_path):
    data = write_suite(tmp_path / "suite")
    with FakeLLMServer(responder=always(503)) as down, FakeLLMServer(responder=respond_http) as up:
        summary = bench(tmp_path / "run", data, down, up)
        up_tasks = [task_of(r) for r in up.requests]
        down_tasks = {task_of(r) for r in down.requests}
        url_down, url_up = down.openai_base_url, up.openai_base_url
    assert summary.tasks.finished == TASKS and summary.accuracy == 1.0
    assert len(set(up_tasks)) == TASKS and down_tasks  # the down one's tasks moved over
    moves = journal_events(tmp_path / "run", EndpointMoved)
    assert moves and {(m.from_endpoint, m.to_endpoint) for m in moves} == {(url_down, url_up)}
    assert all(m.reason.startswith("drained") for m in moves)
    counts = json.loads((tmp_path / "run" / "summary.json").read_text())["endpoints"]
    assert counts[url_down]["requests"] == 0
    assert counts[url_down]["errors"] >= DRAIN_AFTER_FAILURES
    assert counts[url_down]["moved_out"] == len(moves)


def test_every_endpoint_down_ends_the_tasks_as_errors_that_a_resume_finishes(tmp_path):
    data = write_suite(tmp_path / "suite")
    with FakeLLMServer(responder=always(502)) as a, FakeLLMServer(responder=always(500)) as b:
        summary = bench(tmp_path / "run", data, a, b)
        sent = len(a.requests) + len(b.requests)
    assert summary.tasks.errors == TASKS and summary.tasks.finished == 0
    assert journal_events(tmp_path / "run", LLMCallFailed)
    counts = json.loads((tmp_path / "run" / "summary.json").read_text())["endpoints"]
    assert sum(c["errors"] for c in counts.values()) == sent  # every failed attempt counted
    assert all(c["requests"] == 0 for c in counts.values())
    with FakeLLMServer(responder=respond_http) as a, FakeLLMServer(responder=respond_http) as b:
        resumed = bench(tmp_path / "run", data, a, b)
    assert resumed.tasks.finished == TASKS and resumed.accuracy == 1.0


# -- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["llm.endpoints=[]"], r"llm\.endpoints=\[\] names no server"),
        (["llm.endpoints=[gpu-1:8000]"], r"llm\.endpoints\[0\]='gpu-1:8000' is not an http"),
        (
            ["llm.endpoints=['http://a/v1','http://b/v1','http://a/v1/']"],
            r"llm\.endpoints\[2\]='http://a/v1/' is llm\.endpoints\[0\]='http://a/v1' again",
        ),
        (["llm.endpoints=['http://a/v1']", "llm.endpoint_max_concurrent=0"], r"must be >= 1"),
        (["llm=local", "llm.endpoints=['http://a/v1']"], r"llm=local serves its own model"),
    ],
)
def test_bad_endpoint_settings_are_refused_naming_the_key(overrides, says):
    with pytest.raises(ConfigError, match=says):
        validate(composed("llm=openai_compatible", *overrides))


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://user:s3cret-key@gpu-1:8000/v1", "carries a user name or password"),
        ("http://gpu-1:8000/v1?api_key=s3cret-key", "has a query string or a fragment"),
        ("http://gpu-1:8000/v1#s3cret-key", "has a query string or a fragment"),
    ],
)
def test_an_endpoint_url_carrying_a_secret_is_refused_without_repeating_it(url, says):
    """URLs are written to journals, the summary, the report and logs."""
    with pytest.raises(ConfigError) as refused:
        validate(composed("llm=openai_compatible", f"llm.endpoints=['http://a/v1','{url}']"))
    message = str(refused.value)
    assert f"llm.endpoints[1]='http://gpu-1:8000/v1' {says}" in message
    assert "llm.api_key_env" in message and "s3cret-key" not in message


def test_on_ray_the_workers_route_each_task_whole_to_one_endpoint(local_ray, tmp_path):
    """Routing runs inside the workers (their own clients, the route key set by the
    runner there), and the counts come from every worker's journals. That the choice is
    the same in any process is test_a_fresh_process_makes_the_same_choice."""
    data = write_suite(tmp_path / "suite")
    ray_backend = ["benchmark.execution.backend=ray", "benchmark.execution.ray.num_workers=2"]
    with FakeLLMServer(responder=respond_http) as one, FakeLLMServer(responder=respond_http) as two:
        summary = bench(tmp_path / "run", data, one, two, extra=ray_backend)
        seen = [{task_of(r) for r in s.requests} for s in (one, two)]
        requests = {one.openai_base_url: len(one.requests), two.openai_base_url: len(two.requests)}
    assert summary.tasks.finished == TASKS and summary.accuracy == 1.0
    assert seen[0] and seen[1] and not seen[0] & seen[1], seen
    written = json.loads((tmp_path / "run" / "summary.json").read_text())["endpoints"]
    assert {url: c["requests"] for url, c in written.items()} == requests
