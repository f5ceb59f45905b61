"""The ``memory`` tool: notes an agent keeps outside its context window.

Offered when a role lists ``memory`` in its tools (``agent.main_agent.tools=[...,
memory]``). Three calls: ``write`` (a note under a name, replacing one of that name),
``read`` (one note), ``list`` (every name, with each note's size). Notes are files in
the run directory, one folder per task attempt (its format-retries share it; pass@k
attempts do not, so they stay independent), so they survive whatever trimming or
compaction does to the request, and a crashed run leaves them readable. After a
compaction the notes' index is part of the compacted request
(``context/strategies/compaction.py``).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from deepledger.messages import JSONObject
from deepledger.store.files import write_text_atomic
from deepledger.tools.types import LocalTool, ToolRefusal

# The notes' folder is the run store's to name (``Journal.memory_folder``).

SERVER = MEMORY_TOOL = "memory"  # the name a role lists in its tools
MAX_NOTE_CHARS = 20_000
_NAME = re.compile(r"[\w .-]{1,80}")

_NAME_SCHEMA = {"type": "string", "description": "A short name, e.g. 'population figures'."}
SCHEMAS = {
    "write": {
        "type": "object",
        "properties": {
            "name": _NAME_SCHEMA,
            "text": {"type": "string", "description": "The note; replaces one of that name."},
        },
        "required": ["name", "text"],
    },
    "read": {"type": "object", "properties": {"name": _NAME_SCHEMA}, "required": ["name"]},
    "list": {"type": "object", "properties": {}},
}
DESCRIPTIONS = {
    "write": "Save a note under a name (facts found, sources, plans). Notes stay available "
    "even when old steps leave your context.",
    "read": "Read the note saved under a name.",
    "list": "List the names of your saved notes.",
}


class MemoryStore:
    """The notes of one task attempt, as files in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def names(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        return sorted(p.stem for p in self.folder.glob("*.md"))

    def write(self, name: str, text: str) -> str:

        path = self._path(name)
        if len(text) > MAX_NOTE_CHARS:
            raise ToolRefusal(
                f"the note is {len(text)} characters; keep it under {MAX_NOTE_CHARS}."
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)  # a crash never leaves half a note
        return f"Saved note {name!r} ({len(text)} characters)."

    def read(self, name: str) -> str:

        path = self._path(name)
        if not path.is_file():
            known = ", ".join(self.names()) or "none yet"
            raise ToolRefusal(f"no note named {name!r} (notes: {known}).")
        return path.read_text(encoding="utf-8")

    def listing(self) -> str:
        names = self.names()
        if not names:
            return "No notes yet."
        sizes = [(n, len(self._path(n).read_text(encoding="utf-8"))) for n in names]
        return "\n".join(f"- {n} ({size} characters)" for n, size in sizes)

    def _path(self, name: str) -> Path:

        name = name.strip()
        if not _NAME.fullmatch(name) or name.startswith("."):
            raise ToolRefusal(
                f"{name!r} is not a note name: use up to 80 letters, digits, spaces, '.', "
                "'-' or '_'."
            )
        return self.folder / f"{name}.md"


def memory_tools(store: MemoryStore) -> list[LocalTool]:
    from deepledger.tools.types import LocalTool, ToolInfo

    async def write(arguments: JSONObject) -> str:
        return await asyncio.to_thread(store.write, arguments["name"], arguments["text"])

    async def read(arguments: JSONObject) -> str:
        return await asyncio.to_thread(store.read, arguments["name"])

    async def listing(arguments: JSONObject) -> str:
        return await asyncio.to_thread(store.listing)

    return [
        LocalTool(ToolInfo(SERVER, name, DESCRIPTIONS[name], SCHEMAS[name]), run)
        for name, run in (("write", write), ("read", read), ("list", listing))
    ]
