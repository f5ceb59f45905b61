"""The ``deepledger`` command: ``bench | run | report | replay``.

Hydra has no subcommands, so the first argument picks the command and the rest goes
to Hydra untouched (overrides, ``--cfg job``, ``-m`` sweeps, ``hydra.run.dir=...``).
Errors deepledger raises on purpose are printed as one paragraph with exit code 2;
a traceback means a bug.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deepledger import __version__
from deepledger.errors import ConfigError, DeepLedgerError

USAGE = f"""\
deepledger {__version__} — a deep-research agent runtime

usage:
  deepledger bench [OVERRIDES...]           run a benchmark suite
  deepledger run question="..." [OVERRIDES] answer one question
  deepledger report RUN_DIR [RUN_DIR...] [--out FILE]
                                            rebuild a run's summary and HTML report;
                                            several: compare them in one report
  deepledger replay RUN_DIR [KEY=VALUE...]  a run's cost under other context policies
                                            (agent.context.*, agent.keep_tool_result,
                                            llm.max_context_length; --price MODEL)
  deepledger COMMAND --help                 Hydra's help: config groups and keys
  deepledger bench --cfg job [OVERRIDES]    print the composed config and stop

OVERRIDES are Hydra overrides, e.g.
  llm=openai_compatible llm.base_url=http://127.0.0.1:8000/v1 llm.model_name=my-model
  agent=keep5_compress5 agent.keep_tool_result=3 benchmark.execution.max_tasks=10

Config groups: llm=local|openai_compatible|openai|anthropic|qwen-3,
  agent=default|keep5_compress5|keep5_compress5_300turns|multi_agent|
    mirothinker_1.7_keep5_max200|mirothinker_1.7_keep5_max300|mirothinker_v1.5_keep5_max400,
  benchmark=example|worldfacts|gaia-validation|gaia-validation-text-103|browsecomp|
    browsecomp-zh|hle|hle-text-500|hle-text-2158|simpleqa|freshqa|fanoutqa|frames|
    xbench-deepsearch|webwalkerqa|seal-0|deepsearchqa|futurex|aime2025.
Tool servers: tools.<name>.* (search, reader, python, web_search, search_and_scrape_webpage,
  tool-python, time); web.search_backend=serper|searxng|tavily|brave|local.
