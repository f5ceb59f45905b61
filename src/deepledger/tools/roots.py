"""Which local folders and files our file-serving tool servers are given: the reader's and
tool-python's ``--root`` and ``--file`` arguments, decided before the servers start.

The rule (docs/security.md, "Local files")
    A root folder that is the working directory, the home folder, or a folder above
    either (``benchmark.data.data_dir=.``, ``~``, ``/``) is *wide*: it holds what a user
    keeps beside their data (``.env``, ``.git``, other projects). A wide root is replaced
    by the run's attached files that lie inside it, each as a single ``--file``; a wide
    root with no attachment inside is dropped. ``web.allow_working_dir=true`` keeps wide
    roots whole. Either way the secret-file rules (``deepledger.secret_files``) refuse
    ``.env``, keys and the like inside any root.

    ``deepledger run task_file=PATH`` gives the reader and tool-python that one file
    (:func:`attach_file`), never its folder.

Only servers that run our own file-serving modules are changed; a third-party server's
``--root`` means whatever that server means by it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from deepledger.config import ToolServerConfig
from deepledger.paths import resolve_data_path

log = logging.getLogger(__name__)

FILE_SERVERS = ("deepledger.tools.servers.reader", "deepledger.tools.servers.tool_python")
ROOT_FLAG = "--root"
FILE_FLAG = "--file"


def serves_files(server: ToolServerConfig) -> bool:
    """Whether ``server`` runs one of our file-serving modules (``-m <module>``)."""
    return any(module in server.args for module in FILE_SERVERS)


def attach_file(servers: dict[str, ToolServerConfig], file: Path) -> None:
    """Let our file servers open ``file`` (resolved) and nothing beside it."""
    for server in servers.values():
        if serves_files(server):
            server.args.extend([FILE_FLAG, str(file.resolve())])


def is_wide(folder: Path) -> bool:
    """Whether ``folder`` (a real path) is the working directory or the home folder, or
    lies above one of them."""
    guarded = (Path.cwd().resolve(), Path.home().resolve())
    return any(place == folder or place.is_relative_to(folder) for place in guarded)


def narrow_wide_roots(
    servers: dict[str, ToolServerConfig],
    attachments: Callable[[], Iterable[str | Path]],
    allow_working_dir: bool,
) -> None:
    """Replace each wide ``--root`` of our file servers by the attachments inside it
    (the module docstring). ``attachments`` is called only when a wide root is found."""
    if allow_working_dir:
        return
    files: list[Path] | None = None
    for name, server in servers.items():
        if not serves_files(server):
            continue
        args, wide = _without_wide_roots(server.args)
        if not wide:
            continue
        if files is None:
            files = [Path(file).resolve() for file in attachments()]
        kept = sorted({str(f) for f in files if any(f.is_relative_to(root) for root in wide)})
        server.args = args + [arg for file in kept for arg in (FILE_FLAG, file)]
        log.warning(
            "tools.%s: %s holds the working directory or the home folder, so it is not "
            "opened whole: %s (web.allow_working_dir=true opens it, secret files excepted).",
            name,
            ", ".join(str(root) for root in wide),
            f"only its {len(kept)} attached file(s)" if kept else "no file of it",
        )


def _without_wide_roots(args: list[str]) -> tuple[list[str], list[Path]]:
    """``args`` without their wide ``--root DIR`` (or ``--root=DIR``) pairs, and those
    roots' real folders."""
    kept: list[str] = []
    wide: list[Path] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == ROOT_FLAG and index + 1 < len(args):
            value, step = args[index + 1], 2
        elif arg.startswith(ROOT_FLAG + "="):
            value, step = arg.split("=", 1)[1], 1
        else:
            kept.append(arg)
            index += 1
            continue
        folder = resolve_data_path(value).resolve()
        if is_wide(folder):
            wide.append(folder)
        else:
            kept.extend(args[index : index + step])
        index += step
    return kept, wide
