"""The ``tool-python`` MCP server: MiroThinker's python tool, backed by our own sandbox.

Run as ``python -m deepledger.tools.servers.tool_python [--root DIR ...] [--file FILE ...]
[--download-dir DIR] [--timeout S] [--memory-mb N] [--max-output-chars N] [--max-processes N]
[--disk-mb N]
[--isolation auto|bwrap|unshare|none]``; it speaks MCP over stdio. MiroThinker's models were
trained on this server's name, tool names and argument names, so those match MiroThinker
1.7's E2B-backed server exactly; what the tools do runs here, in the sandbox of
``python_sandbox`` (see ``sandbox_isolation`` for exactly what is contained). Meant to be run
with ``scope: task``: one server per task, its sandboxes gone when the task ends.

Tools
-----
``create_sandbox(timeout=600)``
    Starts a sandbox (a persistent Python session with a work folder of its own, seen inside
    as ``/home/user``, and limits of its own: a cgroup and a quota disk where the machine
    allows) and returns its ``sandbox_id``. At most ``MAX_SANDBOXES`` per server.
    ``timeout`` is accepted for compatibility; a sandbox lasts until the server stops.
``run_python_code(code_block, sandbox_id)``
    Runs code in that sandbox's session, as ``python``'s ``run_python`` does.
``run_command(command, sandbox_id)``
    Runs ``/bin/sh -c command`` inside the same sandbox, with its work folder as cwd; the
    result carries ``[stdout]``, ``[stderr]`` and ``[exit code]``.
``upload_file_from_local_to_sandbox(sandbox_id, local_file_path, sandbox_file_path="/home/user")``
    Copies a local file into the sandbox: ``sandbox_file_path`` is a folder (the file keeps
    its name) unless it names a file with an extension. Local files are read only inside the
    ``--root`` folders (the benchmark's data folder) or as one of the ``--file`` files (an
    attachment): the real path is checked, so ``..`` and symlinks leading out are refused,
    and a file whose real path matches a secret-file rule (``.env*``, ``.git/``, keys;
    ``deepledger.secret_files``) is refused whatever the root, with the rule named
    (``confinement.Confinement``); relative paths start at the first root.
``download_file_from_sandbox_to_local(sandbox_id, sandbox_file_path, local_filename=None)``
    Copies a sandbox file into ``--download-dir`` (never elsewhere; the name is reduced to
    its last component and never overwrites an existing file), so other tools can read it.

Transfers are read and written by the sandbox's own worker, as the sandbox user and in the
sandbox's view of the filesystem, so a symlink the code planted can only reach what the
code could read anyway; at most 256 MiB each. An unknown ``sandbox_id``, a missing file, a
refused path and a timeout are error results (``is_error``) that say what to do, never crashes.
MiroThinker's ``download_file_from_internet_to_sandbox`` is not offered: sandboxes have no
network here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import posixpath
import secrets
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from deepledger.tools.servers._stdio import serve_stdio
from deepledger.tools.servers.confinement import Confinement, LocalFileRefused, existing_place
from deepledger.tools.servers.python_sandbox import (
    MAX_TRANSFER_BYTES,
    PythonSandbox,
    SandboxFileError,
    SandboxLimits,
    SandboxUnavailableError,
    add_limit_arguments,
    isolation_from,
    limits_from,
    render_result,
)
from deepledger.tools.servers.sandbox_isolation import Isolation, SandboxResourcesError

MAX_SANDBOXES = 8
SANDBOX_HOME = "/home/user"  # where MiroThinker's models expect their files


class ToolFailure(Exception):
    """A call the model can correct: the message becomes an error result."""


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)])


class SandboxPool:
    """The sandboxes of one server (one task), each with its own work folder and session."""

    def __init__(
        self,
        limits: SandboxLimits,
        isolation: Isolation,
        confinement: Confinement,
        download_dir: Path | None,
    ) -> None:
        self.limits = limits
        self.isolation = isolation
        self.confinement = confinement
        self.download_dir = download_dir
        self._sandboxes: dict[str, PythonSandbox] = {}
        self._creating = asyncio.Lock()

    async def create(self) -> str:
        async with self._creating:
            if len(self._sandboxes) >= MAX_SANDBOXES:
                raise ToolFailure(
                    f"This task already has {MAX_SANDBOXES} sandboxes, the most it may have; "
                    f"reuse one of them: {', '.join(self._sandboxes)}."
                )
            sandbox_id = f"sbx-{secrets.token_hex(6)}"
            try:  # its own work folder (on a quota disk where one can be made) and cgroup
                resources = await asyncio.to_thread(self.isolation.confine, None, SANDBOX_HOME)
            except SandboxResourcesError as exc:
                raise ToolFailure(f"The sandbox could not be started: {exc}") from exc
            sandbox = PythonSandbox(self.limits, resources)
            try:
                await sandbox.reset()  # starts its worker now, so a failure is reported here
            except BaseException as exc:  # whatever it was, its cgroup and disk go
                sandbox.kill()
                await asyncio.to_thread(resources.close)  # umount and waits block
                if isinstance(exc, SandboxUnavailableError):
                    raise ToolFailure(f"The sandbox could not be started: {exc}") from exc
                raise
            self._sandboxes[sandbox_id] = sandbox
            return sandbox_id

    def get(self, sandbox_id: str) -> PythonSandbox:
        sandbox = self._sandboxes.get(sandbox_id.strip())
        if sandbox is not None:
            return sandbox
        known = ", ".join(self._sandboxes) or "none yet"
        raise ToolFailure(
            f"There is no sandbox with sandbox_id {sandbox_id!r} (existing sandboxes: {known}). "
            "Call create_sandbox first and pass the sandbox_id it returns."
        )

    def inside_path(self, sandbox: PythonSandbox, path: str) -> str:
        """``path`` as the sandbox's worker must open it: relative paths start at its work
        folder; without bwrap, /home/user (which then does not exist) means that folder."""
        path = path.strip() or SANDBOX_HOME
        home = sandbox.workdir
        if home != SANDBOX_HOME and (path == SANDBOX_HOME or path.startswith(SANDBOX_HOME + "/")):
            path = home + path[len(SANDBOX_HOME) :]
        trailing = "/" if path.endswith("/") else ""
        return posixpath.normpath(posixpath.join(home, path)) + trailing

    def local_source(self, path_text: str) -> Path:
        """The real local file ``path_text`` names, if it may be uploaded."""
        if not self.confinement.places:
            raise ToolFailure("Local files cannot be uploaded: the server has no --root folder.")
        try:
            real = self.confinement.resolve(path_text)
        except LocalFileRefused as exc:
            raise ToolFailure(str(exc)) from exc
        if not real.is_file():
            raise ToolFailure(f"{path_text} is a folder, not a file.")
        return real

    def download_target(self, name: str) -> Path:
        """A new file in the download folder named after ``name``'s last component."""
        if self.download_dir is None:
            raise ToolFailure("Downloads are off: the server was started without --download-dir.")
        base = posixpath.basename(name.strip().rstrip("/")) or "downloaded_file"
        if base in (".", ".."):
            base = "downloaded_file"
        stem, suffix = os.path.splitext(base)
        for attempt in range(1000):
            target = self.download_dir / (base if attempt == 0 else f"{stem}-{attempt}{suffix}")
            if not target.exists():
                return target
        raise ToolFailure(f"Too many files named like {base} in the download folder.")

    async def aclose(self) -> None:
        for sandbox in self._sandboxes.values():
            await sandbox.aclose()
        await asyncio.to_thread(self.cleanup)  # umount and waiting for groups to empty block

    def kill(self) -> None:
        for sandbox in self._sandboxes.values():
            sandbox.kill()

    def cleanup(self) -> None:
        """Each sandbox's cgroup, disk and work folder go with it."""
        for sandbox in self._sandboxes.values():
            sandbox.resources.close()


