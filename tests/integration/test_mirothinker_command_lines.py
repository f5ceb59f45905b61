"""Every command line of MiroThinker's scripts and READMEs composes here, the program
name changed and nothing else (apps/miroflow-agent/scripts/*.sh, its README and the
agent app's README, as data below; the scripts' variables filled with their defaults
or test values). Composition is in process, with the checks `deepledger bench` makes
before a run: no unknown key, no unknown preset, the whole config valid.

`uv run python benchmarks/common_benchmark.py` is `deepledger bench`; `uv run python
main.py` (one question) is `deepledger run`.
"""

from __future__ import annotations

import functools
import shlex
from pathlib import Path

import pytest

from deepledger.cli import checked_overrides, config_dir
from deepledger.config import (
    COMMAND_LINE_KEY_ENV,
    Config,
    compose,
    unknown_presets,
    validate,
)

# The scripts' variables: their defaults, or what MiroThinker's README sets them to.
ENV = {
    "LLM_MODEL": "MiroThinker-Models",
    "BASE_URL": "https://your-api.com/v1",
    "LLM_PROVIDER": "qwen",
    "MAX_CONTEXT_LENGTH": "262144",
    "MAX_CONCURRENT": "10",
    "PASS_AT_K": "1",
    "TEMPERATURE": "1.0",
    "API_KEY": "xxx",
    "RESULTS_DIR": "../../logs/test",
    "RUN_ID": "run_1",
}

