"""Running a command under Hydra: the overrides checked and ordered, the typed config
made from Hydra's node, Hydra's exits turned into ours."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from deepledger.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, config_dir, fail, quiet_http_logs
from deepledger.errors import ConfigError, DeepLedgerError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from deepledger.config import Config

# A command run under Hydra: the typed config, and Hydra's node it was made from (for
# the files that record the config as composed, interpolations and all).
HydraTask = Callable[["Config", "DictConfig"], int]

# Hydra's flags that take a value (hydra/_internal/utils.py get_args_parser).
HYDRA_FLAGS_WITH_VALUE = frozenset({
    "--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
    "--config-dir", "-cd", "--experimental-rerun",
})  # fmt: skip
HYDRA_INFO_CHOICES = frozenset(
    ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
)


def hydra_command(name: str, overrides: list[str], task: HydraTask) -> int:
    """Run ``task(config, node)`` under Hydra with ``overrides`` as its command line."""
    import hydra
    from dotenv import load_dotenv

    from deepledger.config import register_schemas, typed

    overrides = checked_overrides(name, overrides)
    # The working directory's .env (not one next to the installed code); it never
    # replaces a variable that is already set.
    load_dotenv(Path.cwd() / ".env", override=False)
    register_schemas()
    outcome: dict[str, int] = {}  # "code" is set once Hydra composed a config

    @hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")
    def _entry(node: DictConfig) -> None:
        outcome.setdefault("code", 0)
        quiet_http_logs()
        try:
            # The one place the composed node becomes the typed config.
            code = task(typed(node), node)
        except DeepLedgerError as exc:
            code = fail(exc)
        except KeyboardInterrupt:  # tool servers are already stopped by the time we get here
            print(f"\n{interrupted_message(name, overrides)}", file=sys.stderr)
            code = EXIT_INTERRUPTED
            if in_sweep():  # Ctrl-C stops the sweep: its later jobs do not start
                raise SystemExit(code) from None
        outcome["code"] = max(outcome["code"], code)  # a sweep's worst job

    # Ctrl-C (kill -INT) stops a bench even when started where SIGINT is ignored (a
    # background job of a script): ignored, it would run on and never print its resume.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    saved_argv = sys.argv
    sys.argv = [f"deepledger {name}", *overrides]
    try:
        _entry()
    except SystemExit as exc:
        return _hydra_exit_code(exc, composed="code" in outcome)
    except ValueError as exc:  # Hydra's check of its flags ("only one of --cfg, -m, ...")
        if "code" in outcome:
            raise
        print(f"deepledger {name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        sys.argv = saved_argv
    return outcome.get("code", 0)


def interrupted_message(name: str, overrides: list[str]) -> str:
    """What Ctrl-C leaves said: for a bench, the exact command that resumes it in its
    folder (``cli/resuming.py``); a single question has nothing to resume."""
    from hydra.core.hydra_config import HydraConfig

    from deepledger.cli.resuming import how_to_resume
    from deepledger.store.layout import RunLayout

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if name != "bench":
        return (
            f"deepledger {name}: interrupted; what it did so far is in {run_dir}. A single "
            "question is not resumed: ask it again."
        )
    if not RunLayout(run_dir).manifest.is_file():
        return (
            f"deepledger {name}: interrupted before its run started in {run_dir}: nothing "
            "was done, so nothing is resumed; run the command again."
        )
    sweep_dir = run_dir.parent if in_sweep() else None
    why = f"deepledger {name}: interrupted. Finished work is saved in {run_dir}"
    return how_to_resume(overrides, run_dir, sweep_dir, why=why)


def in_sweep() -> bool:
    """Whether the command runs a job of a ``-m`` sweep."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.get().mode == RunMode.MULTIRUN


