"""The ``python`` MCP tool server: a persistent Python session for one task.

Run as ``python -m deepledger.tools.servers.python_sandbox [--timeout S] [--memory-mb N]
[--max-processes N] [--disk-mb N] [--max-output-chars N] [--workdir DIR]``; it speaks MCP
over stdio. The runtime starts one server per task, so the session (variables, imports,
definitions) lives as long as the server.

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
and talks to it over private pipes; the server's stdout carries only MCP. What isolates the
worker from the machine is chosen at startup with ``--isolation auto|bwrap|unshare|none``
(``auto``, the default: the strongest that works here; ``bwrap`` or ``unshare`` asked for
but not working is a startup error). ``sandbox_isolation`` documents each mode exactly; in
short:

- **bwrap** (bubblewrap): own PID namespace and ``/proc`` (only the sandbox's processes are
  visible, so no ``/proc/<server pid>/environ`` or ``/proc/<pid>/cwd/.env``), an
  unprivileged uid of its own (never root, never the server's user when the server is
  root), no network (an empty loopback: even the host's 127.0.0.1 is unreachable), an empty
  environment, and a filesystem of read-only system and Python folders plus its working
  directory, the only writable place besides ``/tmp`` and ``/dev/shm``, each file at most
  1 GiB (RLIMIT_FSIZE). Its working directory keeps its host path inside.
- **unshare** (fallback): no network (an empty network namespace), nothing else: the code
  runs as the same user on the same filesystem and can read the user's files and other
  processes' environments; process count not limited.
- **none**: no isolation beyond the limits below.

Which mode is in force is stated in the tool description and the server instructions, and,
for the weaker modes, again in the first result (a ``[notice]``) and as a warning on stderr.

In every mode the worker is:

- **limited in time**: each call has a wall-clock limit (``--timeout``, default 30 s). On
  expiry the worker is killed with SIGKILL (with bwrap its whole PID namespace goes, so no
  process the code started survives; otherwise its process group, so processes that called
  ``setsid`` may) and the model is told the session was lost; the next call starts a fresh
  one. Each call also gets an RLIMIT_CPU budget of ``ceil(timeout) + 1`` CPU seconds, a
  backstop that only fires first for multi-threaded code (the worker dies of SIGXCPU and the
  model is told so).
- **limited in memory, processes and disk, the sandbox as a whole** where the machine
  allows (``sandbox_cgroups``: a cgroup holds all its processes to ``--memory-mb`` and
  ``--max-processes`` together; ``sandbox_disk``: its work folder, ``/tmp`` and
  ``/dev/shm`` share ``--disk-mb`` on a file system of that size), else per process
  (RLIMIT_AS, and RLIMIT_NPROC with bwrap; not a total). Each process also has RLIMIT_AS
  of ``--memory-mb``: one runaway allocation is a ``MemoryError`` traceback the session
  survives. A call that met a sandbox-wide limit (the kernel killed a process for
  memory, a fork was refused, the disk is full) fails and says which in ``[error]``; if
  the worker itself was killed, the model is told the session was lost.
- **in a private working directory**: its cwd (and ``HOME``, ``TMPDIR``) is a temporary
  directory made for this server (on its quota disk where there is one) and deleted when
  it exits (``--workdir`` uses a given directory instead, keeps it and puts no quota on it;
  with bwrap as root it is handed to the sandbox's uid).
  Files the code writes there survive ``reset()`` and timeouts but not the server. It is
  also first on ``sys.path``, like a notebook's.
- **without a terminal**: stdin is ``/dev/null`` (``input()`` raises ``EOFError``).
- **in a minimal environment**: only ``PATH``, ``HOME``, ``TMPDIR``, ``LANG``, ``USER``,
  ``LOGNAME`` and ``MPLBACKEND`` are set; the server's environment (API keys and the like) is
  not passed on. The interpreter runs with ``-I``: the user's site-packages and
  ``PYTHONPATH`` are ignored, the interpreter's own site-packages (the venv: numpy etc. if
  installed) are importable.

The worker is not protected from itself: code can raise its own CPU limit or corrupt its
session; the wall-clock kill still holds.

Lifetime: if the server is killed the kernel kills the worker too (``PR_SET_PDEATHSIG``, or
bwrap's ``--die-with-parent``); on stdin EOF or SIGTERM the server kills the worker and
deletes its temporary directory, cgroup and quota disk (a killed server's are removed by
the next server that starts).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import codecs
import json
import logging
import math
import os
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from deepledger.tools.servers._sandbox_worker import (
    TRUNCATION_NOTICE,
    CallReply,
    CommandRequest,
    ReadRequest,
    RunRequest,
    TransferReply,
    WorkerRequest,
    WriteRequest,
)
from deepledger.tools.servers._stdio import serve_stdio
from deepledger.tools.servers.sandbox_isolation import (
    ISOLATION_CHOICES,
    Budget,
    Isolation,
    IsolationUnavailableError,
    SandboxResources,
    SandboxResourcesError,
    detect_isolation,
)

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


class SandboxFileError(RuntimeError):
    """A file could not be moved into or out of the sandbox; the message says why."""


_BUDGET = Budget()


@dataclass(frozen=True)
class SandboxLimits:
    timeout_seconds: float = 30.0
    # All of a sandbox's processes together where cgroups work, else each process's
    # address space (RLIMIT_AS, which the worker sets in every case).
    memory_mb: int = _BUDGET.memory_mb
    max_output_chars: int = 10_000
    max_processes: int = _BUDGET.max_processes  # processes and threads of one sandbox
    max_file_mb: int = _BUDGET.max_file_mb  # RLIMIT_FSIZE: the largest file the code may write
    disk_mb: int = _BUDGET.disk_mb  # the work folder, /tmp and /dev/shm together

    @property
    def cpu_seconds(self) -> int:
        """Per-call CPU budget: never hit before the wall clock by single-threaded code."""
        return math.ceil(self.timeout_seconds) + 1

    @property
    def budget(self) -> Budget:
        return Budget(self.memory_mb, self.max_processes, self.disk_mb, self.max_file_mb)


@dataclass(frozen=True)
class CellResult:
    stdout: str = ""
    stderr: str = ""
    value: str | None = None
    error: str | None = None  # a traceback, or what happened to the worker
    exit_code: int | None = None  # of a shell command

    @property
    def failed(self) -> bool:
        return self.error is not None or self.exit_code not in (None, 0)


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
    async def start(cls, limits: SandboxLimits, resources: SandboxResources) -> _Worker:
        request_read, request_write = os.pipe()
        response_read, response_write = os.pipe()
        argv, env, cwd = resources.command(
            _worker_argv(limits, resources, request_read, response_write)
        )
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(request_read, response_write),
                cwd=cwd,
                env=env,
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

    async def run(self, request: RunRequest | CommandRequest) -> CellResult:
        """A ``run`` or ``command`` request, with the output this call printed."""
        marker = f"\x00DLSANDBOX-END-{secrets.token_hex(8)}\x00"
        sent = request.copy()  # the caller's request stays as it was written
        sent["marker"] = marker
        line = await self._exchange(sent)
        if line is None:
            return await self._timed_out()
        if not line:
            return await self._died()
        response: CallReply = json.loads(line)  # the worker's reply to a run or command
        grace = _MARKER_GRACE_SECONDS if response["markers_written"] else 0.0
        stdout = await self._stdout.output_until(marker, grace)
        stderr = await self._stderr.output_until(marker, grace)
        return CellResult(
            stdout, stderr, response.get("value"), response.get("error"), response.get("exit_code")
        )

    async def transfer(self, request: ReadRequest | WriteRequest) -> TransferReply:
        """A ``read`` or ``write`` request; a failure of the worker comes back as its error."""
        line = await self._exchange(request)
        if line is None:
            result = await self._timed_out()
        elif not line:
            result = await self._died()
        else:
            reply: TransferReply = json.loads(line)
            return reply
        return {"error": result.error}

    async def _exchange(self, request: WorkerRequest) -> bytes | None:
        """Send one request; its response line, b"" if the worker died, None on timeout."""
        try:
            self._requests.write(json.dumps(request).encode() + b"\n")
            await self._requests.drain()
            return await asyncio.wait_for(self._responses.readline(), self._limits.timeout_seconds)
        except TimeoutError:
            return None
        except (BrokenPipeError, ConnectionResetError):
            return b""

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


def _worker_argv(
    limits: SandboxLimits, resources: SandboxResources, request_fd: int, response_fd: int
) -> list[str]:
    bwrap = resources.isolation.mode == "bwrap"
    argv = [
        sys.executable,
        "-I",
        resources.worker_script,
        f"--request-fd={request_fd}",
        f"--response-fd={response_fd}",
        # bwrap's --die-with-parent kills the worker with us; its parent there is bwrap.
        f"--parent-pid={0 if bwrap else os.getpid()}",
        f"--memory-mb={limits.memory_mb}",
        f"--cpu-seconds={limits.cpu_seconds}",
        f"--max-chars={limits.max_output_chars}",
        f"--max-file-mb={limits.max_file_mb}",
    ]
    process_limit = resources.process_limit(limits.max_processes)
    if process_limit is not None:
        argv.append(f"--max-processes={process_limit}")
    if resources.run_as is not None:
        argv.append("--run-as={}:{}".format(*resources.run_as))
    if bwrap:  # inside bubblewrap the code gets no user namespace of its own either
        argv.append("--no-user-namespaces")
    return argv


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


_T = TypeVar("_T")
_TRANSFER_CHUNK = 4 * 1024 * 1024  # raw bytes per pipe message (base64 makes it a third more)
MAX_TRANSFER_BYTES = 256 * 1024 * 1024


class PythonSandbox:
    """The session the server offers: one worker at a time, restarted when it is lost."""

    def __init__(self, limits: SandboxLimits, resources: SandboxResources) -> None:
        self.limits = limits
        self.resources = resources
        self.isolation = resources.isolation
        self._worker: _Worker | None = None
        self._lock = asyncio.Lock()
        # Told to the model at the start of the next result.
        notice = self.isolation.notice
        self._notices: list[str] = [notice] if notice else []

    @property
    def workdir(self) -> str:
        """The working directory as the code sees it."""
        return self.resources.inside_workdir

    async def run(self, code: str) -> CellResult:
        return await self._with_worker(lambda w: self._reported(w, {"op": "run", "code": code}))

    async def run_command(self, command: str) -> CellResult:
        request: CommandRequest = {"op": "command", "command": command, "cwd": self.workdir}
        return await self._with_worker(lambda worker: self._reported(worker, request))

    async def _reported(self, worker: _Worker, request: RunRequest | CommandRequest) -> CellResult:
        """A call that ran into a sandbox-wide limit fails, and says which: the kernel's
        verdict (a killed child, a refused fork, a full disk) may not reach the output.
        Runs under the session's lock, so what happened between the marks is this call's."""
        disk_full_before = self.resources.limit_marks()
        result = await worker.run(request)
        output = "\n".join(text for text in (result.stdout, result.stderr, result.error) if text)
        report = self.resources.limit_report(disk_full_before, output)
        if report is None:
            return result
        error = f"{result.error}\n\n{report}" if result.error else report
        return replace(result, error=error)

    async def read_file(self, path: str) -> bytes:
        """A file as the sandbox sees it, read by the sandbox user; SandboxFileError if not."""
        data = bytearray()
        while True:
            response = await self._transfer(
                {"op": "read", "path": path, "offset": len(data), "length": _TRANSFER_CHUNK}
            )
            if response["error"]:
                raise SandboxFileError(response["error"])
            if response["size"] > MAX_TRANSFER_BYTES:
                raise SandboxFileError(
                    f"{path} is {response['size']} bytes; at most {MAX_TRANSFER_BYTES} move "
                    "out of the sandbox."
                )
            chunk = base64.b64decode(response["data"])
            data += chunk
            if not chunk or len(data) >= response["size"]:
                return bytes(data)

    async def write_file(self, path: str, name: str, data: bytes) -> str:
        """Write ``data`` as the sandbox user at ``path`` (or ``path/name`` for a folder)."""
        offset = 0
        while True:
            chunk = data[offset : offset + _TRANSFER_CHUNK]
            response = await self._transfer(
                {
                    "op": "write",
                    "path": path,
                    "name": name,
                    "data": base64.b64encode(chunk).decode(),
                    "append": offset > 0,
                }
            )
            if response["error"]:
                raise SandboxFileError(response["error"])
            path = response["path"]  # later chunks go to the file the first one chose
            offset += len(chunk)
            if offset >= len(data):
                return path

    async def _transfer(self, request: ReadRequest | WriteRequest) -> TransferReply:
        return await self._with_worker(lambda worker: worker.transfer(request))

    async def _with_worker(self, action: Callable[[_Worker], Awaitable[_T]]) -> _T:
        async with self._lock:
            worker = await self._live_worker()
            try:
                result = await action(worker)
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
            self._worker = await _Worker.start(self.limits, self.resources)
        return self._worker

    async def aclose(self) -> None:
        if self._worker is not None:
            await self._worker.aclose()
            self._worker = None

    def kill(self) -> None:
        if self._worker is not None:
            self._worker.kill()

    def take_notices(self) -> str | None:
        """What the model should hear once: weaker isolation, a session lost unseen."""
        notices, self._notices = self._notices, []
        return "\n".join(notices) or None


def render_result(result: CellResult, notice: str | None = None) -> CallToolResult:
    sections = [f"[notice]\n{notice}"] if notice else []
    for title, body in (
        ("stdout", result.stdout),
        ("stderr", result.stderr),
        ("value", result.value),
        ("exit code", None if result.exit_code is None else str(result.exit_code)),
        ("error", result.error),
    ):
        if body:
            body = body.rstrip("\n")  # the newline print() ends with is noise here
            sections.append(f"[{title}]\n{body}")
    text = "\n\n".join(sections) or "(no output)"
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=result.failed)


def limits_sentence(limits: SandboxLimits) -> str:
    return (
        f"Limits per call: {limits.timeout_seconds:g} s wall clock (on timeout the session "
        "restarts and all variables are lost); memory, processes and disk as below."
    )


def _run_python_description(sandbox: PythonSandbox) -> str:
    limits = sandbox.limits
    return (
        "Run Python code in a persistent session (like a notebook cell): variables, imports "
        "and functions persist between calls, and the value of a final expression is shown. "
        "Returns [stdout], [stderr], [value] and, if the code failed, [error] with the "
        f"traceback; each is cut to {limits.max_output_chars} characters. "
        f"{limits_sentence(limits)} The working directory is a private scratch folder that "
        f"lasts for this task. {sandbox.isolation.summary}"
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
        "session. Files in the working directory are kept. " + sandbox.isolation.summary
    )
    async def reset() -> str:
        await sandbox.reset()
        return "The Python session was reset: all variables are gone; files are kept."

    return server


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    """The options both sandbox servers share: limits and the isolation mode."""
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
        help="memory of all of a sandbox's processes together where cgroups work, else of "
        "each process (default %(default)s)",
    )
    parser.add_argument(
        "--max-output-chars",
        type=int,
        default=defaults.max_output_chars,
        help="limit per stdout/stderr/value/error section (default %(default)s)",
    )
    parser.add_argument(
        "--max-processes",
        type=int,
        default=defaults.max_processes,
        help="processes and threads of a sandbox: with cgroups in any mode, else with bwrap "
        "only (default %(default)s)",
    )
    parser.add_argument(
        "--disk-mb",
        type=int,
        default=defaults.disk_mb,
        help="the work folder, /tmp and /dev/shm together, where a quota disk can be made; "
        "else what /tmp and /dev/shm (RAM-backed) hold together, half each "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--isolation",
        choices=ISOLATION_CHOICES,
        default="auto",
        help="auto: the strongest that works here; bwrap/unshare: exactly that, or fail",
    )


def limits_from(parser: argparse.ArgumentParser, args: argparse.Namespace) -> SandboxLimits:
    numbers = (args.timeout, args.memory_mb, args.max_output_chars, args.max_processes)
    if any(number <= 0 for number in (*numbers, args.disk_mb)):
        parser.error(
            "--timeout, --memory-mb, --max-output-chars, --max-processes and --disk-mb must be > 0"
        )
    return SandboxLimits(
        args.timeout,
        args.memory_mb,
        args.max_output_chars,
        args.max_processes,
        disk_mb=args.disk_mb,
    )


def isolation_from(
    args: argparse.Namespace, limits: SandboxLimits, program: str, *, disk_quota: bool = True
) -> Isolation:
    """The isolation asked for; a clear message and exit status 2 if it does not work here."""
    try:
        isolation = detect_isolation(args.isolation, limits.budget, disk_quota=disk_quota)
    except IsolationUnavailableError as exc:
        print(f"{program}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    if not isolation.complete:
        print(f"{program}: WARNING: {isolation.summary}", file=sys.stderr)
    return isolation


def _parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, SandboxLimits]:
    parser = argparse.ArgumentParser(
        prog="python -m deepledger.tools.servers.python_sandbox",
        description="MCP server (stdio) running Python code in a persistent, isolated worker.",
    )
    add_limit_arguments(parser)
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="working directory to use and keep (default: a temporary one, deleted on exit)",
    )
    args = parser.parse_args(argv)
    return args, limits_from(parser, args)


def main(argv: list[str] | None = None) -> None:
    args, limits = _parse_args(argv)
    made: list[PythonSandbox | SandboxResources] = []  # what a SIGTERM must close, once made

    def clean_up() -> None:
        for thing in reversed(made):
            if isinstance(thing, PythonSandbox):
                thing.kill()
            else:
                thing.close()

    def on_sigterm(_signum: int, _frame: object) -> None:
        # MCP clients SIGTERM servers that do not exit after stdin closes, e.g. while a call
        # still runs; without this the worker group and the temp dir would be left behind.
        # Set before the probe, which mounts a disk: one killed then is swept at next start.
        clean_up()
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    # A given --workdir is the user's to keep: it is not put on a quota disk.
    isolation = isolation_from(args, limits, "python_sandbox", disk_quota=args.workdir is None)
    workdir = None
    if args.workdir is not None:
        workdir = args.workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    try:  # None: the resources make the work folder (on its quota disk) and deletes it
        resources = isolation.confine(workdir)
    except SandboxResourcesError as exc:
        print(f"python_sandbox: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    made.append(resources)
    sandbox = PythonSandbox(limits, resources)
    made.append(sandbox)
    try:
        serve_stdio(build_server(sandbox))
    finally:
        clean_up()


if __name__ == "__main__":
    main()
