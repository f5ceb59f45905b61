"""The help pages: ``deepledger --help`` (the commands, the exit codes, the config
groups) and the short page of ``deepledger bench|run --help``, made from the schema's key
descriptions and the presets in conf/."""

from __future__ import annotations

import textwrap
from pathlib import Path

from deepledger import __version__

EXIT_CODES = (
    "Exit codes: 0 done, 1 some tasks failed (or the model call, for run), 2 a usage or\n"
    "  configuration error, 130 Ctrl-C, 141 the output pipe was closed."
)

USAGE = f"""\
deepledger {__version__} — a deep-research agent runtime

usage:
  deepledger bench [OVERRIDES...]           run a benchmark suite
  deepledger run "QUESTION" [OVERRIDES]     answer one question, any text; or
                                            question="...", or @FILE (question=@FILE)
                                            to read it from a UTF-8 file (@@: a
                                            literal @); task_file=PATH attaches a file
  deepledger report RUN_DIR [RUN_DIR...] [--out FILE]
                                            rebuild a run's summary and HTML report;
                                            several: compare them in one report
  deepledger replay RUN_DIR [KEY=VALUE...]  a run's cost under other context policies
                                            (agent.context.*, agent.keep_tool_result,
                                            llm.max_context_length; --price MODEL)
  deepledger judge RUN_DIR [KEY=VALUE...] [--name NAME] [-cd DIR]
                                            grade a finished run's answers again
                                            (benchmark.judge.*), beside its own
                                            judgement, with the agreement between them
  deepledger resume RUN_DIR [OVERRIDES...]  go on with a stopped bench in its own folder,
                                            from the overrides it was started with
  deepledger export RUN_DIR... FORMAT [--out PATH]
                                            write runs out: results (JSONL, Parquet),
                                            chatml, openai, dpo, mirothinker
  deepledger view [LOGS_DIR] [--port PORT]  the runs under logs/ in a local web app:
                                            a running bench live, questions asked
  deepledger COMMAND --help                 the command's help (bench, run: the common
                                            keys, what they mean, and the presets)
  deepledger bench --cfg job [OVERRIDES]    print the composed config and stop

OVERRIDES are Hydra overrides, e.g.
  llm=openai_compatible llm.base_url=http://127.0.0.1:8000/v1 llm.model_name=my-model
  agent=keep5_compress5 agent.keep_tool_result=3 benchmark.execution.max_tasks=10
For run, an argument is an override when its key is a config key or group (or hydra.*,
+key, ~key, a dotted key); any other argument is the question (after --, always).
{EXIT_CODES}

Config groups:
  llm=local|local_qwen1.5b|openai_compatible|openai|azure_openai|anthropic|gemini|qwen-3|
    deepseek|openai_responses|qwen3-32b|claude|claude-3-7|gpt-5|minimax|
    minimax-m2.7-highspeed|minimax-m2.5-highspeed|default,
  agent=default|keep5_compress5|keep5_compress5_300turns|multi_agent|
    mirothinker_1.7_keep5_max200|mirothinker_1.7_keep5_max300|mirothinker_v1.5_keep5_max400,
    and every other agent preset of MiroThinker's under its name (docs/mirothinker.md),
  benchmark=example|worldfacts|gaia-validation|gaia-validation-text-103|browsecomp|
    browsecomp-zh|hle|hle-text-500|hle-text-2158|simpleqa|freshqa|fanoutqa|frames|
    xbench-deepsearch|webwalkerqa|seal-0|deepsearchqa|futurex|aime2025; MiroThinker's
    browsecomp_zh|xbench_deepsearch|xbench_deepresearch|debug|collect_trace|default.
Tool servers: tools.<name>.* (search, reader, python, web_search, search_and_scrape_webpage,
  tool-python, time); web.search_backend=serper|searxng|tavily|brave|local|sogou.
API keys are read from the environment (or ./.env), never from config files; a key given
as llm.api_key=... is used and never written.
"""

# What ``deepledger bench|run --help`` says first: what the command does, its usage.
HYDRA_COMMANDS = {
    "bench": """\
deepledger bench — run a benchmark suite: every task of the benchmark preset answered by the
agent and judged; progress on stderr, the summary on stdout. The run folder (printed;
logs/<benchmark>/<model>/<time>, or hydra.run.dir=DIR) holds the journals,
benchmark_results.jsonl, summary.json and report.html. `deepledger resume RUN_DIR` resumes
it there (or the same command with hydra.run.dir=RUN_DIR; without it, a new folder).

usage: deepledger bench [GROUP=PRESET ...] [KEY=VALUE ...]
       deepledger bench -m KEY=A,B [...]    a sweep: one run per value (logs/.../multirun/)""",
    "run": """\
deepledger run — answer one question with the agent (the settings bench uses: llm=, agent=,
tools). stdout holds the answer block (Answer:, a line of counts, Log: the journal), progress
goes to stderr; the run folder is logs/<benchmark>/<model>/<time> (or hydra.run.dir=DIR).

usage: deepledger run "QUESTION" [GROUP=PRESET ...] [KEY=VALUE ...]
       deepledger run @FILE [task_file=PATH] [...]   the question read from a UTF-8 file
                                                     (@@: a literal @); task_file attaches one
An argument is an override when its key is a config key or group; any other argument is the
question (after --, always).""",
}


def hydra_command_help(command: str, conf: Path | None = None) -> str:
    """``deepledger bench|run --help``: what the command does, the common keys one line
    each (the schema's descriptions), the presets of each group (conf/'s files), where
    the whole config is, the exit codes. Short: a page, not Hydra's config dump."""
    from deepledger.cli.common import config_dir
    from deepledger.config.docs import key_help

    conf = config_dir() if conf is None else conf
    return "\n".join(
        [
            HYDRA_COMMANDS[command],
            "",
            *key_help(),
            "",
            "Presets (GROUP=NAME; the default first):",
            *preset_lines(conf),
            "",
            "More:",
            f"  deepledger {command} --cfg job [OVERRIDES]".ljust(44)
            + "every key, as composed with the overrides",
            "  docs/configuration.md".ljust(44) + "every key and what it means",
            f"  deepledger {command} --hydra-help".ljust(44)
            + "Hydra's own flags (-m, --cfg, -cd, --info, ...)",
            EXIT_CODES,
        ]
    )


def preset_lines(conf: Path, width: int = 100) -> list[str]:
    """Each config group of ``conf`` (a folder of YAML presets) with its presets, the
    default (config.yaml's defaults list) first; a new preset file shows up by itself."""
    defaults = default_presets(conf)
    lines = []
    for group in sorted(p for p in conf.iterdir() if p.is_dir()):
        names = sorted(p.stem for p in group.glob("*.yaml"))
        if not names:
            continue
        first = defaults.get(group.name)
        if first in names:
            names = [first, *(n for n in names if n != first)]
        lines += textwrap.wrap(
            f"{group.name}={', '.join(names)}",
            width,
            initial_indent="  ",
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
    return lines


def default_presets(conf: Path) -> dict[str, str]:
    """config.yaml's defaults list as group -> preset (``- llm: local``)."""
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(OmegaConf.load(conf / "config.yaml"))
    entries = node.get("defaults", []) if isinstance(node, dict) else []
    return {
        str(group): str(name)
        for entry in entries
        if isinstance(entry, dict)
        for group, name in entry.items()
    }
