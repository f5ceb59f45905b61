"""Bytes of any kind a research agent meets, turned into a ``Document`` a model can read.

What is read, and how:

- **HTML**: the main content, as Markdown with links and tables, by ``trafilatura``;
  the page's ``<title>`` heads it. The whole page is converted instead (Markdown,
  scripts and styles dropped) when it shows fewer than ``2 * min_main_chars``
  characters (a short page: nothing to strip), or when the main content is shorter than
  ``min_main_chars`` or than ``min_main_share`` of the page's visible text (a listing,
  an index). ``Document.notes`` says which was used.
- **PDF**: the text layer (pypdf), each page under a ``[page N]`` line. A scanned PDF
  has no text layer and is refused; columns and tables come out as running text.
- **Office files and e-books**: docx, xlsx, xls, pptx, epub and Jupyter notebooks, as
  Markdown through markitdown's converters, called directly: no network, no model,
  no ``exiftool``, no plugins (``MarkItDown`` itself is never built, so its HTTP session
  and file-type model are never used). Legacy .doc and .ppt are refused.
- **Zip archives**: each member converted in turn under a ``## File: <name>`` heading,
  at most ``max_archive_members`` members and ``max_archive_bytes`` uncompressed bytes
  in all (sizes are checked while reading, so a zip bomb stops at the cap), archives
  inside archives ``max_archive_depth`` levels deep; members that cannot be converted,
  and members a secret-file rule refuses (``deepledger.secret_files``: ``.env``, keys,
  ``.git/``...), are listed with the reason and not read.
- **JSON** pretty-printed (invalid JSON is shown as it is, with a note); **CSV/TSV**,
  plain text, Markdown, XML and SVG as they are.
- **Images** (PNG, JPEG, GIF, WebP, recognised by their bytes): an ``ImagePart``
  (base64) of at most ``max_image_bytes``, and a one-line text note naming it.

Anything else (binary of an unknown kind, a file whose bytes do not match its type, a
damaged file) raises ``ContentError`` with the reason. ``convert`` is CPU-bound (a big
PDF or spreadsheet takes seconds): async code calls ``convert_async``, which runs it on
a worker thread.
"""

from __future__ import annotations

import base64
import codecs
import functools
import io
import json
import re
import zipfile
from dataclasses import dataclass, replace

import anyio.to_thread

from deepledger.messages import ImagePart
from deepledger.secret_files import SecretFiles

READABLE = "HTML, PDF, text, Markdown, JSON, CSV, docx, xlsx, xls, pptx, epub, zip and images"
_SNIFF_BYTES = 8192
_SUFFIX_KINDS = {
    "html": "html", "htm": "html", "xhtml": "html", "pdf": "pdf", "json": "json",
    "csv": "csv", "tsv": "csv", "txt": "text", "md": "text", "markdown": "text",
    "xml": "text", "svg": "text", "jsonl": "text", "docx": "docx", "xlsx": "xlsx",
    "xls": "xls", "pptx": "pptx", "epub": "epub", "ipynb": "ipynb", "zip": "zip",
    "png": "image", "jpg": "image", "jpeg": "image", "gif": "image", "webp": "image",
}  # fmt: skip
_MIME_KINDS = {
    "text/html": "html", "application/xhtml+xml": "html", "application/pdf": "pdf",
    "application/json": "json", "text/csv": "csv", "text/tab-separated-values": "csv",
    "application/zip": "zip", "application/x-zip-compressed": "zip",
    "application/epub+zip": "epub", "application/vnd.ms-excel": "xls",
    "application/x-ipynb+json": "ipynb",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
}  # fmt: skip
_TEXT_KINDS = frozenset({"text", "csv", "json", "html"})
_GENERIC_MIMES = frozenset({"", "application/octet-stream", "binary/octet-stream"})
_ZIP_MARKERS = (
    ("word/document.xml", "docx"),
    ("xl/workbook.xml", "xlsx"),
    ("ppt/presentation.xml", "pptx"),
    ("META-INF/container.xml", "epub"),
)
_LEGACY_OFFICE = {"doc": "Word .doc", "ppt": "PowerPoint .ppt", "msg": "Outlook .msg"}


