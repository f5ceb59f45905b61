from __future__ import annotations

import re

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from deepledger.config import tool_servers, unknown_override_keys, validate
from deepledger.context.strategies import STRATEGIES
from deepledger.errors import ConfigError, MissingAPIKeyError
from deepledger.llm.factory import create_client, resolve_api_key
from tests.support.config import CONF, composed


def presets(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("llm", presets("llm"))
def test_every_llm_preset_composes_validates_and_has_a_window(llm):
    cfg = composed(f"llm={llm}")
    validate(cfg)
    assert cfg.llm.max_context_length > cfg.llm.max_tokens > 0


@pytest.mark.parametrize("agent", presets("agent"))
def test_every_agent_preset_composes_and_validates(agent):
    validate(composed(f"agent={agent}"))


def test_mirothinker_setups_are_presets():
    keep5 = composed("agent=keep5_compress5").agent
    assert (keep5.keep_tool_result, keep5.context_compress_limit, keep5.main_agent.max_turns) == (
        5,
        5,
        200,
    )
    long = composed("agent=keep5_compress5_300turns").agent
    assert long.main_agent.max_turns == 300
    assert composed("agent=default").agent.keep_tool_result == -1


def test_overrides_reach_the_config():
    cfg = composed("agent.keep_tool_result=5", "agent.context_compress_limit=3")
    assert cfg.agent.keep_tool_result == 5 and cfg.agent.context_compress_limit == 3


def test_a_mistyped_key_fails_naming_it():
    with pytest.raises(ConfigCompositionException) as info:
        composed("agent.keep_tool_reslt=5")
    assert "keep_tool_reslt" in str(info.value) + str(info.value.__cause__)


def test_a_wrong_type_fails_naming_the_key():
    with pytest.raises(ConfigCompositionException) as info:
        composed("agent.keep_tool_result=all")
    cause = info.value.__cause__
    assert isinstance(cause, ValidationError | ConfigKeyError)
    assert "agent.keep_tool_result" in str(cause)


def test_max_tokens_not_below_the_window_is_rejected():
    cfg = composed("llm=openai_compatible", "llm.max_tokens=9000", "llm.max_context_length=8192")
    with pytest.raises(ConfigError, match=r"llm.max_tokens=9000.*llm.max_context_length=8192"):
        validate(cfg)


def test_unknown_provider_is_rejected_with_the_choices():
    cfg = composed("llm.provider=gemini")
    with pytest.raises(ConfigError, match=r"llm.provider='gemini'.*openai, anthropic"):
        validate(cfg)


def test_several_problems_are_reported_together():
    cfg = composed(
        "agent.keep_tool_result=-3",
        "agent.tool_protocol=json",
        "benchmark.execution.pass_at_k=0",
        "benchmark.execution.report_every_seconds=-1",
    )
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    for key in (
        "agent.keep_tool_result",
        "agent.tool_protocol",
        "benchmark.execution.pass_at_k",
        "benchmark.execution.report_every_seconds",
    ):
        assert key in str(info.value)


def test_max_cycle_repeats_is_at_least_one_for_every_role():
    assert composed().agent.main_agent.max_cycle_repeats is None  # null: 2
    validate(composed("agent.main_agent.max_cycle_repeats=1"))
    with pytest.raises(ConfigError, match=r"agent.main_agent.max_cycle_repeats=0 must be >= 1"):
        validate(composed("agent.main_agent.max_cycle_repeats=0"))
    sub = composed("agent=multi_agent", "agent.sub_agents.browsing.max_cycle_repeats=-1")
    with pytest.raises(ConfigError, match=r"agent.sub_agents.browsing.max_cycle_repeats=-1"):
        validate(sub)


def test_first_call_names_one_tool():
    validate(composed("llm=local"))  # the preset's own: first_call=search
    validate(composed("llm.first_call=search.open"))
    with pytest.raises(ConfigError, match=r"llm.first_call='search open'"):
        validate(composed("llm.first_call='search open'"))


def test_context_strategy_and_its_parameters_are_checked():
    cfg = composed("agent.context.strategy=round_window", "agent.context.keep_rounds=4")
    validate(cfg)
    assert (cfg.agent.context.strategy, cfg.agent.context.keep_rounds) == ("round_window", 4)
    bad = composed(
        "agent.context.strategy=sliding",
        "agent.context.keep_rounds=0",
        "agent.context.cut_batch=0",
    )
    with pytest.raises(ConfigError) as info:
        validate(bad, STRATEGIES)  # the strategies' registry, as the command line passes it
    message = str(info.value)
    assert "agent.context.strategy='sliding'" in message and "round_window" in message
    assert "agent.context.keep_rounds=0" in message
    assert "agent.context.cut_batch=0 must be at least 1" in message


def test_missing_api_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="ANTHROPIC_API_KEY"):
        create_client(composed("llm=anthropic").llm)


