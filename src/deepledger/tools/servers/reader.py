"""An MCP server with one tool, ``read``: files, web pages and attachments, a page at a time.

Run it as ``python -m deepledger.tools.servers.reader --root DIR [--root DIR ...] [--file
FILE ...]`` (or set ``DEEPLEDGER_READER_ROOTS`` to folders separated by ``os.pathsep``;
``--root`` wins).

What it reads (see ``deepledger.web.convert`` for the details and limits)
    HTML as its main content in Markdown (links and tables kept; the whole page when
    the main content is too small to be it), PDF as its text layer with ``[page N]``
    markers, docx, xlsx, xls, pptx and epub as Markdown, zip archives member by member
    (at most 200 members and 50 MiB uncompressed), JSON pretty-printed, CSV, plain text
    and Markdown as they are; a folder as a list of its entries. Images (PNG, JPEG, GIF,
    WebP, up to 5 MiB) come back as an MCP image alongside a one-line note naming them,
    on the first page only. Other binary content and damaged files are refused.

Paging
    Every answer starts with a header such as ``[chars 0-10000 of 53211; next:
    start=10000]`` and holds at most ``max_chars`` characters (capped at 50,000), cut at
    a line or word break where one is near. Converted documents are kept for ten
    minutes (the eight most recent) so that paging through a URL does not download it again.

Confinement (``confinement.Confinement``)
    Local reads are limited to the root folders (``--root``) and single files (``--file``:
    that file and nothing beside it, as ``deepledger run task_file=...`` attaches one): a
    path is resolved to its real location (``..`` collapsed, symlinks followed) and
    refused unless that lies inside a root or is one of the files. Whatever the root, a
    file whose real path matches a secret-file rule (``.env*``, ``.git/``, ``*.pem``...;
    ``deepledger.secret_files``) is refused with the rule named, and a folder listing
    leaves such entries out. Relative paths are taken from the first root. Without roots
    or files, only URLs can be read. Files over 10 MiB are refused.

URLs
    ``http(s)://`` URLs are fetched through ``deepledger.web``: loopback, private,
    link-local, CGNAT, multicast, reserved and cloud-metadata addresses are refused (every
    redirect too, at most 10, and again at connect time against DNS rebinding) unless
    ``DEEPLEDGER_ALLOW_PRIVATE_NETWORKS=1`` (the config key
    ``web.allow_private_networks``); 20 s per network operation, 60 s per fetch; bodies
    are capped at 10 MiB while they stream (text is cut there with a note, other
    content refused). ``corpus://<doc_id>`` links (from the local search backend) open a
    document of the local search corpus. Refused addresses, HTTP errors, timeouts and
    refused connections are tool errors the model sees, like a missing file or a path
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
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent, TextContent
from pydantic import Field

from deepledger.secret_files import SecretFiles
from deepledger.tools.servers._failures import causes_reported
from deepledger.tools.servers._stdio import serve_stdio
from deepledger.tools.servers.confinement import Confinement, LocalFileRefused
from deepledger.web.convert import ContentError, ConvertLimits, Document, convert_async
from deepledger.web.fetch import FetchError, FetchLimits
from deepledger.web.pages import read_url

ROOTS_ENV = "DEEPLEDGER_READER_ROOTS"
URL_SCHEMES = frozenset({"http", "https", "corpus"})
Content = TextContent | ImageContent


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """How much the reader may fetch and return, in one place."""

    max_bytes: int = 10 * 1024 * 1024  # per file or download
    timeout_seconds: float = 20.0  # per HTTP operation (connect, each read)
    total_seconds: float = 60.0  # per fetch, redirects included
    max_redirects: int = 10
    max_page_chars: int = 50_000  # the most one call returns, whatever max_chars says
    cache_entries: int = 8  # converted documents kept for paging
    cache_seconds: float = 600.0

    def fetch_limits(self) -> FetchLimits:
        """The same limits, as ``deepledger.web.fetch`` takes them."""
        return FetchLimits(
            max_bytes=self.max_bytes,
            timeout_seconds=self.timeout_seconds,
            total_seconds=self.total_seconds,
            max_redirects=self.max_redirects,
        )


class _DocumentCache:
    """A small LRU of converted documents, so paging needs no new download or conversion."""

    def __init__(self, entries: int, seconds: float) -> None:
        self._entries = entries
        self._seconds = seconds
        self._items: OrderedDict[object, tuple[float, Document]] = OrderedDict()

    def get(self, key: object) -> Document | None:
        """The cached document for ``key`` if it is still fresh."""
        item = self._items.get(key)
        if item is None or item[0] < time.monotonic():
            self._items.pop(key, None)
            return None
        self._items.move_to_end(key)
        return item[1]

    def put(self, key: object, document: Document) -> None:
        """Remember ``document``, forgetting the least recently used entry when full."""
        self._items[key] = (time.monotonic() + self._seconds, document)
        self._items.move_to_end(key)
        while len(self._items) > self._entries:
            self._items.popitem(last=False)


class Reader:
    """Reads sources as text (and images) within the roots and limits it was given."""

    def __init__(
        self,
        roots: Sequence[Path],
        limits: ReadLimits | None = None,
        files: Sequence[Path] = (),
        secrets: SecretFiles | None = None,
    ) -> None:
        self.confinement = Confinement(roots, files, secrets, who="this reader may open")
        self.roots = self.confinement.roots
        self.limits = limits or ReadLimits()
        self._cache = _DocumentCache(self.limits.cache_entries, self.limits.cache_seconds)

    async def read(self, source: str, start: int, max_chars: int) -> list[Content]:
        """One page of ``source`` under its paging header; images follow on the first page."""
        source = source.strip()
        scheme = urlsplit(source).scheme.lower()
        if scheme in URL_SCHEMES:
            document = await self._url_document(source)
        elif scheme == "file":
            document = await self._local_document(url2pathname(urlsplit(source).path), source)
        elif len(scheme) > 1:  # one letter is a Windows drive, not a scheme
            raise ToolError(
                f"Cannot read {scheme}: URLs; give an http(s) or corpus:// URL or a file path."
            )
        else:
            document = await self._local_document(source, source)
        size = max(1, min(max_chars, self.limits.max_page_chars))
        start = max(0, start)
        blocks: list[Content] = [TextContent(type="text", text=page(document.text, start, size))]
        if start == 0:
            blocks += [
                ImageContent(type="image", data=image.data, mime_type=image.mime_type)
                for image in document.images
            ]
        return blocks

    async def _url_document(self, url: str) -> Document:
        """The document a URL names, downloaded unless a fresh copy is cached."""
        if (cached := self._cache.get(url)) is not None:
            return cached
        try:
            document = await read_url(url, limits=self.limits.fetch_limits())
        except (FetchError, ContentError) as exc:
            raise ToolError(str(exc)) from exc
        document = _with_notes(document)
        self._cache.put(url, document)
        return document

    async def _local_document(self, path_text: str, source: str) -> Document:
        """The document of a file (or the listing of a folder) inside the roots."""
        path = await anyio.to_thread.run_sync(self.resolve_local, path_text, source)
        try:
            info = await anyio.Path(path).stat()
            if stat.S_ISDIR(info.st_mode):
                listing = await anyio.to_thread.run_sync(self._listing, path)
                return Document(listing, kind="folder")
            key = (str(path), info.st_mtime_ns, info.st_size)
            if (cached := self._cache.get(key)) is not None:
                return cached
            if info.st_size > self.limits.max_bytes:
                limit = _mib(self.limits.max_bytes)
                raise ToolError(f"{source} is {_mib(info.st_size)}; the limit is {limit}.")
            data = await anyio.Path(path).read_bytes()
        except OSError as exc:  # unreadable (permissions, a vanished file): the model should know
            raise ToolError(f"Cannot read {source}: {exc.strerror or exc}") from exc
        try:
            document = await convert_async(
                data, name=path.name, source=source, limits=ConvertLimits()
            )
        except ContentError as exc:
            raise ToolError(f"{source}: {exc}") from exc
        self._cache.put(key, document)
        return document

    def resolve_local(self, path_text: str, source: str) -> Path:
        """The real path ``path_text`` names, if the reader may open it and it exists.

        Resolving first (``..`` and symlinks included) means the check is about where the
        bytes really are, not how the path is spelled.
        """
        if not self.confinement.places:
            raise ToolError("Local files cannot be read: the reader was started without --root.")
        try:
            return self.confinement.resolve(path_text)
        except LocalFileRefused as exc:
            raise ToolError(str(exc).replace(path_text, source, 1)) from exc

    def _listing(self, folder: Path) -> str:
        """A folder's entries, one a line, folders marked with a trailing slash; entries
        a secret-file rule refuses are left out (and counted, so the model stops looking)."""
        entries = sorted(folder.iterdir(), key=lambda entry: entry.name)
        shown = [entry for entry in entries if not self.confinement.hidden(entry)]
        lines = [f"{entry.name}/" if entry.is_dir() else entry.name for entry in shown]
        hidden = len(entries) - len(shown)
        note = f"; {hidden} left out by the secret-file rules" if hidden else ""
        return f"Folder {folder} ({len(lines)} entries{note}):\n" + "\n".join(lines) + "\n"


def _with_notes(document: Document) -> Document:
    """A fetched document whose notes the model should see (a cut body) carried in its text."""
    cut = [note for note in document.notes if note.startswith("only the first")]
    if not cut:
        return document
    return Document(
        document.text.rstrip("\n") + f"\n\n[{cut[0]}]\n",
        title=document.title,
        images=document.images,
        kind=document.kind,
        notes=document.notes,
    )


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
    roots = ", ".join(str(place) for place in reader.confinement.places) or "none (URLs only)"
    server = MCPServer("deepledger-reader", instructions=f"Reads URLs and local files ({roots}).")
    description = (
        "Read a web page (http/https URL), a corpus:// link or a local file as text, one "
        "page at a time. Handles HTML, PDF, Word, Excel, PowerPoint, zip, plain text, "
        "Markdown, JSON and CSV; images come back as images; a folder gives its entries. "
        f"Local files must lie inside: {roots}; relative paths start at the first; files "
        "that hold keys or credentials (.env, .git, *.pem, id_rsa...) are refused. "
        "The answer starts with a header like [chars 0-10000 of 53211; next: start=10000]: "
        "call again with that start to read on."
    )

    @server.tool(name="read", description=description, structured_output=False)
    async def read(
        source: Annotated[str, Field(description="An http(s) or corpus:// URL, or a file path.")],
        start: Annotated[int, Field(description="Character offset to start at.")] = 0,
        max_chars: Annotated[int, Field(description="Most characters to return.")] = 10_000,
    ) -> list[Content]:
        with causes_reported("read"):
            return await reader.read(source, start, max_chars)

    return server


def main(argv: list[str] | None = None) -> None:
    """Resolve the roots, then serve over stdio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", action="append", type=Path, help="a folder files may come from")
    parser.add_argument(
        "--file", action="append", type=Path, default=[], help="a single file that may be read"
    )
    args = parser.parse_args(argv)
    from_env = [Path(part) for part in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if part]
    try:
        reader = Reader(args.root or from_env, files=args.file)
    except OSError as exc:
        parser.exit(2, f"deepledger reader: a root folder cannot be used: {exc}\n")
    serve_stdio(build_server(reader))


if __name__ == "__main__":
    main()
