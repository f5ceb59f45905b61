"""The ``deepledger`` command: ``bench | run | resume | report | replay | judge | export | view``.

Hydra has no subcommands, so the first argument picks the command and the rest goes
to Hydra (overrides, ``--cfg job``, ``-m`` sweeps, ``hydra.run.dir=...``); for ``run``,
the question (and ``task_file``) are taken out first and handed to Hydra quoted, so any
text reaches the run as typed. Errors deepledger raises on purpose are printed as one
paragraph, exit code 2 for a usage or configuration error (Hydra's own included), 1 for
failed work; a traceback means a bug. ``COMMAND -h``/``--help`` prints the command's
page and exits 0: its module's ``HELP``, for bench and run the short page ``usage.py``
makes; a closed output pipe (stdout or stderr) ends any command quietly, with 141
unless the command failed. One module per command; ``common.py`` holds what they
share, ``hydra_command.py`` how a command runs under Hydra.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from deepledger import __version__
from deepledger.cli.common import (
    EXIT_STDOUT_CLOSED,
    EXIT_USAGE,
    closed_pipe_guard,
    config_dir,
    end_process,
    fail,
    skip_exit_collection,
)
from deepledger.cli.hydra_command import checked_overrides
from deepledger.cli.run_args import split_run_arguments
from deepledger.cli.usage import USAGE
from deepledger.errors import DeepLedgerError

__all__ = ["USAGE", "checked_overrides", "config_dir", "main", "split_run_arguments"]

HELP_FLAGS = ("-h", "--help")

# An entry of the table: a command's module ``deepledger.cli.<name>`` (its
# ``<name>_command`` runs it), or a function that runs it. Either way the help page is
# that module's ``HELP`` (bench's and run's are made by usage.py).
Entry = ModuleType | Callable[[list[str]], int]


@dataclass(frozen=True)
class Command:
    """A command as ``main`` runs it: its handler and its help page."""

    run: Callable[[list[str]], int]
    help: Callable[[], str]  # made when asked for: a Hydra command's page reads conf/


def _commands() -> dict[str, Entry]:
    """Each command's entry, imported when it runs: ``deepledger --help`` loads none. A
    new command: its module (``HELP``, ``<name>_command``) and one line here."""
    from deepledger.cli import export, judge, replay, report, resume, view
    from deepledger.cli.bench import bench_command
    from deepledger.cli.hydra_command import hydra_command
    from deepledger.cli.run import run_command

    return {
        "bench": lambda a: hydra_command("bench", a, bench_command),
        "run": lambda a: hydra_command("run", split_run_arguments(a).as_hydra_args(), run_command),
        "report": report,
        "replay": replay,
        "judge": judge,
        "export": export,
        "resume": resume,
        "view": view,
    }


def _command(name: str, entry: Entry) -> Command:
    """The table's entry as a command: bench and run (Hydra's) get the page made from the
    schema and conf/; every other command's page is the ``HELP`` of its module,
    ``deepledger.cli.<name>``, whatever form its entry takes (the module, its handler, a
    lambda calling it)."""
    from deepledger.cli.usage import hydra_command_help

    handler = getattr(entry, f"{name}_command") if isinstance(entry, ModuleType) else entry
    if name in ("bench", "run"):
        return Command(handler, lambda: hydra_command_help(name))
    return Command(handler, lambda: _module_help(name))


def _module_help(name: str) -> str:
    import importlib

    module = importlib.import_module(f"deepledger.cli.{name}")
    page = getattr(module, "HELP", None)
    if not isinstance(page, str):  # a command without a page is a bug: say whose
        raise TypeError(f"{module.__name__} defines no HELP: str (deepledger {name} --help)")
    return page


def wants_help(args: list[str]) -> bool:
    """``-h``/``--help`` anywhere among the command's arguments, up to a ``--`` (after
    it, ``deepledger run -- --help`` asks the question "--help")."""
    before = args[: args.index("--")] if "--" in args else args
    return any(a in HELP_FLAGS for a in before)


def main(argv: list[str] | None = None) -> int:
    """The command; a reader that stops reading (``deepledger run ... | head -1``) ends it
    quietly with 141 instead of a BrokenPipeError traceback. Run as the process itself
    (``argv`` None), it ends the process (:func:`end_process`)."""
    code = _main_guarded(argv)
    if argv is None:
        end_process(code)
    return code


def _main_guarded(argv: list[str] | None) -> int:
    # Not an error to report: whoever read the output has what they wanted. The exit
    # code is 141, not 0, so that `set -o pipefail` still tells the output was cut
    # short, as it does for any program a closed pipe stops; a command that failed
    # keeps its own code (1, 2, 130): the pipe is not why it failed.
    with closed_pipe_guard() as streams:
        code = _main(argv)
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # a closed pipe shows here, not in the interpreter's exit
                stream.flush()
    return EXIT_STDOUT_CLOSED if streams.cut and code == 0 else code


def _main(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:  # a usage error: the page goes to stderr, stdout stays for answers
        print(USAGE, file=sys.stderr)
        return EXIT_USAGE
    if args[0] in (*HELP_FLAGS, "help"):
        if args[1:2] and args[0] == "help":  # deepledger help COMMAND
            return _main([args[1], "--help"])
        print(USAGE)
        return 0
    if args[0] in ("-V", "--version"):
        print(f"deepledger {__version__}")
        return 0
    name, rest = args[0], args[1:]
    entries = _commands()
    if name not in entries:
        print(f"deepledger: unknown command {name!r}.\n\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    command = _command(name, entries[name])
    try:
        if wants_help(rest):  # bench's page reads conf/: a missing one is said in a line
            print(command.help().rstrip("\n"))
            return 0
        return command.run(rest)
    except DeepLedgerError as exc:
        return fail(exc)
    finally:
        if argv is None:  # the process ends next (not a caller's own interpreter)
            skip_exit_collection()
