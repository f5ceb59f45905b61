"""The search server, run for real over stdio and driven with the MCP client."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from mcp import Client, StdioServerParameters

from deepledger.tools.servers.search import main
from deepledger.web.corpus import iter_documents
from tests.support.mcp_client import call, hold_open

# Tests using the module's shared server must run on the loop that server lives on.
on_module_loop = pytest.mark.asyncio(loop_scope="module")

RESULT_LINE = re.compile(r"^(\d+)\. (.+) \[doc_id: (.+)\]$", re.MULTILINE)


def search_server(cache_dir: Path, *args: str) -> StdioServerParameters:
    """How to start the search server with its index cache in ``cache_dir``."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "deepledger.tools.servers.search", "--cache-dir", str(cache_dir), *args],
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def wiki(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    """One server over the default corpus (the wiki leads) for the whole module."""
    params = search_server(tmp_path_factory.mktemp("cache"))
    async for client in hold_open(params, asyncio.Event()):
        yield client


def ranked(text: str) -> list[tuple[str, str]]:
    """(title, doc_id) of each search result, best first."""
    return [(title, doc_id) for _, title, doc_id in RESULT_LINE.findall(text)]


@on_module_loop
async def test_lists_search_and_open(wiki: Client) -> None:
    tools = {tool.name: tool for tool in (await wiki.list_tools()).tools}
    assert set(tools) == {"search", "open"}
    assert set(tools["search"].input_schema["properties"]) == {"query", "k"}


@on_module_loop
@pytest.mark.parametrize(
    ("query", "expected_first"),
    [
        ("Albert Einstein", "Albert Einstein"),
        ("Who painted the Mona Lisa?", "Mona Lisa"),
        ("When was the Eiffel Tower built?", "Eiffel Tower"),
    ],
)
async def test_well_known_topic_ranks_first(wiki: Client, query: str, expected_first: str) -> None:
    failed, text = await call(wiki, "search", query=query, k=5)
    assert not failed
    assert ranked(text)[0][0] == expected_first
    assert "**" in text  # matched words are marked in the snippet


@on_module_loop
@pytest.mark.parametrize(
    "query",
    ['"unbalanced quote', "title: Einstein", "NEAR(Einstein relativity)", "AND OR NOT",
     "well-known -physicist*", "(((Einstein", "^Einstein + col:text {x}"],
)  # fmt: skip
async def test_fts_syntax_in_queries_is_searched_as_words(wiki: Client, query: str) -> None:
    failed, text = await call(wiki, "search", query=query)
    assert not failed, text
    assert ranked(text) or text.startswith("No results")


@on_module_loop
async def test_query_without_words_says_no_results(wiki: Client) -> None:
    failed, text = await call(wiki, "search", query="?!* ()")
    assert not failed
    assert text == "No results for '?!* ()'. Try other or fewer words."


@on_module_loop
async def test_k_is_clamped_to_1_through_20(wiki: Client) -> None:
    assert len(ranked((await call(wiki, "search", query="river city", k=500))[1])) == 20
    assert len(ranked((await call(wiki, "search", query="river city", k=0))[1])) == 1


@on_module_loop
async def test_open_by_title_in_any_case_and_by_doc_id(wiki: Client) -> None:
    failed, by_title = await call(wiki, "open", doc="albert EINSTEIN")
    assert not failed
    assert by_title.startswith("# Albert Einstein\n[doc_id: ")
    assert "theoretical physicist" in by_title
    doc_id = re.search(r"\[doc_id: (.+)\]", by_title).group(1)
    assert (await call(wiki, "open", doc=doc_id)) == (False, by_title)


@on_module_loop
async def test_search_results_open_to_the_same_document(wiki: Client) -> None:
    title, doc_id = ranked((await call(wiki, "search", query="Mona Lisa"))[1])[0]
    failed, text = await call(wiki, "open", doc=doc_id)
    assert not failed
    assert text.startswith(f"# {title}\n")


@on_module_loop
async def test_open_unknown_document_is_an_error_naming_close_titles(wiki: Client) -> None:
    failed, text = await call(wiki, "open", doc="Albert Einstien")
    assert failed
    assert "No document has doc_id or title 'Albert Einstien'" in text
    assert "Albert Einstein" in text


def write_folder_corpus(folder: Path) -> None:
    """A small corpus in every supported file shape."""
    (folder / "animals").mkdir(parents=True)
    (folder / "animals" / "zebra.md").write_text(
        "Intro line\n\n# Zebra Facts\n\nZebras are striped equids of Africa.\n"
    )
    (folder / "okapi.txt").write_text("The okapi is a giraffid from the Congo rainforest.\n")
    (folder / "birds.jsonl").write_text(
        json.dumps({"id": "kiwi-1", "title": "Kiwi", "text": "The kiwi is a flightless bird."})
        + "\n"
        + json.dumps({"name": "Emu", "body": "The emu is a large flightless bird."})
        + "\n"
    )
    (folder / "misc.json").write_text(json.dumps([{"content": "Axolotls regrow limbs."}]))
    (folder / ".hidden.md").write_text("# Secret\n\nA quokka hides here.\n")


async def test_folder_corpus_searches_and_opens_every_file_shape(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_folder_corpus(corpus)
    params = search_server(tmp_path / "cache", "--corpus", str(corpus))
    async with Client(params) as client:
        results = ranked((await call(client, "search", query="striped"))[1])
        assert results == [("Zebra Facts", "animals/zebra.md")]
        assert ranked((await call(client, "search", query="okapi"))[1]) == [("okapi", "okapi.txt")]
        flightless = ranked((await call(client, "search", query="flightless bird", k=5))[1])
        assert sorted(flightless) == [("Emu", "birds.jsonl#1"), ("Kiwi", "kiwi-1")]
        assert ranked((await call(client, "search", query="axolotls"))[1])[0][1] == "misc.json#0"
        assert (await call(client, "search", query="quokka"))[1].startswith("No results")
        failed, text = await call(client, "open", doc="zebra facts")
        assert not failed
        assert "Zebras are striped equids" in text


async def test_changed_corpus_is_reindexed_and_the_old_index_removed(tmp_path: Path) -> None:
    corpus, cache = tmp_path / "corpus", tmp_path / "cache"
    write_folder_corpus(corpus)
    params = search_server(cache, "--corpus", str(corpus))
    async with Client(params) as client:
        assert (await call(client, "search", query="pangolin"))[1].startswith("No results")
    first_index = list(cache.glob("*.sqlite3"))
    (corpus / "pangolin.md").write_text("# Pangolin\n\nPangolins have scales.\n")
    async with Client(params) as client:
        assert ranked((await call(client, "search", query="pangolin"))[1])[0][0] == "Pangolin"
    second_index = list(cache.glob("*.sqlite3"))
    assert len(first_index) == len(second_index) == 1
    assert first_index != second_index
    assert [path.name for path in cache.iterdir()] == [second_index[0].name]  # no temp files


async def test_environment_names_corpus_and_cache_root(tmp_path: Path) -> None:
    corpus = tmp_path / "notes.md"
    corpus.write_text("# Lone Note\n\nNarwhals have tusks.\n")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "deepledger.tools.servers.search"],
        env={"DEEPLEDGER_SEARCH_CORPUS": str(corpus), "DEEPLEDGER_CACHE_DIR": str(tmp_path)},
    )
    async with Client(params) as client:
        assert ranked((await call(client, "search", query="narwhal"))[1]) == [
            ("Lone Note", "notes.md")
        ]
    assert len(list((tmp_path / "search").glob("*.sqlite3"))) == 1


