"""Driving the turn loop and the answer generator in process, with scripted models."""

from __future__ import annotations

from deepledger.agent.answer import AnswerGenerator, AnswerPolicy
from deepledger.agent.boxed import last_boxed
from deepledger.agent.orchestrator import LoopLimits, Orchestrator
from deepledger.agent.state import RunState
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import MessageKind
from deepledger.store.journal import Journal
from deepledger.tools.pool import ToolManager
from deepledger.tools.protocols import XmlProtocol
from deepledger.tools.types import LocalTool, ToolInfo

LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}},
    "required": ["query"],
}


def call(query: str, server: str = "kb", tool: str = "lookup") -> str:
    """One XML tool call, as the model writes it."""
    return (
        f"<use_mcp_tool><server_name>{server}</server_name><tool_name>{tool}</tool_name>"
        f'<arguments>{{"query": "{query}"}}</arguments></use_mcp_tool>'
    )


async def lookup(arguments):
    return f"facts about {arguments['query']} " + "x" * 200


def restate(messages, tools):
    """A model that, asked for its final answer, restates the last box it wrote."""
    replies = [m.content for m in messages if m.kind is MessageKind.MODEL]
    boxed = next((b for b in map(last_boxed, reversed(replies)) if b), None)
    return f"\\boxed{{{boxed}}}" if boxed else "I do not know."


async def make(llm, *, protocol=None, max_turns=10, window=100_000, keep=-1, cap=3, context=None):
    """An orchestrator with one local `kb.lookup` tool, journaling in memory."""
    tools = ToolManager({}).for_task(
        [],
        local_tools=[LocalTool(ToolInfo("kb", "lookup", "Look up facts.", LOOKUP_SCHEMA), lookup)],
    )
    await tools.start()
    journal = Journal(None)
    orchestrator = Orchestrator(
        llm=llm,
        tools=tools,
        protocol=protocol or XmlProtocol(),
        settings=GenerationSettings(max_tokens=100),
        system_prompt="sys",
        limits=LoopLimits(max_turns, window, keep, cap),
        finalizer=AnswerGenerator(
            AnswerPolicy(max_final_answer_retries=1),
            summary_prompt="Answer now in \\boxed{}.",
        ),
        journal=journal,
        context=context,
    )
    return orchestrator, journal


class CharCountingLLM(ScriptedLLM):
    """The scripted model, counting 4 characters a token: sizes checkable by hand."""

    @property
    def token_counter(self):
        from deepledger.llm.tokens import CharCounter

        return CharCounter()


async def finalize_in(
    window: int, policy: AnswerPolicy, state: RunState, llm: ScriptedLLM
) -> Journal:
    """Finalize ``state`` within a context window of ``window`` tokens."""
    from deepledger.context.guard import ContextWindow
    from deepledger.context.policy import ContextPolicy

    journal = Journal(None)
    generator = AnswerGenerator(policy, summary_prompt="Answer in \\boxed{}.")
    settings = GenerationSettings(max_tokens=100)
    await generator.finalize(
        state, llm, settings, journal, ContextPolicy(), window=ContextWindow(window)
    )
    return journal
