"""An MCP server with one tool, ``read``: a local file or an http(s) URL, as text, a page at a time.

Run it as ``python -m deepledger.tools.servers.reader --root DIR [--root DIR ...]`` (or set
``DEEPLEDGER_READER_ROOTS`` to folders separated by ``os.pathsep``; ``--root`` wins).

What it reads
    Plain text and Markdown as they are, HTML as readable text (scripts and styles
    dropped, headings and paragraph breaks kept), PDF as its text layer with ``[page N]``
    markers, JSON pretty-printed, CSV as it is; a folder as a list of its entries.
    Images, archives and other binary content are refused. See ``_text`` for details.

Paging
    Every answer starts with a header such as ``[chars 0-10000 of 53211; next:
    start=10000]`` and holds at most ``max_chars`` characters (capped at 50,000), cut at
    a line or word break where one is near. Converted text is kept for a few minutes so
    that paging through a URL does not download it again.

Confinement
    Local reads are limited to the root folders: a path is resolved to its real location
    (``..`` collapsed, symlinks followed) and refused unless that lies inside a root.
    Relative paths are taken from the first root. Without roots, only URLs can be read.
    The check happens before the file is opened, so it guards against a model's mistakes,
    not against someone swapping in symlinks at the same moment.

URLs
    Fetched with httpx, following redirects, within a timeout (20 s) and a size cap
    (10 MiB). Any address is fetched, loopback and private ones too. HTTP errors, timeouts
    and refused connections are tool errors the model sees, like a missing file or a path
    outside the roots.
"""

from __future__ import annotations

import argparse
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit
from urllib.request import url2pathname

import anyio
import anyio.to_thread
import httpx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from deepledger.tools.servers._stdio import serve_stdio
from deepledger.tools.servers._text import ContentError, Kind, detect_kind, to_text

ROOTS_ENV = "DEEPLEDGER_READER_ROOTS"
USER_AGENT = "deepledger-reader/0.1 (+https://pypi.org/project/deepledger/)"


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """How much the reader may fetch and return, in one place."""

    max_bytes: int = 10 * 1024 * 1024  # per file or download
    timeout_seconds: float = 20.0  # per HTTP operation (connect, each read)
    max_page_chars: int = 50_000  # the most one call returns, whatever max_chars says
    cache_entries: int = 8  # converted documents kept for paging
    cache_seconds: float = 600.0


@dataclass(frozen=True, slots=True)
class _Content:
    """Bytes as read, with what is known about their type."""

    data: bytes
    name: str  # a file name or URL path, for its suffix
    content_type: str | None = None
    charset: str | None = None


class _TextCache:
    """A small LRU of converted documents, so paging needs no new download or conversion."""

    def __init__(self, entries: int, seconds: float) -> None:
        self._entries = entries
        self._seconds = seconds
        self._items: OrderedDict[object, tuple[float, str]] = OrderedDict()

    def get(self, key: object) -> str | None:
        """The cached text for ``key`` if it is still fresh."""
        item = self._items.get(key)
        if item is None or item[0] < time.monotonic():
            self._items.pop(key, None)
            return None
        self._items.move_to_end(key)
        return item[1]

    def put(self, key: object, text: str) -> None:
        """Remember ``text``, forgetting the least recently used entry when full."""
        self._items[key] = (time.monotonic() + self._seconds, text)
        self._items.move_to_end(key)
        while len(self._items) > self._entries:
            self._items.popitem(last=False)