@dataclass(frozen=True, slots=True)
class ConvertLimits:
    """Caps on what one conversion may produce or open."""

    max_image_bytes: int = 5 * 1024 * 1024  # what the common vision APIs accept per image
    max_images: int = 8  # images kept from one archive
    max_archive_members: int = 200
    max_archive_bytes: int = 50 * 1024 * 1024  # uncompressed, all members together
    max_archive_depth: int = 2
    min_main_chars: int = 250  # below both of these, HTML falls back to the full page
    min_main_share: float = 0.1


@dataclass(frozen=True, slots=True)
class Document:
    """Readable content: ``text`` for every model, ``images`` for those that see them.

    ``kind`` is what the bytes were (``html``, ``pdf``, ``docx``, ``image``, ...);
    ``notes`` are short remarks on how they were read (fallbacks, truncation, skips).
    """

    text: str
    title: str | None = None
    images: tuple[ImagePart, ...] = ()
    kind: str = "text"
    notes: tuple[str, ...] = ()


class ContentError(ValueError):
    """The bytes are of a kind we do not read, or are damaged; the message says which."""


def detect_kind(name: str, content_type: str | None, data: bytes) -> str:
    """What ``data`` is: unmistakable magic bytes first (images, PDF), then a specific
    Content-Type, then the name's suffix, then a look at the bytes themselves."""
    magic = _magic_kind(data)
    if magic is not None:
        return magic
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    suffix = _suffix(name)
    kind = _kind_from_mime(mime)
    if kind in {None, "zip"}:
        kind = _SUFFIX_KINDS.get(suffix) or kind
    if kind is None and suffix in _LEGACY_OFFICE:
        raise ContentError(f"{_LEGACY_OFFICE[suffix]} files are not supported; read {READABLE}.")
    if kind == "image":
        raise ContentError(f"{name or mime} does not look like a PNG, JPEG, GIF or WebP image.")
    if kind is None or kind == "zip" or (kind in _TEXT_KINDS and _has_nul(data)):
        kind = _sniff(data, name or mime)
    return kind


def _has_nul(data: bytes) -> bool:
    """NUL bytes near the start: binary, unless it is UTF-16 text with its byte-order mark."""
    head = data[:_SNIFF_BYTES]
    return b"\0" in head and not head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


def _magic_kind(data: bytes) -> str | None:
    """The kinds whose first bytes cannot be mistaken for anything else."""
    if _image_mime(data) is not None:
        return "image"
    if data[:1024].lstrip().startswith(b"%PDF-"):
        return "pdf"
    return None


def _kind_from_mime(mime: str) -> str | None:
    """The kind a specific Content-Type names; None when it is generic or missing."""
    if mime in _GENERIC_MIMES:
        return None
    if mime in _MIME_KINDS:
        return _MIME_KINDS[mime]
    if mime.endswith("+json"):
        return "json"
    if mime == "image/svg+xml" or mime.endswith("+xml") or mime.startswith("text/"):
        return "text"
    if mime in {"application/xml", "application/javascript", "application/x-ndjson"}:
        return "text"
    if mime.startswith("image/"):
        return "image"
    return None  # an unfamiliar type: the suffix or the bytes may still tell


def _suffix(name: str) -> str:
    match = re.search(r"\.([A-Za-z0-9]+)$", name.split("?", 1)[0].split("#", 1)[0])
    return match.group(1).lower() if match else ""


def _sniff(data: bytes, label: str) -> str:
    """The kind the bytes suggest; plain text when they are text and nothing else fits."""
    if data.startswith(b"PK\x03\x04"):
        return _zip_flavour(data)
    if data.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        raise ContentError(
            f"{label} is a legacy Office file (.doc/.xls/.ppt); name it .xls to read a sheet."
        )
    head = data[:_SNIFF_BYTES]
    lowered = head.lstrip().lower()
    if lowered.startswith((b"<!doctype html", b"<html")) or b"<body" in lowered:
        return "html"
    if _has_nul(data):
        raise ContentError(f"{label or 'this content'} looks binary; readable are {READABLE}.")
    return "text"


