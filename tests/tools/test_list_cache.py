"""Tool lists kept between runs: the first request goes out with a cached list while the
servers start, and a server that then fails, hangs or is closed early is handled."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from deepledger.agent.task import AgentFactory
from deepledger.config import ToolServerConfig, tool_servers
from deepledger.llm.factory import create_client
from deepledger.messages import ToolCall
from deepledger.store.journal import Journal
from deepledger.tools.list_cache import ToolListCache, server_key
from deepledger.tools.pool import ToolManager
from deepledger.tools.session import resolve_command
from tests.support.config import composed
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply
from tests.support.tool_servers import CRASH_ON_START, FLAKY, HANG_BEFORE_HANDSHAKE, flaky

ECHO = {
    "name": "echo",
    "description": "Return the text.",
    "input_schema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
}


class CountingCache(ToolListCache):
    """The cache, counting the lists it handed out."""

    hits = 0

    def load(self, key):
        found = super().load(key)
        self.hits += found is not None
        return found


def key_of(cfg: ToolServerConfig) -> str:
    return server_key(resolve_command(cfg.command), list(cfg.args), cfg)


def call(tool: str, server: str, **arguments) -> ToolCall:
    return ToolCall(f"id-{tool}", tool, arguments, server_name=server)


async def first_request(cfg, cache: ToolListCache, tmp_path) -> dict:
    """What the model is sent first by a one-question run with the default tools."""
    with FakeLLMServer(responder=lambda request: Reply("\\boxed{42}")) as server:
        cfg.llm.base_url = server.openai_base_url
        llm = create_client(cfg.llm)
        manager = ToolManager(tool_servers(cfg), tmp_path / "logs", list_cache=cache)
        try:
            await AgentFactory(cfg, llm, manager).solve("What is six times seven?", Journal(None))
        finally:
            await manager.aclose()
            await llm.aclose()
        return server.requests[0].body


@pytest.mark.parametrize("protocol", ["native", "xml"])
async def test_the_second_run_sends_the_cached_list_byte_for_byte(tmp_path, monkeypatch, protocol):
    monkeypatch.chdir(tmp_path)
    cfg = composed(
        "llm=openai_compatible",
        "llm.base_url=http://127.0.0.1:9/v1",
        f"agent.tool_protocol={protocol}",
        "agent.main_agent.tools=[search,reader,python]",
        f"benchmark.data.data_dir={tmp_path}",
    )
    cache = CountingCache(tmp_path / "cache")
    uncached = await first_request(cfg, cache, tmp_path)
    assert cache.hits == 0 and len(list(cache.folder.glob("*.json"))) == 3
    cached = await first_request(cfg, cache, tmp_path)
    assert cache.hits == 3  # every server's list came from the cache
    sent = [
        json.dumps(body.get(k), sort_keys=False)
        for body in (uncached, cached)
        for k in ("tools", "messages")
    ]
    assert sent[0] == sent[2] and sent[1] == sent[3]  # tools, then the system prompt and task
    assert (
        ("search__search" in sent[2])
        if protocol == "native"
        else ("## Server name: python" in sent[3])
    )


async def test_a_cached_list_is_used_and_a_changed_command_line_is_not(tmp_path):
    cache = ToolListCache(tmp_path / "cache")
    config = flaky()
    manager = ToolManager({"flaky": config}, list_cache=cache)
    try:
        listed = await manager.for_task(["flaky"]).start()  # uncached: it starts first
    finally:
        await manager.aclose()
    entry = cache.folder / f"{key_of(config)}.json"
    stored = json.loads(entry.read_text())
    assert [t["name"] for t in stored["tools"]] == [t.name for t in listed]
    for tool in stored["tools"]:  # a mark only the cache can have put there
        tool["description"] = "FROM THE CACHE " + tool["description"]
    entry.write_text(json.dumps(stored))

    manager = ToolManager({"flaky": flaky()}, list_cache=cache)
    try:
        tools = manager.for_task(["flaky"])
        offered = await tools.start()
        assert all(t.description.startswith("FROM THE CACHE") for t in offered)
        answer = await tools.call(call("echo", "flaky", text="hi"))  # waits for the start
        assert not answer.is_error and answer.content.startswith("echo: hi")
    finally:
        await manager.aclose()
    # The server's own list replaced the marked one once it had started.
    assert not json.loads(entry.read_text())["tools"][0]["description"].startswith("FROM")

    entry.write_text(json.dumps(stored))
    changed = flaky(args=["-u", FLAKY])  # same server, another command line: another key
    assert key_of(changed) != key_of(config)
    manager = ToolManager({"flaky": changed}, list_cache=cache)
    try:
        offered = await manager.for_task(["flaky"]).start()
    finally:
        await manager.aclose()
    assert offered and not any(t.description.startswith("FROM") for t in offered)
    other_command = flaky(command=str(tmp_path / "python"))
    assert key_of(other_command) != key_of(config)


async def test_a_server_that_fails_after_its_cached_list_was_sent_says_it_is_unavailable(
    tmp_path, caplog
):
    crashy = ToolServerConfig(command=sys.executable, args=["-c", CRASH_ON_START])
    cache = ToolListCache(tmp_path / "cache")
    cache.store(key_of(crashy), [ECHO])
    manager = ToolManager({"crashy": crashy}, tmp_path / "logs", list_cache=cache)
    try:
        tools = manager.for_task(["crashy"])
        assert [t.name for t in await tools.start()] == ["echo"]  # from the cache
        told = await asyncio.wait_for(tools.call(call("echo", "crashy", text="hi")), 60)
        await tools.aclose()
        later = manager.for_task(["crashy"])  # the next task: left out, as without a cache
        assert await later.start() == []
    finally:
        await manager.aclose()
    assert told.is_error and told.content == (
        "Tool server 'crashy' is unavailable in this task (tool server 'crashy' failed to "
        "start: it exited with status 3 before the handshake); use the other tools."
    )
    assert cache.load(key_of(crashy)) is None  # dropped: the next run waits for it
    logged = [r.getMessage() for r in caplog.records if "crashy" in r.getMessage()]
    assert len(logged) == 1 and "frobnicate" in logged[0]  # its stderr, said once


@pytest.mark.parametrize("scope", ["shared", "task"])
async def test_closing_a_server_that_is_still_starting_does_not_wait_for_it(tmp_path, scope):
    slow = ToolServerConfig(
        command=sys.executable,
        args=["-c", HANG_BEFORE_HANDSHAKE],
        scope=scope,
        startup_timeout_seconds=600,
    )
    cache = ToolListCache(tmp_path / "cache")
    cache.store(key_of(slow), [ECHO])
    manager = ToolManager({"slow": slow}, tmp_path / "logs", list_cache=cache)
    tools = manager.for_task(["slow"])
    assert [t.name for t in await tools.start()] == ["echo"]
    connection = manager.connection("slow", tools._task_scoped)
    log = tmp_path / "logs" / "slow.stderr.log"
    for _ in range(1200):  # until the process is up (it will never answer)
        if "loading a huge index" in (log.read_text() if log.exists() else ""):
            break
        await asyncio.sleep(0.05)
    process = connection._process
    await asyncio.wait_for(tools.aclose(), 20)  # far less than its startup timeout
    await asyncio.wait_for(manager.aclose(), 20)
    assert process.signalled == "SIGTERM"
    with pytest.raises(ProcessLookupError):
        os.kill(process.pid, 0)


def test_the_key_holds_no_secret_and_follows_what_the_server_is_given(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERPER_API_KEY", "sk-first")
    config = flaky(env_from=["SERPER_API_KEY"], env={"X_API_KEY": "fixed-secret", "MODE": "a"})
    key = key_of(config)
    monkeypatch.setenv("SERPER_API_KEY", "sk-second")
    assert key_of(config) == key  # the value is not part of it
    monkeypatch.delenv("SERPER_API_KEY")
    assert key_of(config) != key  # whether it is set is
    assert key_of(flaky(env_from=["SERPER_API_KEY"], env={"X_API_KEY": "x", "MODE": "a"})) == (
        key_of(config)
    )
    assert key_of(flaky(env_from=["SERPER_API_KEY"], env={"X_API_KEY": "x", "MODE": "b"})) != (
        key_of(config)
    )
    cache = ToolListCache(tmp_path / "cache")
    cache.store(key, [ECHO])
    (entry,) = cache.folder.iterdir()
    assert "secret" not in entry.read_text() and "sk-" not in entry.read_text()
    assert cache.load(key) == [ECHO]
    entry.write_text("{torn")
    assert cache.load(key) is None
