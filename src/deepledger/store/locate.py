"""Which folders are runs: telling a run folder from any other, finding the runs under a
folder (``logs/``), and, for a folder that is not a run, the nearest one that is.

A ``bench`` run folder holds ``manifest.json`` (written when its run starts) or the
``tasks/`` folder a run writes; a ``deepledger run``
folder holds ``journal.jsonl``. Commands that take a run folder (``report``, ``replay``,
``judge``, ``resume``, ``export``, ``view``) check it here, so that a mistyped path
gets one line saying what was expected and where the nearest run is, not a traceback
from deep inside a reader.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from deepledger.errors import ConfigError
from deepledger.store.layout import (
    HYDRA,
    JUDGINGS,
    MANIFEST,
    RUN_JOURNAL,
    SUPERSEDED,
    TASKS,
    TOOL_SERVER_LOGS,
    RunLayout,
)

RunKind = Literal["bench", "run"]
RUN_KINDS: tuple[RunKind, ...] = ("bench", "run")

# How deep below a folder runs are looked for: the default run folder is
# logs/<benchmark>/<model>/<stamp>, and a sweep's jobs sit one level below their sweep.
SEARCH_DEPTH = 4
# How far up from a folder that is not a run its nearest run is looked for.
UPWARD_LEVELS = 2
_TOP_OF_DISK = 2  # path parts of "/" (1) and of "/tmp", "/home" (2)
# Folders never searched: they hold a run's own parts, or nothing of ours.
_NOT_SEARCHED = frozenset({HYDRA, TASKS, TOOL_SERVER_LOGS, SUPERSEDED, JUDGINGS, ".git"})


def run_kind(folder: Path) -> RunKind | None:
    """``"bench"`` or ``"run"`` when ``folder`` is a run folder, else None."""
    layout = RunLayout(folder)
    # Not benchmark_results.jsonl alone: a MiroThinker log folder (deepledger export
    # mirothinker) has one too, and is no run of ours.
    if layout.manifest.is_file() or layout.tasks.is_dir():
        return "bench"
    if layout.run_journal.is_file():
        return "run"
    return None


def runs_under(root: Path, depth: int = SEARCH_DEPTH) -> Iterator[tuple[Path, RunKind]]:
    """Every run folder under ``root`` (``root`` itself included), ``depth`` levels
    down at most, without descending into a run. Unreadable folders are skipped."""
    kind = run_kind(root)
    if kind is not None:
        yield root, kind
        return
    if depth <= 0:
        return
    try:
        children = sorted(
            (entry for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False)),
            key=lambda entry: entry.name,
        )
    except OSError:
        return
    for entry in children:
        if entry.name not in _NOT_SEARCHED:
            yield from runs_under(Path(entry.path), depth - 1)


def nearest_run(folder: Path, kinds: tuple[RunKind, ...] = RUN_KINDS) -> Path | None:
    """The run folder closest to ``folder``: below it first (the newest by name, which
    is its start time in the default layout), else below its parents, going up two
    levels at most, never above the working folder or home, and never from a folder
    at the top of the disk (``/``, ``/tmp``): that would search the disk."""
    for base in (folder, *folder.resolve().parents[:UPWARD_LEVELS]):
        if not base.is_dir() or len(base.resolve().parts) <= _TOP_OF_DISK:
            continue
        found = [path for path, kind in runs_under(base) if kind in kinds and path != folder]
        if found:
            return max(found, key=lambda p: (p.name, str(p)))
        if base == Path.cwd().resolve() or base == Path.home():
            break
    return None


def require_run(folder: Path, command: str, kinds: tuple[RunKind, ...] = RUN_KINDS) -> RunKind:
    """The kind of the run in ``folder``; :class:`ConfigError` in one line when it is
    not a run of ``kinds``, naming what was expected and the nearest run folder."""
    kind = run_kind(folder) if folder.is_dir() else None
    if kind is not None and kind in kinds:
        return kind
    expected = " or ".join(f"{_NAME[k]} ({_HOLDS[k]})" for k in kinds)
    if not folder.exists():
        problem = f"{folder} does not exist"
    elif kind is not None:
        problem = f"{folder} is {_NAME[kind]}"
    else:
        problem = f"{folder} is not a run folder"
    near = _enclosing_run(folder, kinds) or nearest_run(
        folder if folder.is_dir() else _existing_parent(folder), kinds
    )
    hint = f"; the nearest run folder is {near}" if near is not None else ""
    raise ConfigError(f"{problem}; deepledger {command} expects {expected}{hint}.")


_NAME: dict[RunKind, str] = {
    "bench": "a `deepledger bench` run folder",
    "run": "a `deepledger run` folder",
}
_HOLDS: dict[RunKind, str] = {"bench": f"{MANIFEST}, {TASKS}/", "run": RUN_JOURNAL}


def _enclosing_run(path: Path, kinds: tuple[RunKind, ...]) -> Path | None:
    """The run folder ``path`` lies in (a journal, ``tasks/``, a task's attempt): a
    user who named a file of a run meant that run, not the newest one beside it."""
    for parent in path.absolute().parents[:_ENCLOSING_LEVELS]:
        if len(parent.parts) <= _TOP_OF_DISK:
            break
        kind = run_kind(parent)
        if kind is not None:
            return parent if kind in kinds else None
    return None


# RUN/tasks/<task>/<attempt>/journal.jsonl: four levels below its run folder.
_ENCLOSING_LEVELS = 4


def _existing_parent(path: Path) -> Path:
    for parent in path.absolute().parents:
        if parent.is_dir():
            return parent
    return Path.cwd()
