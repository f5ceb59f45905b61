"""The archive: tool results too long for the window, kept whole in the run directory.

A result longer than its server's ``max_result_chars`` is written to a file beside the
task's journal (``tasks/<id>/archive/attempt-A-retry-R/r<N>.txt``, next to the memory
notes), and the model gets its first ``preview_chars`` characters, the full size, and a
handle. It reads on with ``archive.read(handle, start, max_chars)``, a page at a time,
as it would read a long document — so a 2 MB page costs the window one preview, not a
cut-off wall of text, and nothing is lost.

``archive.read`` can always be called once something was archived (the preview says
how), even when the role does not list ``archive`` among its tools: that keeps the
system prompt, and with it the provider's prompt cache, the same whether or not a task
meets a long result. A role that lists ``archive`` also sees the tool described up
front. With the native protocol a tool must be declared to be called, so there an
unlisted archive is not used and long results are cut as before.

Each run of the loop has its own archive: a handle names a file in that folder only. Writes
are whole-file (temp file + rename), so a killed run leaves only whole results, and a
resumed retry numbers its results after the interrupted run's, so the interrupted
journal's ``archived`` paths stay true.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from pathlib import Path

from deepledger.messages import JSONObject, ToolResult
from deepledger.store.files import replace_whole
from deepledger.tools.types import LocalTool, ToolInfo, ToolRefusal

SERVER = ARCHIVE_TOOL = "archive"
MAX_ARCHIVED_CHARS = 20_000_000  # beyond this even the archive keeps only the head
MAX_PAGE_CHARS = 50_000
_HANDLE = re.compile(r"r\d{1,6}")

READ_SCHEMA = {
    "type": "object",
    "properties": {
        "handle": {"type": "string", "description": "The handle a preview named, e.g. 'r3'."},
        "start": {"type": "integer", "minimum": 0, "description": "Character to start at."},
        "max_chars": {"type": "integer", "minimum": 1, "description": "Most characters."},
    },
    "required": ["handle"],
}
READ_DESCRIPTION = (
    "Read a long tool result that was archived instead of shown whole, a page at a time. "
    "The preview of such a result names its handle and size; the answer starts with "
    "[chars a-b of n; next: start=b]."
)


class ResultArchive:
    """The archived results of one run of the loop, as files in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._count: int | None = None  # handles given so far, found on first use

    def store(self, text: str) -> tuple[str, Path]:
        """Write ``text`` under a new handle; return the handle and the file.

        Handles continue after those already in the folder (a resumed run's retry reuses
        its folder), so what an interrupted journal points at is never overwritten."""
        if self._count is None:
            taken = [int(p.stem[1:]) for p in self.folder.glob("r*.txt") if p.stem[1:].isdigit()]
            self._count = max(taken, default=0)
        self._count += 1
        handle = f"r{self._count}"
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{handle}.txt"
        # An OSError (a full disk) reaches the caller as is: it cuts the result instead.
        replace_whole(path, text[:MAX_ARCHIVED_CHARS])
        return handle, path

    def read(self, handle: str, start: int = 0, max_chars: int = 10_000) -> str:
        handle = handle.strip()
        path = self.folder / f"{handle}.txt"
        if not _HANDLE.fullmatch(handle) or not path.is_file():
            known = ", ".join(sorted(p.stem for p in self.folder.glob("r*.txt"))) or "none yet"
            raise ToolRefusal(f"no archived result {handle!r} (archived: {known}).")
        text = path.read_text(encoding="utf-8")
        if start >= len(text) > 0:
            raise ToolRefusal(f"start={start} is past the end: {handle} has {len(text)} chars.")
        end = min(len(text), start + max(1, min(max_chars, MAX_PAGE_CHARS)))
        tail = f"next: start={end}" if end < len(text) else "end of result"
        return f"[chars {start}-{end} of {len(text)}; {tail}]\n{text[start:end]}"

    def archived(self, result: ToolResult, preview_chars: int) -> ToolResult:
        """``result`` as the model sees it once archived: a preview and how to read on."""
        handle, path = self.store(result.content)
        total = len(result.content)
        preview = result.content[:preview_chars]
        note = (
            f"\n...[this result is {total} characters long; the first {len(preview)} are "
            f"shown. All of it is archived as handle {handle!r}: read on with archive.read "
            f'{{"handle": "{handle}", "start": {len(preview)}}}]'
        )
        return replace(result, content=preview + note, archived=str(path))


def archive_tools(archive: ResultArchive) -> list[LocalTool]:
    async def read(arguments: JSONObject) -> str:
        return await asyncio.to_thread(
            archive.read,
            str(arguments["handle"]),
            int(arguments.get("start", 0)),
            int(arguments.get("max_chars", 10_000)),
        )

    info = ToolInfo(SERVER, "read", READ_DESCRIPTION, READ_SCHEMA)
    # Its pages are the archive's own, at most MAX_PAGE_CHARS: never archived again.
    return [LocalTool(info, read, max_result_chars=0)]
