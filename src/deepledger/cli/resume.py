"""``deepledger resume``: a bench run resumed in its own folder, from its saved overrides."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

from deepledger.cli.common import EXIT_USAGE
from deepledger.errors import ConfigError

HELP = """\
deepledger resume — resume a `deepledger bench` run in its own folder: the tasks it has not
finished run, the finished ones are kept. Its configuration is its own: the overrides it
was started with (RUN_DIR/.hydra/overrides.yaml) then OVERRIDES, as

  deepledger bench <the run's overrides> OVERRIDES hydra.run.dir=RUN_DIR

so what a bench checks on a resume applies (a changed setting is refused unless
resume.allow_config_change=true; changed tasks follow resume.on_changed_tasks).

usage: deepledger resume RUN_DIR [OVERRIDES...]

  RUN_DIR        the run's folder (a bench names it when it starts, and prints this
                 command when Ctrl-C, a budget or an error stops it)
  OVERRIDES      after the saved ones: a raised budget, more concurrency, a key

Secrets are never saved: a key given as llm.api_key=KEY on the first command line is
given again (deepledger resume RUN_DIR llm.api_key=KEY), as is any override whose key
names a secret (saved as ***). Keys from the environment or ./.env need nothing; the
run's -cd DIR is used again unless OVERRIDES give one. It works in the folder the run
was started in, so relative paths (the run's and OVERRIDES') read as they did. A sweep
(-m) has one folder per job: deepledger resume JOB_DIR resumes one; the sweep's command
with hydra.sweep.dir=SWEEP_DIR resumes them all. A `deepledger run` folder is not
resumed: ask the question again.

examples:
  deepledger resume logs/tiny/my-model/20260101_120000
  deepledger resume logs/tiny/my-model/20260101_120000 benchmark.execution.max_tokens=200000

Exit codes: 0 done, 1 some tasks failed or the budget stopped it, 2 a usage or
  configuration error or a folder that is not a bench run, 130 Ctrl-C (resume again the
  same way), 141 the output pipe was closed.
