"""The ``deepledger`` command: ``bench | run | report | replay | judge``.

Hydra has no subcommands, so the first argument picks the command and the rest goes
to Hydra (overrides, ``--cfg job``, ``-m`` sweeps, ``hydra.run.dir=...``); for ``run``,
the question (and ``task_file``) are taken out first and handed to Hydra quoted, so any
text reaches the run as typed. Errors deepledger raises on purpose are printed as one
paragraph, exit code 2 for a usage or configuration error (Hydra's own included), 1 for
failed work; a traceback means a bug. One module per command; ``common.py`` holds what
they share, ``hydra_command.py`` how a command runs under Hydra.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from deepledger import __version__
from deepledger.cli.common import (
    EXIT_STDOUT_CLOSED,
    EXIT_USAGE,
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


def _commands() -> dict[str, Callable[[list[str]], int]]:
    """Each command's entry, imported when it runs: ``deepledger --help`` loads none."""
    from deepledger.cli import judge, replay, report
    from deepledger.cli.bench import bench_command
    from deepledger.cli.hydra_command import hydra_command
    from deepledger.cli.run import run_command

    return {
        "bench": lambda a: hydra_command("bench", a, bench_command),
        "run": lambda a: hydra_command("run", split_run_arguments(a).as_hydra_args(), run_command),
        "report": report.report_command,
        "replay": replay.replay_command,
        "judge": judge.judge_command,
        "export": __import__("deepledger.cli.export", fromlist=["HELP"]).export_command,
    }


def main(argv: list[str] | None = None) -> int:
    """The command; a reader that stops reading (``deepledger --help | head -1``) ends it
    quietly instead of with a BrokenPipeError traceback. Run as the process itself
    (``argv`` None), it ends the process (:func:`end_process`)."""
    code = _main_guarded(argv)
    if argv is None:
        end_process(code)
    return code


def _main_guarded(argv: list[str] | None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # some other pipe broke (a subprocess's): a bug, keep its traceback
        # Not an error to report: whoever read the output has what they wanted. stdout
        # goes to /dev/null so the interpreter's last flush cannot fail again. The exit
        # code is 141, not 0, so that `set -o pipefail` still tells the output was cut
        # short, as it does for any program a closed pipe stops.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_STDOUT_CLOSED


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reading end has gone (poll reports an error)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):  # no usable stdout at all
        return True


def _main(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else EXIT_USAGE
    if args[0] in ("-V", "--version"):
        print(f"deepledger {__version__}")
        return 0
    command, rest = args[0], args[1:]
    handlers = _commands()
    if command not in handlers:
        print(f"deepledger: unknown command {command!r}.\n\n{USAGE}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return handlers[command](rest)
    except DeepLedgerError as exc:
        return fail(exc)
    finally:
        if argv is None:  # the process ends next (not a caller's own interpreter)
            skip_exit_collection()