def test_an_empty_key_never_counts_as_a_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "   ")
    with pytest.raises(MissingAPIKeyError, match="OPENAI_API_KEY"):
        resolve_api_key(composed("llm=openai").llm)


def test_a_preset_can_name_its_own_key_variable(monkeypatch):
    monkeypatch.setenv("MY_GATEWAY_KEY", "sk-test-gateway")
    cfg = composed("llm=openai", "llm.api_key_env=MY_GATEWAY_KEY").llm
    assert resolve_api_key(cfg) == "sk-test-gateway"


def test_self_hosted_servers_need_no_key_and_never_get_the_openai_one(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-openai-key")
    assert resolve_api_key(composed("llm=openai_compatible").llm) == "EMPTY"
    monkeypatch.setenv("VLLM_API_KEY", "vllm-secret")
    cfg = composed("llm=openai_compatible", "llm.api_key_env=VLLM_API_KEY").llm
    assert resolve_api_key(cfg) == "vllm-secret"


def test_sampling_can_be_left_to_the_server():
    assert composed("llm=openai_compatible", "llm.temperature=null").llm.temperature is None


def test_unknown_keys_get_the_closest_real_key():
    problems = unknown_override_keys(
        ["agent.keep_tool_reslt=5", "llm.modle=x", "benchmark.execution.max_task=3", "zzz.qqq=1"]
    )
    assert problems == [
        "agent.keep_tool_reslt (did you mean agent.keep_tool_result?)",
        "llm.modle (did you mean llm.model_name?)",
        "benchmark.execution.max_task (did you mean benchmark.execution.max_tasks?)",
        "zzz.qqq",
    ]


def test_known_keys_groups_and_hydra_syntax_pass_the_key_check():
    assert (
        unknown_override_keys(
            [
                "llm=anthropic",
                "agent.main_agent.max_turns=3",
                "llm.extra_body.top_k=20",
                "+llm.extra_body.min_p=0.1",
                "pricing.my-model.input=1",
                "hydra.run.dir=/tmp/x",
                "agent.sub_agents.browser.max_turns=5",
                "--cfg",
                "job",
            ]
        )
        == []
    )


def test_a_tool_server_can_be_added_from_the_command_line_and_is_checked():
    cfg = composed("+tools.mine={command: my-mcp-server, args: [--flag], scope: task}")
    assert tool_servers(cfg)["mine"].scope == "task"
    assert tool_servers(cfg)["mine"].call_timeout_seconds == 60.0  # defaults filled in
    bad = composed("+tools.mine={command: x, call_timeout: 5}")
    with pytest.raises(ConfigError, match=r"tools\.mine\.call_timeout"):
        tool_servers(bad)


def test_agents_may_only_name_defined_tool_servers():
    cfg = composed("agent.main_agent.tools=[search, serch]")
    with pytest.raises(ConfigError, match=r"agent.main_agent.tools names 'serch'"):
        validate(cfg)


def test_the_built_in_tool_names_are_the_tools_own():
    from deepledger.config import BUILTIN_TOOLS
    from deepledger.tools.archive import ARCHIVE_TOOL
    from deepledger.tools.memory import MEMORY_TOOL
    from deepledger.tools.scrape import SERVER as SCRAPE_SERVER

    assert set(BUILTIN_TOOLS) == {MEMORY_TOOL, ARCHIVE_TOOL, SCRAPE_SERVER}


def test_each_setting_s_names_are_the_names_its_registry_builds():
    """The enum validate() checks a setting against and the registry that builds what it
    names are one list: a name added to one and not the other fails here."""
    from deepledger.bench.judge import JUDGE_BUILDERS
    from deepledger.bench.judge_rules import LLM_RULES
    from deepledger.config import (
        JudgeName,
        JudgeRule,
        ProtocolName,
        Provider,
        SearchBackendName,
        Transport,
    )
    from deepledger.llm.factory import BUILDERS
    from deepledger.tools.protocols import PROTOCOLS
    from deepledger.tools.session import TRANSPORTS
    from deepledger.web.search import backend_names

    assert set(BUILDERS) == set(Provider)
    assert set(JUDGE_BUILDERS) == set(JudgeName)
    assert set(LLM_RULES) == set(JudgeRule)
    assert set(PROTOCOLS) == set(ProtocolName)
    assert set(TRANSPORTS) == set(Transport)
    assert set(backend_names()) == set(SearchBackendName)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("llm.tool_protocol=json", "llm.tool_protocol"),
        ("benchmark.judge.name=fuzzy", "benchmark.judge.name"),
        ("web.search_backend=bing", "web.search_backend"),
        ("+tools.mine={command: x, transport: pipe}", "tools.mine.transport"),
        ("+tools.mine={command: x, scope: run}", "tools.mine.scope"),
    ],
)
def test_a_name_no_registry_has_is_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=rf"{re.escape(key)}="):
        validate(composed(override))