"""


def resume_command(args: list[str]) -> int:
    """Resume the bench run in ``args[0]`` through the same Hydra path as ``bench``."""
    from deepledger.cli.bench import bench_command
    from deepledger.cli.hydra_command import hydra_command

    # A sweep job's folder has "=" in its name (0_agent.keep_tool_result=1): an override
    # only when no such folder exists.
    if not args or args[0].startswith("-") or ("=" in args[0] and not Path(args[0]).exists()):
        what = "needs the run folder first" if args else "needs the run folder to resume"
        print(
            f"deepledger resume {what}.\nusage: deepledger resume RUN_DIR [OVERRIDES...]",
            file=sys.stderr,
        )
        return EXIT_USAGE
    run_dir = Path(args[0]).absolute()
    overrides = resumed_overrides(run_dir, args[1:])  # refused: one line from main, exit 2
    print(f"deepledger resume: resuming {run_dir}", file=sys.stderr)
    _go_where_started(run_dir)
    return hydra_command("bench", overrides, bench_command)


def resumed_overrides(run_dir: Path, extra: list[str]) -> list[str]:
    """The run's saved overrides, those ``extra`` sets again left out, then ``extra``,
    then ``hydra.run.dir``; :class:`ConfigError` for a folder that is not a bench run,
    or a secret the folder does not keep and ``extra`` does not give."""
    from deepledger.cli.resuming import folder_override, override_key
    from deepledger.store.layout import RunLayout
    from deepledger.store.locate import require_run, run_kind

    if run_kind(run_dir) == "run":
        raise ConfigError(
            f"{run_dir} is a `deepledger run` folder: one question has no finished parts "
            "to keep, so it is not resumed; ask it again with deepledger run. deepledger "
            "resume takes a `deepledger bench` run folder."
        )
    require_run(run_dir, "resume", kinds=("bench",))
    # Either would put the resumed run in another folder than RUN_DIR.
    if moving := [o for o in extra if o in ("-m", "--multirun") or _sets_folder(o)]:
        raise ConfigError(
            f"{moving[0]}: deepledger resume runs in RUN_DIR ({run_dir}) itself; leave "
            f"{moving[0].partition('=')[0]} out (a sweep resumes with its own bench command "
            "and hydra.sweep.dir=SWEEP_DIR)."
        )
    saved = saved_overrides(run_dir)
    given = {override_key(o) for o in extra if not o.startswith("-")}
    if "llm.api_key" in given:  # it becomes llm.api_key_env again (take_command_line_key)
        given.add("llm.api_key_env")
    kept = [o for o in saved if override_key(o) not in given and not o.startswith("hydra.run.")]
    _require_secrets(run_dir, kept)
    # The presets of a --config-dir: Hydra keeps the folder among its config sources, and
    # without it a preset of the run's (llm=mine) is unknown on the resume.
    given_dirs = any(o in ("-cd", "--config-dir") or o.startswith("--config-dir=") for o in extra)
    dirs = [] if given_dirs else _config_dir_flags(RunLayout(run_dir).hydra_settings)
    return [*dirs, *kept, *extra, folder_override("hydra.run.dir", run_dir)]


def _sets_folder(override: str) -> bool:
    from deepledger.cli.resuming import override_key

    return override_key(override).startswith(("hydra.run.dir", "hydra.sweep.", "hydra.mode"))


def saved_overrides(run_dir: Path) -> list[str]:
    """The overrides the run was started with, as Hydra saved them (redacted): Hydra's
    own (``hydra.searchpath`` for presets kept elsewhere, say; not the folder's or the
    mode's, which the resume sets) from ``hydra.yaml``, then the config's."""
    from deepledger.cli.resuming import folder_override, override_key
    from deepledger.store.layout import RunLayout

    layout = RunLayout(run_dir)
    if not layout.hydra_overrides.is_file():
        raise ConfigError(
            f"{layout.hydra_overrides} is missing, so the overrides "
            f"{run_dir} was started with are unknown; resume it with its bench command and "
            f"{shlex.quote(folder_override('hydra.run.dir', run_dir))}."
        )
    task = _yaml_list(layout.hydra_overrides, None)
    hydra = _yaml_list(layout.hydra_settings, "hydra") if layout.hydra_settings.is_file() else []
    own = [o for o in hydra if not override_key(o).startswith(_SET_BY_RESUME)]
    return [*own, *task]


# Hydra's overrides a resume sets itself: the run's folder, and a single run's mode.
_SET_BY_RESUME = ("hydra.run.", "hydra.sweep.", "hydra.mode", "hydra.job.num", "hydra.job.id")


def _yaml_list(path: Path, hydra_key: str | None) -> list[str]:
    """The overrides saved in ``path``: the file itself (``overrides.yaml``), or its
    ``hydra.overrides.<hydra_key>`` (``hydra.yaml``)."""
    from omegaconf import OmegaConf

    try:
        saved = OmegaConf.to_container(OmegaConf.load(path))
        if hydra_key is not None and isinstance(saved, dict):
            saved = saved.get("hydra", {}).get("overrides", {}).get(hydra_key, [])
    except Exception as exc:  # a YAML error of any kind: the file is not Hydra's
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(saved, list):
        raise ConfigError(f"{path} holds no list of overrides.")
    return [str(o) for o in saved]


def _config_dir_flags(hydra_settings: Path) -> list[str]:
    """``-cd DIR`` for the folder the run's command line added with --config-dir, as
    Hydra recorded it (``hydra.runtime.config_sources``, provider ``command-line``)."""
    sources = _hydra_setting(hydra_settings, "hydra.runtime.config_sources") or []
    folders = [str(s.get("path")) for s in sources if s.get("provider") == "command-line"]
    return ["-cd", folders[0]] if folders else []


def _hydra_setting(hydra_settings: Path, key: str) -> Any:
    """``key`` of the run's ``hydra.yaml`` as Hydra recorded it; None when it is not there."""
    from omegaconf import OmegaConf

    if not hydra_settings.is_file():
        return None
    try:
        return OmegaConf.select(OmegaConf.load(hydra_settings), key)
    except Exception:  # a YAML error of any kind: _yaml_list names the file
        return None


def _go_where_started(run_dir: Path) -> None:
    """Work from the folder the run was started in (Hydra's ``hydra.runtime.cwd``): its
    saved overrides' relative paths (benchmark.data.data_dir=../../data, say) and its
    ./.env are relative to it, so from anywhere else the resume would not find them."""
    from deepledger.store.layout import RunLayout

    started_in = _hydra_setting(RunLayout(run_dir).hydra_settings, "hydra.runtime.cwd")
    if not started_in or not Path(started_in).is_dir() or Path(started_in) == Path.cwd():
        return
    os.chdir(started_in)
    print(
        f"deepledger resume: working in {started_in}, where the run was started: relative "
        "paths, its own and yours, are read from there.",
        file=sys.stderr,
    )


def _require_secrets(run_dir: Path, kept: list[str]) -> None:
    """A secret the folder kept as ``***``, or a key given on the first command line,
    must be given again: resuming with ``***`` as the key would fail at the endpoint."""
    from deepledger.cli.resuming import KEY_PLACEHOLDER, holds_redacted, placeheld
    from deepledger.config import COMMAND_LINE_KEY_ENV

    # A secret inside a value (llm.base_url=https://h/?token=***) counts as a whole one.
    missing = [placeheld(o) for o in kept if holds_redacted(o)]
    if f"llm.api_key_env={COMMAND_LINE_KEY_ENV}" in kept and not os.environ.get(
        COMMAND_LINE_KEY_ENV
    ):
        missing.insert(0, f"llm.api_key={KEY_PLACEHOLDER}")
    if missing:
        raise ConfigError(
            f"{run_dir} was started with "
            f"{'a secret' if len(missing) == 1 else 'secrets'} on its command line, which "
            "a run folder never keeps; give "
            f"{'it' if len(missing) == 1 else 'them'} again, your values in place of "
            f"{KEY_PLACEHOLDER}: {shlex.join(['deepledger', 'resume', str(run_dir), *missing])}"
        )