class Reader:
    """Reads sources as text within the roots and limits it was given."""

    def __init__(self, roots: Sequence[Path], limits: ReadLimits | None = None) -> None:
        self.roots = [_resolve_root(root) for root in roots]
        self.limits = limits or ReadLimits()
        self._cache = _TextCache(self.limits.cache_entries, self.limits.cache_seconds)

    async def read(self, source: str, start: int, max_chars: int) -> str:
        """One page of ``source`` as text, under its paging header."""
        source = source.strip()
        scheme = urlsplit(source).scheme.lower()
        if scheme in {"http", "https"}:
            text = await self._url_text(source)
        elif scheme == "file":
            text = await self._local_text(url2pathname(urlsplit(source).path), source)
        elif len(scheme) > 1:  # one letter is a Windows drive, not a scheme
            raise ToolError(f"Cannot read {scheme}: URLs; give an http(s) URL or a file path.")
        else:
            text = await self._local_text(source, source)
        size = max(1, min(max_chars, self.limits.max_page_chars))
        return page(text, max(0, start), size)

    async def _url_text(self, url: str) -> str:
        """The text of a URL, downloaded unless a fresh copy is cached."""
        if (cached := self._cache.get(url)) is not None:
            return cached
        text = await _convert(await fetch(url, self.limits))
        self._cache.put(url, text)
        return text

    async def _local_text(self, path_text: str, source: str) -> str:
        """The text of a file (or the listing of a folder) inside the roots."""
        path = await anyio.to_thread.run_sync(self.resolve_local, path_text, source)
        try:
            info = await anyio.Path(path).stat()
            if stat.S_ISDIR(info.st_mode):
                return await anyio.to_thread.run_sync(_listing, path)
            key = (str(path), info.st_mtime_ns, info.st_size)
            if (cached := self._cache.get(key)) is not None:
                return cached
            if info.st_size > self.limits.max_bytes:
                limit = _mib(self.limits.max_bytes)
                raise ToolError(f"{source} is {_mib(info.st_size)}; the limit is {limit}.")
            data = await anyio.Path(path).read_bytes()
        except OSError as exc:  # unreadable (permissions, a vanished file): the model should know
            raise ToolError(f"Cannot read {source}: {exc.strerror or exc}") from exc
        text = await _convert(_Content(data, path.name))
        self._cache.put(key, text)
        return text

    def resolve_local(self, path_text: str, source: str) -> Path:
        """The real path ``path_text`` names, if it lies inside a root and exists.

        Resolving first (``..`` and symlinks included) means the check is about where the
        bytes really are, not how the path is spelled.
        """
        if not self.roots:
            raise ToolError("Local files cannot be read: the reader was started without --root.")
        candidate = Path(path_text)
        if not candidate.is_absolute():
            candidate = self.roots[0] / candidate
        try:
            real = candidate.resolve()
        except RuntimeError as exc:  # Python 3.11 raises this for a symlink loop
            raise ToolError(f"Cannot resolve {source}: {exc}") from exc
        if not any(real.is_relative_to(root) for root in self.roots):
            allowed = ", ".join(str(root) for root in self.roots)
            raise ToolError(f"{source} is outside the folders this reader may open ({allowed}).")
        if not real.exists():
            raise ToolError(f"No such file: {source} (relative paths start at {self.roots[0]}).")
        return real


def _resolve_root(root: Path) -> Path:
    """A root as the real folder it names; a missing folder or a file is a startup error."""
    real = root.expanduser().resolve(strict=True)
    if not real.is_dir():
        raise NotADirectoryError(f"{root} is not a folder")
    return real


