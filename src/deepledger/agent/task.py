"""Wiring one task: the agent's tools, its prompt, its sub-agents, and the loop.

:class:`AgentFactory` holds what a run shares (config, model client, tool manager) and
builds an :class:`Orchestrator` for the main agent or for any sub-agent. A sub-agent is
offered to its parent as the tool ``agent-<name>.run_subtask(subtask)``; calling it runs
the same loop with the sub-agent's own tools, turn budget and prompt, journals under the
parent's journal, and returns the sub-agent's report as the tool result.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from deepledger.agent.answer import AnswerGenerator, AnswerPolicy, summary_prompt
from deepledger.agent.attachment import Attachment, compose_task, read_attachment
from deepledger.agent.limits import TaskBudget, TaskLimits
from deepledger.agent.orchestrator import LoopLimits, Orchestrator
from deepledger.agent.refused import Refused
from deepledger.agent.resume import ResumePoint, rebuild, stateful_servers
from deepledger.agent.retry_plan import RetryPlan
from deepledger.agent.state import RunState
from deepledger.config import (
    BUILTIN_TOOLS,
    MAX_CYCLE_REPEATS,
    AgentConfig,
    AgentRoleConfig,
    Config,
    ProtocolName,
    prompt_set,
)
from deepledger.context.compaction import NoteWriter
from deepledger.context.guard import ContextWindow
from deepledger.context.policy import ContextPolicy
from deepledger.context.strategies import make_strategy
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.factory import settings_from_config
from deepledger.llm.usage import UsageLedger, price_of
from deepledger.messages import ImagePart, JSONObject, ToolSpec
from deepledger.prompts import PromptSet
from deepledger.records.events import FirstCallSkipped, SubagentFinished, ToolServerUnavailable
from deepledger.store.journal import Journal
from deepledger.tools.archive import ARCHIVE_TOOL, ResultArchive, archive_tools
from deepledger.tools.memory import MEMORY_TOOL, MemoryStore, memory_tools
from deepledger.tools.pool import ToolManager
from deepledger.tools.protocols import ForcedCall, ToolProtocol, make_protocol
from deepledger.tools.repair import CallRepairs
from deepledger.tools.scrape import SERVER as SCRAPE_TOOL
from deepledger.tools.scrape import PageScraper
from deepledger.tools.task_tools import ResultPolicy, TaskTools
from deepledger.tools.types import LocalTool, ToolInfo

SUBTASK_SCHEMA = {
    "type": "object",
    "properties": {"subtask": {"type": "string", "description": "What to find out, fully stated."}},
    "required": ["subtask"],
}


def policy_from_config(agent: AgentConfig, is_final_retry: bool = False) -> AnswerPolicy:
    """The answer policy of one run, as ``agent``'s retry plan reads the keys
    (``agent/retry_plan.py``)."""
    return RetryPlan.for_agent(agent).answer_policy(final=is_final_retry)


# The tool servers that read a task's attached file; without one of them, the file's
# content goes into the task text (agent/attachment.py).
READER_TOOLS = frozenset({"reader"})


async def task_message(
    cfg: Config, question: str, file_path: str | None = None, *, sees_images: bool = False
) -> tuple[str, tuple[ImagePart, ...]]:
    """The main agent's task message and the images that go with it: the question laid
    out as agent.prompt_profile lays it out, with the attached file named (a reader
    tool opens it) or its converted content in the text (no reader tool)."""
    prompts = prompt_set(cfg.agent)
    reader = not READER_TOOLS.isdisjoint(cfg.agent.main_agent.tools)
    attachment: Attachment | None = None
    if file_path:
        path = await asyncio.to_thread(Path(file_path).resolve)
        needed = not reader or sees_images
        attachment = await read_attachment(path) if needed else Attachment(path)
    text = compose_task(question, attachment, prompts, reader=reader, sees_images=sees_images)
    if attachment is None or attachment.kind != "image" or not sees_images:
        return text, ()
    return text, attachment.images


@dataclass(frozen=True)
class _RolePrompts:
    """What one agent's prompts are made of: its system template, whether it boxes a
    final answer, the task as its closing prompt repeats it, its role's description."""

    system: str
    boxed: bool
    question: str
    role_description: str = ""


