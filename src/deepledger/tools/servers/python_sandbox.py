"""The ``python`` MCP tool server: a persistent Python session for one task.

Run as ``python -m deepledger.tools.servers.python_sandbox [--timeout S] [--memory-mb N]
[--max-output-chars N] [--workdir DIR]``; it speaks MCP over stdio. The runtime starts one
server per task, so the session (variables, imports, definitions) lives as long as the server.

Tools
-----
``run_python(code)``
    Runs ``code`` as one notebook cell: variables persist between calls, and if the last
    statement is an expression its ``repr`` is shown. The result is text with the sections
    ``[stdout]``, ``[stderr]``, ``[value]`` and ``[error]`` (empty ones left out; ``(no
    output)`` if all are). Each section is cut to ``--max-output-chars``, keeping head and
    tail around ``...[truncated N chars]...``. ``is_error`` is set when the code raised (the
    traceback is in ``[error]``), timed out, or its worker process died; those are results
    the model reads, not protocol errors. A session lost unseen (a cancelled call) is told in
    a ``[notice]`` section of the next result.
``reset()``
    Throws the session away and starts a fresh one; files in the working directory stay.

How the code is contained
-------------------------
The code runs in a separate worker process (``_sandbox_worker.py``), never in this server,
and talks to it over private pipes; the server's stdout carries only MCP. The worker is:

- **limited in time**: each call has a wall-clock limit (``--timeout``, default 30 s). On
  expiry the worker's whole process group (it is a session leader, so this includes
  processes the code started, unless they called ``setsid``) is killed with SIGKILL and the
  model is told the session was lost; the next call starts a fresh one. Each call also gets
  an RLIMIT_CPU budget of ``ceil(timeout) + 1`` CPU seconds, a backstop that only fires first
  for multi-threaded code (the worker dies of SIGXCPU and the model is told so).
- **limited in memory**: RLIMIT_AS (``--memory-mb``, default 1024) caps its address space
  (child processes inherit the same cap each; it is not a total).
  Usually this surfaces as a ``MemoryError`` traceback and the session survives; if native
  code dies of it instead, the model is told the worker died and the session was lost.
- **without network, where the OS allows**: on Linux with util-linux ``unshare``, the worker
  starts in a new, empty network namespace (``unshare --net`` as root, otherwise
  ``unshare --user --map-root-user --net`` if unprivileged user namespaces are enabled).
  The namespace has only a loopback device, which is down, so every connection fails,
  including to services on the host's 127.0.0.1, and DNS fails. Which mode is in force is
  probed at startup and stated in the tool description. If neither works the server still
  runs, warns on stderr, and says "Network: NOT isolated" in the tool description and in the
  first result. As real root the code keeps CAP_SYS_ADMIN and could deliberately re-enter
  the host namespace (``setns``); the namespace stops accidental or casual network use, it
  is not a defence against code written to escape. In the user-namespace mode the code
  sees itself as uid 0 but has only the real user's rights on the host's files.
- **in a private working directory**: its cwd (and ``HOME``, ``TMPDIR``) is a temporary
  directory made for this server and deleted when it exits (``--workdir`` uses a given
  directory instead and keeps it). Files the code writes there survive ``reset()`` and
  timeouts but not the server. It is also first on ``sys.path``, like a notebook's.
- **without a terminal**: stdin is ``/dev/null`` (``input()`` raises ``EOFError``).
- **in a minimal environment**: only ``PATH``, ``HOME``, ``TMPDIR``, ``LANG`` and
  ``MPLBACKEND`` are set, so the server's environment (API keys and the like) is not passed
  on (though it stays readable in ``/proc/<server pid>/environ``, see below).
  The interpreter runs with ``-I``: the user's site-packages and ``PYTHONPATH`` are ignored,
  the interpreter's own site-packages (the venv: numpy etc. if installed) are importable.

What is **not** isolated: the filesystem. The worker runs as the same user as the server, so
it can read and write whatever that user can (outside its working directory too, including
``/proc``); the working directory is a convenience, not a jail. Processes are not limited in
number and disk use is not limited. Nor is the worker protected from itself: code can raise
its own CPU limit or corrupt its session; the wall-clock kill still holds.

Lifetime: if the server is killed the kernel kills the worker too (``PR_SET_PDEATHSIG``); on
stdin EOF or SIGTERM the server kills the worker's group and deletes its temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from deepledger.tools.servers._sandbox_worker import TRUNCATION_NOTICE
from deepledger.tools.servers._stdio import serve_stdio

logger = logging.getLogger(__name__)

_WORKER_SCRIPT = Path(__file__).with_name("_sandbox_worker.py")
_STARTUP_TIMEOUT_SECONDS = 15.0
# After a call's response, how long its end-of-output markers may take to come through the pipes.
_MARKER_GRACE_SECONDS = 2.0
# After a kill, how long the output pipes may take to report end of file.
_DRAIN_GRACE_SECONDS = 1.0
_RESPONSE_LINE_LIMIT = 64 * 1024 * 1024
_MARKER_RE = re.compile(r"\x00DLSANDBOX-END-[0-9a-f]{16}\x00")
_MARKER_LENGTH = len("\x00DLSANDBOX-END-\x00") + 16


class SandboxUnavailableError(RuntimeError):
    """The worker process could not be started; the message says why."""


@dataclass(frozen=True)
class SandboxLimits:
    timeout_seconds: float = 30.0
    memory_mb: int = 1024
    max_output_chars: int = 10_000

    @property
    def cpu_seconds(self) -> int:
        """Per-call CPU budget: never hit before the wall clock by single-threaded code."""
        return math.ceil(self.timeout_seconds) + 1


@dataclass(frozen=True)
class NetworkIsolation:
    prefix: tuple[str, ...]  # argv that starts the worker in a fresh network namespace
    summary: str  # one line for the tool description

    @property
    def isolated(self) -> bool:
        return bool(self.prefix)


def detect_network_isolation() -> NetworkIsolation:
    """Find a way to start the worker without network that actually works on this machine."""
    unshare = shutil.which("unshare")
    if sys.platform != "linux" or unshare is None:
        return _not_isolated("no util-linux `unshare` on this system")
    candidates = [(unshare, "--user", "--map-root-user", "--net")]
    if os.geteuid() == 0:
        candidates.insert(0, (unshare, "--net"))
    for prefix in candidates:
        probe = subprocess.run(
            [*prefix, "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
        if probe.returncode == 0:
            return NetworkIsolation(
                prefix,
                "Network: isolated (the code runs in an empty network namespace; "
                "every connection fails, even to localhost).",
            )
    return _not_isolated("`unshare --net` is not permitted here")


def _not_isolated(reason: str) -> NetworkIsolation:
    return NetworkIsolation(
        (), f"Network: NOT isolated ({reason}); the code can open network connections."
    )


@dataclass(frozen=True)
class CellResult:
    stdout: str = ""
    stderr: str = ""
    value: str | None = None
    error: str | None = None  # a traceback, or what happened to the worker

    @property
    def failed(self) -> bool:
        return self.error is not None


class _BoundedText:
    """Keeps the head and the tail of a stream of text, counting what falls out between."""

    def __init__(self, limit: int) -> None:
        self._tail_room = limit // 2
        self._head_room = limit - self._tail_room
        self._head: list[str] = []
        self._head_length = 0
        self._tail = ""
        self._total = 0

    def add(self, text: str) -> None:
        self._total += len(text)
        room = self._head_room - self._head_length
        if room > 0:
            self._head.append(text[:room])
            self._head_length += len(self._head[-1])
            text = text[room:]
        if text and self._tail_room:
            self._tail = (self._tail + text)[-self._tail_room :]

    def render(self) -> str:
        head = "".join(self._head)
        dropped = self._total - len(head) - len(self._tail)
        if dropped <= 0:
            return head + self._tail
        return f"{head}{TRUNCATION_NOTICE.format(count=dropped)}{self._tail}"


class _OutputPump:
    """Drains one worker output pipe for the worker's whole life, cut into calls at markers.

    Draining continuously (instead of reading after the call) means output of any size never
    blocks the worker, and memory stays bounded however much it prints.
    """

    def __init__(self, reader: asyncio.StreamReader, limit: int) -> None:
        self._reader = reader
        self._limit = limit
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._current = _BoundedText(limit)
        self._unscanned = ""  # text that may be the start of a marker
        self._finished: dict[str, str] = {}  # marker -> the output of the call it ended
        self._changed = asyncio.Event()
        self._eof = False
        self._task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        while chunk := await self._reader.read(256 * 1024):
            self._feed(self._decoder.decode(chunk))
        self._feed(self._decoder.decode(b"", final=True), final=True)
        self._eof = True
        self._changed.set()

    def _feed(self, text: str, final: bool = False) -> None:
        text = self._unscanned + text
        while match := _MARKER_RE.search(text):
            self._current.add(text[: match.start()])
            self._finished[match.group()] = self._current.render()
            self._current = _BoundedText(self._limit)
            text = text[match.end() :]
        cut = text.rfind("\x00")
        if final or cut == -1 or len(text) - cut >= _MARKER_LENGTH:
            cut = len(text)
        self._current.add(text[:cut])
        self._unscanned = text[cut:]
        self._changed.set()

    async def output_until(self, marker: str, grace_seconds: float) -> str:
        """The output of the call that ``marker`` ends, or all so far if it never comes."""
        await self._wait(lambda: marker in self._finished, grace_seconds)
        if marker in self._finished:
            return self._finished.pop(marker)
        return self.take_current()

    async def output_until_eof(self, grace_seconds: float) -> str:
        await self._wait(lambda: False, grace_seconds)
        return self.take_current()

    async def _wait(self, done: Callable[[], bool], grace_seconds: float) -> None:
        with suppress(TimeoutError):
            async with asyncio.timeout(grace_seconds):
                while not done() and not self._eof:
                    self._changed.clear()
                    await self._changed.wait()

    def cancel(self) -> None:
        self._task.cancel()

    def take_current(self) -> str:
        self._current.add(self._unscanned)
        self._unscanned = ""
        text = self._current.render()
        self._current = _BoundedText(self._limit)
        return text


class _Worker:
    """One live worker process: its control pipes and the pumps draining its output."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        pipes: _ControlPipes,
        limits: SandboxLimits,
    ) -> None:
        self._process = process
        self._pipes = pipes
        self._requests = pipes.requests
        self._responses = pipes.responses
        self._limits = limits
        assert process.stdout is not None and process.stderr is not None
        self._stdout = _OutputPump(process.stdout, limits.max_output_chars)
        self._stderr = _OutputPump(process.stderr, limits.max_output_chars)
        self.alive = True

    @classmethod
    async def start(
        cls, limits: SandboxLimits, workdir: Path, isolation: NetworkIsolation
    ) -> _Worker:
        request_read, request_write = os.pipe()
        response_read, response_write = os.pipe()
        argv = [
            *isolation.prefix,
            sys.executable,
            "-I",
            str(_WORKER_SCRIPT),
            f"--request-fd={request_read}",
            f"--response-fd={response_write}",
            f"--parent-pid={os.getpid()}",
            f"--memory-mb={limits.memory_mb}",
            f"--cpu-seconds={limits.cpu_seconds}",
            f"--max-chars={limits.max_output_chars}",
        ]
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(request_read, response_write),
                cwd=workdir,
                env=_worker_environment(workdir),
                start_new_session=True,  # its own process group, so one killpg ends everything
            )
        finally:
            os.close(request_read)
            os.close(response_write)
        worker = cls(process, await _ControlPipes.connect(request_write, response_read), limits)
        await worker._wait_until_ready()
        return worker

    async def _wait_until_ready(self) -> None:
        line = b""
        with suppress(TimeoutError):
            line = await asyncio.wait_for(self._responses.readline(), _STARTUP_TIMEOUT_SECONDS)
        if line and json.loads(line).get("ready"):
            return
        self.kill()
        _, stderr = await self.finish()
        raise SandboxUnavailableError(
            f"The Python worker did not start: {_describe_exit(self._process.returncode)}."
            + (f"\n{stderr}" if stderr else "")
        )

    async def run(self, code: str) -> CellResult:
        marker = f"\x00DLSANDBOX-END-{secrets.token_hex(8)}\x00"
        try:
            self._requests.write(json.dumps({"code": code, "marker": marker}).encode() + b"\n")
            await self._requests.drain()
            line = await asyncio.wait_for(self._responses.readline(), self._limits.timeout_seconds)
        except TimeoutError:
            return await self._timed_out()
        except (BrokenPipeError, ConnectionResetError):
            line = b""
        if not line:
            return await self._died()
        response = json.loads(line)
        grace = _MARKER_GRACE_SECONDS if response["markers_written"] else 0.0
        stdout = await self._stdout.output_until(marker, grace)
        stderr = await self._stderr.output_until(marker, grace)
        return CellResult(stdout, stderr, response["value"], response["error"])

    async def _timed_out(self) -> CellResult:
        self.kill()
        stdout, stderr = await self.finish()
        limit = self._limits.timeout_seconds
        return CellResult(
            stdout,
            stderr,
            error=(
                f"Timed out: the call ran longer than its {limit:g} s limit and was stopped. "
                "The Python session was restarted, so all variables, imports and definitions "
                "from earlier calls are lost (files in the working directory are kept)."
            ),
        )

    async def _died(self) -> CellResult:
        # The response pipe closed: the worker is gone or going; let it finish dying so
        # its exit status says why.
        with suppress(TimeoutError):
            await asyncio.wait_for(self._process.wait(), _DRAIN_GRACE_SECONDS)
        returncode = self._process.returncode
        self.kill()
        stdout, stderr = await self.finish()
        return CellResult(
            stdout,
            stderr,
            error=(
                f"The Python worker process died during this call: {_describe_exit(returncode)}"
                f"{_limit_hint(returncode, self._limits)}. The session was lost; the next call "
                "starts a fresh one (files in the working directory are kept)."
            ),
        )

    def kill(self) -> None:
        """SIGKILL the worker's process group. Synchronous, so it is safe in a signal
        handler, while being cancelled, or after the event loop has closed."""
        self.alive = False
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)

    async def finish(self) -> tuple[str, str]:
        """After kill(): reap the process, collect its last output, release the pipes."""
        with suppress(TimeoutError):
            await asyncio.wait_for(self._process.wait(), _DRAIN_GRACE_SECONDS)
        stdout = await self._stdout.output_until_eof(_DRAIN_GRACE_SECONDS)
        stderr = await self._stderr.output_until_eof(_DRAIN_GRACE_SECONDS)
        self.close_pipes()
        return stdout, stderr

    def close_pipes(self) -> None:
        self._pipes.close()
        self._stdout.cancel()
        self._stderr.cancel()

    async def aclose(self) -> None:
        self.kill()
        await self.finish()