async def upload(pool: SandboxPool, sandbox_id: str, local: str, dest: str) -> str:
    sandbox = pool.get(sandbox_id)
    source = pool.local_source(local)
    size = source.stat().st_size
    if size > MAX_TRANSFER_BYTES:
        raise ToolFailure(f"{local} is {size} bytes; at most {MAX_TRANSFER_BYTES} may be uploaded.")
    data = await asyncio.to_thread(source.read_bytes)
    try:
        path = await sandbox.write_file(pool.inside_path(sandbox, dest), source.name, data)
    except SandboxFileError as exc:
        raise ToolFailure(f"Upload failed: {exc}") from exc
    return f"File uploaded to {path} in sandbox {sandbox_id}."


async def download(pool: SandboxPool, sandbox_id: str, path: str, name: str | None) -> str:
    sandbox = pool.get(sandbox_id)
    if not path.strip():
        raise ToolFailure("sandbox_file_path is empty: name the sandbox file to download.")
    inside = pool.inside_path(sandbox, path)
    target = pool.download_target(name or inside)  # checked before the copy, not after
    try:
        data = await sandbox.read_file(inside)
    except SandboxFileError as exc:
        raise ToolFailure(f"Download failed: {exc}") from exc

    def write() -> None:
        # O_EXCL: never replace a file, not even one created since download_target looked.
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)

    await asyncio.to_thread(write)
    return f"File downloaded to {target} ({len(data)} bytes); other tools can read it there."