# run_evaluate_multiple_runs_<script>.sh: each runs this line (only the benchmark, its
# task file, its data folder and AGENT_SET's default differ).
SCRIPT_LINE = (
    "deepledger bench benchmark={benchmark} benchmark.data.metadata_file={metadata} "
    "llm=qwen-3 llm.provider=$LLM_PROVIDER llm.model_name=$LLM_MODEL "
    "llm.base_url=$BASE_URL llm.async_client=true llm.temperature=$TEMPERATURE "
    "llm.max_context_length=$MAX_CONTEXT_LENGTH llm.api_key=$API_KEY "
    "benchmark.execution.max_tasks=null benchmark.execution.max_concurrent=$MAX_CONCURRENT "
    "benchmark.execution.pass_at_k=$PASS_AT_K benchmark.data.data_dir=../../data/{data} "
    "agent={agent} hydra.run.dir=$RESULTS_DIR/$RUN_ID"
)
# (script, BENCHMARK_NAME, metadata_file, data folder, AGENT_SET's default)
SCRIPTS = [
    ("aime2025", "aime2025", "standardized_data.jsonl", "aime2025", "single_agent_keep5"),
    ("browsecomp", "browsecomp", "standardized_data.jsonl", "browsecomp", "single_agent_keep5"),
    ("browsecomp_200", "browsecomp", "standardized_data.jsonl", "browsecomp_200", "evaluation_os"),
    ("browsecomp_zh", "browsecomp_zh", "standardized_data.jsonl", "browsecomp_zh",
     "single_agent_keep5"),
    ("debug", "debug", "standardized_data.jsonl", "debug", "single_agent_keep5"),
    ("deepsearchqa", "deepsearchqa", "standardized_data.jsonl", "deepsearchqa",
     "single_agent_keep5"),
    ("frames", "frames", "standardized_data.jsonl", "frames", "single_agent_keep5"),
    ("futurex", "futurex", "standardized_data_250924_250930.jsonl", "futurex",
     "single_agent_keep5"),
    ("gaia-validation-text-103", "gaia-validation-text-103", "standardized_data.jsonl",
     "gaia-2023-validation-text-103", "single_agent_keep5"),
    ("gaia-validation", "gaia-validation", "standardized_data.jsonl", "gaia-2023-validation",
     "single_agent_keep5"),
    ("hle-text-2158", "hle-text-2158", "standardized_data_original.jsonl", "hle-text-2158",
     "single_agent_keep5"),
    ("hle-text-500", "hle-text-500", "standardized_data_original.jsonl", "hle-text-500",
     "single_agent_keep5"),
    ("hle", "hle", "standardized_data.jsonl", "hle", "single_agent_keep5"),
    ("seal-0", "seal-0", "standardized_data.jsonl", "seal-0", "single_agent_keep5"),
    ("webwalkerqa", "webwalkerqa", "standardized_data.jsonl", "webwalkerqa",
     "single_agent_keep5"),
    ("xbench_deepresearch", "xbench_deepresearch", "standardized_data.jsonl",
     "xbench_deepresearch", "single_agent_keep5"),
    ("xbench_deepsearch", "xbench_deepsearch", "standardized_data.jsonl", "xbench_deepsearch",
     "single_agent_keep5"),
]  # fmt: skip
# The README's AGENT_SET for each script: max300 for the BrowseComps, max200 elsewhere.
README_AGENT_SETS = {
    script: "mirothinker_1.7_keep5_max300"
    if script in ("browsecomp", "browsecomp_zh")
    else "mirothinker_1.7_keep5_max200"
    for script, *_ in SCRIPTS
}
# Other lines, spelled out: scripts/debug.sh (AGENT_SET defaults to evaluation), the
# README's MiniMax line (LLM_PROVIDER=minimax), and the READMEs' main.py lines.
OTHER_LINES = [
    "deepledger bench benchmark=gaia-validation llm=qwen3-32b llm.provider=qwen "
    "llm.model_name=$LLM_MODEL llm.openai_base_url=$BASE_URL llm.async_client=true "
    "llm.temperature=0.3 benchmark.execution.max_tasks=2 benchmark.execution.max_concurrent=10 "
    "benchmark.execution.pass_at_k=1 benchmark.data.data_dir=../../data/gaia-2023-validation "
    "agent=evaluation hydra.run.dir=../../debug",
    SCRIPT_LINE.replace("$LLM_PROVIDER", "minimax").replace("$LLM_MODEL", "MiniMax-M2.7")
    .replace("$BASE_URL", "https://api.minimax.io/v1").format(
        benchmark="gaia-validation-text-103", metadata="standardized_data.jsonl",
        data="gaia-2023-validation-text-103", agent="mirothinker_1.7_keep5_max200"),
    "deepledger run llm=qwen-3 agent=mirothinker_1.7_keep5_max200 "
    "llm.base_url=http://localhost:61002/v1",
    "deepledger run llm=claude-3-7 agent=single_agent_keep5",
    "deepledger run llm=gpt-5 agent=single_agent_keep5",
    "deepledger run llm=qwen-3 agent=mirothinker_v1.5_keep5_max200 "
    "llm.base_url=http://localhost:61002/v1",
    "deepledger run llm=qwen-3 agent=mirothinker_v1.5_keep5_max200 benchmark=debug "
    "llm.base_url=http://localhost:61002/v1",
    "deepledger run llm=qwen-3 agent=mirothinker_v1.5_keep5_max200 "
    "benchmark=gaia-validation-text-103 llm.base_url=http://localhost:61002/v1",
]  # fmt: skip
# MiroThinker's README names this one as an example of a preset a user writes
# (conf/agent/my_custom_config.yaml): not one of MiroThinker's, so refused here too.
USER_PRESET_LINE = (
    "deepledger run llm=qwen-3 agent=my_custom_config llm.base_url=https://your_base_url/v1"
)
# The rest of MiroThinker's agent and llm presets, each under its own name.
AGENT_PRESETS = [
    "single_agent", "single_agent_keep5", "single_agent_keep30", "single_agent_no_code",
    "single_agent_with_sougou", "single_agent_with_sougou_keep5",
    "single_agent_with_sougou_keep30", "mirothinker_v1.0", "mirothinker_v1.0_keep5",
    "mirothinker_v1.5", "mirothinker_v1.5_keep5_max200", "mirothinker_v1.5_keep5_max400",
    "mirothinker_1.7_keep5_max200", "mirothinker_1.7_keep5_max300", "multi_agent",
    "multi_agent_os", "evaluation", "evaluation_os", "evaluation_os_zh", "tavily_search",
    "demo", "default",
]  # fmt: skip
LLM_PRESETS = [
    "qwen-3", "qwen3-32b", "claude", "claude-3-7", "gpt-5", "minimax",
    "minimax-m2.5-highspeed", "minimax-m2.7-highspeed", "default",
]  # fmt: skip
BENCHMARK_PRESETS = ["browsecomp_zh", "xbench_deepsearch", "xbench_deepresearch", "debug",
                     "collect_trace", "default"]  # fmt: skip


