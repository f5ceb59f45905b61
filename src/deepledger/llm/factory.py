"""Building a model client from the ``llm`` config: provider, key, retries.

To add a provider: write a :class:`~deepledger.llm.base.LLMClient` subclass in its own
module, name it in :class:`deepledger.config.Provider`, and add its builder to
``BUILDERS`` below (and a preset under ``conf/llm/``); a test checks the two agree.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol, TypedDict

from deepledger.config import LLMConfig, ProtocolName, Provider
from deepledger.errors import ConfigError, MissingAPIKeyError, UnknownProviderError
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.endpoints import RoutedClient
from deepledger.llm.retry import RetryingClient, RetryPolicy
from deepledger.llm.tokens import TokenCounter, default_counter

log = logging.getLogger(__name__)

# The key variable each provider reads when the preset does not name one.
DEFAULT_KEY_VARIABLES: dict[str, str] = {
    Provider.OPENAI: "OPENAI_API_KEY",
    Provider.ANTHROPIC: "ANTHROPIC_API_KEY",
    Provider.AZURE_OPENAI: "AZURE_OPENAI_API_KEY",
    Provider.OPENAI_RESPONSES: "OPENAI_API_KEY",
    Provider.MINIMAX: "MINIMAX_API_KEY",
}
# What self-hosted OpenAI-compatible servers accept when they check no key.
NO_KEY = "EMPTY"


def resolve_api_key(cfg: LLMConfig) -> str:
    """The key from the environment variable the preset names.

    An empty value counts as unset: an empty line in .env or an exported empty variable
    never replaces a key with nothing. A preset that needs no key and names no variable
    sends a dummy, so a real OPENAI_API_KEY never leaks to a self-hosted server.
    """
    variable = cfg.api_key_env
    if variable is None and cfg.api_key_required:
        variable = DEFAULT_KEY_VARIABLES.get(cfg.provider)
    value = os.environ.get(variable, "").strip() if variable else ""
    if value:
        return value
    if cfg.api_key_required:
        raise MissingAPIKeyError(
            variable or "(none named)",
            "For a self-hosted server that needs no key, use llm=openai_compatible.",
        )
    return NO_KEY


def _build_openai(cfg: LLMConfig) -> LLMClient:
    from deepledger.llm.openai import OpenAIChatClient

    return OpenAIChatClient(cfg.model_name, base_url=cfg.base_url, **_openai_protocol_settings(cfg))


def _build_openai_responses(cfg: LLMConfig) -> LLMClient:
    from deepledger.llm.openai_responses import OpenAIResponsesClient

    return OpenAIResponsesClient(
        cfg.model_name, base_url=cfg.base_url, **_openai_protocol_settings(cfg)
    )


class _OpenAIProtocolSettings(TypedDict):
    api_key: str
    timeout_seconds: float
    connect_timeout_seconds: float
    continue_final_message: bool
    reasoning_model: bool | None
    accepts_images: bool
    send_back_reasoning: bool


def _openai_protocol_settings(cfg: LLMConfig) -> _OpenAIProtocolSettings:
    """What every client speaking the OpenAI protocol takes from ``llm.*``."""
    return {
        "api_key": resolve_api_key(cfg),
        "timeout_seconds": cfg.timeout_seconds,
        "connect_timeout_seconds": cfg.connect_timeout_seconds,
        "continue_final_message": cfg.assistant_prefill,
        "reasoning_model": cfg.reasoning_model,
        "accepts_images": cfg.accepts_images,
        "send_back_reasoning": bool(cfg.send_back_reasoning),
    }


def _build_azure_openai(cfg: LLMConfig) -> LLMClient:
    from deepledger.llm.openai import AzureOpenAIChatClient

    base_url = cfg.base_url
    if not base_url:  # checked before the key: the preset leaves it to the user
        raise ConfigError(
            "llm.base_url: set your Azure OpenAI deployment's URL, "
            "llm.base_url=https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT "
            "(and llm.model_name to the model it serves)."
        )
    return AzureOpenAIChatClient(
        cfg.model_name,
        base_url=base_url,
        api_version=cfg.api_version,
        **_openai_protocol_settings(cfg),
    )


def _build_anthropic(cfg: LLMConfig) -> LLMClient:
    from deepledger.llm.anthropic import AnthropicClient

    # llm.thinking, or the same setting passed through llm.extra_body.thinking.
    thinking = cfg.thinking or cfg.extra_body.get("thinking")
    return AnthropicClient(
        cfg.model_name,
        api_key=resolve_api_key(cfg),
        base_url=cfg.base_url,
        timeout_seconds=cfg.timeout_seconds,
        connect_timeout_seconds=cfg.connect_timeout_seconds,
        thinking=thinking,
        accepts_images=cfg.accepts_images,
    )


def _build_local(cfg: LLMConfig) -> LLMClient:
    from deepledger.llm.local import (
        INSTALL_HINT,
        LocalModelClient,
        ServerThreads,
        llama_server_available,
    )

    if not llama_server_available():
        raise ConfigError(f"llm=local needs llama-cpp-python[server]. {INSTALL_HINT}")
    path = _model_file(cfg.model_path)
    return LocalModelClient(
        cfg.model_name,
        model_path=path,
        context_size=cfg.max_context_length,
        timeout_seconds=cfg.timeout_seconds,
        connect_timeout_seconds=cfg.connect_timeout_seconds,
        chat_format=cfg.chat_format,
        native_tools=cfg.tool_protocol == ProtocolName.NATIVE,
        accepts_images=cfg.accepts_images,
        threads=ServerThreads.tuned(
            cfg.threads,
            cfg.batch_threads,
            cfg.omp_wait_policy.upper() if cfg.omp_wait_policy else None,
        ),
    )


def _model_file(model_path: str | None) -> Path:
    """llm=local's GGUF file: ``llm.model_path`` (a path, or the name of a model
    installed on request, ``llm/local_models.py``), else the bundled model's."""
    from deepledger.llm.local import bundled_model
    from deepledger.llm.local_models import installed_model

    if model_path and (packaged := installed_model(model_path)) is not None:
        return packaged
    path = Path(model_path).expanduser() if model_path else bundled_model()
    if not path.is_file():
        raise ConfigError(f"llm.model_path={model_path}: no such file.")
    return path


