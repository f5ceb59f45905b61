"""What every command shares: exit codes, the config folder, failing in one paragraph,
a closed output pipe, ending the process quickly."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO, cast

from deepledger.errors import ConfigError, DeepLedgerError, EndpointRejectedError

EXIT_TASKS_ERRORED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # the shell convention for Ctrl-C


def config_dir() -> Path:
    """``$DEEPLEDGER_CONFIG_DIR``, else the ``conf/`` of the source checkout."""
    configured = os.environ.get("DEEPLEDGER_CONFIG_DIR")
    path = Path(configured) if configured else Path(__file__).resolve().parents[3] / "conf"
    if not (path / "config.yaml").is_file():
        raise ConfigError(
            f"No deepledger configuration at {path} (config.yaml missing). Install from a "
            "source checkout (pip install -e .) or set DEEPLEDGER_CONFIG_DIR to a conf/ folder."
        )
    return path


EXIT_STDOUT_CLOSED = 141  # 128 + SIGPIPE: what a shell shows for `yes | head -1`


class _PipeGuardedStdout:
    """``sys.stdout`` while a command runs, except that a reader gone (``deepledger run
    ... | head -1``) is no error: the first write or flush that meets the closed pipe
    points file descriptor 1 at /dev/null, so the rest of the output (and the
    interpreter's last flush) goes nowhere, and the command finishes its work (its run
    folder complete) instead of stopping at a print. The exception never reaches the
    command's code, where Hydra would catch it and print a traceback of its own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.cut = False  # the reader went away: the command ends with 141

    def write(self, text: str) -> int:
        if not self.cut:
            with self._cut_on_closed_pipe():
                return self._stream.write(text)
        return len(text)

    def flush(self) -> None:
        if not self.cut:
            with self._cut_on_closed_pipe():
                self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer, ...
        return getattr(self._stream, name)

    @contextlib.contextmanager
    def _cut_on_closed_pipe(self) -> Iterator[None]:
        try:
            yield
        except BrokenPipeError:
            if not stdout_closed(self._stream):
                raise  # stdout is fine: some other pipe broke, a bug
            self.cut = True
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())


def stdout_closed(stream: TextIO | None = None) -> bool:
    """Whether stdout is a pipe whose reading end has gone (poll reports an error)."""
    import select

    try:
        poller = select.poll()
        poller.register((stream or sys.stdout).fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):  # no usable stdout at all
        return True


@contextlib.contextmanager
def closed_pipe_guard() -> Iterator[_PipeGuardedStdout]:
    """``sys.stdout`` guarded against a closed pipe while the block runs (the command),
    then the stream it was. ``.cut`` says whether the reader went away."""
    saved = sys.stdout
    guarded = _PipeGuardedStdout(saved)
    sys.stdout = stream = cast(TextIO, guarded)
    try:
        yield guarded
    finally:
        if sys.stdout is stream:  # a command that replaced it keeps its own
            sys.stdout = saved


def end_process(code: int) -> None:
    """End the process now that the command is done: the atexit handlers run (logging's
    flush among them) and the standard streams are flushed, then the process exits
    without the interpreter's teardown, which frees every object one by one (50 ms after
    a one-task bench, most of it the C allocator giving back pydantic's and tiktoken's
    memory). Files, journals and servers are closed by then. A daemon thread (the
    thread pools' idle workers) ends with the process, as in Python's own exit; while a
    non-daemon thread still runs, the normal exit waits for it."""
    import atexit
    import threading

    main = threading.main_thread()
    if any(t is not main and not t.daemon for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: the code says so
            stream.flush()
    os._exit(code)


def skip_exit_collection() -> None:
    """The interpreter's exit runs one last garbage collection over every object the
    command made, 0.2 s after a one-task bench; the process is ending and its memory
    goes back whole, so the objects alive now are moved out of the collector's sight.
    Files, journals and servers are closed by then; atexit handlers still run."""
    import gc

    gc.freeze()


def quiet_http_logs() -> None:
    """One INFO line per HTTP request from the SDKs' clients drowns the progress display."""
    for name in ("httpx", "httpx2", "openai", "anthropic", "mcp"):
        logging.getLogger(name).setLevel(logging.WARNING)


def fail(exc: DeepLedgerError) -> int:
    """One paragraph; 2 when the configuration (or the endpoint it names) is wrong, 1
    when the work itself failed (``deepledger run``'s model call, after its retries)."""
    print(f"deepledger: {exc}", file=sys.stderr)
    usage = isinstance(exc, ConfigError | EndpointRejectedError)
    return EXIT_USAGE if usage else EXIT_TASKS_ERRORED
