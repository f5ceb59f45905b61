"""The web search server, run for real over stdio against fake engines on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support.doubles.fake_search_server import FakeSearxng, FakeSerper, server_error
from tests.support.mcp_client import call

KEY = "sk-planted-55c0ffee91"  # must never reach the model or the server's log

EIFFEL = [
    {"title": "Eiffel Tower - Wikipedia", "link": "http://127.0.0.1:1/eiffel",
     "snippet": "The Eiffel Tower is 330 metres tall.", "date": "Mar 3, 2024"},
    {"title": "Eiffel Tower facts", "link": "http://127.0.0.1:1/facts",
     "snippet": "Completed in 1889."},
]  # fmt: skip
SCRIPT = {
    "eiffel tower height": {
        "organic": EIFFEL,
        "answerBox": {"title": "Eiffel Tower / Height", "answer": "330 m"},
        "knowledgeGraph": {"title": "Eiffel Tower", "type": "Tower",
                           "attributes": {"Height": "330 m"}},
        "relatedSearches": [{"query": "eiffel tower tickets"}],
    },
    "eiffel tower": EIFFEL,
}  # fmt: skip

MIROTHINKER_ARGUMENTS = {
    "q": ("string", None),
    "gl": ("string", "us"),
    "hl": ("string", "en"),
    "location": ("string|null", None),
    "num": ("integer|null", None),
    "tbs": ("string|null", None),
    "page": ("integer|null", None),
    "autocorrect": ("boolean|null", None),
}


def server(*args: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "deepledger.tools.servers.web_search", "--retry-wait", "0", *args],
        env=env or {},
    )


@asynccontextmanager
async def connected(params: StdioServerParameters, errlog: Path) -> AsyncIterator[Client]:
    """A client of a freshly started server whose stderr goes to ``errlog``."""
    with errlog.open("a") as log:
        async with Client(stdio_client(params, errlog=log)) as client:
            yield client


@pytest.fixture
def serper() -> Iterator[FakeSerper]:
    with FakeSerper(SCRIPT, api_key=KEY) as fake:
        yield fake


def serper_env(fake: FakeSerper, key: str | None = KEY) -> dict[str, str]:
    env = {"SERPER_BASE_URL": fake.base_url}
    return env | ({"SERPER_API_KEY": key} if key else {})


def schema_type(spec: dict[str, Any]) -> str:
    if "anyOf" in spec:
        return "|".join(option["type"] for option in spec["anyOf"])
    return spec["type"]


async def test_mirothinker_naming_lists_google_search_with_its_arguments(
    serper: FakeSerper, tmp_path: Path
) -> None:
    params = server("--backend", "serper", "--names", "mirothinker", env=serper_env(serper))
    async with connected(params, tmp_path / "stderr.log") as client:
        assert client.server_info is not None
        assert client.server_info.name == "search_and_scrape_webpage"
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        failed, text = await call(client, "google_search", q="Eiffel Tower height", num=5)
    assert set(tools) == {"google_search", "sogou_search"}  # as MiroThinker's server
    tool = tools["google_search"]
    properties = tool.input_schema["properties"]
    assert list(properties) == list(MIROTHINKER_ARGUMENTS)
    for name, (kind, default) in MIROTHINKER_ARGUMENTS.items():
        assert schema_type(properties[name]) == kind, name
        assert properties[name].get("default") == default, name
    assert tool.input_schema["required"] == ["q"]

    assert not failed, text
    data = json.loads(text)
    assert [item["link"] for item in data["organic"]] == [item["link"] for item in EIFFEL]
    assert data["organic"][0] == {**EIFFEL[0], "position": 1}
    assert data["searchParameters"]["q"] == "Eiffel Tower height"
    assert data["searchParameters"]["gl"] == "us" and data["searchParameters"]["num"] == 5
    # MiroThinker's google_search answers these two fields and no others (its answer box,
    # knowledge graph and related searches are Serper's, not its tool's).
    assert set(data) == {"organic", "searchParameters"}
    assert serper.requests[0].body == {"q": "Eiffel Tower height", "gl": "us", "hl": "en",
                                       "num": 5}  # fmt: skip


async def test_mirothinker_errors_are_json_and_free_of_the_key(
    serper: FakeSerper, tmp_path: Path
) -> None:
    """A retried 5xx, a rejected key and an empty query: each an error result in the JSON
    form MiroThinker models know, and the key appears in no result and no log line."""
    errlog = tmp_path / "stderr.log"
    serper.fail_next(server_error(503))
    params = server("--backend", "serper", "--names", "mirothinker", env=serper_env(serper))
    async with connected(params, errlog) as client:
        retried = await call(client, "google_search", q='"eiffel tower"')
        serper.api_key = "another-key"  # the planted key is now rejected
        rejected = await call(client, "google_search", q="eiffel tower")
        empty = await call(client, "google_search", q="   ")
    assert not retried[0]
    assert json.loads(retried[1])["organic"][0]["title"] == EIFFEL[0]["title"]
    assert rejected[0] and empty[0]
    error = json.loads(rejected[1])
    assert error["success"] is False and error["results"] == []
    assert "check SERPER_API_KEY" in error["error"]
    assert "empty" in json.loads(empty[1])["error"]
    log = errlog.read_text()
    assert "HTTP 503" in log  # the retry was logged...
    for text in (retried[1], rejected[1], empty[1], log):
        assert KEY not in text  # ...without the key


async def test_missing_key_is_reported_on_every_call(serper: FakeSerper, tmp_path: Path) -> None:
    params = server("--backend", "serper", env=serper_env(serper, key=None))
    async with connected(params, tmp_path / "stderr.log") as client:
        failed, text = await call(client, "search", query="eiffel tower")
    assert failed
    assert text.startswith("Error executing tool search: SERPER_API_KEY is not set: ")
    assert serper.requests == []


async def test_deepledger_naming_over_searxng(tmp_path: Path) -> None:
    script = {
        "eiffel tower height": {
            "organic": EIFFEL,
            "answers": ["330 m"],
            "infoboxes": [{"infobox": "Eiffel Tower", "content": "Lattice tower in Paris."}],
        }
    }
    with FakeSearxng(script) as fake:
        params = server("--backend", "searxng", env={"SEARXNG_BASE_URL": fake.base_url})
        async with connected(params, tmp_path / "stderr.log") as client:
            assert client.server_info is not None
            assert client.server_info.name == "web_search"
            (tool,) = (await client.list_tools()).tools
            failed, text = await call(client, "search", query="eiffel tower height", num=1)
            _, nothing = await call(client, "search", query="no such thing")
    assert tool.name == "search"
    properties = tool.input_schema["properties"]
    assert list(properties) == ["query", "num", "page", "gl", "hl"]
    assert schema_type(properties["num"]) == "integer" and properties["num"]["default"] == 10
    assert tool.input_schema["required"] == ["query"]
    assert not failed, text
    lines = text.splitlines()
    assert lines.index("Answer: 330 m") < lines.index("About Eiffel Tower: Lattice tower in Paris.")
    assert "1. Eiffel Tower - Wikipedia" in lines
    assert "   http://127.0.0.1:1/eiffel" in lines
    assert "   Mar 3, 2024 — The Eiffel Tower is 330 metres tall." in lines
    assert "2. Eiffel Tower facts" not in lines  # num=1
    assert "No results" in nothing


async def test_local_backend_serves_corpus_links(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    docs = [{"id": "eiffel", "title": "Eiffel Tower", "text": "A 330 metre iron tower."}]
    docs += [{"id": f"n{n}", "title": f"Note {n}", "text": f"Filler {n}."} for n in range(4)]
    (corpus / "docs.json").write_text(json.dumps(docs))
    env = {"DEEPLEDGER_SEARCH_CORPUS": str(corpus), "DEEPLEDGER_CACHE_DIR": str(tmp_path)}
    params = server("--backend", "local", "--names", "mirothinker", env=env)
    async with connected(params, tmp_path / "stderr.log") as client:
        failed, text = await call(client, "google_search", q="iron tower")
    assert not failed, text
    organic = json.loads(text)["organic"]
    assert organic[0]["link"] == "corpus://eiffel"
    assert organic[0]["title"] == "Eiffel Tower"
    assert list((tmp_path / "search").glob("*.sqlite3"))


async def test_unreachable_engine_is_an_error_result(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"SERPER_API_KEY": KEY, "SERPER_BASE_URL": f"http://127.0.0.1:{port}"}
    params = server("--backend", "serper", "--max-attempts", "1", env=env)
    async with connected(params, tmp_path / "stderr.log") as client:
        failed, text = await call(client, "search", query="eiffel")
    assert failed
    assert f"search: Could not reach Serper at http://127.0.0.1:{port}/search (" in text


@pytest.mark.parametrize("names", ["deepledger", "mirothinker"])
async def test_servers_answer_calls_in_parallel(
    serper: FakeSerper, tmp_path: Path, names: str
) -> None:
    params = server("--backend", "serper", "--names", names, env=serper_env(serper))
    tool, argument = ("google_search", "q") if names == "mirothinker" else ("search", "query")
    async with connected(params, tmp_path / "stderr.log") as client:
        results = await asyncio.gather(
            *(call(client, tool, **{argument: query}) for query in ("eiffel tower", "unknown"))
        )
    assert [failed for failed, _ in results] == [False, False]
    assert "Eiffel Tower facts" in results[0][1]
    assert sorted(serper.queries) == ["eiffel tower", "unknown"]


LEAKY = [
    {"title": "GAIA answers", "link": "https://huggingface.co/datasets/gaia-benchmark/GAIA",
     "snippet": "Final answer: 42"},
    *EIFFEL,
    {"title": "Datasets docs", "link": "https://huggingface.co/docs/datasets/index",
     "snippet": "How to load a dataset."},
    {"title": "A model", "link": "https://huggingface.co/models", "snippet": "Models."},
    {"title": "A blog", "link": "http://127.0.0.1:1/blog",
     "snippet": "Mirrored at https://huggingface.co/datasets/gaia-benchmark/GAIA"},
    {"title": "The leaderboard", "link": "https://WWW.HF.co/spaces/gaia-benchmark/board",
     "snippet": "Scores."},
]  # fmt: skip
KEPT = [item["link"] for item in LEAKY[1:-1]]


async def test_answer_leaks_never_reach_the_model_in_serper_json(tmp_path: Path) -> None:
    box = {"answer": "42", "link": LEAKY[0]["link"]}
    script = {"gaia question": {"organic": LEAKY, "answerBox": box}}
    with FakeSerper(script, api_key=KEY) as fake:
        params = server("--backend", "serper", "--names", "mirothinker", env=serper_env(fake))
        async with connected(params, tmp_path / "stderr.log") as client:
            failed, text = await call(client, "google_search", q="gaia question")
    assert not failed, text
    data = json.loads(text)
    assert [item["link"] for item in data["organic"]] == KEPT
    assert set(data) == {"organic", "searchParameters"}  # the note goes to the log
    assert data["searchParameters"]["q"] == "gaia question"
    assert "Dropped 3 answer-leak result(s)" in (tmp_path / "stderr.log").read_text()


async def test_answer_leaks_never_reach_the_model_in_text(tmp_path: Path) -> None:
    with FakeSearxng({"gaia question": LEAKY}) as fake:
        params = server("--backend", "searxng", env={"SEARXNG_BASE_URL": fake.base_url})
        async with connected(params, tmp_path / "stderr.log") as client:
            failed, text = await call(client, "search", query="gaia question")
    assert not failed, text
    assert "huggingface.co/datasets" not in text.replace(LEAKY[-2]["snippet"], "")
    assert "hf.co" not in text.lower()
    for link in KEPT:
        assert f"   {link}" in text
    assert text.splitlines()[-1] == (
        "Note: 2 results dropped as answer leaks (pages that publish benchmark answers; "
        "web.blocked_urls)."
    )


async def test_a_user_pattern_drops_its_results(tmp_path: Path) -> None:
    env = {"DEEPLEDGER_BLOCKED_URLS": "127.0.0.1/facts*", "DEEPLEDGER_BLOCK_ANSWER_SITES": "0"}
    with FakeSearxng({"gaia question": LEAKY}) as fake:
        params = server("--backend", "searxng", env={"SEARXNG_BASE_URL": fake.base_url, **env})
        async with connected(params, tmp_path / "stderr.log") as client:
            _, text = await call(client, "search", query="gaia question")
    assert "http://127.0.0.1:1/facts" not in text
    assert "https://huggingface.co/datasets/gaia-benchmark/GAIA\n" in text  # cleared
    assert "Note: 1 result dropped as answer leaks" in text


SITE = "http://127.0.0.1:1"
RICH = [
    {"title": "北京 - 维基百科", "link": f"{SITE}/wiki/%E5%8C%97%E4%BA%AC",
     "snippet": "Capital of China.", "date": "Jan 1, 2024",
     "sitelinks": [{"title": "History", "link": f"{SITE}/wiki/%E5%8C%97%E4%BA%AC%23History"},
                   {"title": "Leak", "link": "https://huggingface.co/datasets/x/y"}],
     "attributes": {"Population": "21.9 million", "Area": "16,411 km²"}},
    {"title": "A query page", "link": f"{SITE}/s?q=a%26b%3Dc&x=%E4%B8%AD%20%25",
     "snippet": "see http://x/%E4%B8%AD"},
    {"title": "Broken bytes", "link": f"{SITE}/p/%FF%FE"},
]  # fmt: skip


async def test_mirothinker_results_keep_sitelinks_and_attributes_with_decoded_urls(
    tmp_path: Path,
) -> None:
    with FakeSerper({"beijing": RICH}, api_key=KEY) as fake:
        params = server("--backend", "serper", "--names", "mirothinker", env=serper_env(fake))
        async with connected(params, tmp_path / "stderr.log") as client:
            failed, text = await call(client, "google_search", q="beijing")
    assert not failed, text
    first, second, third = json.loads(text)["organic"]
    assert first == {
        "title": "北京 - 维基百科", "link": f"{SITE}/wiki/北京", "snippet": "Capital of China.",
        "date": "Jan 1, 2024",
        "sitelinks": [{"title": "History", "link": f"{SITE}/wiki/北京%23History"}],
        "attributes": {"Population": "21.9 million", "Area": "16,411 km²"}, "position": 1,
    }  # fmt: skip
    # Delimiters, "%" and spaces stay escaped: decoding them would move the link.
    assert second["link"] == f"{SITE}/s?q=a%26b%3Dc&x=中%20%25"
    assert second["snippet"] == "see http://x/中"
    assert third["link"] == f"{SITE}/p/%FF%FE"  # not UTF-8: left as sent


async def test_a_quoted_query_retried_names_the_query_searched(
    serper: FakeSerper, tmp_path: Path
) -> None:
    params = server("--backend", "serper", "--names", "mirothinker", env=serper_env(serper))
    async with connected(params, tmp_path / "stderr.log") as client:
        failed, text = await call(client, "google_search", q='"eiffel tower"')
    assert not failed, text
    data = json.loads(text)
    assert data["searchParameters"]["q"] == "eiffel tower"
    assert set(data) == {"organic", "searchParameters"}


async def test_deepledger_naming_shows_sitelinks_and_attributes(tmp_path: Path) -> None:
    with FakeSerper({"beijing": RICH}, api_key=KEY) as fake:
        params = server("--backend", "serper", env=serper_env(fake))
        async with connected(params, tmp_path / "stderr.log") as client:
            _, text = await call(client, "search", query="beijing")
    lines = text.splitlines()
    assert "   Population: 21.9 million" in lines
    assert f"   - History: {SITE}/wiki/%E5%8C%97%E4%BA%AC%23History" in lines
    assert "huggingface.co" not in text
    assert "Note: 1 result dropped as answer leaks" in text
