"""Configuration schemas, registered in Hydra's ConfigStore.

The YAML presets under ``conf/`` are merged into these dataclasses, so a mistyped key
(``agent.keep_tool_reslt=5``) or a wrong type (``agent.keep_tool_result=all``) fails at
composition with Hydra's message naming the key. What types cannot express (a provider
that exists, ``max_tokens`` below the window, ...) is checked by :func:`validate`.

Key names follow MiroThinker's, so existing command lines carry over. Secrets are never
configuration: a preset names the *environment variable* holding its key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import os
import re
import typing
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from deepledger.blocked_urls import BlockedURLs, clean_patterns
from deepledger.errors import ConfigError
from deepledger.messages import JSONObject
from deepledger.paths import CONFIG_DIR_ENV, looked_in, resolve_data_path
from deepledger.prices import library_price
from deepledger.prompts import PROFILES, PromptSet, prompt_exists
from deepledger.secret_files import SECRET_FILES_ENV, SecretFiles, clean_rules, rule_problem

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


@dataclass
class RetryConfig:
    """One retry policy for every provider (see ``llm/retry.py``)."""

    max_attempts: int = 5  # attempts in all, the first one included
    initial_wait_seconds: float = 1.0  # exponential backoff starts here ...
    max_wait_seconds: float = 60.0  # ... and never waits longer than this
    jitter_seconds: float = 1.0  # random extra wait, so parallel tasks do not retry in step
    max_retry_after_seconds: float = 120.0  # a longer Retry-After is capped to this
    # A server no call has reached yet is retried past max_attempts while it refuses,
    # until the waits add up to this (a local server loading its model binds its port
    # late); then the run stops on it (llm/retry.py, UNREACHABLE_AFTER_SECONDS).
    unreachable_after_seconds: float = 60.0
    # A reply the server aborted (vLLM/SGLang finish_reason "abort") or that holds
    # nothing at all is retried as a transient error; null: true. Null, not true, so
    # that a run made before the key existed resumes unchanged.
    aborted_or_empty: bool | None = None


@dataclass
class LLMConfig:
    # a Provider: openai | anthropic | azure_openai | openai_responses | local | qwen |
    # minimax
    provider: str = MISSING
    model_name: str = MISSING
    base_url: str | None = None  # None: the provider's public API
    api_key_env: str | None = None  # variable holding the key; None: the provider's usual one
    api_key_required: bool = True  # False for self-hosted servers that accept any key
    max_context_length: int = MISSING  # the model's window in tokens; the guard works against it
    max_tokens: int = 4096  # reply budget per call
    temperature: float | None = 1.0  # null: leave it to the server's default
    top_p: float | None = 1.0
    timeout_seconds: float = 600.0  # per HTTP attempt: the whole reply, read included
    # Opening the connection: short, so a server that is down or whose listen queue is
    # full is retried in seconds rather than waiting out timeout_seconds.
    connect_timeout_seconds: float = 10.0
    retry: RetryConfig = field(default_factory=RetryConfig)
    extra_body: JSONObject = field(default_factory=dict)  # JSON passed through to the server
    # openai provider: the server continues a trailing assistant message when sent
    # continue_final_message (vLLM, SGLang). The OpenAI API does not: leave it off there.
    assistant_prefill: bool = False
    # local provider: the GGUF file to serve (null: the bundled SmolLM2-135M-Instruct) and
    # llama.cpp's --chat_format (null: the template inside the file).
    model_path: str | None = None
    chat_format: str | None = None
    # local provider: llama.cpp's generation and batch (prompt) threads, null: the cores
    # this process may use; and OpenMP's wait policy: PASSIVE (threads sleep while they
    # wait, so a loaded machine still generates), ACTIVE (llama.cpp's spinning default)
    # or null (whatever the environment says).
    threads: int | None = None
    batch_threads: int | None = None
    omp_wait_policy: str | None = "PASSIVE"
    # A model's own needs (small models especially), applied whatever the agent preset:
    # the tool-call protocol it handles (overrides agent.tool_protocol), and a worked
    # example added to its system prompt (a file in src/deepledger/prompts/).
    tool_protocol: str | None = None
    worked_example: str | None = None
    # A tool ("server.tool" or "tool") that the first reply of each task calls: the reply
    # is prefilled with the opening of that call (XML or hermes, a provider that continues
    # a prefill), so a model that would answer from memory searches first.
    first_call: str | None = None
    # Also the model's own: a cap on every agent's turns (the lower of this and
    # agent.*.max_turns; null: no cap) and tools hidden from every agent ("server.tool" or
    # "tool", added to agent.*.tool_blacklist; null: none), for a small model that loops
    # or misuses a tool. Null, not [], so runs made before these keys resume unchanged.
    max_turns: int | None = None
    tool_blacklist: list[str] | None = None
    # The model reads images (OpenAI image parts, Anthropic image blocks): images that
    # tools return or tasks attach are sent to it; otherwise they are named in a note.
    accepts_images: bool = False
    # MiroThinker's command lines set this; deepledger's clients are always async.
    async_client: bool = True
    # anthropic: Claude's thinking, sent as the request's `thinking` field, e.g.
    # {type: enabled, budget_tokens: 8000} or {type: adaptive}; null: the model's default.
    # Thinking blocks are kept and re-sent as the API requires; no prefill while it is on.
    thinking: Any = None  # a mapping, or null
    # openai: reasoning models (o1/o3/o4-mini, gpt-5...) take max_completion_tokens and
    # only the default temperature/top_p. null: told by llm.model_name; true/false: say so
    # (a gateway's or an Azure deployment's own name).
    reasoning_model: bool | None = None
    reasoning_effort: str | None = None  # sent as reasoning_effort (none, low, medium, high...)
    # openai: the reasoning_content a reply came with goes back on its assistant message
    # when that message's tool calls are sent (DeepSeek's thinking mode requires it and
    # answers 400 without); null or false: never sent (vLLM and SGLang refuse it). Null,
    # not false, so runs made before this key resume unchanged.
    send_back_reasoning: bool | None = None
    # azure_openai: the api-version query parameter (null: none, for the /openai/v1 API).
    api_version: str | None = None
    # openai: a prompt_cache_key per task (a digest of its system prompt and task), so the
    # API routes a task's calls to the same prompt cache; null: only to api.openai.com
    # (vLLM logs it as an ignored field on every request, stricter servers refuse it),
    # true: to any server, false: never.
    prompt_cache_key: bool | None = None
    # Several servers of the same model (vLLM/SGLang replicas): each task attempt sticks
    # to one (a stable hash of task id and attempt), so its growing prompt stays in that
    # server's prefix cache.
    # null: llm.base_url alone.
    endpoints: list[str] | None = None
    endpoint_max_concurrent: int | None = None  # requests in flight per endpoint; null: no cap


@dataclass
class PriceConfig:
    """USD per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float | None = None  # None: same as input
    cache_write: float | None = None  # None: same as input