async def fetch(url: str, limits: ReadLimits) -> _Content:
    """GET ``url`` within the limits; every failure is a ``ToolError`` naming its cause."""
    headers = {"User-Agent": USER_AGENT}
    timeout = httpx.Timeout(limits.timeout_seconds)
    try:
        async with (
            httpx.AsyncClient(timeout=timeout, follow_redirects=True, headers=headers) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code >= 400:
                raise ToolError(f"HTTP {response.status_code} {response.reason_phrase} for {url}")
            body = await _read_capped(response, limits.max_bytes, url)
            return _Content(
                body,
                response.url.path,
                response.headers.get("content-type"),
                response.charset_encoding,
            )
    except httpx.TimeoutException as exc:
        raise ToolError(f"Timed out after {limits.timeout_seconds:g} s fetching {url}") from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise ToolError(f"Could not fetch {url}: {exc or type(exc).__name__}") from exc


async def _read_capped(response: httpx.Response, max_bytes: int, url: str) -> bytes:
    """The response body, refused as soon as it passes ``max_bytes`` (not after downloading)."""
    too_big = f"{url} is larger than the reader's limit of {_mib(max_bytes)}."
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise ToolError(too_big)
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise ToolError(too_big)
    return bytes(body)


async def _convert(content: _Content) -> str:
    """Bytes to text on a worker thread (PDF parsing can take a while and must not block)."""
    try:
        kind: Kind = detect_kind(content.name, content.content_type, content.data)
        return await anyio.to_thread.run_sync(to_text, content.data, kind, content.charset)
    except ContentError as exc:
        raise ToolError(str(exc)) from exc


def _listing(folder: Path) -> str:
    """A folder's entries, one a line, folders marked with a trailing slash."""
    entries = sorted(folder.iterdir(), key=lambda entry: entry.name)
    lines = [f"{entry.name}/" if entry.is_dir() else entry.name for entry in entries]
    return f"Folder {folder} ({len(lines)} entries):\n" + "\n".join(lines) + "\n"


def page(text: str, start: int, max_chars: int) -> str:
    """``text[start:end]`` under a header saying where it is and where the next page starts."""
    total = len(text)
    if total == 0:
        return "[chars 0-0 of 0; the document is empty]\n"
    if start >= total:
        raise ToolError(f"start={start} is past the end: the document has {total} chars.")
    end = _page_end(text, start, max_chars)
    tail = f"next: start={end}" if end < total else "end of document"
    return f"[chars {start}-{end} of {total}; {tail}]\n{text[start:end]}"


def _page_end(text: str, start: int, max_chars: int) -> int:
    """Where a page ends: at the last line break, else space, in its final tenth, else hard."""
    end = min(start + max_chars, len(text))
    if end == len(text):
        return end
    floor = end - max_chars // 10
    for separator in ("\n", " "):
        cut = text.rfind(separator, floor, end)
        if cut > start:
            return cut + 1
    return end


def _mib(size: int) -> str:
    """A byte count for people."""
    return f"{size / (1024 * 1024):.1f} MiB"


def build_server(reader: Reader) -> MCPServer:
    """The MCP server exposing ``read``; its description names the roots so the model knows."""
    roots = ", ".join(str(root) for root in reader.roots) or "none (URLs only)"
    server = MCPServer("deepledger-reader", instructions=f"Reads URLs and local files ({roots}).")
    description = (
        "Read a web page (http/https URL) or a local file as text, one page at a time. "
        "Handles HTML, PDF, plain text, Markdown, JSON and CSV; a folder gives its entries. "
        f"Local files must lie inside: {roots}; relative paths start at the first. "
        "The answer starts with a header like [chars 0-10000 of 53211; next: start=10000]: "
        "call again with that start to read on."
    )

    @server.tool(name="read", description=description, structured_output=False)
    async def read(
        source: Annotated[str, Field(description="An http(s) URL or a file path.")],
        start: Annotated[int, Field(description="Character offset to start at.")] = 0,
        max_chars: Annotated[int, Field(description="Most characters to return.")] = 10_000,
    ) -> str:
        return await reader.read(source, start, max_chars)

    return server


def main(argv: list[str] | None = None) -> None:
    """Resolve the roots, then serve over stdio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", action="append", type=Path, help="a folder files may come from")
    args = parser.parse_args(argv)
    from_env = [Path(part) for part in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if part]
    try:
        reader = Reader(args.root or from_env)
    except OSError as exc:
        parser.exit(2, f"deepledger reader: a root folder cannot be used: {exc}\n")
    serve_stdio(build_server(reader))


if __name__ == "__main__":
    main()