def _zip_flavour(data: bytes) -> str:
    """docx, xlsx, pptx, epub or a plain zip, from the names inside."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
    except zipfile.BadZipFile as exc:
        raise ContentError(f"The zip archive is damaged: {exc}") from exc
    for marker, kind in _ZIP_MARKERS:
        if marker in names:
            return kind
    return "zip"


def convert(
    data: bytes,
    *,
    name: str = "",
    content_type: str | None = None,
    charset: str | None = None,
    source: str = "",
    limits: ConvertLimits | None = None,
) -> Document:
    """``data`` as a ``Document`` (see the module docstring for each kind and its limits).

    ``name`` (a file name or URL path) and ``content_type`` help decide the kind;
    ``charset`` is the declared text encoding; ``source`` names the content in notes
    and images. Raises ``ContentError``. Runs synchronously: use ``convert_async``
    from async code.
    """
    return _convert(data, name, content_type, charset, source or name, limits or ConvertLimits(), 0)


async def convert_async(data: bytes, **options: object) -> Document:
    """``convert`` on a worker thread, so the event loop keeps running meanwhile."""
    call = functools.partial(convert, data, **options)  # type: ignore[arg-type]
    return await anyio.to_thread.run_sync(call)


def _convert(
    data: bytes,
    name: str,
    content_type: str | None,
    charset: str | None,
    source: str,
    limits: ConvertLimits,
    depth: int,
) -> Document:
    kind = detect_kind(name, content_type, data)
    if kind == "image":
        return image_document(data, source, limits)
    if kind == "pdf":
        return pdf_document(data)
    if kind == "zip":
        return zip_document(data, source, limits, depth)
    if kind in {"docx", "xlsx", "xls", "pptx", "epub", "ipynb"}:
        return office_document(data, kind)
    text = decode(data, charset, sniff_html=kind == "html")
    if kind == "html":
        return html_document(text, source, limits)
    if kind == "json":
        return Document(json_to_text(text), kind="json")
    return Document(text, kind=kind)


def decode(data: bytes, charset: str | None = None, *, sniff_html: bool = False) -> str:
    """Bytes to str: a byte-order mark wins, then the declared charset, then (for HTML) a
    ``<meta charset>``, then UTF-8, then Windows-1252. Undecodable bytes become U+FFFD
    rather than failing: a page with one bad byte is still worth reading."""
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                          (codecs.BOM_UTF16_BE, "utf-16")):  # fmt: skip
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    if charset is None and sniff_html:
        declared = re.search(rb"<meta[^>]+charset=[\"']?([\w-]+)", data[:4096], re.IGNORECASE)
        charset = declared.group(1).decode("ascii") if declared else None
    if charset:
        try:
            return data.decode(charset, errors="replace")
        except LookupError:
            pass  # a charset name Python does not know: guess below like an undeclared one
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def json_to_text(text: str) -> str:
    """JSON indented for reading; text that does not parse is returned as it is, with a note."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except json.JSONDecodeError as exc:
        return f"(not valid JSON: {exc}; shown as is)\n{text}"


def pdf_document(data: bytes) -> Document:
    """The text layer of a PDF, each page under a ``[page N]`` line so it can be cited."""
    from pypdf import PdfReader  # imported here: only PDF reads pay for loading pypdf

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            reader.decrypt("")
        pages = [page.extract_text() or "" for page in reader.pages]
        title = reader.metadata.title if reader.metadata else None
    # pypdf raises many exception types on damaged files, not only PyPdfError; any of
    # them means "this PDF cannot be read", which the model should be told.
    except Exception as exc:
        raise ContentError(f"Could not read the PDF: {exc}") from exc
    if not any(page.strip() for page in pages):
        raise ContentError(
            f"The PDF has {len(pages)} page(s) but no text layer (perhaps scanned images)."
        )
    text = "\n\n".join(f"[page {number}]\n{page.strip()}" for number, page in enumerate(pages, 1))
    return Document(text, title=title or None, kind="pdf")