def script_lines() -> list[str]:
    lines = []
    for script, benchmark, metadata, data, agent in SCRIPTS:
        for agent_set in (agent, README_AGENT_SETS[script]):
            lines.append(SCRIPT_LINE.format(benchmark=benchmark, metadata=metadata,
                                            data=data, agent=agent_set))  # fmt: skip
    return lines


@functools.cache
def agent_preset(name: str) -> object:
    return compose(config_dir(), [f"agent={name}"]).agent


def filled(line: str) -> list[str]:
    for name, value in sorted(ENV.items(), key=lambda item: -len(item[0])):
        line = line.replace(f"${name}", value)
    return shlex.split(line)[2:]  # the program and its command


def composed(line: str, monkeypatch: pytest.MonkeyPatch) -> Config:
    """What `deepledger bench|run` composes from the line, with the checks it makes
    before Hydra runs (cli.checked_overrides) and after (validate)."""
    monkeypatch.setenv(COMMAND_LINE_KEY_ENV, "")  # restored after the test: the line's
    monkeypatch.delenv(COMMAND_LINE_KEY_ENV)  # llm.api_key moves into it
    overrides = checked_overrides("bench", filled(line))
    cfg = compose(config_dir(), [o for o in overrides if not o.startswith("hydra.")])
    validate(cfg)
    return cfg


@pytest.mark.parametrize("line", script_lines() + OTHER_LINES)
def test_every_mirothinker_command_line_composes(line, monkeypatch):
    cfg = composed(line, monkeypatch)
    words = filled(line)
    agent = next(w.split("=", 1)[1] for w in words if w.startswith("agent="))
    assert cfg.agent == agent_preset(agent)
    if "llm.api_key=xxx" in words:  # the key left the overrides for a variable
        assert cfg.llm.api_key_env == COMMAND_LINE_KEY_ENV


def test_the_scripts_settings_arrive(monkeypatch):
    cfg = composed(script_lines()[0], monkeypatch)
    assert (cfg.llm.provider, cfg.llm.model_name) == ("qwen", "MiroThinker-Models")
    assert (cfg.llm.base_url, cfg.llm.max_context_length) == ("https://your-api.com/v1", 262144)
    assert cfg.benchmark.data.data_dir == "../../data/aime2025"
    assert cfg.benchmark.execution.max_concurrent == 10
    debug = composed(OTHER_LINES[0], monkeypatch)  # llm.openai_base_url, as debug.sh spells it
    assert (debug.llm.base_url, debug.llm.model_name) == ("https://your-api.com/v1",
                                                          "MiroThinker-Models")  # fmt: skip
    minimax = composed(OTHER_LINES[1], monkeypatch)
    assert (minimax.llm.provider, minimax.llm.base_url) == ("minimax", "https://api.minimax.io/v1")


def test_a_preset_we_do_not_carry_names_the_closest_one():
    (problem,) = unknown_presets(filled(USER_PRESET_LINE), config_dir())
    assert problem.startswith("agent=my_custom_config is not a preset (the closest is agent=")
    (problem,) = unknown_presets(["agent=single_agent_keep6"], config_dir())
    assert "the closest is agent=single_agent_keep5;" in problem
    (problem,) = unknown_presets(["llm=claude-3-5"], config_dir())
    assert "the closest is llm=claude-3-7;" in problem


@pytest.mark.parametrize("group,names", [("agent", AGENT_PRESETS), ("llm", LLM_PRESETS),
                                         ("benchmark", BENCHMARK_PRESETS)])  # fmt: skip
