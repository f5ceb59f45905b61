"""Values read off a config: the prompt set, the models the tools use (MiroThinker's
summary model, ``tools.extract_llm``) and a model's entry in ``pricing``."""

from __future__ import annotations

import re
from collections.abc import Mapping

from deepledger.config.schema import AgentConfig, Config, LLMConfig, PriceConfig
from deepledger.errors import ConfigError
from deepledger.paths import resolve_data_path
from deepledger.prompts import PromptSet

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
