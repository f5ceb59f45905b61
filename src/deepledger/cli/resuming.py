"""How a stopped bench resumes, in words: the exact command that resumes it in its folder.

``deepledger bench ... hydra.run.dir=<folder>`` and ``deepledger resume <folder>``,
shell-quoted so they paste, with no secret in them.

A bench resumes only in its own folder: the default ``hydra.run.dir`` carries the start
time, so the same command without it starts a new run. The overrides are the command
line as Hydra got it (``cli/hydra_command.py``): a key given as ``llm.api_key=KEY`` has
already become ``llm.api_key_env=<the variable it moved to>``; it is shown again as
``llm.api_key=<YOUR_KEY>``, a placeholder the user fills, and so is any other override
whose key is named like a secret (``store/redaction.py``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from deepledger.cli.override_text import quoted
from deepledger.config import COMMAND_LINE_KEY_ENV
from deepledger.store.redaction import redact_assignments

KEY_PLACEHOLDER = "<YOUR_KEY>"
REDACTED = "***"  # what store/redaction.py puts in a secret's place
_SWEEP_FLAGS = ("-m", "--multirun")
# Overrides that name the run folder (or the sweep's): the resume command sets its own.
_FOLDER_KEYS = ("hydra.run.dir", "hydra.sweep.dir")
_PLAIN_FOLDER = re.compile(r"[\w./-]+")  # a path Hydra reads as typed
# ${oc.env:SERPER_API_KEY}: where the key is, not the key (a default after a comma might be).
_ENV_LOOKUP = re.compile(r"\$\{oc\.env:\w+\}")


def folder_override(key: str, folder: Path) -> str:
    """``key=<folder>`` in Hydra's override grammar: quoted when the path holds what the
    grammar reads otherwise (a sweep job's ``0_a.b=1,c=2``, a space, ``${``)."""
    text = str(folder)
    return f"{key}={text if _PLAIN_FOLDER.fullmatch(text) else quoted(text)}"


def override_key(override: str) -> str:
    """``a.b`` of ``a.b=1``, ``+a.b=1``, ``++a.b=1`` or ``~a.b``."""
    return override.partition("=")[0].lstrip("+~")


def shown_overrides(overrides: list[str]) -> tuple[list[str], bool]:
    """``overrides`` with every secret replaced by :data:`KEY_PLACEHOLDER`, and whether
    one was: ``llm.api_key_env`` naming the command line's key variable is shown as the
    ``llm.api_key=`` it came from."""
    shown, hidden = [], False
    for override in overrides:
        if override == f"llm.api_key_env={COMMAND_LINE_KEY_ENV}":
            shown.append(f"llm.api_key={KEY_PLACEHOLDER}")
            hidden = True
        elif _ENV_LOOKUP.fullmatch(override.partition("=")[2]):
            shown.append(override)  # names the variable the key is in: no secret
        elif (redacted := redact_assignments(override)) != override:
            # Only the secret is held back: in llm.base_url=https://h/?token=T the rest of
            # the value is the user's and must come back as it was.
            shown.append(placeheld(redacted))
            hidden = True
        else:
            shown.append(override)
    return shown, hidden


def placeheld(redacted: str) -> str:
    """A redacted override (``key=***``, ``k=https://h/?token=***``) with
    :data:`KEY_PLACEHOLDER` where each secret was."""
    return redacted.replace(f"={REDACTED}", f"={KEY_PLACEHOLDER}")


def holds_redacted(override: str) -> bool:
    """Whether ``override``, as a run folder saved it, lost a secret to redaction."""
    return f"={REDACTED}" in override


def secret_overrides(overrides: list[str]) -> list[str]:
    """The overrides of ``overrides`` that carry a secret, as placeholders: what a
    ``deepledger resume`` needs again, since the run folder keeps none."""
    shown, _ = shown_overrides(overrides)
    # A ${oc.env:NAME} lookup is shown as typed, but the folder kept it as *** too.
    return [
        s for s, o in zip(shown, overrides, strict=True) if s != o or redact_assignments(o) != o
    ]


def bench_resume_command(overrides: list[str], run_dir: Path) -> str:
    """``deepledger bench <overrides> hydra.run.dir=<run_dir>``, quoted for a POSIX
    shell: a single run's, or one job of a sweep resumed alone (its own overrides)."""
    kept = [o for o in overrides if o not in _SWEEP_FLAGS and override_key(o) not in _FOLDER_KEYS]
    shown, _ = shown_overrides(kept)
    return shlex.join(["deepledger", "bench", *shown, folder_override("hydra.run.dir", run_dir)])


def sweep_resume_command(overrides: list[str], sweep_dir: Path) -> str:
    """``deepledger bench -m <overrides> hydra.sweep.dir=<sweep_dir>``: each job resumes
    in its own folder, whose name its number and swept values make again."""
    kept = [o for o in overrides if override_key(o) not in _FOLDER_KEYS]
    shown, _ = shown_overrides(kept)
    return shlex.join(
        ["deepledger", "bench", *shown, folder_override("hydra.sweep.dir", sweep_dir)]
    )


def short_resume_command(overrides: list[str], run_dir: Path, extra: Sequence[str] = ()) -> str:
    """``deepledger resume <run_dir>``, plus the secrets the folder does not keep, then
    ``extra``."""
    return shlex.join(["deepledger", "resume", str(run_dir), *secret_overrides(overrides), *extra])


def how_to_resume(
    overrides: list[str],
    run_dir: Path,
    sweep_dir: Path | None = None,
    why: str = "",
    changed: list[str] | None = None,
) -> str:
    """The lines that say how to resume ``run_dir`` (a job of the sweep in ``sweep_dir``
    when given), for stderr. ``why``: what stopped it, to start the first line;
    ``changed``: overrides the resume needs in place of the run's (a raised budget)."""
    changed = changed or []
    short = short_resume_command(overrides, run_dir, changed)
    replaced = {override_key(o) for o in changed}
    overrides = [o for o in overrides if override_key(o) not in replaced] + changed
    lead = f"{why}; to resume" if why else "To resume"
    lines = []
    if sweep_dir is not None:
        lines.append(
            f"{lead} the sweep (each job in its own folder under {sweep_dir}, finished "
            "work kept), run:"
        )
        lines.append(f"  {sweep_resume_command(overrides, sweep_dir)}")
        lines.append("or this job alone:")
    else:
        lines.append(f"{lead} this run in the same folder (finished work kept), run:")
        lines.append(f"  {bench_resume_command(overrides, run_dir)}")
        lines.append("or, shorter (the run's saved overrides):")
    lines.append(f"  {short}")
    if shown_overrides(overrides)[1]:
        lines.append(
            f"Replace {KEY_PLACEHOLDER} with the key you gave: a key is never saved or shown."
        )
    return "\n".join(lines)
