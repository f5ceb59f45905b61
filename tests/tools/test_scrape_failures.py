"""The scraper's error results carry what went wrong, whatever the exception."""

from __future__ import annotations

import pytest

from deepledger import web
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.usage import UsageLedger
from deepledger.messages import ToolCall
from deepledger.tools.pool import ToolManager
from deepledger.tools.scrape import SERVER, TOOL, ExtractionModel, PageScraper


async def test_a_broken_install_reaches_the_model_with_its_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def html_reader_without_its_cleaner(*args: object, **kwargs: object) -> web.Document:
        raise ImportError("lxml.html.clean module is now a separate project lxml_html_clean")

    monkeypatch.setattr(web, "read_url", html_reader_without_its_cleaner)
    scraper = PageScraper(ExtractionModel(ScriptedLLM(), GenerationSettings(), None, 8192))
    tool = scraper.tool(journal=None, ledger=UsageLedger())  # type: ignore[arg-type]
    tools = ToolManager({}).for_task([], local_tools=[tool])
    await tools.start()
    result = await tools.call(
        ToolCall(
            "c1", TOOL, {"url": "https://example.org/a", "info_to_extract": ""}, server_name=SERVER
        )
    )
    assert result.is_error
    assert "ImportError" in result.content and "lxml_html_clean" in result.content
