"""Turning fetched or stored bytes into text a model can read.

The reader server decides *what* to read and from where; this module only decides what
kind of content some bytes are (from a file name, a Content-Type, or the bytes
themselves) and converts them: HTML to readable text with headings and paragraph breaks,
PDF to its text layer page by page, JSON pretty-printed, CSV and other text as is.
Everything else (images, archives, office files) is refused with ``ContentError``.

Limits: HTML conversion keeps text, headings, list items and table cells, and drops
links' targets, images and forms; PDF conversion gets only a text layer (a scanned PDF
has none) and loses columns and tables.
"""

from __future__ import annotations

import codecs
import io
import json
import re
from html.parser import HTMLParser
from typing import Literal

Kind = Literal["text", "html", "pdf", "json", "csv"]

_SUFFIX_KINDS: dict[str, Kind] = {
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".pdf": "pdf",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "csv",
}
_SNIFF_BYTES = 8192


class ContentError(ValueError):
    """The bytes are of a kind we do not read, or are damaged; the message says which."""


def detect_kind(name: str, content_type: str | None, data: bytes) -> Kind:
    """What ``data`` is: a server's Content-Type first, then the name's suffix, then the bytes.

    A generic Content-Type (octet-stream, or none) says nothing, so the suffix decides;
    with neither, the first bytes do. Bytes with NUL in them are binary and refused.
    """
    kind = _kind_from_content_type(content_type) or _kind_from_name(name) or _sniff(data)
    if kind == "text" and b"\0" in data[:_SNIFF_BYTES]:
        label = content_type or name or "this content"
        raise ContentError(f"{label} looks binary; only text, HTML, PDF, JSON and CSV are read.")
    return kind


def _kind_from_content_type(content_type: str | None) -> Kind | None:
    """The kind a Content-Type names, or None when it is missing or generic."""
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if mime in {"text/html", "application/xhtml+xml"}:
        return "html"
    if mime == "application/pdf":
        return "pdf"
    if mime == "application/json" or mime.endswith("+json"):
        return "json"
    if mime in {"text/csv", "text/tab-separated-values"}:
        return "csv"
    if mime.startswith("text/") or mime in {"application/xml", "application/javascript"}:
        return "text"
    if not mime or mime in {"application/octet-stream", "binary/octet-stream"}:
        return None
    raise ContentError(f"Content of type {mime} is not supported (text, HTML, PDF, JSON, CSV are).")


def _kind_from_name(name: str) -> Kind | None:
    """The kind a file name's suffix names, or None for other suffixes."""
    match = re.search(r"\.[A-Za-z0-9]+$", name)
    return _SUFFIX_KINDS.get(match.group(0).lower()) if match else None


def _sniff(data: bytes) -> Kind:
    """The kind the first bytes suggest; plain text when nothing else fits."""
    head = data[:_SNIFF_BYTES].lstrip().lower()
    if head.startswith(b"%pdf-"):
        return "pdf"
    if head.startswith((b"<!doctype html", b"<html")):
        return "html"
    return "text"


def to_text(data: bytes, kind: Kind, charset: str | None = None) -> str:
    """``data`` of ``kind`` as readable text."""
    if kind == "pdf":
        return pdf_to_text(data)
    text = decode(data, charset)
    if kind == "html":
        return html_to_text(text)
    if kind == "json":
        return json_to_text(text)
    return text


def decode(data: bytes, charset: str | None = None) -> str:
    """Bytes to str: a UTF-8 byte-order mark wins, then the declared charset, then UTF-8.

    Undecodable bytes become U+FFFD rather than failing: a page with one bad byte is
    still worth reading.
    """
    if data.startswith(codecs.BOM_UTF8):
        return data.decode("utf-8-sig", errors="replace")
    try:
        return data.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset name Python does not know
        return data.decode("utf-8", errors="replace")


def json_to_text(text: str) -> str:
    """JSON indented for reading; text that does not parse is returned as it is, with a note."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except json.JSONDecodeError as exc:
        return f"(not valid JSON: {exc}; shown as is)\n{text}"


def pdf_to_text(data: bytes) -> str:
    """The text layer of a PDF, each page under a ``[page N]`` line so it can be cited."""
    from pypdf import PdfReader  # imported here: only PDF reads pay for loading pypdf

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            reader.decrypt("")
        pages = [page.extract_text() or "" for page in reader.pages]
    # pypdf raises many exception types on damaged files, not only PyPdfError; any of
    # them means "this PDF cannot be read", which the model should be told.
    except Exception as exc:
        raise ContentError(f"Could not read the PDF: {exc}") from exc
    if not any(page.strip() for page in pages):
        raise ContentError(
            f"The PDF has {len(pages)} page(s) but no text layer (perhaps scanned images)."
        )
    return "\n\n".join(f"[page {number}]\n{page.strip()}" for number, page in enumerate(pages, 1))


_SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "svg", "iframe", "canvas"})
_BLOCK_TAGS = frozenset(
    {
        "address", "article", "aside", "blockquote", "dd", "details", "div", "dl", "dt",
        "figcaption", "figure", "footer", "form", "header", "hr", "main", "nav", "ol", "p",
        "pre", "section", "summary", "table", "ul", "title",
    }
)  # fmt: skip
_HEADINGS = {f"h{level}": level for level in range(1, 7)}


class _ReadableHTML(HTMLParser):
    """Collects the visible text of an HTML page, marking block boundaries with newlines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0  # depth inside script/style and the like
        self._in_pre = 0
        self._first_cell = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED_TAGS:
            self._skipping += 1
        elif tag in _HEADINGS:
            self._break(2)
            self.parts.append("#" * _HEADINGS[tag] + " ")
        elif tag == "li":
            self._break(1)
            self.parts.append("- ")
        elif tag == "tr":
            self._break(1)
            self._first_cell = True
        elif tag == "br":
            self._break(1, force=True)
        elif tag in {"td", "th"}:
            self.parts.append("" if self._first_cell else " | ")
            self._first_cell = False
        elif tag in _BLOCK_TAGS:
            self._break(2)
        if tag == "pre":
            self._in_pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_TAGS:
            self._skipping = max(0, self._skipping - 1)
        elif tag in _HEADINGS or tag in _BLOCK_TAGS:
            self._break(2)
        if tag == "pre":
            self._in_pre = max(0, self._in_pre - 1)

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        if not self._in_pre:
            data = re.sub(r"\s+", " ", data)
            if not self.parts or self.parts[-1].endswith(("\n", " ")):
                data = data.lstrip()
        if data:
            self.parts.append(data)

    def _break(self, newlines: int, force: bool = False) -> None:
        """End the current line; ``newlines=2`` leaves a blank line, as between paragraphs."""
        if self._skipping or (not force and not self.parts):
            return
        self.parts.append("\n" * newlines)


def html_to_text(html: str) -> str:
    """The readable text of an HTML page: scripts and styles dropped, headings as ``#``
    lines, list items as ``-`` lines, table cells joined by ``|``, one blank line between
    blocks."""
    parser = _ReadableHTML()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip() + "\n"
