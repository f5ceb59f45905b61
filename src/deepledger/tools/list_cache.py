"""The tool lists of stdio servers, kept between runs.

A run's first request needs every tool the model may use, and a server's list is known
only once the server has started (for deepledger's own servers, half a second each,
most of it importing the MCP SDK). With the list of the last run of the same server at
hand, the first request goes out at once and the server finishes starting meanwhile
(tools/task_tools.py: a call that comes before it is ready waits for it).

An entry is found by a key made of everything the list may depend on: the command (and
its file's size and modification time), the arguments (files among them, and the
module of ``-m``, by size and time too), the working directory, the server's fixed
variables, the *names* of the variables it copies from our environment (never their
values: those are API keys), PATH and HOME, and the versions of deepledger and of the
MCP SDK. A changed command line is a new key. An entry holds only the tools' names,
descriptions and schemas, written whole (a reader sees the old file or the new one) in
``tool_lists/`` under ``$DEEPLEDGER_CACHE_DIR`` (else ``~/.cache/deepledger``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeGuard

from deepledger.messages import JSONObject
from deepledger.paths import cache_root

if TYPE_CHECKING:
    from deepledger.config import ToolServerConfig

log = logging.getLogger(__name__)

FOLDER = "tool_lists"
FORMAT = 1  # of an entry; another number is a miss
# Fixed variables whose names say they hold a secret enter the key by name only.
_SECRET_NAME = re.compile(r"(api_?key|token|secret|password)", re.IGNORECASE)


def _file_stamp(path: str | None) -> list[Any] | None:
    """A file's size and modification time: it changes when the file is rewritten."""
    if not path:
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return [path, found.st_size, found.st_mtime_ns]


def _module_file(module: str) -> str | None:
    """Where ``python -m module`` finds its code, without running it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None else None


def _argument_stamps(args: list[str]) -> list[Any]:
    stamps = []
    for before, arg in zip(["", *args], args, strict=False):
        path = _module_file(arg) if before == "-m" else arg if os.path.isfile(arg) else None
        if stamp := _file_stamp(path):
            stamps.append(stamp)
    return stamps


@functools.cache
def _versions() -> dict[str, str]:
    from importlib import metadata

    from deepledger import __version__

    try:
        mcp = metadata.version("mcp")
    except metadata.PackageNotFoundError:
        mcp = "none"
    return {"deepledger": __version__, "mcp": mcp}


def server_key(command: str, args: list[str], cfg: ToolServerConfig) -> str:
    """The cache key of a stdio server started as ``command args`` with ``cfg``'s
    environment (tools.<name> entry), from this working directory."""
    fixed = {
        name: ("<set>" if _SECRET_NAME.search(name) else str(value))
        for name, value in cfg.env.items()
    }
    material = {
        "format": FORMAT,
        "command": _file_stamp(command) or command,
        "args": list(args),
        "files": _argument_stamps(list(args)),
        "cwd": os.getcwd(),
        "env": fixed,
        "env_from_set": sorted(n for n in cfg.env_from if n in os.environ),
        "path": os.environ.get("PATH", ""),
        "home": os.environ.get("HOME", ""),
        "versions": _versions(),
    }
    text = json.dumps(material, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ListedTool(TypedDict):
    """One tool of a server's list, as kept in an entry."""

    name: str
    description: str
    input_schema: JSONObject  # the server's JSON schema of the arguments


class ToolListCache:
    """Entries (a server's tools as name, description, input schema) in one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def default(cls) -> ToolListCache:
        return cls(cache_root() / FOLDER)

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def load(self, key: str) -> list[ListedTool] | None:
        """The tools stored under ``key``, or None (none stored, or unreadable)."""
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("tool list cache entry %s unreadable (%s); ignored", key, exc)
            return None
        if not isinstance(entry, dict) or entry.get("format") != FORMAT:
            return None
        tools = entry.get("tools")
        return tools if _well_formed(tools) else None

    def store(self, key: str, tools: list[ListedTool]) -> None:
        """Write the entry whole; a cache that cannot be written costs only speed."""
        text = json.dumps({"format": FORMAT, "tools": tools}, ensure_ascii=False, indent=1)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=f".{key}.", suffix=".tmp")
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as out:
                    out.write(text)
                os.replace(temporary, self._path(key))
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.warning("could not keep a tool list in %s: %s", self.folder, exc)

    def drop(self, key: str) -> None:
        with contextlib.suppress(OSError):
            self._path(key).unlink(missing_ok=True)


def _well_formed(tools: Any) -> TypeGuard[list[ListedTool]]:
    return isinstance(tools, list) and all(
        isinstance(t, dict)
        and isinstance(t.get("name"), str)
        and isinstance(t.get("description"), str)
        and isinstance(t.get("input_schema"), dict)
        for t in tools
    )