@dataclass
class ToolServerConfig:
    """One MCP tool server. Which agents use it is said in ``agent.*.tools``."""

    transport: str = "stdio"  # a Transport: stdio | streamable_http | sse
    command: str | None = None  # stdio: the program ("python" means this interpreter)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # fixed variables for the server
    env_from: list[str] = field(default_factory=list)  # copied from our environment if set
    url: str | None = None  # streamable_http / sse endpoint
    # shared: one session serves every task of the run (stateless servers: search, reader);
    # task: one session per task, so state never leaks between tasks (python).
    scope: str = "shared"
    instances: int = 1  # shared servers: sessions (processes) that calls are spread over
    call_timeout_seconds: float = 60.0
    startup_timeout_seconds: float = 30.0
    # Longer results are archived in the run directory when the agent has the `archive`
    # tool (the model gets the first preview_chars and a handle to read on), else cut
    # with a visible marker.
    max_result_chars: int = 20_000
    preview_chars: int = 2_000
    # stdio: the most one message from the server may hold; a larger answer is dropped
    # while it streams in and the call gets an error result (tools/stdio_transport.py).
    max_message_bytes: int = 16 * 1024 * 1024
    # Identical calls (same tool, same arguments) are answered once per run and then
    # served from the run's cache, marked as cached in the journal: search servers.
    cache_results: bool = False
    required: bool = False  # True: a server that cannot start fails the task
    description: str = ""  # shown to the model above the server's tools


MAX_CYCLE_REPEATS = 2  # agent.*.max_cycle_repeats when null: A A A and A B A B A B end


@dataclass
class AgentRoleConfig:
    """The main agent or one sub-agent."""

    max_turns: int = 200
    tools: list[str] = field(default_factory=list)  # names of entries in `tools`
    tool_blacklist: list[str] = field(default_factory=list)  # "server.tool" or "tool"
    description: str = ""  # sub-agents: what the main agent is told it does
    max_consecutive_rollbacks: int = 5  # after this many in a row, the turn is kept
    # The loop ends as looping when its newest turns go round a cycle of 1 to 3 turns
    # (the same replies, the same results) this many more times after its first round;
    # null: MAX_CYCLE_REPEATS. Null, not 2, so that a run made before the key existed
    # resumes with the same settings (an absent key and a null one are no change).
    max_cycle_repeats: int | None = None


# agent.context.cut_batch when null: measured on short and long recorded runs
# (benchmarks/perf/context_policies.py, docs/caching.md).
CUT_BATCH = 5


