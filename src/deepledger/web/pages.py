"""``read_url``: THE way a tool turns a link into a ``Document``.

Two kinds of link:

- ``http://`` and ``https://``: fetched with ``fetch.fetch`` (the SSRF guard on every
  hop, the body capped while it streams) and converted with ``convert.convert_async``
  on a worker thread. A body cut at ``FetchLimits.max_bytes`` gets a note saying so.
- ``corpus://<url-quoted doc_id>``: a document of the local search corpus (the FTS5
  index of ``web/corpus.py``; the corpus given as ``corpus``, else the one
  ``DEEPLEDGER_SEARCH_CORPUS`` names, else the default one), as ``# title`` and its
  text. Each corpus's index is opened once per process, on first use (building it if
  needed takes about half a second), and reused.

Anything else is a ``FetchError`` of kind ``invalid_url``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

import anyio.to_thread

from deepledger.web.convert import ConvertLimits, Document, convert_async, with_note
from deepledger.web.fetch import FetchError, FetchLimits, fetch

if TYPE_CHECKING:
    from deepledger.web.corpus import SearchIndex

CORPUS_SCHEME = "corpus"

_index_lock = threading.Lock()
_indexes: dict[Path, SearchIndex] = {}


def corpus_link(doc_id: str) -> str:
    """The ``corpus://`` link of a local corpus document."""
    return f"{CORPUS_SCHEME}://{quote(doc_id, safe='')}"


async def read_url(
    url: str,
    *,
    limits: FetchLimits,
    allow_private: bool | None = None,
    headers: Mapping[str, str] | None = None,
    convert_limits: ConvertLimits | None = None,
    corpus: Path | None = None,
) -> Document:
    """The document ``url`` links to (see the module docstring).

    Raises ``FetchError`` (not fetched: refused address, HTTP error, timeout, too large,
    unknown corpus document) or ``convert.ContentError`` (fetched but unreadable).
    """
    url = url.strip()
    scheme = urlsplit(url).scheme.lower()
    if scheme == CORPUS_SCHEME:
        return await read_corpus_document(url, corpus)
    if scheme not in {"http", "https"}:
        raise FetchError(
            f"Cannot read {scheme or 'scheme-less'} links: give an http(s) or corpus:// URL.",
            kind="invalid_url",
            url=url,
        )
    fetched = await fetch(url, limits=limits, allow_private=allow_private, headers=headers)
    document = await convert_async(
        fetched.data,
        name=fetched.name,
        content_type=fetched.content_type,
        charset=fetched.charset,
        source=fetched.final_url,
        limits=convert_limits,
    )
    if fetched.truncated:
        document = with_note(
            document, f"only the first {limits.max_bytes:,} bytes of the page were read"
        )
    return document


async def read_corpus_document(url: str, corpus: Path | None = None) -> Document:
    """A ``corpus://`` link's document, looked up off the event loop."""
    parts = urlsplit(url)
    doc_id = unquote(parts.netloc + parts.path)
    if not doc_id:
        raise FetchError(f"{url} names no document.", kind="invalid_url", url=url)
    from deepledger.web.corpus import CorpusError

    try:
        index = await anyio.to_thread.run_sync(corpus_index, corpus)
    except CorpusError as exc:
        message = f"The local corpus cannot be opened: {exc}"
        raise FetchError(message, kind="not_found", url=url) from exc
    found = await anyio.to_thread.run_sync(index.get, doc_id)
    if found is None:
        raise FetchError(f"The local corpus has no document {doc_id!r}.", kind="not_found", url=url)
    text = f"# {found.title}\n[doc_id: {found.doc_id}]\n\n{found.text.strip()}\n"
    return Document(text, title=found.title, kind="corpus")


def corpus_index(corpus: Path | None = None) -> SearchIndex:
    """The process's index of ``corpus`` (else the configured or default corpus),
    opened (and built) on first call."""
    from deepledger.web import corpus as local_corpus

    if corpus is None:
        configured = os.environ.get(local_corpus.CORPUS_ENV)
        corpus = Path(configured) if configured else local_corpus.default_corpus()
    corpus = corpus.resolve()
    with _index_lock:
        if corpus not in _indexes:
            path = local_corpus.ensure_index(corpus, local_corpus.default_cache_dir())
            _indexes[corpus] = local_corpus.SearchIndex(path)
        return _indexes[corpus]


def reset_corpus_index() -> None:
    """Forget the opened index (tests that switch corpora call this)."""
    with _index_lock:
        _indexes.clear()
