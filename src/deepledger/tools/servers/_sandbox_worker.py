"""The process that runs model-written code for the sandbox servers: one namespace, REPL-style.

``python_sandbox`` and ``tool_python`` start it as ``python -I _sandbox_worker.py
--request-fd R --response-fd W ...`` (by path, not ``-m``, so it imports only the standard
library, starts fast and never loads deepledger), inside the isolation of
``sandbox_isolation``. It lives as long as one session: globals persist between calls.

When started as root inside bubblewrap (``--run-as UID:GID``) its first act is to set its
resource limits (as root, so the hard limits hold) and drop to that uid/gid for good, before
it reads any request.

Protocol, newline-delimited JSON on two private pipes (stdin is /dev/null; stdout and stderr
belong to the model's code and are drained by the server):

- worker → server, once, after setup: ``{"ready": true, "pid": ...}``
- server → worker, one of:

  - ``{"op": "run", "code": str, "marker": str}`` → ``{"value", "error", "markers_written"}``
  - ``{"op": "command", "command": str, "cwd": str, "marker": str}`` → ``{"exit_code",
    "error", "markers_written"}`` (``/bin/sh -c`` with the worker's stdout and stderr)
  - ``{"op": "read", "path": str, "offset": int, "length": int}`` → ``{"data": base64,
    "size": int, "error"}``
  - ``{"op": "write", "path": str, "name": str, "data": base64, "append": bool}`` →
    ``{"path": str, "error"}``: the first chunk (``append`` false) decides the file: ``path``
    itself, or ``path/name`` when ``path`` is (or looks like) a folder

After each run or command the worker writes ``marker`` to fd 1 and fd 2, so the server knows
where this call's output ends in each stream (output of child processes goes through the same
fds). File transfers run here, as the sandbox user and in the sandbox's view of the
filesystem, so a symlink the code planted can only reach what the code could read anyway.
"""

from __future__ import annotations

import argparse
import ast
import base64
import io
import json
import linecache
import os
import resource
import subprocess
import sys
import traceback
from contextlib import suppress
from types import CodeType
from typing import Any, BinaryIO, Literal, NotRequired, TypeAlias, TypedDict, cast

TRUNCATION_NOTICE = "\n...[truncated {count} chars]...\n"


# The protocol's messages (see above), shared with the server that imports this module.
class RunRequest(TypedDict):
    op: Literal["run"]
    code: str
    marker: NotRequired[str]  # added by the server for each call


class CommandRequest(TypedDict):
    op: Literal["command"]
    command: str
    cwd: str
    marker: NotRequired[str]


class ReadRequest(TypedDict):
    op: Literal["read"]
    path: str
    offset: int
    length: int


class WriteRequest(TypedDict):
    op: Literal["write"]
    path: str
    name: str
    data: str  # base64
    append: bool


WorkerRequest: TypeAlias = RunRequest | CommandRequest | ReadRequest | WriteRequest


class Ready(TypedDict):
    ready: bool
    pid: int


class CallReply(TypedDict):
    """What a ``run`` (``value``) or ``command`` (``exit_code``) call answers."""

    error: str | None
    markers_written: bool
    value: NotRequired[str | None]
    exit_code: NotRequired[int | None]


class TransferReply(TypedDict):
    """What a ``read`` (``data``, ``size``) or ``write`` (``path``) answers; only
    ``error`` when it failed."""

    error: str | None
    data: NotRequired[str]  # base64
    size: NotRequired[int]
    path: NotRequired[str]


_PR_SET_PDEATHSIG = 1
_SIGKILL = 9


def truncate_middle(text: str, limit: int) -> str:
    """Keep the head and the tail of ``text`` (the tail of a traceback is the error)."""
    if len(text) <= limit:
        return text
    tail = limit // 2
    head = limit - tail
    notice = TRUNCATION_NOTICE.format(count=len(text) - limit)
    return f"{text[:head]}{notice}{text[len(text) - tail :]}"


def _limit_resources(memory_mb: int, max_processes: int | None, max_file_mb: int | None) -> None:
    """Limits for the whole worker life; no core files when a limit kills it.

    RLIMIT_NPROC counts the tasks of the real uid, so it is a per-sandbox limit only where the
    sandbox has a uid of its own (``--run-as``); the server passes it only where it holds.
    """
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if max_processes is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
    if max_file_mb is not None:
        size = max_file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def _drop_privileges(run_as: str) -> None:
    """Become the sandbox user for good: no supplementary groups, no capabilities left."""
    uid, gid = (int(part) for part in run_as.split(":"))
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # from root to non-root: the kernel clears all capabilities
    if os.getresuid() != (uid, uid, uid) or os.getgroups() not in ([], [gid]):
        raise SystemExit("could not drop privileges")