API keys are read from the environment (or ./.env), never from config files; a key given
as llm.api_key=... is used and never written.
"""

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # the shell convention for Ctrl-C


def config_dir() -> Path:
    """``$DEEPLEDGER_CONFIG_DIR``, else the ``conf/`` of the source checkout."""
    configured = os.environ.get("DEEPLEDGER_CONFIG_DIR")
    path = Path(configured) if configured else Path(__file__).resolve().parents[2] / "conf"
    if not (path / "config.yaml").is_file():
        raise ConfigError(
            f"No deepledger configuration at {path} (config.yaml missing). Install from a "
            "source checkout (pip install -e .) or set DEEPLEDGER_CONFIG_DIR to a conf/ folder."
        )
    return path


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else EXIT_USAGE
    if args[0] in ("-V", "--version"):
        print(f"deepledger {__version__}")
        return 0
    command, rest = args[0], args[1:]
    handlers: dict[str, Callable[[list[str]], int]] = {
        "bench": lambda a: _hydra_command("bench", a, _bench),
        "run": lambda a: _hydra_command("run", a, _run),
        "report": _report,
        "replay": _replay,
    }
    if command not in handlers:
        print(f"deepledger: unknown command {command!r}.\n\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return handlers[command](rest)
    except DeepLedgerError as exc:
        return _fail(exc)


def quiet_http_logs() -> None:
    """One INFO line per HTTP request from the SDKs' clients drowns the progress display."""
    for name in ("httpx", "httpx2", "openai", "anthropic", "mcp"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _fail(exc: DeepLedgerError) -> int:
    print(f"deepledger: {exc}", file=sys.stderr)
    return EXIT_USAGE


def _hydra_command(name: str, overrides: list[str], task: Callable[[Any], int]) -> int:
    """Run ``task(cfg)`` under Hydra with ``overrides`` as its command line."""
    import hydra
    from dotenv import load_dotenv

    from deepledger.config import register_schemas, unknown_override_keys

    overrides = take_command_line_key(overrides)
    if problems := unknown_override_keys(overrides):
        raise ConfigError(
            "not a configuration key: "
            + ", ".join(problems)
            + f". Every key is listed by: deepledger {name} --cfg job"
        )
    # The working directory's .env (not one next to the installed code); it never
    # replaces a variable that is already set.
    load_dotenv(Path.cwd() / ".env", override=False)
    register_schemas()
    outcome: dict[str, int] = {}

    @hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")
    def _entry(cfg: Any) -> None:
        quiet_http_logs()
        try:
            outcome["code"] = task(cfg)
        except DeepLedgerError as exc:
            outcome["code"] = _fail(exc)
        except KeyboardInterrupt:  # tool servers are already stopped by the time we get here
            print(
                f"\ndeepledger {name}: interrupted. Finished work is saved; run the same "
                "command again (same hydra.run.dir) to resume.",
                file=sys.stderr,
            )
            outcome["code"] = EXIT_INTERRUPTED

    saved_argv = sys.argv
    sys.argv = [f"deepledger {name}", *overrides]
    try:
        _entry()
    finally:
        sys.argv = saved_argv
    return outcome.get("code", 0)


COMMAND_LINE_KEY_ENV = "DEEPLEDGER_COMMAND_LINE_API_KEY"


def take_command_line_key(overrides: list[str]) -> list[str]:
    """``llm.api_key=KEY`` (MiroThinker's command lines pass keys so) taken out of the
    overrides before Hydra sees them, so the key is never written to the run directory,
    the manifest or a log: it moves to a variable of this process, which the llm preset
    then names. An empty one (an unset ``$API_KEY`` in a script) is dropped."""
    kept, key = [], None
    for override in overrides:
        name, _, value = override.partition("=")
        if name.lstrip("+") == "llm.api_key":
            key = value.strip().strip("'\"") or key
        else:
            kept.append(override)
    if key:
        os.environ[COMMAND_LINE_KEY_ENV] = key
        kept.append(f"llm.api_key_env={COMMAND_LINE_KEY_ENV}")
    return kept


def _checked(cfg: Any) -> None:
    from deepledger.config import validate
    from deepledger.llm.factory import PROVIDERS, create_client

    validate(cfg, PROVIDERS)
    # Building the client fails early on a missing key or an unavailable provider.
    asyncio.run(create_client(cfg.llm).aclose())


def _bench(cfg: Any) -> int:
    from hydra.core.hydra_config import HydraConfig

    from deepledger.bench.suite import run_suite

    _checked(cfg)
    root = Path(HydraConfig.get().runtime.output_dir)
    summary = asyncio.run(run_suite(cfg, root, config_dir(), sys.argv[1:]))
    print(f"Run directory: {root}")
    return 0 if not summary["tasks"]["errors"] else 1


def _run(cfg: Any) -> int:
    if not cfg.question:
        raise ConfigError('deepledger run needs a question: deepledger run question="..."')
    if cfg.task_file and not Path(cfg.task_file).is_file():
        raise ConfigError(f"task_file={cfg.task_file!r} is not a file.")
    _checked(cfg)
    return asyncio.run(_answer_one(cfg))


async def _answer_one(cfg: Any) -> int:
    from hydra.core.hydra_config import HydraConfig

    from deepledger.agent.task import AgentFactory
    from deepledger.bench.suite import note_writer, page_scraper
    from deepledger.config import tool_servers
    from deepledger.journal import Journal
    from deepledger.llm.factory import create_client
    from deepledger.tools.manager import ToolManager

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    journal = Journal(run_dir / "journal.jsonl")
    servers = tool_servers(cfg)
    if cfg.task_file and "reader" in servers:  # let the reader open the attached file
        folder = await asyncio.to_thread(lambda: Path(cfg.task_file).resolve().parent)
        servers["reader"].args.extend(["--root", str(folder)])
    manager = ToolManager(servers, log_dir=run_dir / "tool_servers")
    writer = note_writer(cfg, config_dir())
    scraper = page_scraper(cfg, config_dir())
    llm = create_client(cfg.llm)
    try:
        factory = AgentFactory(cfg, llm, manager, note_writer=writer, scraper=scraper)
        state = await factory.solve(cfg.question, journal, cfg.task_file)
    finally:
        journal.close()
        await manager.aclose()
        await llm.aclose()
        if writer is not None:
            await writer.llm.aclose()
        if scraper is not None:
            await scraper.aclose()
    print(f"Answer: {state.final_answer if state.final_answer is not None else '(none)'}")
    print(
        f"({state.provenance.value}; {state.end_reason.value} after {state.turn} turns, "
        f"{state.tool_calls} tool calls, {state.ledger.total.total_tokens} tokens)"
    )
    print(f"Log: {journal.path}")
    return 0


def _report(args: list[str]) -> int:
    """One run: rebuild its summary and report. Several: average them and write one
    report comparing them (``--out FILE``, else beside the runs)."""
    from deepledger.bench.aggregate import aggregate, format_aggregate
    from deepledger.bench.metrics import format_summary
    from deepledger.bench.report import rebuild_summary
    from deepledger.report.compare import default_output, write_comparison
    from deepledger.report.page import REPORT, write_run_report

    out = None
    if "--out" in args:
        at = args.index("--out")
        if at + 1 >= len(args):
            raise ConfigError("--out needs the path of the comparison file to write.")
        out = Path(args[at + 1])
        args = args[:at] + args[at + 2 :]
    if not args or any(a.startswith("-") for a in args):
        print("usage: deepledger report RUN_DIR [RUN_DIR...] [--out FILE]", file=sys.stderr)
        return EXIT_USAGE
    run_dirs = [Path(d) for d in args]
    if len(run_dirs) == 1 and out is not None:
        raise ConfigError(
            f"--out names the comparison of several runs; one run's report is {REPORT} in "
            "its run directory."
        )
    if len(run_dirs) == 1:
        summary = rebuild_summary(run_dirs[0])
        print(format_summary(summary))
        print(f"Report: {write_run_report(run_dirs[0], summary)}")
        return 0
    summaries = {}
    for run_dir in run_dirs:
        try:
            summaries[run_dir] = summary = rebuild_summary(run_dir)
            write_run_report(run_dir, summary)
        except DeepLedgerError as exc:
            print(f"deepledger: {exc}", file=sys.stderr)
        except Exception as exc:  # one run's report must not cost the comparison
            print(f"deepledger: {run_dir}: its report failed ({exc!r})", file=sys.stderr)
    combined = aggregate(run_dirs)
    print(format_aggregate(combined))
    path = write_comparison(run_dirs, summaries, out or default_output(run_dirs))
    print(f"Comparison: {path}")
    return 0 if combined["complete"] else 1


def _replay(args: list[str]) -> int:
    """Replay a finished run's journals under other context policies; no model calls."""
    from deepledger.bench.replay import run_replay

    price = None
    if "--price" in args:
        at = args.index("--price")
        if at + 1 >= len(args):
            raise ConfigError("--price needs a model name from the price list.")
        price = args[at + 1]
        args = args[:at] + args[at + 2 :]
    if not args or args[0].startswith("-") or "=" in args[0]:
        print(
            "usage: deepledger replay RUN_DIR [agent.context.strategy=... KEY=VALUE ...] "
            "[--price MODEL]",
            file=sys.stderr,
        )
        return EXIT_USAGE
    print(run_replay(Path(args[0]), args[1:], price))
    return 0