@dataclass
class _ControlPipes:
    requests: asyncio.StreamWriter
    responses: asyncio.StreamReader
    response_transport: asyncio.ReadTransport

    @classmethod
    async def connect(cls, request_fd: int, response_fd: int) -> _ControlPipes:
        loop = asyncio.get_running_loop()
        responses = asyncio.StreamReader(limit=_RESPONSE_LINE_LIMIT)
        response_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(responses), os.fdopen(response_fd, "rb", 0)
        )
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(request_fd, "wb", 0)
        )
        requests = asyncio.StreamWriter(transport, protocol, None, loop)
        return cls(requests, responses, response_transport)

    def close(self) -> None:
        self.requests.close()
        self.response_transport.close()


def _worker_environment(workdir: Path) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)  # so `python` in a subprocess is this one
    return {
        "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", os.defpath)]),
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
    }


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "it stopped answering"
    if returncode >= 0:
        return f"it exited with status {returncode}"
    try:
        return f"it was killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"it was killed by signal {-returncode}"


def _limit_hint(returncode: int | None, limits: SandboxLimits) -> str:
    if returncode == -signal.SIGXCPU:
        return f" (it used more than its CPU-time limit of {limits.cpu_seconds} s for one call)"
    if returncode in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT, -signal.SIGBUS):
        return f" (possibly out of memory: the limit is {limits.memory_mb} MB)"
    return ""