@dataclass
class ContextConfig:
    """Which messages go into each request (see context/strategy.py)."""

    strategy: str = "keep_tool_results"  # keep_tool_results | round_window | compaction
    # round_window, compaction: rounds kept unchanged after the system prompt and the task
    keep_rounds: int = 8
    # compaction (context/strategies/): due when the estimated request reaches this
    # fraction of llm.max_context_length; done only if the rounds it replaces hold at
    # least min_saving of the request; the notes get at most summary_max_tokens.
    compact_at: float = 0.8
    min_saving: float = 0.25
    summary_max_tokens: int = 1024
    # compaction: an llm preset (conf/llm/<name>.yaml) that writes the notes instead of
    # the agent's own model, e.g. a cheaper one; null: the agent's model.
    summary_llm: str | None = None
    # agent.keep_tool_result and round_window cut this many tool results (rounds) at a
    # time, when this many more than the limit have piled up, so the provider's prompt
    # cache keeps hitting between cuts (context/trim.py); 1: one every turn, as
    # MiroThinker does; null: CUT_BATCH. Null, not 5, so that a run made before the key
    # existed resumes with the same settings.
    cut_batch: int | None = None

    @property
    def batch(self) -> int:
        """``cut_batch``, or the measured default when it is null."""
        return CUT_BATCH if self.cut_batch is None else self.cut_batch


# agent.recovery.cut_reply_attempts when null: MiroThinker's client asks a reply cut at
# max_tokens up to this many times in all, 10 % more room each time.
CUT_REPLY_ATTEMPTS = 10


@dataclass
class RecoveryConfig:
    """MiroThinker's recoveries (docs/agent.md#recoveries). Each is on when null; null,
    not a value, so that a run made before the keys existed resumes unchanged."""

    # Attempts in all for a reply cut at llm.max_tokens, each with 10 % more room
    # (never past the window); 1: a cut reply is kept as it is. Null: CUT_REPLY_ATTEMPTS.
    cut_reply_attempts: int | None = None
    # \boxed{unknown}, \boxed{N/A}, ... are no answer, so the format retry follows.
    boxed_non_answers: bool | None = None
    # tool-python: `code` read as `code_block`, a missing or unknown sandbox_id given a
    # sandbox of the task's.
    repair_python_calls: bool | None = None
    # A call naming a server the agent lacks goes to the one tool of that name.
    route_unknown_server: bool | None = None

    @property
    def cut_attempts(self) -> int:
        return CUT_REPLY_ATTEMPTS if self.cut_reply_attempts is None else self.cut_reply_attempts

    @property
    def voids_non_answers(self) -> bool:
        return self.boxed_non_answers is not False

    @property
    def repairs_python(self) -> bool:
        return self.repair_python_calls is not False

    @property
    def routes_unknown_server(self) -> bool:
        return self.route_unknown_server is not False


@dataclass
class AgentConfig:
    keep_tool_result: int = -1  # -1 keep all tool results, 0 none, N the last N
    context: ContextConfig = field(default_factory=ContextConfig)
    context_compress_limit: int = 0  # 0 off; >0 on, and the number of extra format-retries
    retry_with_summary: bool = True  # write a post-mortem for the next retry
    # Tries to get a boxed final answer; null: 3 when keeping every tool result, else 1.
    max_final_answer_retries: int | None = None
    # xml (<use_mcp_tool> in text) | native (function calling) | hermes (<tool_call> in text)
    tool_protocol: str = "xml"
    # The prompt layout (prompts/__init__.py): null (deepledger's own, "default") |
    # mirothinker (the layout MiroThinker models are trained on; every MiroThinker preset
    # sets it). null, not "default", so runs from before the key resume unchanged.
    prompt_profile: str | None = None
    # A folder of the user's own template files, each replacing ours of the same name.
    prompts_dir: str | None = None
    main_agent: AgentRoleConfig = field(default_factory=AgentRoleConfig)
    sub_agents: dict[str, AgentRoleConfig] = field(default_factory=dict)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)


@dataclass
class FieldMapping:
    """Names of the task fields in the benchmark's JSONL (MiroThinker's standardized format)."""

    task_id_field: str = "task_id"
    task_question_field: str = "task_question"
    ground_truth_field: str = "ground_truth"
    file_name_field: str = "file_name"


@dataclass
class BenchmarkDataConfig:
    # jsonl: data_dir/metadata_file; package:simpleqa|freshqa|fanoutqa: a question set
    # shipped inside a PyPI package (bench/public.py)
    source: str = "jsonl"
    data_dir: str = MISSING
    metadata_file: str = "standardized_data.jsonl"
    # The task file's layout (bench/formats.py): auto (by its extension, CSV header or
    # first record) | jsonl | gaia | hle | browsecomp | browsecomp-zh |
    # xbench-deepsearch | simpleqa
    format: str = "auto"
    field_mapping: FieldMapping = field(default_factory=FieldMapping)
    strict: bool = False  # a bad line in the task file stops the run (else: reported, skipped)
    text_only: bool = False  # skip the tasks that come with an image (embedded or attached)