def office_document(data: bytes, kind: str) -> Document:
    """docx, xlsx, xls, pptx, epub or ipynb as Markdown through markitdown's converter
    for that kind alone (see the module docstring for what is never used)."""
    from markitdown import StreamInfo, converters  # heavy (pandas for sheets): load on use

    converter_class = {
        "docx": converters.DocxConverter,
        "xlsx": converters.XlsxConverter,
        "xls": converters.XlsConverter,
        "pptx": converters.PptxConverter,
        "epub": converters.EpubConverter,
        "ipynb": converters.IpynbConverter,
    }[kind]
    info = StreamInfo(extension=f".{kind}")
    try:
        result = converter_class().convert(io.BytesIO(data), info)
    # The converters raise whatever their libraries raise on a damaged file (zipfile,
    # lxml, pandas, xlrd errors); each means the file cannot be read.
    except Exception as exc:
        raise ContentError(f"Could not read the {kind} file: {_first_line(exc)}") from exc
    text = _tidy_markdown(result.markdown)
    if not text.strip():
        return Document(
            "", title=result.title, kind=kind, notes=(f"the {kind} file holds no text",)
        )
    return Document(text, title=result.title or None, kind=kind)


def html_document(html: str, source: str, limits: ConvertLimits) -> Document:
    """An HTML page's main content, or the whole page when extraction finds too little."""
    import trafilatura  # loads lxml and its settings: paid by HTML reads only

    title = html_title(html)
    main = trafilatura.extract(
        html,
        url=source if source.startswith(("http://", "https://")) else None,
        output_format="markdown",
        include_links=True,
        include_tables=True,
        include_comments=False,
        favor_recall=True,
    )
    main = _drop_anchor_links(main or "").strip()
    visible = visible_text_length(html)
    if visible < 2 * limits.min_main_chars:
        body, note = full_page_markdown(html), "the whole page (a short page)"
    elif len(main) >= limits.min_main_chars and len(main) >= limits.min_main_share * visible:
        body = main
        note = f"main content ({len(main):,} chars; the page shows {visible:,})"
    else:
        body = full_page_markdown(html)
        note = "the whole page (main-content extraction found too little)"
    if title and not body.lstrip("# ").startswith(title):
        body = f"# {title}\n\n{body}"
    return Document(body.strip() + "\n", title=title, kind="html", notes=(note,))


def _drop_anchor_links(markdown: str) -> str:
    """Links to places in the same page (``[¶](#section)``, ``[text](#id)``) as plain text:
    a model cannot follow them, and they cost tokens on every heading."""
    markdown = re.sub(r"\[(?:¶|#)?\]\(#[^)\s]*\)", "", markdown)
    return re.sub(r"\[((?:\\.|[^\]\\\n])*)\]\(#[^)\s]*\)", r"\1", markdown)


def html_title(html: str) -> str | None:
    """The text of a page's ``<title>``, whitespace collapsed; None when it has none."""
    match = re.search(r"<title[^>]*>(.*?)</title>", html[:200_000], re.IGNORECASE | re.DOTALL)
    if not match:
        return None
    import html as html_module

    title = " ".join(html_module.unescape(re.sub(r"<[^>]+>", "", match.group(1))).split())
    return title or None


def visible_text_length(html: str) -> int:
    """How many non-space characters the page shows (scripts, styles and markup dropped)."""
    import lxml.html

    try:
        tree = lxml.html.document_fromstring(html)
    except (ValueError, lxml.etree.ParserError):  # empty or unparsable: nothing is shown
        return 0
    for element in tree.xpath("//script|//style|//noscript|//template"):
        element.drop_tree()
    return len(re.sub(r"\s+", "", tree.text_content()))