def _descriptions(pool: SandboxPool) -> dict[str, str]:
    limits = pool.limits
    summary = pool.isolation.summary
    home = f"Each sandbox's work folder is {SANDBOX_HOME} (its cwd and HOME)."
    if not pool.isolation.complete:
        home = f"Each sandbox's work folder (its cwd and HOME) stands in for {SANDBOX_HOME}."
    per_call = (
        f"Limits per call: {limits.timeout_seconds:g} s wall clock (on timeout the sandbox's "
        f"Python session restarts, files are kept); output sections are cut to "
        f"{limits.max_output_chars} characters. Memory, processes and disk are limited per "
        "sandbox, as below."
    )
    return {
        "create_sandbox": (
            "Create a Linux sandbox: a persistent Python session with a private work folder. "
            f"Returns its sandbox_id, which the other tools take. {home} Reuse a sandbox "
            f"rather than creating many (at most {MAX_SANDBOXES}); it lasts for this task "
            f"(timeout is accepted but not needed). {summary}"
        ),
        "run_python_code": (
            "Run Python code in a sandbox's persistent session: variables and imports persist "
            "between calls, and a final expression's value is shown. Returns [stdout], "
            f"[stderr], [value] and, on failure, [error] with the traceback. {per_call} "
            f"{home} {summary}"
        ),
        "run_command": (
            "Run a shell command (/bin/sh -c) in a sandbox, in its work folder. Returns "
            f"[stdout], [stderr] and [exit code]. {per_call} {home} {summary}"
        ),
        "upload_file_from_local_to_sandbox": (
            "Copy a local file (e.g. a task's attached file) into a sandbox. "
            "sandbox_file_path is the folder to put it in (default the work folder); it may "
            "also name the file. Returns the file's path in the sandbox. Local files can come "
            "only from the task's data folder or attachment; files that hold keys or "
            f"credentials (.env, .git, *.pem, id_rsa...) are refused. {summary}"
        ),
        "download_file_from_sandbox_to_local": (
            "Copy a file out of a sandbox to the local download folder, so that tools of "
            "other servers can read it; local_filename renames it. Returns the local path. "
            f"{summary}"
        ),
    }


_SandboxId = Annotated[str, Field(description="The sandbox_id that create_sandbox returned.")]


