"""The scrape tool against loopback fakes of a site and of the Jina reader: the direct
fetch when Jina fails, the model's custom headers, forgiving URLs, and which model
extracts (tools.extract_llm, MiroThinker's SUMMARY_LLM_* variables, the agent's own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deepledger.config import Config, summary_llm_config
from deepledger.errors import ConfigError
from deepledger.llm.base import GenerationSettings
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.usage import UsageLedger
from deepledger.records.events import ExtractionCall
from deepledger.store.journal import Journal
from deepledger.tools.scrape import ExtractionModel, PageScraper
from deepledger.web import JinaLimits
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply
from tests.support.doubles.fake_web_server import Failure, FakeJinaServer, FakeWebServer, Page

KEY = "test-jina-key"
ARTICLE = b"<html><head><title>Herons</title></head><body><p>Herons eat fish.</p></body></html>"


@pytest.fixture
def site() -> Iterator[FakeWebServer]:
    with FakeWebServer({"/herons": Page(ARTICLE)}) as fake:
        yield fake


def _scraper(mode: str = "jina", jina_timeout: float = 30.0, **extra: object) -> PageScraper:
    # A loaded machine can take seconds to answer on loopback: only the test of a silent
    # Jina waits for the timeout, and its server stays silent far longer.
    model = ExtractionModel(ScriptedLLM(["Herons eat fish."]), GenerationSettings(), None, 8192)
    limits = JinaLimits(timeout_seconds=jina_timeout, max_retries=0)
    return PageScraper(model, mode, True, jina_limits=limits, **extra)  # type: ignore[arg-type]


def _read_by(journal: Journal) -> ExtractionCall:
    calls = [e for e in journal.events if isinstance(e, ExtractionCall)]
    assert len(calls) == 1
    return calls[0]


@pytest.mark.parametrize(
    "failure", [Failure(404), Failure(422), Failure(503), Failure(402)], ids=lambda f: f.status
)
async def test_a_jina_failure_falls_back_to_a_direct_fetch(
    site: FakeWebServer, failure: Failure, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = site.url("/herons")
    with FakeJinaServer({url: ("Herons", "# Herons")}, api_key=KEY, failures=[failure]) as jina:
        monkeypatch.setenv("JINA_API_KEY", KEY)
        monkeypatch.setenv("JINA_BASE_URL", jina.base_url)
        journal = Journal(None)
        outcome = await _scraper().scrape_and_extract(url, "diet", {}, journal, UsageLedger())
        assert [r.path for r in jina.requests] == [f"/{url}"]
    assert outcome["success"] is True, outcome
    assert site.paths_requested() == ["/herons"]
    event = _read_by(journal)
    assert event.reader == "direct"
    assert event.jina_error is not None and f"HTTP {failure.status}" in event.jina_error


async def test_an_unreachable_or_silent_jina_falls_back_too(
    site: FakeWebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JINA_API_KEY", KEY)
    with FakeWebServer({}) as hanging:
        hanging.pages["/" + site.url("/herons")] = Page(
            lambda: iter([b"x"]), chunk_delay=120.0, content_length=False
        )
        for base, kind in ((hanging.base_url, "timed out"), ("http://127.0.0.1:9", "reach")):
            monkeypatch.setenv("JINA_BASE_URL", base)
            journal = Journal(None)
            outcome = await _scraper(jina_timeout=2.0).scrape_and_extract(
                site.url("/herons"), "diet", {}, journal, UsageLedger()
            )
            assert outcome["success"] is True, outcome
            event = _read_by(journal)
            assert event.reader == "direct" and kind in (event.jina_error or "")


async def test_jina_serving_the_page_is_journaled_and_no_direct_fetch_follows(
    site: FakeWebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = site.url("/herons")
    with FakeJinaServer({url: ("Herons", "Herons eat fish.")}, api_key=KEY) as jina:
        monkeypatch.setenv("JINA_API_KEY", KEY)
        monkeypatch.setenv("JINA_BASE_URL", jina.base_url)
        journal = Journal(None)
        outcome = await _scraper().scrape_and_extract(url, "diet", {}, journal, UsageLedger())
    assert outcome["success"] is True
    assert site.paths_requested() == []
    assert list(outcome["scrape_stats"]) == [
        "line_count", "char_count", "last_char_line", "all_content_displayed"
    ]  # MiroThinker's, in its order  # fmt: skip
    event = _read_by(journal)
    assert (event.reader, event.jina_error) == ("jina", None)


async def test_both_failing_says_both_and_an_answer_leak_is_not_fetched_directly(
    site: FakeWebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JINA_API_KEY", KEY)
    monkeypatch.setenv("JINA_BASE_URL", "http://127.0.0.1:9")
    scraper = _scraper()
    outcome = await scraper.scrape_and_extract(
        site.url("/missing"), "x", {}, Journal(None), UsageLedger()
    )
    assert outcome["success"] is False
    assert "Jina reader failed" in outcome["error"] and "HTTP 404" in outcome["error"]
    site.redirect("/short", "https://huggingface.co/datasets/x/y")
    leak = "https://huggingface.co/datasets/x/y"
    outcome = await scraper.scrape_and_extract(leak, "x", {}, Journal(None), UsageLedger())
    assert "answer-leak rule" in outcome["error"] and "directly" not in outcome["error"]


async def test_a_private_address_jina_will_not_read_is_not_fetched_directly_either(
    site: FakeWebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JINA_API_KEY", KEY)
    model = ExtractionModel(ScriptedLLM(["unused"]), GenerationSettings(), None, 8192)
    guarded = PageScraper(model, "jina", False, jina_limits=JinaLimits(30.0, max_retries=0))
    outcome = await guarded.scrape_and_extract(
        site.url("/herons"), "diet", {}, Journal(None), UsageLedger()
    )
    assert outcome["success"] is False
    assert not site.requests  # the fallback did not go round the SSRF guard


async def test_custom_headers_reach_the_site_without_credentials_or_hop_by_hop_ones(
    site: FakeWebServer,
) -> None:
    headers = {
        "Accept-Language": "zh-CN",
        "X-Requested-With": "XMLHttpRequest",
        "Authorization": "Bearer stolen",
        "Cookie": "session=1",
        "Proxy-Authorization": "Basic x",
        "Connection": "upgrade",
        "Host": "evil.example",
        "X-Bad": "a\r\nInjected: 1",
    }
    journal = Journal(None)
    outcome = await _scraper("direct").scrape_and_extract(
        site.url("/herons"), "diet", headers, journal, UsageLedger()
    )
    assert outcome["success"] is True
    sent = {k.lower(): v for k, v in site.requests[0].headers.items()}
    assert sent["accept-language"] == "zh-CN" and sent["x-requested-with"] == "XMLHttpRequest"
    for name in ("authorization", "cookie", "proxy-authorization", "injected", "x-bad"):
        assert name not in sent
    assert sent["host"].startswith("127.0.0.1") and sent.get("connection") != "upgrade"
    assert _read_by(journal).dropped_headers == [
        "Authorization", "Cookie", "Proxy-Authorization", "Connection", "Host", "X-Bad"
    ]  # fmt: skip


async def test_custom_headers_go_to_jina_but_never_replace_its_key(
    site: FakeWebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = site.url("/herons")
    with FakeJinaServer({url: ("Herons", "Herons eat fish.")}, api_key=KEY) as jina:
        monkeypatch.setenv("JINA_API_KEY", KEY)
        monkeypatch.setenv("JINA_BASE_URL", jina.base_url)
        headers = {"authorization": "Bearer other", "X-Timeout": "20", "X-Set-Cookie": "a=b",
                   "x-return-format": "text"}  # fmt: skip
        outcome = await _scraper().scrape_and_extract(
            url, "diet", headers, Journal(None), UsageLedger()
        )
        sent = jina.requests[0].headers
    assert outcome["success"] is True
    assert sent["Authorization"] == f"Bearer {KEY}" and sent["X-Timeout"] == "20"
    assert "X-Set-Cookie" not in sent
    assert sent["x-return-format"] == "text" and "X-Return-Format" not in sent


async def test_a_pasted_jina_address_is_read_once_not_prefixed_twice(
    site: FakeWebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = site.url("/herons")
    with FakeJinaServer({url: ("Herons", "Herons eat fish.")}, api_key=KEY) as jina:
        monkeypatch.setenv("JINA_API_KEY", KEY)
        monkeypatch.setenv("JINA_BASE_URL", jina.base_url)
        for pasted in (f"https://r.jina.ai/{url}", f"r.jina.ai/{url}"):
            outcome = await _scraper().scrape_and_extract(
                pasted, "diet", {}, Journal(None), UsageLedger()
            )
            assert outcome["success"] is True and outcome["url"] == pasted
        assert [r.path for r in jina.requests] == [f"/{url}", f"/{url}"]


async def test_a_url_without_a_scheme_gets_https(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    async def read_url(url: str, **_: object) -> object:
        seen.append(url)
        raise __import__("deepledger.web", fromlist=["FetchError"]).FetchError(
            "stop here", kind="connect", url=url
        )

    monkeypatch.setattr("deepledger.web.read_url", read_url)
    for given in ("example.com/a?b=1", "www.example.org", "//cdn.example.net/x"):
        await _scraper("direct").scrape_and_extract(given, "", {}, Journal(None), UsageLedger())
    assert seen == ["https://example.com/a?b=1", "https://www.example.org",
                    "https://cdn.example.net/x"]  # fmt: skip


# --- which model extracts ---------------------------------------------------------------


def test_summary_llm_variables_make_an_openai_compatible_preset() -> None:
    assert summary_llm_config({}) is None
    preset = summary_llm_config(
        {"SUMMARY_LLM_BASE_URL": "https://host/v1/chat/completions",
         "SUMMARY_LLM_MODEL_NAME": "Qwen/Qwen3-14B", "SUMMARY_LLM_API_KEY": "k"}
    )  # fmt: skip
    assert preset is not None
    assert (preset.provider, preset.base_url, preset.model_name, preset.api_key_env) == (
        "openai", "https://host/v1", "Qwen/Qwen3-14B", "SUMMARY_LLM_API_KEY"
    )  # fmt: skip
    assert preset.api_key_required is False and preset.max_tokens == 8192
    base_only = summary_llm_config(
        {"SUMMARY_LLM_BASE_URL": "http://0.0.0.0:61005/v1/", "SUMMARY_LLM_MODEL_NAME": "m"}
    )
    assert base_only is not None and base_only.base_url == "http://0.0.0.0:61005/v1"
    with pytest.raises(ConfigError, match="SUMMARY_LLM_MODEL_NAME is not"):
        summary_llm_config({"SUMMARY_LLM_BASE_URL": "https://host/v1"})


async def test_the_summary_models_name_shows_no_credentials_of_its_url() -> None:
    from deepledger.tools.scrape import summary_model

    preset = summary_llm_config(
        {"SUMMARY_LLM_BASE_URL": "https://user:pa55@gateway.example/v1?key=s3cret",
         "SUMMARY_LLM_MODEL_NAME": "m"}
    )  # fmt: skip
    assert preset is not None
    model = summary_model(preset, _config())
    try:
        assert "gateway.example/v1" in model.source
        assert not [secret for secret in ("pa55", "s3cret", "user:") if secret in model.source]
    finally:
        await model.llm.aclose()


def _config() -> Config:
    from tests.support.config import composed

    cfg: Config = composed()
    return cfg


async def test_summary_llm_variables_choose_the_extraction_model(
    site: FakeWebServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import deepledger.tools.scrape

    # Each model is named once per process: start as a fresh process would.
    monkeypatch.setattr(deepledger.tools.scrape, "_announced", set())
    cfg = _config()
    cfg.web.scraper, cfg.web.allow_private_networks = "direct", True
    agent = ScriptedLLM(["the agent's own answer"])
    with FakeLLMServer([Reply("Herons eat fish (summary model).")]) as summary:
        env = {"SUMMARY_LLM_BASE_URL": summary.openai_base_url + "/chat/completions",
               "SUMMARY_LLM_MODEL_NAME": "summary-small"}  # fmt: skip
        scraper = PageScraper.for_agent(cfg, agent, None, env=env)
        journal = Journal(None)
        outcome = await scraper.scrape_and_extract(
            site.url("/herons"), "diet", {}, journal, UsageLedger()
        )
    assert outcome["extracted_info"] == "Herons eat fish (summary model)."
    assert outcome["model_used"] == "summary-small"
    assert _read_by(journal).model == "summary-small"
    assert "SUMMARY_LLM_MODEL_NAME=summary-small at http://127.0.0.1" in capsys.readouterr().err

    own = PageScraper.for_agent(cfg, agent, None, env={})
    assert own.model.agents_own and own.model.llm is agent
    assert "the agent's own model" in capsys.readouterr().err


def test_half_of_the_summary_variables_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from deepledger.config import validate

    cfg = _config()
    monkeypatch.delenv("SUMMARY_LLM_BASE_URL", raising=False)
    monkeypatch.setenv("SUMMARY_LLM_MODEL_NAME", "gpt-5-nano")
    with pytest.raises(ConfigError, match="SUMMARY_LLM_BASE_URL is not"):
        validate(cfg)
    monkeypatch.setenv("SUMMARY_LLM_BASE_URL", "https://host/v1/chat/completions")
    validate(cfg)
