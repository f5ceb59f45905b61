"""The memory tool: notes outside the context window, per task attempt, in the run dir."""

from __future__ import annotations

import pytest

from deepledger.agent.task import AgentFactory
from deepledger.config import tool_servers, validate
from deepledger.context.strategies.compaction import Compaction
from deepledger.errors import ConfigError
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import MessageKind
from deepledger.store.journal import Journal
from deepledger.tools.memory import MemoryStore
from deepledger.tools.pool import ToolManager
from deepledger.tools.types import ToolRefusal
from tests.support.config import composed
from tests.support.histories import NOTES, compact, padded


def test_notes_are_written_read_and_listed_as_files(tmp_path):
    store = MemoryStore(tmp_path / "memory")
    assert store.listing() == "No notes yet." and store.names() == []
    assert "Saved note 'Peru facts'" in store.write("Peru facts", "capital: Lima")
    store.write("Peru facts", "capital: Lima; area 1,285,216 km2")  # replaces
    store.write("plan", "check the area")
    assert store.read("Peru facts") == "capital: Lima; area 1,285,216 km2"
    assert store.names() == ["Peru facts", "plan"]
    assert "- plan (14 characters)" in store.listing()
    assert (tmp_path / "memory" / "plan.md").read_text() == "check the area"


@pytest.mark.parametrize("name", ["../escape", ".hidden", "a/b", "", "x" * 81])
def test_a_bad_note_name_is_refused(tmp_path, name):
    with pytest.raises(ToolRefusal, match="not a note name"):
        MemoryStore(tmp_path).write(name, "text")


def test_a_missing_note_and_an_oversized_one_are_refused_with_what_exists(tmp_path):
    store = MemoryStore(tmp_path)
    store.write("plan", "x")
    with pytest.raises(ToolRefusal, match=r"no note named 'nope' \(notes: plan\)"):
        store.read("nope")
    with pytest.raises(ToolRefusal, match="keep it under"):
        store.write("big", "x" * 20_001)


def call(tool: str, arguments: str) -> str:
    return (
        f"<use_mcp_tool><server_name>memory</server_name><tool_name>{tool}</tool_name>"
        f"<arguments>{arguments}</arguments></use_mcp_tool>"
    )


async def test_an_agent_keeps_and_reads_back_notes_through_the_tool(tmp_path):
    cfg = composed("agent.main_agent.tools=[memory]", "agent.tool_protocol=xml")
    validate(cfg)
    steps = [
        call("write", '{"name": "facts", "text": "Lima is the capital."}'),
        call("read", '{"name": "facts"}'),
        call("read", '{"name": "../x"}'),
        "From my notes: \\boxed{Lima}",
    ]
    llm = ScriptedLLM(steps, responder=lambda messages, tools: "\\boxed{Lima}")
    manager = ToolManager(tool_servers(cfg))
    journal = Journal(tmp_path / "tasks" / "t1" / "attempt-1-retry-0.jsonl")
    try:
        state = await AgentFactory(cfg, llm, manager).solve("Capital of Peru?", journal)
    finally:
        journal.close()
        await manager.aclose()
    assert "Server name: memory" in llm.calls[0].messages[0].content
    results = [m.content for m in state.history if m.kind is MessageKind.TOOL_RESULTS]
    assert "Saved note 'facts'" in results[0] and "Lima is the capital." in results[1]
    assert "not a note name" in results[2] and state.final_answer == "Lima"
    note = tmp_path / "tasks" / "t1" / "memory" / "attempt-1" / "facts.md"
    assert note.read_text() == "Lima is the capital."


def test_an_unknown_tool_name_lists_memory_among_the_known_ones():
    with pytest.raises(ConfigError, match=r"known: .*memory"):
        validate(composed("agent.main_agent.tools=[memry]"))


async def test_the_notes_index_comes_back_with_every_compaction(tmp_path):
    store = MemoryStore(tmp_path)
    store.write("populations", "...")
    store.write("sources", "...")
    strategy = Compaction(1, min_saving=0.0, memory_index=store.names)
    history = padded(11)
    changed, _ = await compact(strategy, history, ScriptedLLM([NOTES]))
    notes = strategy.select(history)[2].content
    assert changed and NOTES in notes
    assert "memory notes (read one with memory.read): populations, sources" in notes


def test_a_configured_server_named_memory_is_refused():
    cfg = composed("+tools.memory={command: server-memory}")
    with pytest.raises(ConfigError, match="'memory' is the name of a tool built into deepledger"):
        validate(cfg)
