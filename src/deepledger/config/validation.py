"""What the types cannot say, checked all at once: :func:`validate` names each bad
key and its fix."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Collection, Mapping

from deepledger.config.lookups import price_entry, prompt_set, summary_llm_config
from deepledger.config.names import (
    BACKENDS,
    BUDGET_KEYS,
    BUILTIN_TOOLS,
    CHANGED_TASKS,
    COST_LIMITS,
    JUDGE_RULES,
    JUDGES,
    OMP_WAIT_POLICIES,
    PROTOCOL_METRICS,
    PROVIDERS,
    REASONING_EFFORTS,
    RESUME_MODES,
    SCOPES,
    SCRAPERS,
    SEARCH_BACKENDS,
    TOOL_PROTOCOLS,
    TRANSPORTS,
    Backend,
    Provider,
    Transport,
)
from deepledger.config.schema import (
    AgentConfig,
    BenchmarkConfig,
    Config,
    ExecutionConfig,
    LLMConfig,
    SandboxConfig,
    ToolServerConfig,
)
from deepledger.config.servers import tool_servers
from deepledger.errors import ConfigError
from deepledger.paths import looked_in, resolve_data_path
from deepledger.prices import library_price
from deepledger.prompts import PROFILES, prompt_exists
from deepledger.secret_files import rule_problem


def validate(cfg: Config, strategies: Collection[str] | None = None) -> None:
    """Check what the types cannot; raise :class:`ConfigError` naming key and fix.
    ``strategies``: the context strategies' names (their registry is above this floor,
    in ``context/strategies/``); None leaves ``agent.context.strategy`` unchecked."""
    problems = [*_llm_problems(cfg.llm), *_agent_problems(cfg.agent, strategies)]
    problems += _tool_problems(tool_servers(cfg), cfg.agent)
    problems += _execution_problems(cfg.benchmark.execution)
    problems += _ray_with_local_model(cfg)
    problems += _unpriced_cost_limits(cfg)
    corpus = cfg.benchmark.search_corpus
    if corpus and not resolve_data_path(corpus).exists():
        problems.append(
            f"benchmark.search_corpus={corpus}: no such file or folder (looked for "
            f"{looked_in(corpus)})."
        )
    problems += _web_problems(cfg)
    problems += _metrics_problems(cfg.benchmark)
    if cfg.resume.on_changed_tasks not in CHANGED_TASKS:
        problems.append(
            f"resume.on_changed_tasks={cfg.resume.on_changed_tasks!r}: use one of "
            f"{', '.join(CHANGED_TASKS)}."
        )
    problems += _sandbox_problems(cfg.sandbox)
    if cfg.benchmark.judge.rule not in JUDGE_RULES:
        problems.append(
            f"benchmark.judge.rule={cfg.benchmark.judge.rule!r}: use one of "
            f"{', '.join(JUDGE_RULES)}."
        )
    if (asks := cfg.benchmark.judge.max_asks) is not None and asks < 1:
        problems.append(f"benchmark.judge.max_asks={asks} must be at least 1 (or null: 3).")
    if cfg.benchmark.judge.name not in JUDGES:
        problems.append(
            f"benchmark.judge.name={cfg.benchmark.judge.name!r}: use one of {', '.join(JUDGES)}."
        )
    if problems:
        raise ConfigError("Invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))


def _metrics_problems(benchmark: BenchmarkConfig) -> list[str]:
    unknown = [name for name in benchmark.metrics or () if name not in PROTOCOL_METRICS]
    if not unknown:
        return []
    return [
        f"benchmark.metrics: {', '.join(map(repr, unknown))} "
        f"{'is not a metric' if len(unknown) == 1 else 'are not metrics'}; "
        f"use some of {', '.join(PROTOCOL_METRICS)}."
    ]


def check_llm_preset(preset: LLMConfig, key: str) -> None:
    """The checks ``llm`` gets, for a preset another setting names (``key``: e.g.
    ``benchmark.judge.llm=<name>``), so a bad one stops the run before any work."""
    problems = _llm_problems(preset)
    if problems:
        raise ConfigError(
            f"Invalid llm preset {key}:\n" + "\n".join(f"  - {key}: {p}" for p in problems)
        )


def _llm_problems(llm: LLMConfig) -> list[str]:
    problems = []
    if llm.provider not in PROVIDERS:
        problems.append(
            f"llm.provider={llm.provider!r} is not a provider; use one of "
            f"{', '.join(PROVIDERS)} (or pick a preset: llm=openai, llm=anthropic, ...)."
        )
    if llm.max_context_length <= 0:
        problems.append(f"llm.max_context_length={llm.max_context_length} must be positive.")
    elif llm.max_tokens >= llm.max_context_length:
        problems.append(
            f"llm.max_tokens={llm.max_tokens} leaves no room for the prompt in "
            f"llm.max_context_length={llm.max_context_length}; lower llm.max_tokens or raise "
            "llm.max_context_length to the model's real window."
        )
    if llm.max_tokens <= 0:
        problems.append(f"llm.max_tokens={llm.max_tokens} must be positive.")
    if llm.timeout_seconds <= 0:
        problems.append(f"llm.timeout_seconds={llm.timeout_seconds} must be positive.")
    if llm.connect_timeout_seconds <= 0:
        problems.append(
            f"llm.connect_timeout_seconds={llm.connect_timeout_seconds} must be positive."
        )
    if llm.base_url is not None and not _is_http_url(llm.base_url):
        problems.append(
            f"llm.base_url={llm.base_url!r} is not an http(s) URL; give the server's address, "
            "e.g. llm.base_url=http://127.0.0.1:8000/v1 (or null for the provider's public API)."
        )
    problems += _endpoint_problems(llm)
    for key in ("threads", "batch_threads"):
        if (count := getattr(llm, key)) is not None and count < 1:
            problems.append(f"llm.{key}={count} must be >= 1 (or null: the usable cores).")
    if llm.omp_wait_policy is not None and llm.omp_wait_policy.upper() not in OMP_WAIT_POLICIES:
        problems.append(
            f"llm.omp_wait_policy={llm.omp_wait_policy!r}: use PASSIVE, ACTIVE or null (the "
            "environment's)."
        )
    if llm.tool_protocol is not None and llm.tool_protocol not in TOOL_PROTOCOLS:
        problems.append(
            f"llm.tool_protocol={llm.tool_protocol!r}: use one of {', '.join(TOOL_PROTOCOLS)} "
            "or null (the agent's choice)."
        )
    if llm.worked_example and not prompt_exists(llm.worked_example):
        problems.append(
            f"llm.worked_example={llm.worked_example!r}: no such prompt in src/deepledger/prompts/."
        )
    if llm.first_call is not None and not re.fullmatch(r"[\w-]+(\.[\w-]+)?", llm.first_call):
        problems.append(
            f"llm.first_call={llm.first_call!r}: name one tool, as server.tool or tool."
        )
    if llm.max_turns is not None and llm.max_turns < 1:
        problems.append(f"llm.max_turns={llm.max_turns} must be >= 1 (or null: no cap).")
    for hidden in llm.tool_blacklist or []:
        if not re.fullmatch(r"[\w-]+(\.[\w-]+)?", hidden):
            problems.append(
                f"llm.tool_blacklist: {hidden!r}: name one tool, as server.tool or tool."
            )
    if llm.retry.max_attempts < 1:
        problems.append(f"llm.retry.max_attempts={llm.retry.max_attempts} must be at least 1.")
    if llm.reasoning_effort is not None and llm.reasoning_effort not in REASONING_EFFORTS:
        problems.append(
            f"llm.reasoning_effort={llm.reasoning_effort!r}: use one of "
            f"{', '.join(REASONING_EFFORTS)}, or null for the model's default."
        )
    return problems + _thinking_problems(llm) + _openai_protocol_problems(llm)


def _openai_protocol_problems(llm: LLMConfig) -> list[str]:
    """Settings of the OpenAI protocols that another provider would silently ignore."""
    problems = []
    if llm.send_back_reasoning and llm.provider in (Provider.ANTHROPIC, Provider.LOCAL):
        problems.append(
            "llm.send_back_reasoning is a setting of the OpenAI protocol (DeepSeek-style "
            f"servers); llm.provider={llm.provider!r} would ignore it (Anthropic's thinking "
            "blocks always go back)."
        )
    if llm.assistant_prefill and llm.provider == Provider.OPENAI_RESPONSES:
        problems.append(
            "llm.assistant_prefill: the Responses API continues no trailing assistant "
            "message; set it false with llm.provider=openai_responses."
        )
    return problems


def _endpoint_problems(llm: LLMConfig) -> list[str]:
    if llm.endpoints is None:
        return []
    if llm.provider == Provider.LOCAL:
        return [
            "llm.endpoints: llm=local serves its own model in this process; leave "
            "llm.endpoints null, or point llm=openai_compatible at your servers."
        ]
    if not llm.endpoints:
        return [
            "llm.endpoints=[] names no server; list the model's servers, e.g. "
            "llm.endpoints=[http://10.0.0.1:8000/v1,http://10.0.0.2:8000/v1], or leave it "
            "null for llm.base_url alone."
        ]
    problems = [p for i, url in enumerate(llm.endpoints) for p in _endpoint_url_problems(i, url)]
    problems += _duplicate_endpoints(llm.endpoints)
    cap = llm.endpoint_max_concurrent
    if cap is not None and cap < 1:
        problems.append(f"llm.endpoint_max_concurrent={cap} must be >= 1 (or null: no cap).")
    return problems


MIN_THINKING_BUDGET = 1024  # Anthropic's floor for budget_tokens


def _thinking_problems(llm: LLMConfig) -> list[str]:
    """What Anthropic refuses with thinking on: a budget under 1024 or not under
    max_tokens, and sampling settings other than the defaults (through extra_body)."""
    if llm.thinking and llm.provider != Provider.ANTHROPIC:
        return [f"llm.thinking is Anthropic's setting; llm.provider={llm.provider!r} ignores it."]
    thinking = llm.thinking or (llm.extra_body or {}).get("thinking")
    if not thinking or llm.provider != Provider.ANTHROPIC:
        return []
    if not hasattr(thinking, "get") or not isinstance(thinking.get("type"), str):
        return ["llm.thinking needs a type, e.g. {type: enabled, budget_tokens: 8000}."]
    problems = []
    budget = thinking.get("budget_tokens")
    if thinking["type"] == "enabled" and not (
        isinstance(budget, int) and MIN_THINKING_BUDGET <= budget < llm.max_tokens
    ):
        problems.append(
            f"llm.thinking.budget_tokens={budget}: with type enabled it must be at least "
            f"{MIN_THINKING_BUDGET} and below llm.max_tokens={llm.max_tokens}."
        )
    extra = llm.extra_body or {}
    if extra.get("temperature") not in (None, 1, 1.0) or "top_k" in extra:
        problems.append(
            "llm.extra_body: Anthropic takes no temperature other than 1 and no top_k while "
            "llm.thinking is on; remove them."
        )
    return problems


def _endpoint_url_problems(index: int, url: str) -> list[str]:
    """What is wrong with ``llm.endpoints[index]``. The URLs are written to journals, the
    summary, the report and logs, so one must carry no secret; the message shows the URL
    without the parts that might be one."""
    from urllib.parse import urlsplit

    key = f"llm.endpoints[{index}]"
    if not _is_http_url(url):
        shown = url.split("@")[-1].split("?")[0].split("#")[0]
        return [
            f"{key}={shown!r} is not an http(s) URL; give the server's address, e.g. "
            "http://10.0.0.1:8000/v1."
        ]
    parts = urlsplit(url.strip())
    shown = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}{parts.path}"
    elsewhere = (
        "a URL is written to the journals, the summary, the report and the logs: give the "
        "server's address alone, and put a key in the environment variable named by "
        "llm.api_key_env (the same key goes to every endpoint)."
    )
    if parts.username is not None or parts.password is not None:
        return [f"{key}={shown!r} carries a user name or password (user:password@); {elsewhere}"]
    if parts.query or parts.fragment:
        return [f"{key}={shown!r} has a query string or a fragment (?... or #...); {elsewhere}"]
    return []


def _duplicate_endpoints(urls: list[str]) -> list[str]:
    """The servers listed twice; ``.../v1`` and ``.../v1/`` are one server."""
    first: dict[str, int] = {}
    problems = []
    for index, url in enumerate(urls):
        same = url.strip().rstrip("/")
        if same in first:
            was = first[same]
            problems.append(
                f"llm.endpoints[{index}]={url!r} is llm.endpoints[{was}]={urls[was]!r} again; "
                "list each server once."
            )
        else:
            first[same] = index
    return problems


def _is_http_url(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _agent_problems(agent: AgentConfig, strategies: Collection[str] | None) -> list[str]:
    problems = []
    if agent.keep_tool_result < -1:
        problems.append(
            f"agent.keep_tool_result={agent.keep_tool_result}: use -1 (keep all), 0 (none) "
            "or N > 0 (the last N)."
        )
    if agent.context_compress_limit < 0:
        problems.append(
            f"agent.context_compress_limit={agent.context_compress_limit} must be 0 (off) or more."
        )
    if strategies is not None and agent.context.strategy not in strategies:
        problems.append(
            f"agent.context.strategy={agent.context.strategy!r} is not a strategy; use one of "
            f"{', '.join(strategies)}."
        )
    if agent.context.keep_rounds < 1:
        problems.append(
            f"agent.context.keep_rounds={agent.context.keep_rounds} must be at least 1."
        )
    context = agent.context
    if context.cut_batch is not None and context.cut_batch < 1:
        problems.append(
            f"agent.context.cut_batch={context.cut_batch} must be at least 1 "
            "(1: cut one tool result or round a turn)."
        )
    if not 0 < context.compact_at < 1:
        problems.append(
            f"agent.context.compact_at={context.compact_at} must be between 0 and 1 "
            "(a fraction of llm.max_context_length)."
        )
    if not 0 <= context.min_saving < 1:
        problems.append(
            f"agent.context.min_saving={context.min_saving} must be at least 0 and below 1."
        )
    if context.summary_max_tokens < 1:
        problems.append(
            f"agent.context.summary_max_tokens={context.summary_max_tokens} must be positive."
        )
    if agent.tool_protocol not in TOOL_PROTOCOLS:
        problems.append(
            f"agent.tool_protocol={agent.tool_protocol!r}: use one of {', '.join(TOOL_PROTOCOLS)}."
        )
    if agent.prompt_profile is not None and agent.prompt_profile not in PROFILES:
        problems.append(
            f"agent.prompt_profile={agent.prompt_profile!r}: use one of {', '.join(PROFILES)}."
        )
    else:
        problems += prompt_set(agent).problems()
    if agent.main_agent.max_turns < 1:
        problems.append(f"agent.main_agent.max_turns={agent.main_agent.max_turns} must be >= 1.")
    cut_attempts = agent.recovery.cut_reply_attempts
    if cut_attempts is not None and cut_attempts < 1:
        problems.append(
            f"agent.recovery.cut_reply_attempts={cut_attempts} must be >= 1: attempts in all "
            "for a reply cut at llm.max_tokens (1: no larger retry; null: 10)."
        )
    roles = {"agent.main_agent": agent.main_agent}
    roles |= {f"agent.sub_agents.{n}": role for n, role in agent.sub_agents.items()}
    for where, role in roles.items():
        if role.max_cycle_repeats is not None and role.max_cycle_repeats < 1:
            problems.append(
                f"{where}.max_cycle_repeats={role.max_cycle_repeats} must be >= 1: the times "
                "a cycle of turns may come round again after its first round before the "
                "loop ends as looping (default 2)."
            )
    return problems


def _tool_problems(tools: Mapping[str, ToolServerConfig], agent: AgentConfig) -> list[str]:
    problems = []
    for name, server in tools.items():
        if server.transport not in TRANSPORTS:
            problems.append(
                f"tools.{name}.transport={server.transport!r}: use one of {TRANSPORTS}."
            )
        elif server.transport == Transport.STDIO and not server.command:
            problems.append(f"tools.{name}.command is empty: a stdio server needs a program.")
        elif server.transport != Transport.STDIO and not server.url:
            problems.append(f"tools.{name}.url is empty: a {server.transport} server needs one.")
        if server.scope not in SCOPES:
            problems.append(f"tools.{name}.scope={server.scope!r}: use shared or task.")
    for builtin in BUILTIN_TOOLS:
        if builtin in tools:
            problems.append(
                f"tools.{builtin}: {builtin!r} is the name of a tool built into deepledger "
                "(see docs/tools.md); give this server another name."
            )
    roles = {"agent.main_agent": agent.main_agent}
    roles |= {f"agent.sub_agents.{n}": role for n, role in agent.sub_agents.items()}
    for where, role in roles.items():
        for tool in role.tools:
            if (
                tool not in tools
                and tool not in BUILTIN_TOOLS
                and not _names_sub_agent(tool, agent)
            ):
                sub_agents = [f"agent-{n}" for n in agent.sub_agents]
                known = ", ".join([*tools, *sub_agents, *BUILTIN_TOOLS])
                problems.append(
                    f"{where}.tools names {tool!r}, which is not defined (known: {known})."
                )
    return problems


def _sandbox_problems(sandbox: SandboxConfig) -> list[str]:
    return [
        f"sandbox.{name}={value} must be positive (or null: the server's default)."
        for name, value in dataclasses.asdict(sandbox).items()
        if value is not None and value < 1
    ]


def _web_problems(cfg: Config) -> list[str]:
    problems = []
    if cfg.web.search_backend not in SEARCH_BACKENDS:
        problems.append(
            f"web.search_backend={cfg.web.search_backend!r}: use one of "
            f"{', '.join(SEARCH_BACKENDS)}."
        )
    if cfg.web.scraper not in SCRAPERS:
        problems.append(f"web.scraper={cfg.web.scraper!r}: use one of {', '.join(SCRAPERS)}.")
    problems += [
        f"web.secret_files: {problem}."
        for rule in cfg.web.secret_files
        if (problem := rule_problem(str(rule))) is not None
    ]
    extract = cfg.tools.get("extract_llm")
    if extract is not None and not isinstance(extract, str):
        problems.append(
            f"tools.extract_llm={extract!r}: name an llm preset (conf/llm/<name>.yaml) or null."
        )
    if not extract:
        try:  # half of MiroThinker's summary-model variables: said before any task runs
            summary_llm_config(os.environ)
        except ConfigError as exc:
            problems.append(str(exc))
    return problems


def _names_sub_agent(tool: str, agent: AgentConfig) -> bool:
    return tool.startswith("agent-") and tool.removeprefix("agent-") in agent.sub_agents


def _ray_with_local_model(cfg: Config) -> list[str]:
    """llm=local serves its model in the process that runs the tasks: with backend=ray
    each worker would start its own llama.cpp server, every one on all the cores."""
    if cfg.benchmark.execution.backend != Backend.RAY or cfg.llm.provider != Provider.LOCAL:
        return []
    return [
        "benchmark.execution.backend=ray with llm=local (llm.provider=local): each Ray "
        "worker would start its own llama.cpp server, every one on all the cores. Use "
        "benchmark.execution.backend=asyncio with llm=local, or serve the model once and "
        "point llm=openai_compatible "
        "(llm.base_url=...) at it."
    ]


def _execution_problems(execution: ExecutionConfig) -> list[str]:
    problems = []
    if execution.backend not in BACKENDS:
        problems.append(
            f"benchmark.execution.backend={execution.backend!r}: use one of {', '.join(BACKENDS)}."
        )
    if execution.resume not in RESUME_MODES:
        problems.append(
            f"benchmark.execution.resume={execution.resume!r}: use one of "
            f"{', '.join(RESUME_MODES)}."
        )
    if execution.ray.num_workers < 1:
        problems.append(
            f"benchmark.execution.ray.num_workers={execution.ray.num_workers} must be >= 1."
        )
    if execution.max_concurrent < 1:
        problems.append(
            f"benchmark.execution.max_concurrent={execution.max_concurrent} must be >= 1."
        )
    if execution.pass_at_k < 1:
        problems.append(f"benchmark.execution.pass_at_k={execution.pass_at_k} must be >= 1.")
    if execution.report_every_seconds < 0:
        problems.append(
            f"benchmark.execution.report_every_seconds={execution.report_every_seconds} must "
            "be >= 0 (0: the report is written at the end only)."
        )
    if execution.max_tasks is not None and execution.max_tasks < 0:
        problems.append(
            f"benchmark.execution.max_tasks={execution.max_tasks} must be >= 0 or null."
        )
    for key in BUDGET_KEYS:
        value = getattr(execution, key)
        if value is not None and not value > 0:  # `not >`: NaN is refused too
            problems.append(
                f"benchmark.execution.{key}={value:g} must be positive, or null for no limit."
            )
    return problems


def _unpriced_cost_limits(cfg: Config) -> list[str]:
    """A cost limit on a model without a price could never be reached: refused before
    any work, rather than letting the run spend without a bound."""
    execution = cfg.benchmark.execution
    keys = [k for k in COST_LIMITS if getattr(execution, k, None) is not None]
    model = cfg.llm.model_name
    if not keys or price_entry(model, cfg.pricing) is not None:
        return []
    if library_price(model, cfg.llm.provider, cfg.llm.base_url) is not None:
        return []
    return [
        f"benchmark.execution.{keys[0]} is set, but llm.model_name={model!r} has no price, "
        f"so its cost is unknown. Add one ('+pricing={{{model}: {{input: USD, output: USD}}}}' "
        "per million tokens) or limit tokens instead "
        "(benchmark.execution.task_token_limit, .max_tokens)."
    ]
