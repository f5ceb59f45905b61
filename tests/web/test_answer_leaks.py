"""The answer-leak guard on every way a page is read: fetch (and so the reader server and
the scraper's direct path), redirects included, and the Jina path."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from deepledger.blocked_urls import BLOCKED_URLS_ENV, BUILTIN_ENV
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.usage import UsageLedger
from deepledger.messages import ToolCall
from deepledger.tools.pool import ToolManager
from deepledger.tools.scrape import SERVER, TOOL, ExtractionModel, PageScraper
from deepledger.tools.servers.reader import Reader
from deepledger.web import ssrf
from deepledger.web.fetch import FetchError, FetchLimits, fetch
from deepledger.web.jina import JinaError, jina_read
from deepledger.web.pages import read_url
from tests.support.doubles.fake_web_server import FakeJinaServer, FakeWebServer, Page

DATASET = "https://huggingface.co/datasets/gaia-benchmark/GAIA/blob/main/answers.jsonl"
LIMITS = FetchLimits(timeout_seconds=5.0, total_seconds=20.0)


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeWebServer]:
    monkeypatch.setenv(ssrf.ALLOW_ENV, "1")
    monkeypatch.delenv(BLOCKED_URLS_ENV, raising=False)
    monkeypatch.delenv(BUILTIN_ENV, raising=False)
    pages = {
        "/page.html": Page(b"<p>The answer is not here; see huggingface.co/datasets/x.</p>"),
        "/answers/key.txt": Page(b"42", content_type="text/plain"),
    }
    with FakeWebServer(pages) as server:
        server.redirect("/short", DATASET)
        yield server


async def test_a_blocked_url_is_refused_before_any_request(site: FakeWebServer) -> None:
    with pytest.raises(FetchError) as caught:
        await read_url(DATASET, limits=LIMITS)
    assert caught.value.kind == "answer_leak"
    assert "'huggingface.co/datasets/*'" in str(caught.value)


async def test_a_redirect_to_a_blocked_url_is_refused(site: FakeWebServer) -> None:
    with pytest.raises(FetchError) as caught:
        await fetch(site.url("/short"), limits=LIMITS)
    assert caught.value.kind == "answer_leak"
    assert caught.value.url == DATASET
    assert site.paths_requested() == ["/short"]


async def test_a_page_mentioning_huggingface_is_read(site: FakeWebServer) -> None:
    document = await read_url(site.url("/page.html"), limits=LIMITS)
    assert "huggingface.co/datasets/x" in document.text


async def test_a_user_pattern_refuses_its_pages(
    site: FakeWebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await fetch(site.url("/answers/key.txt"), limits=LIMITS)).data == b"42"
    monkeypatch.setenv(BLOCKED_URLS_ENV, "127.0.0.1/answers/*")
    with pytest.raises(FetchError, match=r"'127.0.0.1/answers/\*'"):
        await fetch(site.url("/answers/key.txt"), limits=LIMITS)
    assert (await fetch(site.url("/page.html"), limits=LIMITS)).status == 200
    monkeypatch.setenv(BUILTIN_ENV, "0")  # the user cleared the built-in rules
    site.redirect("/short2", "/page.html")
    assert (await fetch(site.url("/short2"), limits=LIMITS)).status == 200


async def test_the_reader_refuses_a_redirect_to_a_blocked_url(site: FakeWebServer) -> None:
    with pytest.raises(ToolError, match=r"answer-leak rule 'huggingface.co/datasets/\*'"):
        await Reader([]).read(site.url("/short"), 0, 10_000)
    with pytest.raises(ToolError, match=r"answer-leak rule 'hf.co/spaces/\*'"):
        await Reader([]).read("https://HF.co/spaces/some/leaderboard", 0, 10_000)


async def test_the_jina_path_refuses_a_blocked_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BLOCKED_URLS_ENV, raising=False)
    monkeypatch.delenv(BUILTIN_ENV, raising=False)
    with FakeJinaServer({}, api_key="k") as jina:
        with pytest.raises(JinaError) as caught:
            await jina_read(DATASET, api_key="k", base_url=jina.base_url)
        assert jina.requests == []
    assert caught.value.kind == "answer_leak"


@pytest.mark.parametrize("scraper", ["direct", "jina"])
async def test_the_scraper_answers_success_false_with_the_rule(
    site: FakeWebServer, scraper: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JINA_API_KEY", "k")
    monkeypatch.setenv("JINA_BASE_URL", "http://127.0.0.1:9")  # never reached
    model = ExtractionModel(ScriptedLLM(), GenerationSettings(), None, 8192)
    tool = PageScraper(model, scraper, allow_private_networks=True).tool(
        journal=None,  # type: ignore[arg-type]
        ledger=UsageLedger(),
    )
    tools = ToolManager({}).for_task([], local_tools=[tool])
    await tools.start()
    url = DATASET if scraper == "jina" else site.url("/short")
    call = ToolCall("c1", TOOL, {"url": url, "info_to_extract": "the answer"}, server_name=SERVER)
    result = await tools.call(call)
    outcome = json.loads(result.content)
    assert outcome["success"] is False
    assert "answer-leak rule 'huggingface.co/datasets/*'" in outcome["error"]
