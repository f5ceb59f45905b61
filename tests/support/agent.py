"""Driving the turn loop and the answer generator in process, with scripted models."""

from __future__ import annotations

from deepledger.agent.answer import AnswerGenerator, AnswerPolicy
from deepledger.agent.boxed import last_boxed
from deepledger.agent.orchestrator import LoopLimits, Orchestrator
from deepledger.agent.state import RunState
from deepledger.context.guard import ContextWindow
from deepledger.context.policy import ContextPolicy
from deepledger.context.strategy import ContextStrategy
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.usage import UsageLedger
from deepledger.messages import MessageKind
from deepledger.store.journal import Journal
from deepledger.tools.pool import ToolManager
from deepledger.tools.protocols import ToolProtocol, XmlProtocol
from deepledger.tools.task_tools import TaskTools
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
    orchestrator = loop(
        llm,
        tools,
        protocol or XmlProtocol(),
        LoopLimits(max_turns, cap),
        AnswerGenerator(
            AnswerPolicy(max_final_answer_retries=1),
            summary_prompt="Answer now in \\boxed{}.",
        ),
        journal,
        settings=GenerationSettings(max_tokens=100),
        system_prompt="sys",
        context=context,
        window=window,
        keep=keep,
    )
    return orchestrator, journal


def loop(
    llm: LLMClient,
    tools: TaskTools,
    protocol: ToolProtocol,
    limits: LoopLimits,
    finalizer: AnswerGenerator,
    journal: Journal,
    *,
    settings: GenerationSettings | None = None,
    system_prompt: str = "sys",
    context: ContextStrategy | None = None,
    window: int = 100_000,
    keep: int = -1,
    ledger: UsageLedger | None = None,
) -> Orchestrator:
    """The turn loop of ``llm`` with the policy an agent of the runner gets: ``context``
    (default: keep every message) with ``keep`` as keep_tool_result, guarded against a
    window of ``window`` tokens, compaction notes from ``llm`` recorded in the loop's
    ``ledger``."""
    settings = settings or GenerationSettings()
    ledger = ledger if ledger is not None else UsageLedger()
    policy = ContextPolicy.for_model(
        context,
        keep_tool_result=keep,
        llm=llm,
        settings=settings,
        window=ContextWindow(window),
        summary_prompt=finalizer.summary_prompt,
        journal=journal,
        ledger=ledger,
    )
    return Orchestrator(
        llm=llm,
        tools=tools,
        protocol=protocol,
        settings=settings,
        limits=limits,
        system_prompt=system_prompt,
        finalizer=finalizer,
        journal=journal,
        policy=policy,
        ledger=ledger,
    )


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
    journal = Journal(None)
    generator = AnswerGenerator(policy, summary_prompt="Answer in \\boxed{}.")
    settings = GenerationSettings(max_tokens=100)
    await generator.finalize(
        state, llm, settings, journal, ContextPolicy(), window=ContextWindow(window)
    )
    return journal