class PythonSandbox:
    """The session the server offers: one worker at a time, restarted when it is lost."""

    def __init__(self, limits: SandboxLimits, workdir: Path, isolation: NetworkIsolation) -> None:
        self.limits = limits
        self.workdir = workdir
        self.isolation = isolation
        self._worker: _Worker | None = None
        self._lock = asyncio.Lock()
        # Told to the model at the start of the next result.
        self._notices: list[str] = [] if isolation.isolated else [isolation.summary]

    async def run(self, code: str) -> CellResult:
        async with self._lock:
            worker = await self._live_worker()
            try:
                result = await worker.run(code)
            except BaseException as exc:  # mid-call, so the worker no longer matches our state
                worker.kill()
                worker.close_pipes()
                what = (
                    "was cancelled before it finished"
                    if isinstance(exc, asyncio.CancelledError)
                    else f"failed inside the sandbox ({exc!r})"
                )
                self._notices.append(
                    f"The previous call {what}, so the Python session was restarted: "
                    "variables from earlier calls are lost."
                )
                raise
            if not worker.alive:
                self._worker = None
            return result

    async def reset(self) -> None:
        async with self._lock:
            if self._worker is not None:
                await self._worker.aclose()
                self._worker = None
            await self._live_worker()

    async def start(self) -> None:
        """Start the first worker early, so the first call does not wait for it."""
        async with self._lock:
            try:
                await self._live_worker()
            except SandboxUnavailableError as exc:
                logger.error("%s", exc)  # the first call retries and reports it

    async def _live_worker(self) -> _Worker:
        if self._worker is None or not self._worker.alive:
            self._worker = await _Worker.start(self.limits, self.workdir, self.isolation)
        return self._worker

    async def aclose(self) -> None:
        if self._worker is not None:
            await self._worker.aclose()
            self._worker = None

    def kill(self) -> None:
        if self._worker is not None:
            self._worker.kill()

    def take_notices(self) -> str | None:
        """What the model should hear once: no network isolation, a session lost unseen."""
        notices, self._notices = self._notices, []
        return "\n".join(notices) or None


