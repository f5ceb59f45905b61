"""``deepledger export``: bench runs written out in a form other tools read (a results
table, training samples, MiroThinker's logs), the formats of ``export/formats.py``."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from deepledger.cli.common import EXIT_TASKS_ERRORED
from deepledger.errors import ConfigError

if TYPE_CHECKING:
    from deepledger.export.formats import ExportFormat
    from deepledger.export.request import ExportOutcome, ExportRequest
    from deepledger.store.locate import RunKind

HELP = """\
deepledger export — write runs out in a form other tools read: a results table for pandas,
training samples, preference pairs, MiroThinker's log folder.

usage: deepledger export RUN_DIR [RUN_DIR...] FORMAT [options]

RUN_DIR is a `deepledger bench` run folder (its hydra.run.dir; chatml, openai and dpo
take a `deepledger run` folder too), or a folder holding runs (a -m sweep folder,
logs/): every run below it is exported, into one output.

formats:
  results      a row per task (--per-attempt: per attempt of pass@k), JSONL or Parquet
  chatml       training samples: the trajectories of attempts judged correct
  openai       the same samples in OpenAI's fine-tuning layout, with the tool schemas
  dpo          pairs of a correct and an incorrect attempt at one task (pass@k runs)
  mirothinker  the runs as MiroThinker's log folder (its per-task JSON and results)

options:
  --out PATH           the file (or folder, mirothinker) to write; default: in the
                       current folder, named after the run and the format, e.g.
                       tiny-gpt-4.1-20260101_120000.results.jsonl (never in a run folder)
  --force              replace PATH if it exists (without: refused); a folder only
                       when an earlier export wrote it
  --table jsonl|parquet  results: JSON lines (default) or a Parquet table
  --per-attempt        results: a row per attempt instead of per task
  --only correct|all   results, chatml, openai: keep what was judged correct, or all;
                       default: correct for chatml and openai, all for results.
                       `--only correct` on runs with no judged task exits 1 and
                       writes nothing
  --min-turns N        results, chatml, openai, dpo: keep attempts (tasks, for
                       results) of at least N turns
  --max-turns N        ... of at most N turns
  --end-reason R [R...]  ... that ended so: model_finished, turns_exhausted,
                       window_exhausted, looping, limit, cut_or_empty, error
  --per-turn           chatml/openai: a sample per turn (the request as the model saw
                       it, trimmed, and its reply) instead of one per attempt
  --thinking keep|drop chatml/openai/dpo: keep the model's reasoning text, or drop it

mirothinker exports whole runs and takes none of these; an option a format does not
use is refused (exit 2), not ignored.

The written path is printed on stdout; counts and what was left out (and why) on
stderr. Nothing is written in a run folder, and a failed export leaves no file.
docs/export.md has a sample of each format.

