"""From YAML to a typed Config: Hydra's composition, the node typed into the
dataclasses once, and the config as plain data."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from deepledger.config.overrides import carried_override
from deepledger.config.schema import Config, LLMConfig, register_schemas
from deepledger.errors import ConfigError
from deepledger.messages import JSONObject


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