def render_result(result: CellResult, notice: str | None = None) -> CallToolResult:
    sections = [f"[notice]\n{notice}"] if notice else []
    for title, body in (
        ("stdout", result.stdout),
        ("stderr", result.stderr),
        ("value", result.value),
        ("error", result.error),
    ):
        if body:
            body = body.rstrip("\n")  # the newline print() ends with is noise here
            sections.append(f"[{title}]\n{body}")
    text = "\n\n".join(sections) or "(no output)"
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=result.failed)


def _run_python_description(sandbox: PythonSandbox) -> str:
    limits = sandbox.limits
    return (
        "Run Python code in a persistent session (like a notebook cell): variables, imports "
        "and functions persist between calls, and the value of a final expression is shown. "
        "Returns [stdout], [stderr], [value] and, if the code failed, [error] with the "
        f"traceback; each is cut to {limits.max_output_chars} characters. Limits per call: "
        f"{limits.timeout_seconds:g} s wall clock (on timeout the session restarts and all "
        f"variables are lost), {limits.memory_mb} MB memory. The working directory is a "
        "private scratch folder that lasts for this task. "
        f"{sandbox.isolation.summary}"
    )


def build_server(sandbox: PythonSandbox) -> MCPServer[Any]:
    @asynccontextmanager
    async def lifespan(_server: MCPServer[Any]) -> AsyncIterator[None]:
        await sandbox.start()
        try:
            yield
        finally:
            await sandbox.aclose()

    server: MCPServer[Any] = MCPServer(
        name="python",
        instructions="A persistent Python session for this task. " + sandbox.isolation.summary,
        lifespan=lifespan,
    )

    @server.tool(description=_run_python_description(sandbox))
    async def run_python(
        code: Annotated[str, Field(description="Python source to run, one or more statements.")],
    ) -> CallToolResult:
        result = await sandbox.run(code)
        return render_result(result, sandbox.take_notices())

    @server.tool(
        description="Discard all variables, imports and definitions and start a fresh Python "
        "session. Files in the working directory are kept."
    )
    async def reset() -> str:
        await sandbox.reset()
        return "The Python session was reset: all variables are gone; files are kept."

    return server


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m deepledger.tools.servers.python_sandbox",
        description="MCP server (stdio) running Python code in a persistent, limited worker.",
    )
    defaults = SandboxLimits()
    parser.add_argument(
        "--timeout",
        type=float,
        default=defaults.timeout_seconds,
        help="wall-clock seconds per call (default %(default)s)",
    )
    parser.add_argument(
        "--memory-mb",
        type=int,
        default=defaults.memory_mb,
        help="address-space limit of the worker (default %(default)s)",
    )
    parser.add_argument(
        "--max-output-chars",
        type=int,
        default=defaults.max_output_chars,
        help="limit per stdout/stderr/value/error section (default %(default)s)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="working directory to use and keep (default: a temporary one, deleted on exit)",
    )
    args = parser.parse_args(argv)
    if args.timeout <= 0 or args.memory_mb <= 0 or args.max_output_chars <= 0:
        parser.error("--timeout, --memory-mb and --max-output-chars must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    limits = SandboxLimits(args.timeout, args.memory_mb, args.max_output_chars)
    if args.workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="deepledger-python-"))
        owned = True
    else:
        workdir = args.workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        owned = False
    isolation = detect_network_isolation()
    if not isolation.isolated:
        print(f"python_sandbox: WARNING: {isolation.summary}", file=sys.stderr)
    sandbox = PythonSandbox(limits, workdir, isolation)

    def clean_up() -> None:
        sandbox.kill()
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)

    def on_sigterm(_signum: int, _frame: object) -> None:
        # MCP clients SIGTERM servers that do not exit after stdin closes, e.g. while a call
        # still runs; without this the worker group and the temp dir would be left behind.
        clean_up()
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        serve_stdio(build_server(sandbox))
    finally:
        clean_up()


if __name__ == "__main__":
    main()
