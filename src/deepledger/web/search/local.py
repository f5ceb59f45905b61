"""The offline corpus as a search backend, so every web preset also runs without a network.

It searches the same SQLite FTS5 index as :mod:`deepledger.web.corpus`: the
corpus is ``BackendOptions.corpus``, else ``DEEPLEDGER_SEARCH_CORPUS``, else the bundled
Wikipedia leads; the index lives under ``search/`` in ``DEEPLEDGER_CACHE_DIR`` (else
``~/.cache/deepledger``) unless ``BackendOptions.cache_dir`` says otherwise. It is built
on the first search (about half a second for the default corpus), off the event loop.

Links are ``corpus://<doc_id>`` with the doc_id percent-quoted (``/``, ``#`` and all);
the page readers open them from the same corpus. :func:`corpus_link` and
:func:`doc_id_from_corpus_link` are the two directions of that contract.

Limits: region, language, time filter, location and autocorrect mean nothing here and
are ignored; at most :data:`MAX_DEPTH` results deep (page times num).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, unquote

import anyio.to_thread

from deepledger.paths import CACHE_DIR_ENV
from deepledger.web.corpus import (
    CORPUS_ENV,
    CorpusError,
    SearchIndex,
    default_corpus,
    ensure_index,
)
from deepledger.web.search import (
    BackendOptions,
    SearchBackend,
    SearchConfigError,
    SearchQuery,
    SearchResponse,
    SearchResult,
)

SCHEME = "corpus://"
MAX_DEPTH = 100


def corpus_link(doc_id: str) -> str:
    """The link of a corpus document: ``corpus://`` and its doc_id, percent-quoted."""
    return SCHEME + quote(doc_id, safe="")


def doc_id_from_corpus_link(link: str) -> str | None:
    """The doc_id a ``corpus://`` link names, or None if ``link`` is not one."""
    if not link.startswith(SCHEME) or len(link) == len(SCHEME):
        return None
    return unquote(link[len(SCHEME) :])


class LocalBackend(SearchBackend):
    """Full-text search over a local document collection."""

    name = "local"

    def __init__(self, corpus: Path | None, cache_dir: Path) -> None:
        self.corpus = corpus  # None: the bundled default, located on first use
        self.cache_dir = cache_dir
        self._index: SearchIndex | None = None
        self._building = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str], options: BackendOptions) -> LocalBackend:
        corpus = options.corpus or (Path(env[CORPUS_ENV]) if env.get(CORPUS_ENV) else None)
        cache_root = env.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "deepledger"
        cache_dir = options.cache_dir or Path(cache_root) / "search"
        return cls(corpus.expanduser() if corpus else None, cache_dir.expanduser())

    async def search(self, query: SearchQuery) -> SearchResponse:
        index = self._index
        if index is None:
            index = await anyio.to_thread.run_sync(self._open_index)
        skipped = (query.page_number - 1) * query.count
        depth = min(MAX_DEPTH, skipped + query.count)
        hits = index.search(query.query, depth) if skipped < depth else []
        results = tuple(
            SearchResult(
                title=hit.title,
                link=corpus_link(hit.doc_id),
                snippet=hit.snippet,
                position=skipped + offset + 1,
            )
            for offset, hit in enumerate(hits[skipped:])
        )
        return SearchResponse(query=query, backend=self.name, results=results)

    def _open_index(self) -> SearchIndex:
        with self._building:  # two first searches at once build the index once
            if self._index is None:
                try:
                    corpus = (self.corpus or default_corpus()).resolve()
                    self._index = SearchIndex(ensure_index(corpus, self.cache_dir))
                except CorpusError as exc:
                    raise SearchConfigError(str(exc)) from exc
                except OSError as exc:  # the cache folder cannot be made or written
                    raise SearchConfigError(
                        f"Cannot build the search index in {self.cache_dir}: {exc}"
                    ) from exc
            return self._index