@dataclass
class JudgeConfig:
    """How answers are scored: exact | normalized | numeric | list | gaia | llm."""

    name: str = "normalized"
    rel_tol: float = 1e-6  # numeric: relative tolerance
    abs_tol: float = 0.0  # numeric: absolute tolerance
    ordered: bool = False  # list: order matters
    # llm: the llm preset the judge uses (llm/<name>.yaml on Hydra's search path: the
    # packaged conf/, -cd/--config-dir, hydra.searchpath)
    llm: str | None = None
    # llm: a model id that replaces the preset's model_name (e.g. a benchmark's official
    # judge model, pinned); null: the preset's
    model: str | None = None
    # llm: the judge's OpenAI-compatible server (a local or proxy one), replacing the
    # preset's base_url; null: the preset's
    base_url: str | None = None
    # llm: how the model is asked and its reply read, a JudgeRule (one grading protocol
    # each, bench/judge_rules.py): default | gaia_text | hle | browsecomp | simpleqa |
    # xbench | frames | deepsearchqa
    rule: str = "default"
    # llm: the label set and the fields the preset's protocol returns, as data (e.g.
    # [CORRECT, INCORRECT, NOT_ATTEMPTED]; [extracted_answer, reasoning, verdict,
    # confidence]); each must be one the rule reads, else the run stops before any work.
    # null: not stated.
    labels: list[str] | None = None
    fields: list[str] | None = None
    # llm: a file holding the user's own copy of an official judge template, sent in
    # place of our prompt with the official placeholders filled ({question},
    # {correct_answer}, {response}; SimpleQA: {question}, {target}, {predicted_answer}).
    template: str | None = None
    # llm: how many times the model is asked for one answer when its replies have no
    # readable verdict; then the answer is unjudged (not counted in accuracy). null: 3.
    max_asks: int | None = None


@dataclass
class RayConfig:
    """benchmark.execution.backend=ray: the cluster and its workers."""

    # null: start a local Ray on this machine; auto: the cluster this machine belongs to;
    # ray://host:10001: a remote cluster through Ray Client.
    address: str | None = None
    num_workers: int = 2  # actors; each runs up to benchmark.execution.max_concurrent tasks


@dataclass
class ExecutionConfig:
    max_tasks: int | None = None  # None: all tasks
    max_concurrent: int = 5
    pass_at_k: int = 1
    # While the run goes, report.html is rewritten this often (seconds) when tasks
    # have finished since; 0: only at the end.
    report_every_seconds: float = 300.0
    report: bool = True  # false: no report.html (`deepledger report RUN_DIR` writes it later)
    # Budgets per task (null: none). A task over one ends its attempt as the window
    # guard does, with end reason `limit`, and records which limit it hit.
    task_time_limit_seconds: float | None = None
    task_token_limit: int | None = None  # input + output tokens of the task's model calls
    task_cost_limit_usd: float | None = None
    # Budgets per run (null: none): once spent, no task starts; running ones finish or
    # stop at their next turn, and the same command with a higher budget resumes.
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    # Where the tasks run: asyncio (this process) or ray (Ray actors, each with its own
    # event loop, tool servers and model clients; pip install deepledger[ray]).
    backend: str = "asyncio"
    ray: RayConfig = field(default_factory=RayConfig)
    # Where a retry a killed run left unfinished goes on: `turn` (rebuilt from its
    # journal, at the next turn; what cannot be rebuilt falls back to `retry`) or
    # `retry` (from its first turn).
    resume: str = "turn"


