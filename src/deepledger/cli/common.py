"""What every command shares: exit codes, the config folder, failing in one paragraph,
a closed output pipe, ending the process quickly."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
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

# One stream is cut at a time: two threads meeting the closed pipe at once (the
# progress display's refresh thread and the command's) must not both redirect it.
_CUT_LOCK = threading.Lock()


class _PipeGuardedStream:
    """``sys.stdout`` (or ``sys.stderr``) while a command runs, except that a reader gone
    (``deepledger run ... | head -1``, ``... 2>&1 | head -1``) is no error: the first
    write or flush that meets the closed pipe points the stream's file descriptor at
    /dev/null, so the rest of the output (and the interpreter's last flush) goes nowhere,
    and the command finishes its work (its run folder complete) instead of stopping at a
    print. The exception never reaches the command's code, where Hydra would catch it
    and print a traceback of its own. Everything else (``fileno``, ``isatty``,
    ``encoding``, ``buffer``: what rich looks at) is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.cut = False  # the reader went away: the command ends with 141

    def write(self, text: str) -> int:
        if not self.cut:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                if not self._cut_at_closed_pipe():
                    raise
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.cut:
            try:
                self._stream.flush()
            except BrokenPipeError:
                if not self._cut_at_closed_pipe():
                    raise

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer, ...
        return getattr(self._stream, name)

    def _cut_at_closed_pipe(self) -> bool:
        """Whether the BrokenPipeError just met is this stream's reader gone (the stream
        is cut from now on); False: the stream is fine, the error is some other pipe's."""
        with _CUT_LOCK:
            if self.cut:  # another thread met it first and redirected the descriptor
                return True
            if not pipe_closed(self._stream):
                return False
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                try:
                    os.dup2(devnull, self._stream.fileno())
                finally:
                    os.close(devnull)
            self.cut = True
            return True


def pipe_closed(stream: TextIO) -> bool:
    """Whether ``stream`` is a pipe whose reading end has gone (poll reports an error)."""
    import select

    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):  # no usable file descriptor at all
        return True


@dataclass(frozen=True)
class GuardedStreams:
    """The standard streams a command writes to, guarded (:func:`closed_pipe_guard`)."""

    stdout: _PipeGuardedStream
    stderr: _PipeGuardedStream

    @property
    def cut(self) -> bool:
        """Whether a reader of either went away: the command ends with 141."""
        return self.stdout.cut or self.stderr.cut


@contextlib.contextmanager
def closed_pipe_guard() -> Iterator[GuardedStreams]:
    """``sys.stdout`` and ``sys.stderr`` guarded against a closed pipe while the block
    runs (the command), then the streams they were: progress lines on stderr piped into
    ``head`` must not cost the run its summary."""
    saved = sys.stdout, sys.stderr
    guarded = GuardedStreams(_PipeGuardedStream(saved[0]), _PipeGuardedStream(saved[1]))
    # A stream the process started without (``2>&-``: None) stays None.
    if saved[0] is not None:
        sys.stdout = cast(TextIO, guarded.stdout)
    if saved[1] is not None:
        sys.stderr = cast(TextIO, guarded.stderr)
    try:
        yield guarded
    finally:
        # A command that replaced one keeps its own.
        if sys.stdout is cast(TextIO, guarded.stdout):
            sys.stdout = saved[0]
        if sys.stderr is cast(TextIO, guarded.stderr):
            sys.stderr = saved[1]


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
        # A closed pipe: the code says so. None: the process started without it (2>&-).
        with contextlib.suppress(OSError, ValueError, AttributeError):
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
    text = str(exc)
    # A message that already names its command ("deepledger export: ...") is not
    # prefixed again: "deepledger: deepledger export: ..." reads as a stutter.
    print(text if text.startswith("deepledger ") else f"deepledger: {text}", file=sys.stderr)
    usage = isinstance(exc, ConfigError | EndpointRejectedError)
    return EXIT_USAGE if usage else EXIT_TASKS_ERRORED
