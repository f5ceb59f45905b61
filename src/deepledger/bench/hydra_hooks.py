"""What deepledger asks of Hydra around a run: its folder claimed first, sweep folders
named by what the sweep varies.

``conf/config.yaml`` names :class:`RunDirectoryGuard` under ``hydra.callbacks`` and
turns Hydra's own ``.hydra/`` writing off (``hydra.output_subdir: null``). The guard
checks and locks ``hydra.run.dir`` in ``on_run_start``, before Hydra creates the folder
or opens its log, so a folder that is a file, read-only, on a full disk or held by a
live run is refused with nothing in it changed; it then writes ``.hydra/config.yaml``,
``hydra.yaml`` and ``overrides.yaml`` itself, redacted, once the lock is held (for a
resume: once ``run_suite`` accepted its settings, ``save_hydra_files``).

Sweeps (``-m``): each job's folder under ``hydra.sweep.dir`` is named by
``${deepledger_sweep_subdir:${hydra.job.num},${hydra.overrides.task}}``: the job number
and the swept keys only (``3_agent.keep_tool_result=5,llm.temperature=0.7``), in
characters safe in a folder name (no ``/`` or ``\\``). Hydra's own
``hydra.job.override_dirname`` carries every override, paths included.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from deepledger.config import node_data
from deepledger.errors import RunDirectoryError
from deepledger.messages import JSONObject
from deepledger.store.files import write_text_atomic
from deepledger.store.layout import RunLayout
from deepledger.store.lock import check_folder, claim, release
from deepledger.store.redaction import redact, redact_assignments

SWEPT_KEYS_ENV = "DEEPLEDGER_SWEPT_KEYS"  # set for the jobs of a sweep (and their launchers)
SUBDIR_RESOLVER = "deepledger_sweep_subdir"
_UNSAFE_IN_FOLDER = re.compile(r"[^A-Za-z0-9._=,+-]+")
FOLDER_NAME_LIMIT = 120
MULTIRUN_FILE = "multirun.yaml"
_LAUNCHER_LOGGER = "hydra._internal.core_plugins.basic_launcher"
EXIT_USAGE = 2  # cli.EXIT_USAGE: a folder that cannot take the run is a usage error


class RunDirectoryGuard:
    """A Hydra callback (``hydra.callbacks.run_directory``). Hydra turns a callback's
    exceptions into warnings and goes on to create the folder, so a refusal prints its
    message and leaves with the usage exit code."""

    def on_run_start(self, config: DictConfig, **_: Any) -> None:
        _or_exit(lambda: claim(Path(config.hydra.run.dir), "hydra.run.dir"))

    def on_multirun_start(self, config: DictConfig, **_: Any) -> None:
        os.environ[SWEPT_KEYS_ENV] = json.dumps(swept_keys(config.hydra.overrides.task))
        launcher_log = logging.getLogger(_LAUNCHER_LOGGER)
        if not any(isinstance(f, _RedactOverrides) for f in launcher_log.filters):
            launcher_log.addFilter(_RedactOverrides())
        _or_exit(lambda: check_folder(Path(config.hydra.sweep.dir), "hydra.sweep.dir"))

    def on_job_start(self, config: DictConfig, **_: Any) -> None:
        root = Path(config.hydra.runtime.output_dir)
        key = "hydra.run.dir" if config.hydra.mode.name == "RUN" else "hydra.sweep.dir"
        _or_exit(lambda: claim(root, key))  # a single run's: taken in on_run_start already
        if not RunLayout(root).manifest.exists():  # a resume's: once run_suite accepted it
            # Hydra would turn a full disk here into a warning and run the job anyway
            _or_exit(lambda: write_hydra_files(root, config))

    def on_job_end(self, config: DictConfig, **_: Any) -> None:
        release(Path(config.hydra.runtime.output_dir))  # if no RunStore adopted it

    def on_run_end(self, config: DictConfig, **_: Any) -> None:
        pass

    def on_multirun_end(self, config: DictConfig, **_: Any) -> None:
        pass


class RunLogHandler(logging.FileHandler):
    """The job's log file (``deepledger.log``, ``hydra.job_logging``), opened at its first
    line. A line that cannot be written (the disk is full) is dropped without the page of
    traceback ``logging`` would print for each: the run says once what happened."""

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handleError(record)


def _or_exit(action: Any) -> None:
    try:
        action()
    except RunDirectoryError as exc:
        print(f"deepledger: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def write_hydra_files(root: Path, config: DictConfig) -> None:
    """What Hydra's ``output_subdir`` would hold (``config`` with its ``hydra`` node),
    secrets redacted."""
    everything = node_data(config, resolve=False)
    _write_hydra_files(root, everything, everything.pop("hydra"))


def save_hydra_files(root: Path, task_config: JSONObject) -> None:
    """``.hydra/`` for a bench whose resume was accepted (``run_suite``): the job's
    config (as composed, interpolations unresolved) and Hydra's own, when Hydra runs
    the job (not in tests that call in)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    _write_hydra_files(root, dict(task_config), node_data(HydraConfig.get(), resolve=False))


