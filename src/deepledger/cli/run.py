"""``deepledger run``: one question answered, its trajectory journaled."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from deepledger.bench.metrics import plural
from deepledger.cli.bench import checked, refused_leaves_nothing
from deepledger.cli.common import config_dir
from deepledger.errors import ConfigError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from deepledger.config import Config, ToolServerConfig


def run_command(cfg: Config, node: DictConfig) -> int:
    with refused_leaves_nothing():
        question = _checked_question(cfg)
    return asyncio.run(_answer_one(cfg, question))


def _checked_question(cfg: Config) -> str:
    question = cfg.question
    if not question:
        raise ConfigError(
            'deepledger run needs a question: deepledger run "..." [OVERRIDES] (or '
            'question="...", or question=@FILE to read it from a UTF-8 file).'
        )
    if cfg.task_file and not Path(cfg.task_file).is_file():
        raise ConfigError(f"task_file={cfg.task_file!r} is not a file.")
    if cfg.task_file:
        _refuse_secret_task_file(cfg)
    checked(cfg)
    return question


def _refuse_secret_task_file(cfg: Config) -> None:
    """A ``task_file`` whose real path matches a secret-file rule is a usage error: the
    tools would refuse it anyway, and the model would be told where a key lies."""
    from deepledger.config import secret_rules

    assert cfg.task_file is not None
    if (rule := secret_rules(cfg).rule_for(Path(cfg.task_file).resolve())) is not None:
        raise ConfigError(
            f"task_file={cfg.task_file!r} matches the secret-file rule {rule!r}: files "
            "that hold keys or credentials are never shown to the model (docs/security.md)."
        )


def _run_tool_servers(cfg: Config) -> dict[str, ToolServerConfig]:
    """The tool servers of ``deepledger run``: the reader and tool-python get the attached
    file itself, never its folder (which may hold .env), and no data folder that holds
    the working directory or the home folder whole (``tools/roots.py``)."""
    from deepledger.config import tool_servers
    from deepledger.tools.roots import attach_file, narrow_wide_roots

    servers = tool_servers(cfg)
    attached = [Path(cfg.task_file)] if cfg.task_file else []
    narrow_wide_roots(servers, lambda: attached, cfg.web.allow_working_dir)
    for file in attached:
        attach_file(servers, file)
    return servers


async def _answer_one(cfg: Config, question: str) -> int:
    from hydra.core.hydra_config import HydraConfig

    from deepledger.agent.task import AgentFactory
    from deepledger.bench.services import note_writer, page_scraper
    from deepledger.llm.factory import create_client
    from deepledger.store.journal import Journal
    from deepledger.store.layout import RunLayout
    from deepledger.tools.list_cache import ToolListCache
    from deepledger.tools.pool import ToolManager

    layout = RunLayout(Path(HydraConfig.get().runtime.output_dir))
    journal = Journal(layout.run_journal)
    task_file = cfg.task_file
    servers = await asyncio.to_thread(_run_tool_servers, cfg)
    manager = ToolManager(
        servers, log_dir=layout.tool_server_logs, list_cache=ToolListCache.default()
    )
    writer = note_writer(cfg, config_dir())
    scraper = page_scraper(cfg, config_dir())
    llm = create_client(cfg.llm)
    try:
        factory = AgentFactory(cfg, llm, manager, note_writer=writer, scraper=scraper)
        state = await factory.solve(question, journal, task_file)
    finally:
        journal.close()
        await manager.aclose()
        await llm.aclose()
        if writer is not None:
            await writer.llm.aclose()
        if scraper is not None:
            await scraper.aclose()
    print(f"Answer: {state.final_answer if state.final_answer is not None else '(none)'}")
    ended = state.end_reason.value if state.end_reason is not None else "not ended"
    print(
        f"({state.provenance.value}; {ended} after {plural(state.turn, 'turn')}, "
        f"{plural(state.tool_calls, 'tool call')}, {state.ledger.total.total_tokens} tokens)"
    )
    if state.end_detail:  # e.g. the task alone does not fit the window
        print(f"Why: {state.end_detail}")
    print(f"Log: {journal.path}")
    return 0
