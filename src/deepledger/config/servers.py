"""What the tool servers get from the config: each ``tools.<name>`` entry typed, the
environment every server learns, the sandbox limits as arguments, and the reading rules
(secret files, answer leaks) this process shares with them."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from deepledger.blocked_urls import BlockedURLs, clean_patterns
from deepledger.config.names import TOOL_SETTINGS
from deepledger.config.schema import Config, SandboxConfig, ToolServerConfig
from deepledger.errors import ConfigError
from deepledger.paths import CONFIG_DIR_ENV, resolve_data_path
from deepledger.secret_files import SECRET_FILES_ENV, SecretFiles, clean_rules

SEARCH_CORPUS_ENV = "DEEPLEDGER_SEARCH_CORPUS"  # read by the search and page servers
ALLOW_PRIVATE_ENV = "DEEPLEDGER_ALLOW_PRIVATE_NETWORKS"  # read by web/ssrf.py


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