def build_server(pool: SandboxPool) -> MCPServer[Any]:
    @asynccontextmanager
    async def lifespan(_server: MCPServer[Any]) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await pool.aclose()

    server: MCPServer[Any] = MCPServer(
        name="tool-python",
        instructions="Linux sandboxes with persistent Python sessions for this task. "
        + pool.isolation.summary,
        lifespan=lifespan,
    )
    descriptions = _descriptions(pool)

    @server.tool(description=descriptions["create_sandbox"])
    async def create_sandbox(
        # The name is MiroThinker's (its models pass it), not an asyncio timeout.
        timeout: Annotated[  # noqa: ASYNC109
            int, Field(description="Accepted for compatibility; the sandbox lasts the task.")
        ] = 600,
    ) -> CallToolResult:
        try:
            sandbox_id = await pool.create()
        except ToolFailure as exc:
            return _error(str(exc))
        notice = pool.get(sandbox_id).take_notices()
        text = f"Sandbox created with sandbox_id: {sandbox_id}"
        return _text(f"[notice]\n{notice}\n\n{text}" if notice else text)

    @server.tool(description=descriptions["run_python_code"])
    async def run_python_code(
        code_block: Annotated[str, Field(description="Python source to run.")],
        sandbox_id: _SandboxId,
    ) -> CallToolResult:
        try:
            sandbox = pool.get(sandbox_id)
        except ToolFailure as exc:
            return _error(str(exc))
        result = await sandbox.run(code_block)
        return render_result(result, sandbox.take_notices())

    @server.tool(description=descriptions["run_command"])
    async def run_command(
        command: Annotated[str, Field(description="A shell command line.")],
        sandbox_id: _SandboxId,
    ) -> CallToolResult:
        try:
            sandbox = pool.get(sandbox_id)
        except ToolFailure as exc:
            return _error(str(exc))
        result = await sandbox.run_command(command)
        return render_result(result, sandbox.take_notices())

    @server.tool(description=descriptions["upload_file_from_local_to_sandbox"])
    async def upload_file_from_local_to_sandbox(
        sandbox_id: _SandboxId,
        local_file_path: Annotated[str, Field(description="The local file to copy in.")],
        sandbox_file_path: Annotated[
            str, Field(description="Folder (or file path) in the sandbox to copy it to.")
        ] = SANDBOX_HOME,
    ) -> CallToolResult:
        try:
            return _text(await upload(pool, sandbox_id, local_file_path, sandbox_file_path))
        except ToolFailure as exc:
            return _error(str(exc))

    @server.tool(description=descriptions["download_file_from_sandbox_to_local"])
    async def download_file_from_sandbox_to_local(
        sandbox_id: _SandboxId,
        sandbox_file_path: Annotated[str, Field(description="The sandbox file to copy out.")],
        local_filename: Annotated[
            str | None, Field(description="Name for the local copy; default: the same name.")
        ] = None,
    ) -> CallToolResult:
        try:
            return _text(await download(pool, sandbox_id, sandbox_file_path, local_filename))
        except ToolFailure as exc:
            return _error(str(exc))

    return server


def _parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, SandboxLimits]:
    parser = argparse.ArgumentParser(
        prog="python -m deepledger.tools.servers.tool_python",
        description="MCP server (stdio) named tool-python: MiroThinker's python tool names "
        "over deepledger's sandbox.",
    )
    add_limit_arguments(parser)
    parser.add_argument(
        "--root",
        type=Path,
        action="append",
        default=[],
        help="a folder local files may be uploaded from (repeatable; the first one is where "
        "relative paths start)",
    )
    parser.add_argument(
        "--file", type=Path, action="append", default=[], help="a single file that may be uploaded"
    )
    parser.add_argument(
        "--download-dir", type=Path, default=None, help="the folder downloads are written to"
    )
    args = parser.parse_args(argv)
    limits = limits_from(parser, args)
    try:
        args.confinement = Confinement(args.root, args.file)
        args.root = args.confinement.roots
        if args.download_dir is not None:
            args.download_dir.mkdir(parents=True, exist_ok=True)
            args.download_dir = existing_place(args.download_dir, folder=True)
    except OSError as exc:
        parser.error(str(exc))
    return args, limits


def main(argv: list[str] | None = None) -> None:
    args, limits = _parse_args(argv)
    pools: list[SandboxPool] = []  # empty until the probe is done

    def on_sigterm(_signum: int, _frame: object) -> None:
        # As in python_sandbox: a SIGTERM mid-call must not leave sandboxes or folders behind.
        # Set before the probe, which mounts a disk: one killed then is swept at next start.
        for made in pools:
            made.kill()
            made.cleanup()
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    isolation = isolation_from(args, limits, "tool_python")
    pool = SandboxPool(limits, isolation, args.confinement, args.download_dir)
    pools.append(pool)
    try:
        serve_stdio(build_server(pool))
    finally:
        pool.kill()
        pool.cleanup()


if __name__ == "__main__":
    main()
