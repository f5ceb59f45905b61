"""The names a setting may take: one StrEnum per kind of thing a key names, the
value lists validation checks against, and the names of the config's environment
variables and budget keys."""

from __future__ import annotations

from enum import StrEnum

# -- the names a setting may take ----------------------------------------------------
# Each enum is the one list of a setting's allowed values: validate() checks against it
# and the registry that builds the thing (llm/factory.py, bench/judge.py, ...) is keyed
# by it (tests check that they agree). The schema fields stay `str`, so that a bad value
# is reported by validate() with every other problem, not by Hydra one at a time; being
# StrEnums, the members compare equal to those strings and are written as them.


class Provider(StrEnum):
    """``llm.provider``: who serves the model (llm/factory.py builds each)."""

    OPENAI = "openai"  # any OpenAI-compatible server
    ANTHROPIC = "anthropic"
    AZURE_OPENAI = "azure_openai"
    OPENAI_RESPONSES = "openai_responses"  # the OpenAI Responses API (llm/openai_responses.py)
    LOCAL = "local"  # the bundled llama.cpp server (llm/local.py)
    # MiroThinker's name for its models behind an OpenAI-compatible endpoint
    # (llm.provider=qwen in its scripts), so those command lines carry over.
    QWEN = "qwen"
    # MiroThinker's name for MiniMax's OpenAI-compatible API (llm.provider=minimax).
    MINIMAX = "minimax"


class JudgeName(StrEnum):
    """``benchmark.judge.name``: how answers are scored (bench/judge.py)."""

    EXACT = "exact"
    NORMALIZED = "normalized"
    NUMERIC = "numeric"
    LIST = "list"
    GAIA = "gaia"
    AIME = "aime"
    LLM = "llm"


class JudgeRule(StrEnum):
    """``benchmark.judge.rule``: how the llm judge asks its model and reads the reply
    (``bench/judge_rules.py``'s ``LLM_RULES``, keyed by these)."""

    DEFAULT = "default"
    GAIA_TEXT = "gaia_text"
    HLE = "hle"
    BROWSECOMP = "browsecomp"
    SIMPLEQA = "simpleqa"
    XBENCH = "xbench"
    FRAMES = "frames"
    DEEPSEARCHQA = "deepsearchqa"


class ProtocolName(StrEnum):
    """``agent.tool_protocol`` / ``llm.tool_protocol``: how tool calls are written
    (tools/protocols/)."""

    XML = "xml"  # <use_mcp_tool> blocks in the reply's text
    NATIVE = "native"  # the provider's function calling
    HERMES = "hermes"  # <tool_call>{json}</tool_call> blocks in the reply's text (Qwen, Hermes)


class Transport(StrEnum):
    """``tools.<name>.transport``: how an MCP server is reached (tools/session.py)."""

    STDIO = "stdio"
    STREAMABLE_HTTP = "streamable_http"
    SSE = "sse"


class Scope(StrEnum):
    """``tools.<name>.scope``: who shares a server's session."""

    SHARED = "shared"  # one session (or ``instances``) for every task of the run
    TASK = "task"  # one session per task: no state leaks between tasks


class Backend(StrEnum):
    """``benchmark.execution.backend``: where the tasks run (bench/)."""

    ASYNCIO = "asyncio"  # this process, one event loop
    RAY = "ray"  # Ray actors on this machine or a cluster (pip install deepledger[ray])


class ResumeMode(StrEnum):
    """``benchmark.execution.resume``: where a retry a killed run left unfinished
    goes on (agent/resume.py)."""

    TURN = "turn"  # rebuilt from its journal, at the next turn
    RETRY = "retry"  # from its first turn, the old journal set aside


class ChangedTasks(StrEnum):
    """``resume.on_changed_tasks``: what a resume does with a task whose question, ground
    truth, attached file or judge changed since its result was recorded
    (bench/inputs.py)."""

    RERUN = "rerun"  # run it again from its start; its old result is not counted
    REFUSE = "refuse"  # refuse the resume (exit 2), naming the tasks; nothing is written


class SearchBackendName(StrEnum):
    """``web.search_backend``: who answers the web search tools (web/search/)."""

    SERPER = "serper"
    SEARXNG = "searxng"
    TAVILY = "tavily"
    BRAVE = "brave"
    LOCAL = "local"  # the offline corpus of the `search` tool
    SOGOU = "sogou"  # Tencent Cloud's web search API (MiroThinker's sogou_search)


TOOL_PROTOCOLS = tuple(p.value for p in ProtocolName)
PROVIDERS = tuple(p.value for p in Provider)
JUDGES = tuple(j.value for j in JudgeName)
JUDGE_RULES = tuple(r.value for r in JudgeRule)
TRANSPORTS = tuple(t.value for t in Transport)
SCOPES = tuple(s.value for s in Scope)
SEARCH_BACKENDS = tuple(b.value for b in SearchBackendName)
RESUME_MODES = tuple(m.value for m in ResumeMode)
CHANGED_TASKS = tuple(c.value for c in ChangedTasks)
SCRAPERS = ("auto", "jina", "direct")
BACKENDS = tuple(b.value for b in Backend)
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
OMP_WAIT_POLICIES = ("PASSIVE", "ACTIVE")

# Entries of `tools` that are settings, not servers.
TOOL_SETTINGS = ("extract_llm",)
# Tools that run inside deepledger rather than in a server: roles name them like servers.
BUILTIN_TOOLS = ("memory", "archive", "jina_scrape_llm_summary")

# The one list of them: limits, metrics and the report import it from here.
TASK_LIMITS = ("task_time_limit_seconds", "task_token_limit", "task_cost_limit_usd")
RUN_BUDGETS = ("max_cost_usd", "max_tokens")
BUDGET_KEYS = (*TASK_LIMITS, *RUN_BUDGETS)
COST_LIMITS = ("task_cost_limit_usd", "max_cost_usd")

# benchmark.metrics' names: the published metrics a preset may choose.
PROTOCOL_METRICS = (
    "simpleqa",  # SimpleQA: labels, accuracy given attempted, F1, not-attempted rate
    "calibration_error",  # BrowseComp, HLE: binned RMS calibration error
    "confidence_interval",  # HLE: the 95 % half-width of the accuracy
    "deepsearchqa",  # DeepSearchQA: its outcome rates and the F1 over every task
    "avg_at_k",  # xbench-DeepSearch: the mean accuracy over pass@k's attempts
)

# The variable `llm.api_key=KEY` on the command line moves the key to
# (cli/hydra_command.py), named by
# llm.api_key_env from then on, so that the key itself is never written anywhere.
COMMAND_LINE_KEY_ENV = "DEEPLEDGER_COMMAND_LINE_API_KEY"