def test_every_mirothinker_preset_name_composes(group, names, monkeypatch):
    for name in names:
        cfg = composed(f"deepledger bench {group}={name}", monkeypatch)
        assert cfg is not None


def test_agent_presets_keep_mirothinkers_settings(monkeypatch):
    def agent(name: str) -> Config:
        return composed(f"deepledger bench agent={name}", monkeypatch)

    keep5 = agent("single_agent_keep5").agent
    assert (keep5.keep_tool_result, keep5.context_compress_limit) == (5, 5)
    assert keep5.main_agent.max_turns == 600 and keep5.retry_with_summary
    assert keep5.main_agent.tools == ["search_and_scrape_webpage", "jina_scrape_llm_summary",
                                      "tool-python"]  # fmt: skip
    assert "search_and_scrape_webpage.sogou_search" in keep5.main_agent.tool_blacklist
    v15 = agent("mirothinker_v1.5_keep5_max200").agent
    assert (v15.main_agent.max_turns, v15.keep_tool_result) == (200, 5)
    no_code = agent("single_agent_no_code").agent
    assert no_code.main_agent.tools == ["search_and_scrape_webpage", "jina_scrape_llm_summary"]
    assert (no_code.main_agent.max_turns, no_code.keep_tool_result) == (50, -1)
    for name in (
        "single_agent_with_sougou",
        "single_agent_with_sougou_keep5",
        "single_agent_no_code",
    ):
        role = agent(name).agent.main_agent  # sogou_search offered beside google_search
        assert "search_and_scrape_webpage" in role.tools
        assert not any("sogou_search" in tool for tool in role.tool_blacklist), name
    zh = agent("evaluation_os_zh").agent.sub_agents["browsing"]
    assert zh.tool_blacklist == ["search_and_scrape_webpage.google_search"]
    multi = agent("multi_agent_os").agent
    assert "agent-browsing" in multi.main_agent.tools
    assert (multi.main_agent.max_turns, multi.sub_agents["browsing"].max_turns) == (50, 50)
    tavily = agent("tavily_search")
    assert tavily.agent.sub_agents["browsing"].tools[0] == "tool-tavily-search"
    assert "tavily" in tavily.tools["tool-tavily-search"]["args"]


def test_llm_presets_keep_mirothinkers_ids_and_endpoints(monkeypatch):
    def llm(name: str) -> tuple:
        cfg = composed(f"deepledger bench llm={name}", monkeypatch).llm
        return cfg.provider, cfg.model_name, cfg.base_url, cfg.max_context_length

    assert llm("claude-3-7") == ("anthropic", "claude-3-7-sonnet-20250219",
                                 "https://api.anthropic.com", 65536)  # fmt: skip
    assert llm("claude") == ("anthropic", "claude-sonnet-4-20250514",
                             "https://api.anthropic.com", 153600)  # fmt: skip
    assert llm("gpt-5") == ("openai", "gpt-5-2025-08-07", "https://api.openai.com/v1", 65536)
    assert llm("qwen3-32b")[:2] == ("qwen", "qwen3-32b") and llm("qwen3-32b")[3] == 40960
    assert llm("minimax") == ("minimax", "MiniMax-M2.7", "https://api.minimax.io/v1", 204800)


def test_the_judges_openai_preset_reads_openai_base_url(monkeypatch):
    from deepledger.bench.services import load_llm_preset

    conf = Path(config_dir())
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert load_llm_preset("openai", conf).base_url == "https://api.openai.com/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert load_llm_preset("openai", conf).base_url == "http://127.0.0.1:9/v1"


def test_an_unknown_preset_is_refused_by_the_cli_with_exit_2(capsys):
    from deepledger.cli import main

    code = main(["bench", "agent=mirothinker_v1.6_keep5_max200", "--cfg", "job"])
    assert code == 2
    err = capsys.readouterr().err
    assert "agent=mirothinker_v1.6_keep5_max200 is not a preset" in err
    assert "the closest is agent=mirothinker_v1.5_keep5_max200" in err