def _write_hydra_files(root: Path, everything: JSONObject, hydra: JSONObject) -> None:
    """``everything`` and ``hydra``: config nodes as plain data (``node_data``)."""
    layout = RunLayout(root)
    layout.hydra.mkdir(exist_ok=True)
    files = {
        layout.hydra_config: everything,
        layout.hydra_settings: {"hydra": hydra},
        layout.hydra_overrides: hydra.get("overrides", {}).get("task", []),
    }
    for path, content in files.items():
        write_text_atomic(path, OmegaConf.to_yaml(OmegaConf.create(redact(content))))
    mode = hydra.get("mode")
    if getattr(mode, "name", mode) == "MULTIRUN":
        redact_multirun_file(root.parent / MULTIRUN_FILE)


def redact_multirun_file(path: Path) -> None:
    """Hydra's sweeper saves the whole config, overrides unredacted, as the sweep
    folder's ``multirun.yaml`` before any job starts; each job's start writes it back
    redacted (again: a no-op after the first)."""
    if not path.is_file():
        return
    saved = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    write_text_atomic(path, OmegaConf.to_yaml(OmegaConf.create(redact(saved))))


class _RedactOverrides(logging.Filter):
    """Hydra's launcher logs each job's overrides (``#0 : a=1 b=2``) before it runs."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        record.msg = " ".join(redact_assignments(word) for word in message.split(" "))
        record.args = ()
        return True


def swept_keys(overrides: Any) -> list[str]:
    """The keys (or config groups) that the sweep's overrides give several values."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([str(o) for o in overrides])
    return [o.key_or_group for o in parsed if o.is_sweep_override()]


def sweep_subdir(number: Any, overrides: Any) -> str:
    """A sweep job's folder name: its number and its values of the swept keys."""
    swept = set(json.loads(os.environ.get(SWEPT_KEYS_ENV) or "[]"))
    parts = []
    for override in overrides or []:
        key, _, value = str(override).partition("=")
        key = key.lstrip("+~").split("@", 1)[0]
        if key in swept:
            parts.append(redact_assignments(f"{key}={value}"))
    return safe_folder_name(f"{number}_{','.join(parts)}" if parts else str(number))


def safe_folder_name(text: str) -> str:
    """``text`` as one folder name: no separators or shell-hostile characters, not
    hidden, and short (a long one keeps its start and a hash of the whole)."""
    name = _UNSAFE_IN_FOLDER.sub("_", text).lstrip(".") or "run"
    if len(name) > FOLDER_NAME_LIMIT:
        digest = hashlib.sha1(text.encode()).hexdigest()[:10]
        name = f"{name[: FOLDER_NAME_LIMIT - 11]}-{digest}"
    return name


OmegaConf.register_new_resolver(SUBDIR_RESOLVER, sweep_subdir, replace=True)