def test_the_typed_config_is_recorded_as_the_composed_one():
    """The manifest's config (and so config_id, which a resume compares) is the same
    whether made from Hydra's node, as before, or from the typed config."""
    from omegaconf import OmegaConf

    from deepledger.config import as_record, compose_node, typed

    overrides = ["+tools.mine={command: x, args: [a]}", "llm.thinking={type: enabled}"]
    node = compose_node(CONF, overrides)
    assert as_record(typed(node)) == OmegaConf.to_container(node, resolve=True)


def test_the_sandbox_keys_reach_only_the_sandbox_servers_and_null_changes_nothing():
    default = tool_servers(composed())
    cfg = composed("sandbox.memory_mb=512", "sandbox.max_processes=64", "sandbox.disk_mb=300")
    validate(cfg)
    servers = tool_servers(cfg)
    added = ["--memory-mb", "512", "--max-processes", "64", "--disk-mb", "300"]
    for name in ("python", "tool-python"):  # the last --memory-mb wins in argparse
        assert servers[name].args == default[name].args + added
    assert servers["reader"].args == default["reader"].args
    assert "--disk-mb" not in " ".join(default["python"].args)  # null: the server's own
    with pytest.raises(ConfigError, match=r"sandbox\.disk_mb=0 must be positive"):
        validate(composed("sandbox.disk_mb=0"))


# -- the package: one schema that explains itself -----------------------------------------


def test_each_key_says_what_it_means_and_omegaconf_reads_only_its_default():
    """The descriptions ride in the fields' metadata: the structured schema Hydra merges
    into is the dataclasses' defaults, key for key (a MISSING value stays ``???``)."""
    import dataclasses

    from omegaconf import OmegaConf

    from deepledger.config import Config
    from deepledger.config.docs import key_docs

    docs = key_docs()
    assert len(docs) > 140 and all(doc.meaning.strip() for doc in docs)
    assert len({doc.key for doc in docs}) == len(docs)
    structured = OmegaConf.to_container(OmegaConf.structured(Config))
    assert structured == dataclasses.asdict(Config())


def test_the_package_exports_every_public_name_of_its_modules():
    """``from deepledger.config import X`` works for whatever the modules define."""
    import ast
    from pathlib import Path

    import deepledger.config as config

    package = Path(config.__file__).parent
    defined = set()
    for module in package.glob("*.py"):
        if module.name in ("__init__.py", "docs.py"):  # docs: a command, imported by path
            continue
        for node in ast.parse(module.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    public = {name for name in defined if not name.startswith("_")}
    internal = {"T", "DOC", "COMMON", "ENTRIES", "ROWS"}  # setting()'s own
    assert set(config.__all__) == public - internal
    assert all(hasattr(config, name) for name in config.__all__)