# A seccomp filter (classic BPF over struct seccomp_data) that refuses what would hand
# the code a user namespace of its own, the usual door to the kernel's less-trodden
# paths: unshare() and clone() with CLONE_NEWUSER get EPERM, clone3() ENOSYS (its flags
# sit behind a pointer BPF cannot follow; glibc then falls back to clone()), and other
# ABIs (x32, i386) EPERM. Everything else is allowed.
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_NR_CLONE, _NR_UNSHARE, _NR_CLONE3 = 56, 272, 435  # x86_64
_CLONE_NEWUSER = 0x10000000
_ALLOW, _EPERM, _ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026  # SECCOMP_RET_* | errno
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_NO_USERNS_FILTER = (
    (_LD_ABS, 0, 0, 4),  # arch
    (_JEQ, 1, 0, _AUDIT_ARCH_X86_64),
    (_RET, 0, 0, _EPERM),
    (_LD_ABS, 0, 0, 0),  # syscall number
    (_JGE, 0, 1, _X32_SYSCALL_BIT),
    (_RET, 0, 0, _EPERM),
    (_JEQ, 0, 1, _NR_CLONE3),
    (_RET, 0, 0, _ENOSYS),
    (_JEQ, 2, 0, _NR_UNSHARE),
    (_JEQ, 1, 0, _NR_CLONE),
    (_RET, 0, 0, _ALLOW),
    (_LD_ABS, 0, 0, 16),  # the first argument's low 32 bits: the flags
    (_JSET, 0, 1, _CLONE_NEWUSER),
    (_RET, 0, 0, _EPERM),
    (_RET, 0, 0, _ALLOW),
)
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


def _forbid_user_namespaces() -> bool:
    """Install the filter above for this process and all it starts (x86_64 Linux only;
    elsewhere nothing is installed and False is returned)."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return False
    import ctypes

    class Instruction(ctypes.Structure):
        _fields_ = (("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                    ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32))  # fmt: skip

    class Program(ctypes.Structure):
        _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction)))

    instructions = (Instruction * len(_NO_USERNS_FILTER))(
        *(Instruction(*fields) for fields in _NO_USERNS_FILTER)
    )
    program = Program(len(_NO_USERNS_FILTER), instructions)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SystemExit(f"could not set no_new_privs: errno {ctypes.get_errno()}")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
        raise SystemExit(f"could not install the seccomp filter: errno {ctypes.get_errno()}")
    return True


def _limit_cpu_for_one_call(cpu_seconds: int) -> None:
    """RLIMIT_CPU counts the whole process life, so each call gets its budget on top of use."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = int(usage.ru_utime + usage.ru_stime)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = used + cpu_seconds
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _die_with_parent(parent_pid: int) -> None:
    """If the server dies without cleaning up (SIGKILL), the kernel kills us too (Linux only).

    ``parent_pid`` 0: bubblewrap's ``--die-with-parent`` does this (and our parent there is
    bubblewrap, in another PID namespace)."""
    if sys.platform != "linux" or parent_pid == 0:
        return
    import ctypes  # only here: ctypes costs a few milliseconds of startup

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


class Session:
    """One persistent namespace; each call is a cell whose last expression is echoed."""

    def __init__(self, max_chars: int) -> None:
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
        self.max_chars = max_chars
        self.cells = 0

    def run(self, code: str) -> tuple[str | None, str | None]:
        """Run one cell; returns (repr of the last expression or None, traceback or None)."""
        self.cells += 1
        filename = f"<cell {self.cells}>"
        try:
            body, last = _compile_cell(code, filename)
        except (SyntaxError, ValueError) as exc:  # ValueError: source holds NUL bytes
            return None, self._clip("".join(traceback.format_exception_only(exc)))
        # Registered so tracebacks can quote the model's own lines.
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            exec(body, self.namespace)
            value = eval(last, self.namespace) if last is not None else None
            if value is None:
                return None, None
            self.namespace["_"] = value
            return self._clip(repr(value)), None
        except BaseException as exc:  # the model's code may raise anything, even SystemExit
            return None, self._clip(_format_user_traceback(exc))

    def _clip(self, text: str) -> str:
        return truncate_middle(text, self.max_chars)


def _compile_cell(code: str, filename: str) -> tuple[CodeType, CodeType | None]:
    tree = ast.parse(code, filename, "exec")
    last = None
    if tree.body and isinstance(final := tree.body[-1], ast.Expr):
        tree.body.pop()
        last = compile(ast.Expression(final.value), filename, "eval")
    return compile(tree, filename, "exec"), last


