"""``deepledger view``: a local web app that lists the runs under a logs folder and shows
any of them, a running bench live, and asks questions."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from deepledger.cli.common import EXIT_USAGE
from deepledger.errors import ConfigError

HELP = """\
deepledger view — a local web app over the runs under a logs folder: every `deepledger
bench` and `deepledger run` folder, newest first, with suite, model, accuracy, tokens, cost,
status (finished / running / stopped) and start time. A bench's page is its report.html
page; one that is running updates as it runs (progress, each task's status, the open
task's trajectory turn by turn). The form on the first page asks a question (`deepledger
run` in a process of its own, its folder under LOGS_DIR/questions/) and shows its
trajectory as it is written.

usage: deepledger view [LOGS_DIR] [--host HOST] [--port PORT] [--no-browser]
                       [--allow-questions]

  LOGS_DIR           the folder whose runs are listed (default: logs)
  --host HOST        the address to listen on (default: 127.0.0.1, this machine only)
  --port PORT        the port (default: 8765; when in use, the next free one, said)
  --no-browser       do not open the page in a browser
  --allow-questions  let the form start runs even when --host is not a loopback
                     address (off by default: anyone who reaches the page could start
                     processes on this machine)

The address is printed on stdout once the viewer listens; the rest goes to stderr.

examples:
  deepledger view
  deepledger view logs/tiny --port 9000 --no-browser

Exit codes: 130 stopped by Ctrl-C (the viewer runs until then), 2 a usage error or a
  LOGS_DIR that is not a folder, 141 the output pipe was closed.
"""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
EXIT_INTERRUPTED = 130


def view_command(args: list[str]) -> int:
    try:
        logs, host, port, browser, allow = _parse(args)
    except ConfigError as exc:
        print(f"deepledger view: {exc} (see deepledger view --help)", file=sys.stderr)
        return EXIT_USAGE
    if not logs.is_dir():
        raise ConfigError(
            f"{logs} is not a folder (expected the logs folder that holds "
            "the runs, e.g. logs); runs are written under logs/ by default."
        )
    from deepledger.store.locate import runs_under
    from deepledger.view.serve import bind, is_loopback, serve, url_of

    # SIGINT stops the viewer even when started where it is ignored (a background job
    # of a script): a server left running after kill -INT would hold its port.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sock = bind(host, port)
    url = url_of(sock)
    if sock.getsockname()[1] != port:
        print(
            f"deepledger view: port {port} is in use; using {sock.getsockname()[1]}",
            file=sys.stderr,
        )
    allow_questions = allow or is_loopback(host)
    if not allow_questions:
        print(
            "deepledger view: not on a loopback address: asking questions is off "
            "(--allow-questions turns it on)",
            file=sys.stderr,
        )
    print(
        f"deepledger view: the runs under {logs.resolve()} at {url} (Ctrl-C stops it)",
        file=sys.stderr,
    )
    if next(iter(runs_under(logs)), None) is None:  # a mistyped folder, most likely
        print(
            f"deepledger view: no runs under {logs.resolve()} yet; runs written there "
            "appear as they start",
            file=sys.stderr,
        )
    print(url, flush=True)  # the command's result: where to point a browser
    if browser:
        import webbrowser

        webbrowser.open(url)
    try:
        serve(logs, sock, allow_questions=allow_questions)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_INTERRUPTED  # uvicorn ends only on a signal, having handled it itself


def _parse(args: list[str]) -> tuple[Path, str, int, bool, bool]:
    logs, host, port, browser, allow = Path("logs"), DEFAULT_HOST, DEFAULT_PORT, True, False
    rest = list(args)
    positional: list[str] = []
    while rest:
        word = rest.pop(0)
        if word in ("--host", "--port"):
            if not rest:
                raise ConfigError(f"{word} needs a value")
            value = rest.pop(0)
            if word == "--host":
                host = value
            elif value.isdigit() and 0 < int(value) < 65536:
                port = int(value)
            else:
                raise ConfigError(f"--port {value!r} is not a port number (1-65535)")
        elif word == "--no-browser":
            browser = False
        elif word == "--allow-questions":
            allow = True
        elif word.startswith("-"):
            raise ConfigError(f"unknown option {word!r}")
        else:
            positional.append(word)
    if len(positional) > 1:
        raise ConfigError(f"one logs folder is expected, not {len(positional)}")
    if positional:
        logs = Path(positional[0])
    return logs, host, port, browser, allow