def checked_overrides(name: str, overrides: list[str]) -> list[str]:
    """The command line's overrides as Hydra gets them (a key on it moved to a variable,
    MiroThinker's spellings read, flags first), refused with :class:`ConfigError` naming
    an unknown key, an override that does not parse or a preset that does not exist."""
    from deepledger.cli.resuming import KEY_PLACEHOLDER
    from deepledger.config import carried_override, unknown_override_keys, unknown_presets

    # A resume command pasted as printed would send the placeholder as the key.
    if placeheld := [o for o in overrides if KEY_PLACEHOLDER in o.partition("=")[2]]:
        raise ConfigError(
            f"{placeheld[0].partition('=')[0]}={KEY_PLACEHOLDER} still holds the placeholder: "
            f"put your key in place of {KEY_PLACEHOLDER} (inside the quotes) and run the "
            "command again."
        )
    overrides = flags_first([carried_override(o) for o in take_command_line_key(overrides)])
    if problems := unknown_override_keys(overrides):
        raise ConfigError(
            "not a configuration key: "
            + ", ".join(problems)
            + f". Every key is listed by: deepledger {name} --cfg job"
        )
    check_override_syntax(overrides)
    if not _searches_other_folders(overrides) and (
        missing := unknown_presets(overrides, config_dir())
    ):
        raise ConfigError("; ".join(missing) + ".")
    return overrides


def _searches_other_folders(overrides: list[str]) -> bool:
    """Presets may also come from folders the command line adds (``--config-dir``,
    ``hydra.searchpath``): Hydra then judges the names itself."""
    prefixes = (
        "-cd",
        "--config-dir",
        "-cp",
        "--config-path",
        "hydra.searchpath",
        "+hydra.searchpath",
    )
    return any(a.startswith(prefixes) for a in overrides)


def flags_first(args: list[str]) -> list[str]:
    """Hydra's flags (with their values) before the overrides: its argument parser takes
    the overrides as one run of words, so ``a=1 -m b=1,2`` would leave ``b=1,2`` out."""
    flags, overrides = [], []
    pending = list(args)
    while pending:
        arg = pending.pop(0)
        if not arg.startswith("-"):
            overrides.append(arg)
            continue
        flags.append(arg)
        if flag_takes_value(arg, pending[0] if pending else None):
            flags.append(pending.pop(0))
    return flags + overrides


def check_override_syntax(overrides: list[str]) -> None:
    """Hydra names no override when one does not parse ("no viable alternative at input
    '[1,'"); this names it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    pending = list(overrides)
    while pending:
        override = pending.pop(0)
        if override.startswith("-"):  # a flag: Hydra's argument parser checks those
            if flag_takes_value(override, pending[0] if pending else None):
                pending.pop(0)
            continue
        try:
            parser.parse_override(override)
        except HydraException as exc:
            raise ConfigError(
                f"cannot read the override {override!r}: {str(exc).splitlines()[0]}. Quote a "
                "value that holds spaces, commas, brackets or colons (key='a, b'); see "
                "https://hydra.cc/docs/advanced/override_grammar/basic/"
            ) from None


def _hydra_exit_code(exc: SystemExit, composed: bool) -> int:
    """Hydra exits 1 on its own errors (an unknown preset, a value of the wrong type, an
    override it cannot parse), message printed: before any config was composed, that is
    a usage error. After, it is a crash inside the command, and stays 1."""
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return EXIT_USAGE if code == 1 and not composed else code


def take_command_line_key(overrides: list[str]) -> list[str]:
    """``llm.api_key=KEY`` (MiroThinker's command lines pass keys so) taken out of the
    overrides before Hydra sees them, so the key is never written to the run directory,
    the manifest or a log: it moves to a variable of this process, which the llm preset
    then names. An empty one (an unset ``$API_KEY`` in a script) is dropped; one given as
    ``${oc.env:NAME}`` becomes ``llm.api_key_env=NAME``."""
    from deepledger.config import COMMAND_LINE_KEY_ENV

    kept, key = [], None
    for override in overrides:
        name, _, value = override.partition("=")
        if name.lstrip("+") != "llm.api_key":
            kept.append(override)
        elif lookup := re.fullmatch(r"\$\{oc\.env:(\w+)\}", value.strip().strip("'\"")):
            # Hydra never resolves this key (it is taken out here): the variable is named.
            kept.append(f"llm.api_key_env={lookup[1]}")
        else:
            key = value.strip().strip("'\"") or key
    if key:
        os.environ[COMMAND_LINE_KEY_ENV] = key
        kept.append(f"llm.api_key_env={COMMAND_LINE_KEY_ENV}")
    return kept


def flag_takes_value(flag: str, next_arg: str | None) -> bool:
    """Whether the argument after Hydra's ``flag`` is the flag's value."""
    if next_arg is None:
        return False
    if flag in ("--info", "-i"):  # its value is optional
        return next_arg in HYDRA_INFO_CHOICES
    return flag in HYDRA_FLAGS_WITH_VALUE