def full_page_markdown(html: str) -> str:
    """The whole page as Markdown (markitdown's HTML converter: scripts, styles dropped)."""
    from markitdown.converters import HtmlConverter

    return _tidy_markdown(HtmlConverter().convert_string(html).markdown)


def image_document(data: bytes, source: str, limits: ConvertLimits) -> Document:
    """An image as an ``ImagePart`` plus a one-line note naming it."""
    mime = _image_mime(data)
    if mime is None:
        raise ContentError(f"{source or 'The image'} is not a PNG, JPEG, GIF or WebP image.")
    if len(data) > limits.max_image_bytes:
        raise ContentError(
            f"{source or 'The image'} is {_size(len(data))}; images are passed on up to "
            f"{_size(limits.max_image_bytes)}."
        )
    label = source or "an image"
    note = f"[image: {label} ({mime}, {_size(len(data))})]"
    part = ImagePart(mime, base64.b64encode(data).decode("ascii"), source)
    return Document(note + "\n", images=(part,), kind="image")


def _image_mime(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def zip_document(data: bytes, source: str, limits: ConvertLimits, depth: int) -> Document:
    """Each member of a zip archive converted under its own heading (see the limits)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ContentError(f"The zip archive is damaged: {exc}") from exc
    with archive:
        members = [
            info for info in archive.infolist()
            if not info.is_dir() and not info.filename.startswith("__MACOSX/")
        ]  # fmt: skip
        sections: list[str] = []
        images: list[ImagePart] = []
        notes: list[str] = []
        budget = limits.max_archive_bytes
        for info in members[: limits.max_archive_members]:
            text, member, used = _zip_member(archive, info, budget, source, limits, depth)
            budget -= used
            sections.append(f"## File: {info.filename}\n\n{text.strip()}\n")
            if member is not None and len(images) < limits.max_images:
                images.extend(member.images[: limits.max_images - len(images)])
        if len(members) > limits.max_archive_members:
            notes.append(f"{len(members) - limits.max_archive_members} more members not read")
    head = f"Archive {source or ''} ({len(members)} files):".replace("  ", " ")
    body = "\n".join([head, "", *sections, *(f"({note})" for note in notes)])
    return Document(body.strip() + "\n", images=tuple(images), kind="zip", notes=tuple(notes))


def _zip_member(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    budget: int,
    source: str,
    limits: ConvertLimits,
    depth: int,
) -> tuple[str, Document | None, int]:
    """One member's text, its document (None when not read) and the bytes it used."""
    if info.flag_bits & 0x1:
        return "(encrypted; not read)", None, 0
    if (rule := SecretFiles.from_environment().rule_for(info.filename)) is not None:
        return f"(not read: it matches the secret-file rule {rule!r})", None, 0
    if info.file_size > budget:
        return f"(not read: {_size(info.file_size)} would pass the archive limit)", None, 0
    try:
        with archive.open(info) as stream:
            raw = stream.read(budget + 1)  # the declared size may lie: read at most the budget
    except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError) as exc:
        return f"(not read: {exc})", None, 0
    if len(raw) > budget:
        return "(not read: it passes the archive's size limit)", None, budget
    if _suffix(info.filename) == "zip" and depth + 1 >= limits.max_archive_depth:
        return "(a nested archive; not opened this deep)", None, len(raw)
    member_source = f"{source}/{info.filename}" if source else info.filename
    try:
        document = _convert(raw, info.filename, None, None, member_source, limits, depth + 1)
    except ContentError as exc:
        return f"(not converted: {exc})", None, len(raw)
    return document.text, document, len(raw)


def _tidy_markdown(text: str) -> str:
    """Trailing spaces gone and runs of blank lines collapsed to one."""
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _size(size: int) -> str:
    """A byte count for people."""
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


def with_note(document: Document, note: str) -> Document:
    """``document`` with one more note."""
    return replace(document, notes=(*document.notes, note))