@dataclass
class BenchmarkConfig:
    name: str = MISSING
    data: BenchmarkDataConfig = field(default_factory=BenchmarkDataConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    answer_format: str = ""  # extra answer-format rules for the summarize prompt
    # The corpus the `search` tool indexes for this suite instead of its default (a
    # hermetic suite brings its own); relative paths are from the working directory.
    search_corpus: str | None = None
    # Answer-leak patterns of this suite (where its answers are published), added to
    # web.blocked_urls; same syntax (blocked_urls.py). Null (none), not [], so that a run
    # made before the key existed resumes with the same settings.
    blocked_urls: list[str] | None = None
    # The metrics this suite's official protocol publishes, beside accuracy and pass@k
    # (names in PROTOCOL_METRICS; bench/protocol_metrics.py). Null, not [], as above.
    metrics: list[str] | None = None
    # Task fields (the task line's metadata, e.g. GAIA's Level) to break accuracy down by.
    breakdown: list[str] | None = None


@dataclass
class WebConfig:
    """What URLs chosen by the model (or by a page it reads) may reach, and which local
    files the tools may show it."""

    # Loopback, private, link-local and cloud-metadata addresses are refused unless
    # this is true (tests on loopback; a research intranet). Base URLs the user
    # configures (SERPER_BASE_URL, llm.base_url, ...) are never filtered.
    allow_private_networks: bool = False
    # The backend of the web search servers (web_search, search_and_scrape_webpage):
    # serper (SERPER_API_KEY), searxng (SEARXNG_BASE_URL), tavily (TAVILY_API_KEY),
    # brave (BRAVE_API_KEY), or local: the offline corpus of the `search` tool.
    search_backend: str = "serper"
    # The page reader of the scrape-and-extract tool: jina (JINA_API_KEY; r.jina.ai or
    # JINA_BASE_URL) or direct (fetched and converted here). auto: jina when its key is
    # set, else direct.
    scraper: str = "auto"
    # Shell-style name patterns of files no tool ever shows the model, added to the
    # built-in ones (.env*, .git/, *.pem, *.key, id_rsa*, .ssh/, .aws/, credentials*.json,
    # ...; deepledger/secret_files.py). Matched against every part of a file's real path.
    secret_files: list[str] = field(default_factory=list)
    # The reader and tool-python open a benchmark.data.data_dir that is the working
    # directory, the home folder or a folder above them only as its tasks' attached
    # files (tools/roots.py); true opens it whole (secret files are refused anyway).
    allow_working_dir: bool = False
    # Answer-leak guard (blocked_urls.py): glob patterns on a URL's host/path (no scheme,
    # www. dropped, any case; `*` also matches `/`) whose pages the search tools drop and
    # the readers refuse, added to the built-in huggingface.co (and hf.co) datasets/* and
    # spaces/* rules and to the suite's benchmark.blocked_urls.
    # Null (none) rather than [], and null (true) below rather than true, so that a run
    # made before these keys existed resumes under the guard with the same settings.
    blocked_urls: list[str] | None = None
    # false turns the built-in huggingface.co rules off (blocked_urls still apply).
    block_answer_sites: bool | None = None


@dataclass
class ResumeConfig:
    """Resuming a run directory (the same command with the same ``hydra.run.dir``)."""

    # A resume may use settings that differ from the run's (each task records the
    # config_id it ran under); false: such a resume is refused, listing the keys.
    allow_config_change: bool = False
    # A task whose question, ground truth, attached file or judge changed since its
    # result was recorded: rerun (from its start, the old result not counted) or refuse.
    on_changed_tasks: str = "rerun"


@dataclass
class SandboxConfig:
    """What one python sandbox (tools ``python`` and ``tool-python``) may take of the host.

    Set, each is added to the args of the servers that run deepledger's sandbox
    (``SANDBOX_MODULES``) as ``--memory-mb``, ``--max-processes`` and ``--disk-mb``; null
    leaves the server's args and defaults as they are (docs/security.md says what each
    server enforces and how; its tool descriptions say it to the model).
    """

    # All of a sandbox's processes together where a cgroup can be made (root); else each
    # process's address space (RLIMIT_AS). null: the server's --memory-mb (python 1024,
    # tool-python 2048).
    memory_mb: int | None = None
    max_processes: int | None = None  # processes and threads together; null: 256
    # Its work folder, /tmp and /dev/shm together (an ext4 quota disk, as root); else the
    # size of /tmp and /dev/shm together (half each, in RAM), and the work folder is not
    # limited. null: 1024.
    disk_mb: int | None = None


@dataclass
class Config:
    llm: LLMConfig = field(default_factory=LLMConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    pricing: dict[str, PriceConfig] = field(default_factory=dict)  # keyed by model name
    # keyed by server name; entries are ToolServerConfig, checked by tool_servers(). Typed
    # loosely here because OmegaConf cannot add a typed entry from the command line
    # (`+tools.mine={command: ..., args: [...]}` must work).
    tools: dict[str, Any] = field(default_factory=dict)
    web: WebConfig = field(default_factory=WebConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    resume: ResumeConfig = field(default_factory=ResumeConfig)
    question: str | None = None  # for `deepledger run`
    task_file: str | None = None  # for `deepledger run`: a file attached to the question


SCHEMA_NAME = "deepledger_schema"
TOOL_PROTOCOLS = tuple(p.value for p in ProtocolName)


def register_schemas() -> None:
    """Make the schema available to ``conf/config.yaml``'s defaults list."""
    ConfigStore.instance().store(name=SCHEMA_NAME, node=Config)


SEARCH_CORPUS_ENV = "DEEPLEDGER_SEARCH_CORPUS"  # read by the search and page servers
ALLOW_PRIVATE_ENV = "DEEPLEDGER_ALLOW_PRIVATE_NETWORKS"  # read by web/ssrf.py
# Entries of `tools` that are settings, not servers.
TOOL_SETTINGS = ("extract_llm",)
# Tools that run inside deepledger rather than in a server: roles name them like servers.
BUILTIN_TOOLS = ("memory", "archive", "jina_scrape_llm_summary")


@functools.cache
def _server_schema() -> DictConfig:
    """The structured :class:`ToolServerConfig`, built once: building it costs a few
    milliseconds, and every run checks each server entry twice."""
    schema = OmegaConf.structured(ToolServerConfig)
    assert isinstance(schema, DictConfig)
    return schema


def tool_servers(config: Config) -> dict[str, ToolServerConfig]:
    """Every ``tools.<name>`` server entry checked against :class:`ToolServerConfig`:
    new objects on each call, so a caller may change its copy (``deepledger run`` gives
    the reader and tool-python the attached file; ``tools/roots.py``)."""
    servers, problems = {}, []
    for name, entry in config.tools.items():
        if name in TOOL_SETTINGS:
            continue
        try:
            merged = OmegaConf.merge(_server_schema(), entry)  # merge copies it
            server = OmegaConf.to_object(merged)
        except OmegaConfBaseException as exc:
            key = getattr(exc, "key", None) or "?"
            problems.append(f"tools.{name}.{key}: {str(exc).splitlines()[0]}")
            continue
        assert isinstance(server, ToolServerConfig)
        servers[name] = server
    if problems:
        raise ConfigError("Invalid tool server configuration:\n  - " + "\n  - ".join(problems))
    for server in servers.values():
        server.env.update(server_environment(config))
        if any(module in server.args for module in SANDBOX_MODULES):
            server.args += sandbox_arguments(config.sandbox)
    return servers


def server_environment(cfg: Config) -> dict[str, str]:
    """What every tool server learns from the config: the suite's search corpus (the
    search servers index it, the page readers open its ``corpus://`` links), whether
    URLs the model chooses may reach private networks and the user's own secret-file
    rules (``web.secret_files``). None is a secret. With
    ``$DEEPLEDGER_CONFIG_DIR`` set they learn it too: a relative ``--root`` (the reader's
    ``benchmark.data.data_dir``) is then found in the same project as the task loader
    finds it (``deepledger.paths``)."""
    env = {}
    if configured := os.environ.get(CONFIG_DIR_ENV):
        env[CONFIG_DIR_ENV] = str(Path(configured).expanduser().resolve())
    corpus = cfg.benchmark.search_corpus
    if corpus:
        env[SEARCH_CORPUS_ENV] = str(resolve_data_path(corpus).resolve())
    if cfg.web.allow_private_networks:
        env[ALLOW_PRIVATE_ENV] = "1"
    env.update(reading_rules_environment(cfg))
    return env


def reading_rules_environment(cfg: Config) -> dict[str, str]:
    """The user's secret-file rules and the run's answer-leak rules, as the variables the
    readers (tool servers and this process alike) take them from."""
    env = leak_rules(cfg).environment()
    if extra := secret_rules(cfg).environment_value():
        env[SECRET_FILES_ENV] = extra
    return env


def leak_rules(cfg: Config) -> BlockedURLs:
    """The answer-leak rules of this run: the built-in ones (unless
    ``web.block_answer_sites`` is false), the suite's ``benchmark.blocked_urls`` and the
    user's ``web.blocked_urls``."""
    patterns = [*(cfg.benchmark.blocked_urls or ()), *(cfg.web.blocked_urls or ())]
    return BlockedURLs(clean_patterns(patterns), cfg.web.block_answer_sites is not False)


def secret_rules(cfg: Config) -> SecretFiles:
    """The secret-file rules of this run: the built-in ones and ``web.secret_files``."""
    return SecretFiles(clean_rules(cfg.web.secret_files))


def share_reading_rules(cfg: Config) -> None:
    """Make ``web.secret_files`` and the answer-leak rules this process's rules as well as
    its tool servers', so what it reads itself (the scraper's pages and ``corpus://``
    links, members of a zip it fetched) meets the same rules: those readers take them
    from the environment, as the servers do."""
    os.environ.update(reading_rules_environment(cfg))


# MiroThinker's summary model, named by its .env variables (apps/miroflow-agent/.env.example).
SUMMARY_BASE_URL_ENV = "SUMMARY_LLM_BASE_URL"
SUMMARY_MODEL_ENV = "SUMMARY_LLM_MODEL_NAME"
SUMMARY_KEY_ENV = "SUMMARY_LLM_API_KEY"
SUMMARY_WINDOW = 131_072  # assumed: the variables say nothing of the model's window
SUMMARY_MAX_TOKENS = 8192  # the reply budget MiroThinker gives its summary calls


def summary_llm_config(env: Mapping[str, str]) -> LLMConfig | None:
    """MiroThinker's summary model (``SUMMARY_LLM_BASE_URL``, ``SUMMARY_LLM_MODEL_NAME``,
    ``SUMMARY_LLM_API_KEY``) as an OpenAI-compatible llm preset; None when neither the
    URL nor the model is set. The URL may be the full ``.../chat/completions`` address
    (as MiroThinker's .env example gives it) or the API base (``.../v1``)."""
    base = env.get(SUMMARY_BASE_URL_ENV, "").strip()
    name = env.get(SUMMARY_MODEL_ENV, "").strip()
    if not base and not name:
        return None
    if not base or not name:
        missing = SUMMARY_MODEL_ENV if base else SUMMARY_BASE_URL_ENV
        given = SUMMARY_BASE_URL_ENV if base else SUMMARY_MODEL_ENV
        raise ConfigError(
            f"{given} is set but {missing} is not: MiroThinker's summary model needs both "
            f"(or unset {given} to let the agent's own model, or tools.extract_llm, read pages)."
        )
    base = re.sub(r"/chat/completions$", "", base.rstrip("/"))
    return LLMConfig(
        provider="openai",
        model_name=name,
        base_url=base,
        api_key_env=SUMMARY_KEY_ENV,
        api_key_required=False,  # optional in MiroThinker: self-hosted servers take none
        max_context_length=SUMMARY_WINDOW,
        max_tokens=SUMMARY_MAX_TOKENS,
        temperature=1.0,
        top_p=None,
    )


def extract_llm_name(cfg: Config) -> str | None:
    """``tools.extract_llm``: the llm preset the scrape-and-extract tool uses (None: the
    agent's own model)."""
    name = cfg.tools.get("extract_llm")
    return str(name) if name else None


def prompt_set(agent: AgentConfig) -> PromptSet:
    """The templates the agent's prompts come from: agent.prompt_profile's, with the
    files of agent.prompts_dir in place of ours."""
    folder = resolve_data_path(agent.prompts_dir) if agent.prompts_dir else None
    return PromptSet(agent.prompt_profile or "default", folder)


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


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
OMP_WAIT_POLICIES = ("PASSIVE", "ACTIVE")
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


PROVIDERS = tuple(p.value for p in Provider)
JUDGES = tuple(j.value for j in JudgeName)
JUDGE_RULES = tuple(r.value for r in JudgeRule)
TRANSPORTS = tuple(t.value for t in Transport)
SCOPES = tuple(s.value for s in Scope)


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


SEARCH_BACKENDS = tuple(b.value for b in SearchBackendName)
RESUME_MODES = tuple(m.value for m in ResumeMode)
CHANGED_TASKS = tuple(c.value for c in ChangedTasks)
SCRAPERS = ("auto", "jina", "direct")


def _sandbox_problems(sandbox: SandboxConfig) -> list[str]:
    return [
        f"sandbox.{name}={value} must be positive (or null: the server's default)."
        for name, value in dataclasses.asdict(sandbox).items()
        if value is not None and value < 1
    ]


# The servers that run deepledger's sandbox, and take the `sandbox` keys as arguments.
SANDBOX_MODULES = (
    "deepledger.tools.servers.python_sandbox",
    "deepledger.tools.servers.tool_python",
)


def sandbox_arguments(sandbox: SandboxConfig) -> list[str]:
    """The `sandbox` keys that are set, as the sandbox servers' options (the last of an
    option wins, so these override the same option earlier in a server's args)."""
    options = (
        ("--memory-mb", sandbox.memory_mb),
        ("--max-processes", sandbox.max_processes),
        ("--disk-mb", sandbox.disk_mb),
    )
    return [part for flag, value in options if value is not None for part in (flag, str(value))]


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


BACKENDS = tuple(b.value for b in Backend)


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


def price_entry(model: str, pricing: Mapping[str, PriceConfig]) -> PriceConfig | None:
    """``pricing``'s entry for ``model``, or for the longest listed prefix of it (dated
    variants: ``gpt-4o`` prices ``gpt-4o-2024-08-06``)."""
    key = price_key(model, pricing)
    return None if key is None else pricing[key]


def price_key(model: str, pricing: Mapping[str, PriceConfig]) -> str | None:
    """The key of ``price_entry``'s entry, or None."""
    if model in pricing:
        return model
    prefixes = [name for name in pricing if model.startswith(name)]
    return max(prefixes, key=len) if prefixes else None


# Task limits and run budgets under benchmark.execution (agent/limits.py); null: none.
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

# The variable `llm.api_key=KEY` on the command line moves the key to (cli.py), named by
# llm.api_key_env from then on, so that the key itself is never written anywhere.
COMMAND_LINE_KEY_ENV = "DEEPLEDGER_COMMAND_LINE_API_KEY"


# -- unknown keys on the command line -------------------------------------------------
# Hydra rejects them too, but its message suggests `+key=value`, which would fail again
# against the schema. We name the key and the closest real one instead.

CONFIG_GROUPS = ("llm", "agent", "benchmark", "pricing", "tools")


def schema_keys(node: type = Config, prefix: str = "") -> tuple[set[str], set[str]]:
    """(every leaf or node key, the keys whose children are free-form dict entries)."""
    keys: set[str] = set()
    open_prefixes: set[str] = set()
    hints = typing.get_type_hints(node)
    for f in dataclasses.fields(node):
        key = f"{prefix}{f.name}"
        keys.add(key)
        kind = hints[f.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            sub_keys, sub_open = schema_keys(kind, key + ".")
            keys |= sub_keys
            open_prefixes |= sub_open
        elif typing.get_origin(kind) is dict:
            open_prefixes.add(key)
    return keys, open_prefixes


def closest_key(key: str, keys: set[str], cutoff: float = 0.6) -> str | None:
    """The most similar key, or None below ``cutoff``; on a tie the first alphabetically
    (difflib's own tie-break takes the last, so "llm.modle" suggested llm.model_path)."""
    best, best_score = None, cutoff
    for candidate in sorted(keys):
        score = difflib.SequenceMatcher(None, key, candidate).ratio()
        if score > best_score or (best is None and score >= cutoff):
            best, best_score = candidate, score
    return best


def unknown_override_keys(overrides: list[str]) -> list[str]:
    """Each ``key=value`` override whose key the schema does not have, with a suggestion.

    Entries under a free-form dict (``llm.extra_body``, ``pricing``) are Hydra's to
    judge: adding one needs ``+key=value`` there, and Hydra says so.
    """
    keys, open_prefixes = schema_keys()
    problems = []
    for override in overrides:
        key = override.split("=", 1)[0].strip()
        if "=" not in override or key.startswith(("+", "~", "hydra")) or key in CONFIG_GROUPS:
            continue
        if key in keys or any(key.startswith(p + ".") for p in open_prefixes):
            continue
        close = closest_key(key, keys)
        hint = f" (did you mean {close}?)" if close else ""
        problems.append(f"{key}{hint}")
    return problems


def unknown_presets(overrides: list[str], conf_dir: Path) -> list[str]:
    """Each ``group=name`` override (``llm``, ``agent``, ``benchmark``, ...; a sweep's
    ``a,b`` too) naming no file of ``conf/<group>/``, with the closest preset there.

    Hydra's own message lists every option of the group; a MiroThinker command line
    naming a preset deepledger does not carry should name the one to use instead.
    """
    problems = []
    for override in overrides:
        group, _, value = override.partition("=")
        if group not in CONFIG_GROUPS or not re.fullmatch(r"[\w.,-]+", value):
            continue
        known = {p.stem for p in (conf_dir / group).glob("*.yaml")}
        for name in value.split(","):
            if name and name != "null" and name not in known:  # null: Hydra's own
                close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.0)
                hint = f"the closest is {group}={close[0]}" if close else "there is none"
                problems.append(
                    f"{group}={name} is not a preset ({hint}; all of them: "
                    f"{', '.join(sorted(known))})"
                )
    return problems


def compose(conf_dir: str | Path, overrides: list[str]) -> Config:
    """The config ``deepledger`` would run with, for code that is not the CLI (scripts,
    benchmarks, notebooks): the same files, schema and override syntax, typed."""
    return typed(compose_node(conf_dir, overrides))


def compose_node(conf_dir: str | Path, overrides: list[str]) -> DictConfig:
    """What :func:`compose` types: Hydra's composed node, interpolations unresolved."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_schemas()
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        return hydra_compose(
            config_name="config", overrides=[carried_override(o) for o in overrides]
        )


def resume_override(override: str) -> str:
    """``+resume.allow_config_change=...`` as earlier releases documented it (``resume``
    was a mapping without keys, so Hydra wanted the ``+``): the same as without it, now
    that its keys have defaults and Hydra refuses to add a key that exists."""
    return override[1:] if override.startswith("+resume.") else override


# MiroThinker's llm presets spell the server's address per provider; its command lines
# set them so (llm.openai_base_url=$BASE_URL in its debug script). Here it is base_url.
BASE_URL_ALIASES = ("llm.openai_base_url", "llm.anthropic_base_url")


def carried_override(override: str) -> str:
    """An override as deepledger reads it: :func:`resume_override`, and MiroThinker's
    ``llm.openai_base_url=``/``llm.anthropic_base_url=`` as ``llm.base_url=``."""
    key, equals, value = override.partition("=")
    if equals and key.strip() in BASE_URL_ALIASES:
        return f"llm.base_url={value}"
    return resume_override(override)


def typed(node: DictConfig) -> Config:
    """The composed Hydra config as :class:`Config` instances, interpolations resolved:
    done once, at the CLI's edge; everything below it reads the dataclasses. A preset's
    or an override's bad value is left for :func:`validate` to report."""
    with _typed_errors():
        config = OmegaConf.to_object(node)
    if not isinstance(config, Config):  # a node composed without the schema
        with _typed_errors():
            config = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), node))
    assert isinstance(config, Config)
    return config