class AgentFactory:
    def __init__(
        self,
        cfg: Config,
        llm: LLMClient,
        manager: ToolManager,
        policy: AnswerPolicy | None = None,
        note_writer: NoteWriter | None = None,
        scraper: PageScraper | None = None,
        budget: TaskBudget | None = None,
    ) -> None:
        self.cfg = cfg
        # The task's limits, shared by the main agent and its sub-agents. Without one
        # (`deepledger run`), the task limits of benchmark.execution apply from now.
        self.budget = budget or TaskBudget(TaskLimits.from_execution(cfg.benchmark.execution))
        self.llm = llm
        self.scraper = scraper  # the scrape-and-extract tool's model, built once per run
        self.note_writer = note_writer  # agent.context.summary_llm, built once per run
        self.manager = manager
        self.policy = policy or policy_from_config(cfg.agent)
        self.prompts: PromptSet = prompt_set(cfg.agent)
        self.price = price_of(cfg.llm, cfg.pricing)
        self._subagent_calls = 0
        # The model's window for every agent of this task: lowered for all of them when
        # the server refuses a request and states a smaller one (context/guard.py).
        self.window = ContextWindow(cfg.llm.max_context_length)

    async def solve(
        self, question: str, journal: Journal, file_path: str | None = None
    ) -> RunState:
        """Run the main agent on one task."""
        state = await self._solve(question, journal, file_path, None)
        assert isinstance(state, RunState), "only a resume can be refused"
        return state

    async def resume(
        self, question: str, journal: Journal, point: ResumePoint, file_path: str | None = None
    ) -> RunState | Refused:
        """Go on with the main agent's run a killed run left at ``point`` (its journal,
        opened to append); or why it cannot be rebuilt, with nothing run (the caller
        starts the retry afresh)."""
        return await self._solve(question, journal, file_path, point)

    async def _solve(
        self, question: str, journal: Journal, file_path: str | None, point: ResumePoint | None
    ) -> RunState | Refused:
        text, images = await task_message(
            self.cfg, question, file_path, sees_images=self.llm.capabilities.images
        )
        return await self._run_role(
            self.cfg.agent.main_agent,
            text,
            journal,
            question=question,
            prompt="system.md",
            boxed=True,
            task_images=images,
            main=True,
            point=point,
        )

    async def _run_role(
        self,
        role: AgentRoleConfig,
        text: str,
        journal: Journal,
        *,
        prompt: str,
        boxed: bool,
        question: str,
        role_description: str = "",
        task_images: tuple[ImagePart, ...] = (),
        main: bool = False,
        point: ResumePoint | None = None,
    ) -> RunState | Refused:
        """``text``: the task message; ``question``: the task as the closing prompt
        repeats it (the mirothinker profile does)."""
        ledger = UsageLedger(self.price)
        prompts = _RolePrompts(prompt, boxed, question, role_description)
        # A sub-agent's calls are counted while it runs, then in its parent's ledger.
        with self.budget.watch(ledger, keep=main):
            return await self._run_role_counted(
                role, text, journal, ledger, prompts, task_images, point
            )

    async def _run_role_counted(
        self,
        role: AgentRoleConfig,
        text: str,
        journal: Journal,
        ledger: UsageLedger,
        prompts: _RolePrompts,
        task_images: tuple[ImagePart, ...],
        point: ResumePoint | None = None,
    ) -> RunState | Refused:
        servers = [t for t in role.tools if not t.startswith("agent-") and t not in BUILTIN_TOOLS]
        local = [
            self._subagent_tool(t, journal, ledger) for t in role.tools if t.startswith("agent-")
        ]
        memory, scratch = None, None
        if MEMORY_TOOL in role.tools:
            folder = journal.memory_folder
            if folder is None:  # no journal on disk (tests): notes last as long as the task
                scratch = tempfile.TemporaryDirectory(prefix="deepledger-memory-")
                folder = Path(scratch.name)
            memory = MemoryStore(folder)
            local += memory_tools(memory)
        if SCRAPE_TOOL in role.tools:
            local.append(self._scrape_tool(journal, ledger))
        policy, archive = self._result_policy(role, journal)
        listed = archive if ARCHIVE_TOOL in role.tools else []
        hidden = archive if ARCHIVE_TOOL not in role.tools else []
        tools = self.manager.for_task(
            servers,
            [*role.tool_blacklist, *(self.cfg.llm.tool_blacklist or [])],  # the model's own too
            [*local, *listed],
            policy,
            hidden_tools=hidden,
            repairs=CallRepairs(
                python_arguments=self.cfg.agent.recovery.repairs_python,
                unknown_server=self.cfg.agent.recovery.routes_unknown_server,
            ),
        )
        try:
            await tools.start()
            for server, why in tools.unavailable.items():
                unavailable = ToolServerUnavailable(server=server, reason=why)
                if point is None or not point.said(unavailable):  # said once, not per resume
                    journal.write(unavailable)
            orchestrator = self._orchestrator(role, tools, journal, prompts, ledger, memory, point)
            if point is None:
                return await orchestrator.run(text, task_images)
            rebuilt = await rebuild(
                point,
                protocol=orchestrator.protocol,
                policy=orchestrator.policy,
                ledger=ledger,
                system_prompt=orchestrator.system_prompt,
                tools=list(tools.tools),
                extraction_price=self.scraper.model.price if self.scraper else None,
            )
            if isinstance(rebuilt, Refused):
                return rebuilt
            scopes = self.manager.scopes()
            rebuilt.lost_tool_state = stateful_servers(list(tools.server_names), scopes)
            return await orchestrator.run(text, task_images, rebuilt)
        finally:
            await tools.aclose()
            if scratch is not None:
                scratch.cleanup()

    def _result_policy(
        self, role: AgentRoleConfig, journal: Journal
    ) -> tuple[ResultPolicy, list[LocalTool]]:
        """What this agent's tool results may hold: images if its model sees them; long
        results archived beside the journal when the model can read the archive (an
        XML call can name any tool; a native one only a declared tool)."""
        folder = journal.archive_folder
        protocol = self.cfg.llm.tool_protocol or self.cfg.agent.tool_protocol
        callable_ = ARCHIVE_TOOL in role.tools or protocol == ProtocolName.XML
        archive = ResultArchive(folder) if folder is not None and callable_ else None
        policy = ResultPolicy(
            accepts_images=self.llm.capabilities.images,
            archive=archive,
            archive_callable=archive is not None,
        )
        return policy, archive_tools(archive) if archive is not None else []

    def _scrape_tool(self, journal: Journal, ledger: UsageLedger) -> LocalTool:
        scraper = self.scraper or PageScraper.for_agent(self.cfg, self.llm, self.price)
        return scraper.tool(journal, ledger)

    def _orchestrator(
        self,
        role: AgentRoleConfig,
        tools: TaskTools,
        journal: Journal,
        prompts: _RolePrompts,
        ledger: UsageLedger,
        memory: MemoryStore | None = None,
        point: ResumePoint | None = None,
    ) -> Orchestrator:
        agent, llm = self.cfg.agent, self.cfg.llm
        protocol = make_protocol(
            llm.tool_protocol or agent.tool_protocol, self.llm.capabilities, self.prompts
        )
        system = self.prompts.render(
            prompts.system,
            date=datetime.now(UTC).date().isoformat(),
            tools_section=protocol.system_section(tools.tools),
            role_description=prompts.role_description,
        )
        if llm.worked_example and tools.tools:
            system += "\n\n" + self.prompts.render(llm.worked_example)
        limits = LoopLimits(
            # llm.max_turns: the model's own cap, whatever the agent preset allows.
            max_turns=min(role.max_turns, llm.max_turns or role.max_turns),
            max_consecutive_rollbacks=role.max_consecutive_rollbacks,
            max_cycle_repeats=(
                MAX_CYCLE_REPEATS if role.max_cycle_repeats is None else role.max_cycle_repeats
            ),
            cut_reply_attempts=agent.recovery.cut_attempts,
        )
        settings = settings_from_config(self.cfg.llm)
        summary = summary_prompt(self.cfg.benchmark.answer_format, prompts.question, self.prompts)
        specs = protocol.specs(tools.tools)
        context = self._context_policy(settings, summary, journal, ledger, memory, specs)
        finalizer = AnswerGenerator(
            self.policy,
            summary_prompt=summary,
            boxed=prompts.boxed,
            prompts=self.prompts,
            question=prompts.question,
            non_answers=agent.recovery.voids_non_answers,
            cut_attempts=agent.recovery.cut_attempts,
        )
        return Orchestrator(
            llm=self.llm,
            tools=tools,
            protocol=protocol,
            settings=settings,
            limits=limits,
            system_prompt=system,
            finalizer=finalizer,
            journal=journal,
            policy=context,
            ledger=ledger,
            first_call=self._first_call(protocol, tools, journal, point),
            budget=self.budget,
        )

    def _context_policy(
        self,
        settings: GenerationSettings,
        summary: str,
        journal: Journal,
        ledger: UsageLedger,
        memory: MemoryStore | None,
        specs: list[ToolSpec],
    ) -> ContextPolicy:
        """What this agent's requests send (agent.context, agent.keep_tool_result),
        guarded against the task's shared window; compaction notes are written by
        agent.context.summary_llm's model, else the agent's, and list its memory notes;
        their spend is in the agent's ``ledger``."""
        agent = self.cfg.agent
        memory_index = memory.names if memory is not None else None
        return ContextPolicy.for_model(
            make_strategy(agent.context, memory_index=memory_index),
            keep_tool_result=agent.keep_tool_result,
            llm=self.llm,
            settings=settings,
            window=self.window,
            summary_prompt=summary,
            journal=journal,
            ledger=ledger,
            note_writer=self.note_writer,
            tools=specs,  # a tools block the model's template writes counts from the start
        )

    def _first_call(
        self,
        protocol: ToolProtocol,
        tools: TaskTools,
        journal: Journal,
        point: ResumePoint | None = None,
    ) -> ForcedCall | None:
        """How the first reply is made to call ``llm.first_call``, or ``None`` (with the
        reason in the journal, once: not again when resuming at ``point``) when this
        agent, protocol or model cannot."""
        wanted = self.cfg.llm.first_call
        if not wanted:
            return None
        tool = next((t for t in tools.tools if wanted in (t.qualified_name, t.name)), None)
        forced = protocol.forced_call(tool) if tool else None
        why = (
            f"this agent has no tool {wanted}"
            if tool is None
            else f"the {protocol.name} protocol cannot prefill a call"
            if forced is None
            else "the model's provider cannot continue a prefill"
            if not self.llm.capabilities.prefill
            else None
        )
        if why:
            skipped = FirstCallSkipped(tool=wanted, reason=why)
            if point is None or not point.said(skipped):
                journal.write(skipped)
            return None
        return forced

    def _subagent_tool(self, server: str, parent: Journal, ledger: UsageLedger) -> LocalTool:
        name = server.removeprefix("agent-")
        role = self.cfg.agent.sub_agents[name]
        description = role.description or f"Delegate a research subtask to the {name} agent."

        async def run_subtask(arguments: JSONObject) -> str:
            self._subagent_calls += 1
            journal = parent.child(f"{name}-{self._subagent_calls}")
            try:
                state = await self._run_role(
                    role,
                    arguments["subtask"],
                    journal,
                    prompt="subagent_system.md",
                    boxed=False,
                    question=arguments["subtask"],
                    role_description=description,
                )
            finally:
                journal.close()
            assert isinstance(state, RunState), "a sub-agent's run is never a resume"
            ledger.absorb(state.ledger)
            parent.write(
                SubagentFinished(
                    agent=name,
                    journal=None if journal.path is None else str(journal.path),
                    turns=state.turn,
                    usage=state.ledger.total,
                )
            )
            return state.final_answer or "The sub-agent ended without a report."

        info = ToolInfo(server, "run_subtask", description, SUBTASK_SCHEMA)
        return LocalTool(info, run_subtask, max_result_chars=0)  # a report is never cut