def _format_user_traceback(exc: BaseException) -> str:
    """The traceback from the cell down, without this module's own frame on top."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _end_call(marker: str) -> bool:
    """Flush the model's streams and mark the end of this call's output on fd 1 and fd 2."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError, AttributeError):  # the model replaced or closed it
            stream.flush()
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    try:
        for fd in (1, 2):
            os.write(fd, marker.encode())
    except OSError:  # the model closed fd 1 or 2; the server then stops waiting at once
        return False
    return True


def _send(responses: BinaryIO, message: Ready | CallReply | TransferReply) -> None:
    responses.write(json.dumps(message).encode() + b"\n")
    responses.flush()


def _run_command(command: str, cwd: str) -> tuple[int | None, str | None]:
    """A shell command with this worker's stdout and stderr, so the pumps collect its output."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError, AttributeError):
            stream.flush()
    try:
        completed = subprocess.run(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, cwd=cwd)
    except OSError as exc:
        return None, f"The command could not be started: {exc}"
    return completed.returncode, None


def _read_chunk(path: str, offset: int, length: int) -> TransferReply:
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            file.seek(offset)
            data = file.read(length)
    except OSError as exc:
        return {"error": _describe_os_error(exc, path)}
    return {"data": base64.b64encode(data).decode(), "size": size, "error": None}


def _write_chunk(path: str, name: str, data: str, append: bool) -> TransferReply:
    if not append and _looks_like_folder(path):
        path = os.path.join(path, name)
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "ab" if append else "wb") as file:
            file.write(base64.b64decode(data))
    except OSError as exc:
        return {"error": _describe_os_error(exc, path)}
    return {"path": os.path.abspath(path), "error": None}


def _looks_like_folder(path: str) -> bool:
    """An existing folder, or a path ending in a slash or without an extension."""
    return os.path.isdir(path) or path.endswith("/") or not os.path.splitext(path)[1]


def _describe_os_error(exc: OSError, path: str) -> str:
    reason = exc.strerror or type(exc).__name__
    return f"{path}: {reason}"


def _handle(request: WorkerRequest, session: Session) -> CallReply | TransferReply:
    if request["op"] == "read":
        return _read_chunk(request["path"], request["offset"], request["length"])
    if request["op"] == "write":
        return _write_chunk(request["path"], request["name"], request["data"], request["append"])
    if request["op"] == "command":
        exit_code, error = _run_command(request["command"], request["cwd"])
        markers_written = _end_call(request["marker"])
        return {"exit_code": exit_code, "error": error, "markers_written": markers_written}
    value, error = session.run(request["code"])
    markers_written = _end_call(request["marker"])
    return {"value": value, "error": error, "markers_written": markers_written}


def serve(requests: BinaryIO, responses: BinaryIO, session: Session, cpu_seconds: int) -> None:
    _send(responses, {"ready": True, "pid": os.getpid()})
    while line := requests.readline():
        _limit_cpu_for_one_call(cpu_seconds)
        _send(responses, _handle(json.loads(line), session))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--request-fd", type=int, required=True)
    parser.add_argument("--response-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--cpu-seconds", type=int, required=True)
    parser.add_argument("--max-chars", type=int, required=True)
    parser.add_argument("--max-processes", type=int, default=None)
    parser.add_argument("--max-file-mb", type=int, default=None)
    parser.add_argument("--run-as", default=None, help="UID:GID to drop to (started as root)")
    parser.add_argument(
        "--no-user-namespaces",
        action="store_true",
        help="refuse new user namespaces with a seccomp filter (x86_64)",
    )
    args = parser.parse_args(argv)

    _die_with_parent(args.parent_pid)
    _limit_resources(args.memory_mb, args.max_processes, args.max_file_mb)
    if args.run_as is not None:
        _drop_privileges(args.run_as)
    if args.no_user_namespaces:
        _forbid_user_namespaces()
    for fd in (args.request_fd, args.response_fd):
        os.set_inheritable(fd, False)  # child processes of the model's code must not hold them
    for stream in (sys.stdout, sys.stderr):
        # Safe: nothing has replaced them yet, and Python starts them as TextIOWrappers.
        text_stream = cast(io.TextIOWrapper, stream)
        text_stream.reconfigure(encoding="utf-8", errors="backslashreplace", line_buffering=True)
    sys.path.insert(0, os.getcwd())  # like a notebook: modules the model writes can be imported
    with (
        os.fdopen(args.request_fd, "rb") as requests,
        os.fdopen(args.response_fd, "wb") as responses,
    ):
        serve(requests, responses, Session(args.max_chars), args.cpu_seconds)


if __name__ == "__main__":
    main()
