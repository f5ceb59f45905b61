"""One whole task through AgentFactory, with the tool servers its config names."""

from __future__ import annotations

from pathlib import Path

from deepledger.agent.state import RunState
from deepledger.agent.task import AgentFactory
from deepledger.config import Config, tool_servers
from deepledger.llm.base import LLMClient
from deepledger.store.journal import Journal
from deepledger.tools.pool import ToolManager


async def solve(
    cfg: Config, llm: LLMClient, tmp_path: Path, question: str = "What time is it?"
) -> tuple[RunState, Journal]:
    """``llm`` answers ``question`` as the agent of ``cfg``; the state it ended in and its
    journal (``tmp_path/journal.jsonl``, closed), the servers stopped."""
    manager = ToolManager(tool_servers(cfg))
    journal = Journal(tmp_path / "journal.jsonl")
    try:
        state = await AgentFactory(cfg, llm, manager).solve(question, journal)
    finally:
        journal.close()
        await manager.aclose()
    return state, journal