Exit codes: 0 written, 1 nothing to write (e.g. --only correct and no task judged
  correct), 2 a usage error (not a run folder, an option the format does not take),
  141 the output pipe was closed."""


def export_command(args: list[str]) -> int:
    """Parse the command line, export, and say what was written and left out."""
    from deepledger.export.formats import FORMATS, format_named, judged_tasks
    from deepledger.export.request import ExportRequest

    parsed = _parser().parse_intermixed_args(args)
    folders, name = _split_positionals(parsed.positionals, FORMATS)
    chosen = format_named(name)
    run_dirs = resolve_runs(folders, chosen.kinds)
    _check_options(parsed, name, chosen)
    _check_filters(parsed.min_turns, parsed.max_turns, parsed.end_reason)
    if parsed.out == "-":
        raise ConfigError(
            "deepledger export: writes a file, not stdout (--out -); give --out a path, "
            "or none for one in the current folder (its path is printed on stdout)."
        )
    # Absolute and normal: `--out .` names the current folder, and its name is needed.
    out = (
        Path(os.path.abspath(parsed.out))
        if parsed.out
        else default_out(folders, run_dirs, name, chosen, parsed)
    )
    check_out(out, force=parsed.force, folder_format=chosen.output == "folder")
    only = parsed.only or chosen.default_only
    # Formats that export whole runs (mirothinker) take no --only: nothing to check.
    if "--only" in chosen.options and only == "correct" and not judged_tasks(run_dirs):
        said = "--only correct" if parsed.only else f"--only correct ({name}'s default)"
        print(
            f"deepledger export: {said}, but no task of {_runs_text(run_dirs)} was "
            "judged (no ground truth, or the judge gave no verdict); nothing written. "
            "Use --only all (or, where the judge gave no verdict, `deepledger judge "
            "RUN_DIR` first: a task without a ground truth is never judged).",
            file=sys.stderr,
        )
        return EXIT_TASKS_ERRORED
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    request = ExportRequest(
        run_dirs=run_dirs,
        format=name,
        out=partial,
        table=parsed.table or "jsonl",
        only=only,
        min_turns=parsed.min_turns,
        max_turns=parsed.max_turns,
        end_reasons=frozenset(parsed.end_reason) if parsed.end_reason else None,
        per_turn=parsed.per_turn,
        thinking=parsed.thinking or "keep",
        per_attempt=parsed.per_attempt,
        final_out=out.absolute(),
    )
    outcome = _write(request, out)
    _say(outcome, partial, out, name, run_dirs)
    return 0


def _write(request: ExportRequest, out: Path) -> ExportOutcome:
    """Export under the request's temporary name, then rename it to ``out``; a writer
    that fails, or is interrupted, leaves nothing, not even the folders made for it."""
    from deepledger.export.formats import export

    made = [p for p in reversed(out.parents) if not p.exists()]  # outermost first
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        outcome = export(request)
        _move_into_place(request.out, out)
    except BaseException as exc:
        _remove(request.out)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(exc, OSError):  # an unwritable --out, a full disk: one line
            where = f" ({exc.filename})" if exc.filename else ""
            raise ConfigError(
                f"deepledger export: {exc.strerror or exc}{where}; nothing was written to {out}."
            ) from exc
        raise
    return outcome


class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one line (exit 2), as every command's are."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"deepledger export: {message} (deepledger export --help).")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="deepledger export", add_help=False)
    parser.add_argument("positionals", nargs="*")
    parser.add_argument("--out")
    parser.add_argument("--force", action="store_true")
    # No defaults here (None: not given), so that an option a format does not use is
    # refused (_check_options); the request's defaults apply.
    parser.add_argument("--table", choices=("jsonl", "parquet"))
    parser.add_argument("--per-attempt", action="store_true")
    parser.add_argument("--only", choices=("correct", "all"))
    parser.add_argument("--min-turns", type=int)
    parser.add_argument("--max-turns", type=int)
    parser.add_argument("--end-reason", nargs="+", action="extend")
    parser.add_argument("--per-turn", action="store_true")
    parser.add_argument("--thinking", choices=("keep", "drop"))
    return parser


def _split_positionals(
    positionals: list[str], formats: dict[str, ExportFormat]
) -> tuple[list[str], str]:
    """The run folders and the format: the format comes last (first is taken too, when
    the last is no format and the first is)."""
    if len(positionals) < 2:
        raise ConfigError(
            "deepledger export: needs a run folder and a format: deepledger export RUN_DIR "
            f"[RUN_DIR...] FORMAT (FORMAT one of {', '.join(sorted(formats))})."
        )
    if positionals[-1] not in formats and positionals[0] in formats:
        return positionals[1:], positionals[0]
    return positionals[:-1], positionals[-1]


def resolve_runs(folders: list[str], kinds: tuple[RunKind, ...] = ("bench",)) -> tuple[Path, ...]:
    """The run folders (of ``kinds``) the arguments name: a run folder itself, or every
    run below a folder that is none (a sweep, logs/); each once, in the order given."""
    from deepledger.store.layout import RunLayout
    from deepledger.store.locate import require_run, run_kind, runs_under

    def exportable(path: Path, kind: RunKind) -> bool:
        # A bench run below has its manifest: a folder with a results file alone is a
        # run not started yet, or a MiroThinker export (its run_N/ has that file too).
        return kind in kinds and (kind != "bench" or RunLayout(path).manifest.is_file())

    found: dict[Path, None] = {}
    for folder in map(Path, folders):
        below = [] if run_kind(folder) else [p for p, k in runs_under(folder) if exportable(p, k)]
        if not below:
            require_run(folder, "export", kinds=kinds)
            below = [folder]
        for run_dir in below:
            found.setdefault(run_dir.resolve(), None)
    return tuple(found)


def _check_options(parsed: argparse.Namespace, name: str, chosen: ExportFormat) -> None:
    """Refuse an option the format does not use, rather than ignore it."""
    given = [
        option
        for option in (
            "--table",
            "--per-attempt",
            "--only",
            "--min-turns",
            "--max-turns",
            "--end-reason",
            "--per-turn",
            "--thinking",
        )
        if getattr(parsed, option[2:].replace("-", "_")) not in (None, False)
    ]
    if unused := [option for option in given if option not in chosen.options]:
        takes = ", ".join(chosen.options) if chosen.options else "only --out and --force"
        raise ConfigError(
            f"deepledger export: {unused[0]} does not apply to {name} (it takes {takes}); "
            "leave it out, or pick the format it is for (deepledger export --help)."
        )


def _check_filters(least: int | None, most: int | None, end_reasons: list[str] | None) -> None:
    from deepledger.messages import EndReason

    known = [reason.value for reason in EndReason] + ["error"]  # error: a failed task
    if unknown := [r for r in end_reasons or () if r not in known]:
        raise ConfigError(
            f"deepledger export: no end reason {unknown[0]!r}; one of {', '.join(known)}."
        )
    if (least is not None and least < 0) or (most is not None and most < 0):
        raise ConfigError("deepledger export: --min-turns and --max-turns take counts >= 0.")
    if least is not None and most is not None and least > most:
        raise ConfigError(
            f"deepledger export: --min-turns {least} is over --max-turns {most}; nothing "
            "could be kept."
        )


def default_out(
    folders: list[str],
    run_dirs: tuple[Path, ...],
    name: str,
    chosen: ExportFormat,
    parsed: argparse.Namespace,
) -> Path:
    """In the current folder: ``<benchmark>-<model>-<run folder>.<format>.<ext>`` for
    one run, the folder's name for a sweep, ``<n>-runs`` for several arguments
    (``<format>-per-attempt``, ``<format>-per-turn`` with those options)."""
    from deepledger.store.locate import run_kind
    from deepledger.store.run_store import load_manifest

    if len(folders) == 1 and len(run_dirs) == 1 and run_kind(run_dirs[0]) == "bench":
        _, config = load_manifest(run_dirs[0])
        model = (config.get("llm") or {}).get("model_name") or "model"
        stem = f"{config['benchmark']['name']}-{model}-{run_dirs[0].name}"
    elif len(folders) == 1:  # a sweep, or a `deepledger run` folder
        stem = Path(folders[0]).resolve().name
    else:
        stem = f"{len(run_dirs)}-runs"
    stem = re.sub(r"[^\w.+-]+", "_", stem).strip("._") or "export"
    suffix = "" if chosen.output == "folder" else f".{parsed.table or 'jsonl'}"
    # A table per attempt and samples per turn are other files than the plain ones: the
    # same default name would refuse the second export of one run ("exists").
    grain = "-per-attempt" if parsed.per_attempt else "-per-turn" if parsed.per_turn else ""
    return Path.cwd() / f"{stem}.{name}{grain}{suffix}"


def check_out(out: Path, *, force: bool, folder_format: bool = False) -> None:
    """Refuse an output inside a run folder (a live run may own it) and, without
    ``force``, one that exists (an empty folder is taken for a folder format)."""
    from deepledger.store.layout import RunLayout

    absolute = out.absolute()
    for folder in (absolute, *absolute.parents):
        layout = RunLayout(folder)
        # What a run writes first; a folder that merely holds a tasks/ folder is no run.
        if any(p.is_file() for p in (layout.manifest, layout.results, layout.run_journal)):
            raise ConfigError(
                f"deepledger export: {out} is in the run folder {folder}, which its run "
                "may still be writing; pass --out PATH outside any run folder."
            )
    if out.is_dir() and not folder_format:
        raise ConfigError(
            f"deepledger export: {out} is a folder; this format writes a file: give --out "
            "a file's path."
        )
    if out.exists() and not out.is_dir() and folder_format:
        raise ConfigError(
            f"deepledger export: {out} is a file; this format writes a folder: give --out "
            "a new or empty folder."
        )
    empty_folder = folder_format and out.is_dir() and not any(out.iterdir())
    if out.exists() and not force and not empty_folder:
        raise ConfigError(
            f"deepledger export: {out} exists; pass --force to replace it, or --out another path."
        )
    if force and folder_format and out.is_dir() and (strays := _not_an_export(out)):
        # --force replaces a folder whole: only one an earlier export wrote.
        raise ConfigError(
            f"deepledger export: {out} holds {strays[0]!r}, which no export wrote; --force "
            "replaces only an earlier export's folder: give --out a new or empty folder."
        )


def _not_an_export(folder: Path) -> list[str]:
    """What in ``folder`` a folder export (MiroThinker's ``run_N/`` folders) did not write.
    A deepledger run in a ``run_N/`` is no export: MiroThinker's own layout puts its
    runs there (``hydra.run.dir=<results>/run_N``)."""
    from deepledger.store.layout import RunLayout

    def exported(path: Path) -> bool:
        layout = RunLayout(path)
        ours = (layout.manifest.is_file(), layout.tasks.is_dir(), layout.run_journal.is_file())
        return path.is_dir() and re.fullmatch(r"run_\d+", path.name) is not None and not any(ours)

    return sorted(p.name for p in folder.iterdir() if not exported(p))


def _move_into_place(partial: Path, out: Path) -> None:
    """The finished output under its name: a file replaced in one step; a folder that
    replaces one (``--force``, or an empty one) after the old is set aside, and the old
    removed only once the new is in place (put back if the rename fails)."""
    if not (partial.is_dir() and out.is_dir()):
        os.replace(partial, out)
        return
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    os.replace(out, old)
    try:
        os.replace(partial, out)
    except OSError:
        os.replace(old, out)
        raise
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _say(
    outcome: ExportOutcome, partial: Path, out: Path, name: str, run_dirs: tuple[Path, ...]
) -> None:
    """The written paths on stdout (the command's answer); counts and the reasons
    anything was left out on stderr."""
    for path in outcome.written:
        print(out / path.relative_to(partial) if path.is_relative_to(partial) else path)
    print(
        f"deepledger export: {name}: {outcome.rows} written from {_runs_text(run_dirs)}.",
        file=sys.stderr,
    )
    for reason, count in sorted(outcome.skipped.items()):
        print(f"  left out: {count} {reason}", file=sys.stderr)


def _runs_text(run_dirs: tuple[Path, ...]) -> str:
    return str(run_dirs[0]) if len(run_dirs) == 1 else f"{len(run_dirs)} runs"