class CountedModel(Protocol):
    """What tells how a model's tokens are counted: an ``LLMConfig``, or what a replay
    read of a run's recorded one."""

    @property
    def provider(self) -> str: ...
    @property
    def model_name(self) -> str: ...
    @property
    def max_context_length(self) -> int: ...
    @property
    def model_path(self) -> str | None: ...
    @property
    def chat_format(self) -> str | None: ...


def token_counter_for(model: CountedModel) -> TokenCounter:
    """The counter a client of ``model`` counts with, told without starting it (a
    replay has no model server): the model's own tokenizer where the client counts
    exactly (``capabilities.exact_counting``), else the default estimate."""
    if model.provider != Provider.LOCAL:
        return default_counter()  # a remote API's tokenizer is not ours to load
    from deepledger.llm.local import LocalModelClient

    try:
        path = _model_file(model.model_path)
    except ConfigError as exc:  # the bundled model or the run's file is not on this machine
        log.info("counting %s's tokens with %s: %s", model.model_name, default_counter().name, exc)
        return default_counter()
    at_rest = LocalModelClient(  # built to be asked, never started
        model.model_name,
        model_path=path,
        context_size=model.max_context_length,
        timeout_seconds=0.0,
        chat_format=model.chat_format,
    )
    exact = at_rest.capabilities.exact_counting  # the file's template and vocabulary loaded
    return at_rest.token_counter if exact else default_counter()


# The one registry of providers: llm.provider's value -> the builder of its client.
BUILDERS: dict[Provider, Callable[[LLMConfig], LLMClient]] = {
    Provider.OPENAI: _build_openai,
    Provider.ANTHROPIC: _build_anthropic,
    Provider.AZURE_OPENAI: _build_azure_openai,
    Provider.OPENAI_RESPONSES: _build_openai_responses,
    Provider.LOCAL: _build_local,
    Provider.QWEN: _build_openai,  # MiroThinker's models behind an OpenAI-compatible server
    Provider.MINIMAX: _build_openai,  # MiniMax's OpenAI-compatible API
}
PROVIDERS = tuple(p.value for p in BUILDERS)


def create_client(cfg: LLMConfig) -> LLMClient:
    """The provider named by ``cfg.provider`` (one client per ``llm.endpoints`` entry,
    behind a router, when set), wrapped in the retry policy."""
    default_counter()  # load the tokenizer now, not on the event loop at the first call
    if cfg.provider not in PROVIDERS:
        raise UnknownProviderError(
            f"llm.provider={cfg.provider!r} is not a provider; use one of {', '.join(PROVIDERS)}."
        )
    builder = BUILDERS[Provider(cfg.provider)]
    return RetryingClient(_routed(cfg, builder), RetryPolicy.from_config(cfg.retry))


def _routed(cfg: LLMConfig, builder: Callable[[LLMConfig], LLMClient]) -> LLMClient:
    """The provider's client; with ``llm.endpoints``, one per endpoint (the same settings,
    ``base_url`` replaced) behind the router, inside the retry policy so that each HTTP
    attempt is routed (``llm/endpoints.py``)."""
    if cfg.endpoints is None:
        return builder(cfg)
    clients = {url: builder(replace(cfg, base_url=url, endpoints=None)) for url in cfg.endpoints}
    return RoutedClient(clients, max_concurrent=cfg.endpoint_max_concurrent)


def settings_from_config(cfg: LLMConfig) -> GenerationSettings:
    return GenerationSettings(
        max_tokens=cfg.max_tokens,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        extra_body=dict(cfg.extra_body),
        reasoning_effort=cfg.reasoning_effort,
        prompt_cache_key=cfg.prompt_cache_key,
    )