def typed_llm(node: DictConfig, key: str) -> LLMConfig:
    """An llm preset loaded by name (``benchmark.judge.llm``, ...) as :class:`LLMConfig`;
    ``key`` names the setting in the error."""
    with _typed_errors(key):
        preset = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(LLMConfig), node))
    assert isinstance(preset, LLMConfig)
    return preset


@contextlib.contextmanager
def _typed_errors(key: str | None = None) -> Iterator[None]:
    """OmegaConf's errors while typing (a mandatory value left ``???``, a value of the
    wrong type in a preset) as a :class:`ConfigError` naming the key."""
    try:
        yield
    except OmegaConfBaseException as exc:
        where = getattr(exc, "full_key", None) or "?"
        prefix = f"{key}: " if key else ""
        raise ConfigError(f"{prefix}{where}: {str(exc).splitlines()[0]}") from None


def node_data(node: Any, *, resolve: bool) -> JSONObject:
    """A config node (Hydra's own included) as plain data, keyed by strings."""
    data = OmegaConf.to_container(node, resolve=resolve)
    assert isinstance(data, dict)
    return {str(key): value for key, value in data.items()}


def as_record(config: Config) -> JSONObject:
    """The config as plain data, the way the run directory records it (manifest.json,
    ``config_id``): the same data as the composed node resolved, enum values as strings."""
    return dataclasses.asdict(config)
