"""An MCP server for full-text search over a local corpus: ``search`` and ``open``.

Run it as ``python -m deepledger.tools.servers.search [--corpus PATH] [--cache-dir DIR]``
(or set ``DEEPLEDGER_SEARCH_CORPUS``, and ``DEEPLEDGER_CACHE_DIR`` for the root of
deepledger's caches). It is the offline
stand-in for a web search engine: the model searches, reads snippets, then opens whole
documents.

The corpus, its index and how queries are matched are described in ``web/corpus.py``,
which holds them; this module is the server around them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from deepledger.tools.servers._stdio import serve_stdio
from deepledger.web.corpus import (
    CORPUS_ENV,
    MAX_K,
    CorpusError,
    Document,
    Hit,
    SearchIndex,
    default_cache_dir,
    default_corpus,
    ensure_index,
)

# --- what the model reads -----------------------------------------------------------------


def format_hits(query: str, hits: list[Hit]) -> str:
    """Search results as plain numbered text, each with what ``open`` needs."""
    if not hits:
        return f"No results for {query!r}. Try other or fewer words."
    lines = [f"{len(hits)} results for {query!r}, best first:", ""]
    for rank, hit in enumerate(hits, start=1):
        lines += [f"{rank}. {hit.title} [doc_id: {hit.doc_id}]", f"   {hit.snippet}", ""]
    lines.append("Call open with a doc_id or title to read a whole document.")
    return "\n".join(lines)


def format_document(document: Document) -> str:
    """A whole document with a title line the model can cite."""
    return f"# {document.title}\n[doc_id: {document.doc_id}]\n\n{document.text}"


def not_found_message(doc: str, close: list[str]) -> str:
    """Why ``open`` failed and what to try instead."""
    message = f"No document has doc_id or title {doc!r}."
    if close:
        message += " Close titles: " + "; ".join(close) + "."
    return message + " Use search to find documents."


SEARCH_DESCRIPTION = (
    "Search the document collection by keywords. Returns the best-matching documents, each "
    "with its doc_id, title and a snippet with the matched words in **bold**. Documents "
    "containing more (and rarer) query words rank higher."
)
OPEN_DESCRIPTION = "Return the full text of one document, by its doc_id or its title (any case)."


def build_server(index: SearchIndex) -> MCPServer:
    """The MCP server exposing ``search`` and ``open`` over ``index``."""
    server = MCPServer(
        "deepledger-search",
        instructions="Full-text search over a local document collection, then open documents.",
    )

    # A coroutine on purpose: a search takes about a millisecond, less than the SDK's hand-off
    # of a plain function to a worker thread and back costs (a fifth of the server's CPU).
    @server.tool(name="search", description=SEARCH_DESCRIPTION, structured_output=False)
    async def search(
        query: Annotated[str, Field(description="Words to look for; no operators needed.")],
        k: Annotated[int, Field(description="How many results, 1 to 20.")] = 5,
    ) -> str:
        return format_hits(query, index.search(query, max(1, min(k, MAX_K))))

    @server.tool(name="open", description=OPEN_DESCRIPTION, structured_output=False)
    def open_document(
        doc: Annotated[str, Field(description="A doc_id from search results, or a title.")],
    ) -> str:
        document = index.get(doc)
        if document is None:
            raise ToolError(not_found_message(doc, index.close_titles(doc)))
        return format_document(document)

    return server


def main(argv: list[str] | None = None) -> None:
    """Resolve the corpus and cache folder, make sure the index exists, serve over stdio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--corpus", type=Path, default=os.environ.get(CORPUS_ENV) or None)
    parser.add_argument("--cache-dir", type=Path, help="the folder for index files")
    args = parser.parse_args(argv)
    cache_dir = (args.cache_dir or default_cache_dir()).expanduser()
    try:
        corpus = (args.corpus.expanduser() if args.corpus else default_corpus()).resolve()
        index = SearchIndex(ensure_index(corpus, cache_dir))
    except CorpusError as exc:
        parser.exit(2, f"deepledger search: {exc}\n")
    serve_stdio(build_server(index))


if __name__ == "__main__":
    main()