def test_missing_corpus_stops_the_server_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--corpus", str(tmp_path / "nowhere"), "--cache-dir", str(tmp_path)])
    assert stopped.value.code == 2
    assert "does not exist" in capsys.readouterr().err


def test_json_shapes_give_titles_and_ids(tmp_path: Path) -> None:
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"Oslo": "Oslo is a capital.", "Bergen": {"extract": "Rainy."}}))
    single = tmp_path / "single.json"
    single.write_text(json.dumps({"id": 7, "title": "Seven", "text": "A number."}))
    documents = [*iter_documents(mapping), *iter_documents(single)]
    assert [(d.doc_id, d.title) for d in documents] == [
        ("0", "Oslo"),
        ("1", "Bergen"),
        ("7", "Seven"),
    ]


def test_words_in_half_the_documents_are_left_out_of_the_ranking(tmp_path: Path) -> None:
    """'the' is in every document here; ranking on the other words gives the same order,
    and a query of nothing but common words still finds something."""
    from deepledger.web.corpus import SearchIndex, build_index

    corpus = tmp_path / "corpus.jsonl"
    texts = [
        "The capital of France is Paris.",
        "The capital of Norway is Oslo.",
        "The river of the north.",
        "The end of the road.",
        "The tall tree.",
        "The the the the.",
    ]
    corpus.write_text(
        "\n".join(json.dumps({"title": f"d{i}", "text": t}) for i, t in enumerate(texts))
    )
    target = tmp_path / "index.sqlite3"
    build_index(corpus, target)
    index = SearchIndex(target)
    assert index._informative(["the", "capital", "of", "france"]) == ["capital", "france"]
    assert [hit.title for hit in index.search("the capital of France", 2)] == ["d0", "d1"]
    assert [hit.title for hit in index.search("the of", 1)]  # only common words: kept whole
