"""Each search backend against its fake engine over loopback: requests, parsing, failures."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from deepledger.llm.retry import RetryPolicy
from deepledger.web.search import (
    BackendOptions,
    SearchConfigError,
    SearchError,
    SearchQuery,
    SearchRejectedError,
    SearchUnavailableError,
    backend_names,
    create_backend,
)
from deepledger.web.search.local import corpus_link, doc_id_from_corpus_link
from tests.support.doubles.fake_search_server import (
    FakeBrave,
    FakeSearxng,
    FakeSerper,
    FakeTavily,
    SearchFault,
    garbage,
    rate_limited,
    server_error,
    unauthorized,
)

KEY = "sk-planted-7d1e0c9a4b"  # a key that must never show up in any text we produce

EIFFEL = [
    {"title": "Eiffel Tower - Wikipedia", "link": "https://en.wikipedia.org/wiki/Eiffel_Tower",
     "snippet": "The Eiffel Tower is 330 metres (1,083 ft) tall.", "date": "Mar 3, 2024"},
    {"title": "Eiffel Tower facts", "link": "https://example.org/eiffel",
     "snippet": "Completed in <b>1889</b> for the World's Fair."},
    {"title": "Visiting the tower", "link": "https://example.org/visit", "snippet": "Tickets."},
]  # fmt: skip

SERPER_EXTRAS = {
    "organic": EIFFEL,
    "answerBox": {"title": "Eiffel Tower / Height", "answer": "330 m"},
    "knowledgeGraph": {
        "title": "Eiffel Tower", "type": "Tower", "website": "https://www.toureiffel.paris/",
        "description": "Wrought-iron lattice tower in Paris.", "descriptionSource": "Wikipedia",
        "attributes": {"Height": "330 m", "Opened": "March 31, 1889"},
    },
    "peopleAlsoAsk": [{"question": "How tall is the Eiffel Tower?", "snippet": "330 m",
                       "title": "Height", "link": "https://example.org/height"}],
    "relatedSearches": [{"query": "eiffel tower tickets"}, {"query": "eiffel tower history"}],
}  # fmt: skip


class Sleeps:
    """A stand-in for asyncio.sleep that records the waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def options(sleeps: Sleeps, *, attempts: int = 3, timeout: float = 5.0) -> BackendOptions:
    policy = RetryPolicy(
        max_attempts=attempts,
        initial_wait_seconds=0.5,
        max_wait_seconds=2.0,
        jitter_seconds=0.0,
        max_retry_after_seconds=30.0,
    )
    return BackendOptions(timeout_seconds=timeout, retry=policy, sleep=sleeps)


def serper(fake: FakeSerper | None, sleeps: Sleeps, key: str | None = KEY, **kw):
    env = {"SERPER_BASE_URL": fake.base_url if fake else "http://127.0.0.1:9"}
    if key is not None:
        env["SERPER_API_KEY"] = key
    return create_backend("serper", env=env, options=options(sleeps, **kw))


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- Serper -------------------------------------------------------------------------------


async def test_serper_sends_key_header_and_only_given_options(sleeps: Sleeps) -> None:
    with FakeSerper({"Eiffel Tower height": SERPER_EXTRAS}, api_key=KEY) as fake:
        async with serper(fake, sleeps) as backend:
            response = await backend.search(
                SearchQuery("eiffel tower  height", num=2, gl="fr", tbs="qdr:y")
            )
    (request,) = fake.requests
    assert (request.method, request.path) == ("POST", "/search")
    assert request.headers["x-api-key"] == KEY
    assert request.body == {"q": "eiffel tower  height", "num": 2, "gl": "fr", "tbs": "qdr:y"}
    assert [(r.position, r.title) for r in response.results] == [
        (1, "Eiffel Tower - Wikipedia"),
        (2, "Eiffel Tower facts"),
    ]
    first, second = response.results
    assert first.date == "Mar 3, 2024" and second.date is None
    assert second.snippet == "Completed in 1889 for the World's Fair."  # tags dropped
    assert response.answer_box is not None and response.answer_box.answer == "330 m"
    graph = response.knowledge_graph
    assert graph is not None and graph.link == "https://www.toureiffel.paris/"
    assert ("Height", "330 m") in graph.attributes
    assert response.people_also_ask[0].question == "How tall is the Eiffel Tower?"
    assert response.related_searches == ("eiffel tower tickets", "eiffel tower history")


async def test_serper_pages_continue_positions(sleeps: Sleeps) -> None:
    with FakeSerper({"eiffel": EIFFEL}, api_key=KEY) as fake:
        async with serper(fake, sleeps) as backend:
            response = await backend.search(SearchQuery("eiffel", num=2, page=2))
    assert fake.requests[0].body == {"q": "eiffel", "num": 2, "page": 2}
    assert [(r.position, r.link) for r in response.results] == [(3, "https://example.org/visit")]


async def test_unknown_query_gets_the_default(sleeps: Sleeps) -> None:
    default = [{"title": "Anything", "link": "https://example.org/any", "snippet": "..."}]
    with FakeSerper(default=lambda q: default if "any" in q else [], api_key=KEY) as fake:
        async with serper(fake, sleeps) as backend:
            found = await backend.search(SearchQuery("anything at all"))
            nothing = await backend.search(SearchQuery("something else"))
    assert [r.title for r in found.results] == ["Anything"]
    assert nothing.results == ()


async def test_rate_limit_is_retried_after_the_requested_wait(sleeps: Sleeps) -> None:
    with FakeSerper({"eiffel": EIFFEL}, api_key=KEY) as fake:
        fake.fail_next(rate_limited(retry_after=7))
        async with serper(fake, sleeps) as backend:
            response = await backend.search(SearchQuery("eiffel"))
    assert len(fake.requests) == 2
    assert sleeps.waits == [7.0]
    assert len(response.results) == 3


async def test_server_errors_are_retried_with_backoff_then_reported(sleeps: Sleeps) -> None:
    with FakeSerper({"eiffel": EIFFEL}, api_key=KEY) as fake:
        fake.fail_next(server_error(502), server_error(503), server_error(500))
        async with serper(fake, sleeps) as backend:
            with pytest.raises(SearchUnavailableError, match="HTTP 500"):
                await backend.search(SearchQuery("eiffel"))
            fake.fail_next(server_error(500))
            recovered = await backend.search(SearchQuery("eiffel"))
    assert len(fake.requests) == 5
    assert sleeps.waits[:2] == [0.5, 1.0]  # exponential from the policy's initial wait
    assert len(recovered.results) == 3


async def test_not_json_is_retried_then_reported(sleeps: Sleeps) -> None:
    with FakeSerper({"eiffel": EIFFEL}, api_key=KEY) as fake:
        fake.fail_next(garbage(), garbage())
        async with serper(fake, sleeps, attempts=2) as backend:
            with pytest.raises(SearchUnavailableError, match="not JSON"):
                await backend.search(SearchQuery("eiffel"))
    assert len(fake.requests) == 2


async def test_rejected_key_is_not_retried_and_names_the_variable(sleeps: Sleeps) -> None:
    with FakeSerper({"eiffel": EIFFEL}, api_key="the-right-key") as fake:
        async with serper(fake, sleeps) as backend:
            with pytest.raises(SearchRejectedError) as rejected:
                await backend.search(SearchQuery("eiffel"))
            fake.fail_next(unauthorized(401))
            with pytest.raises(SearchRejectedError) as unauthorized_error:
                await backend.search(SearchQuery("eiffel"))
    assert len(fake.requests) == 2
    assert rejected.value.status == 403
    assert unauthorized_error.value.status == 401
    for error in (rejected.value, unauthorized_error.value):
        assert "check SERPER_API_KEY" in str(error)
        assert KEY not in str(error)


async def test_missing_key_names_the_variable_without_sending(sleeps: Sleeps) -> None:
    with FakeSerper(api_key=KEY) as fake:
        async with serper(fake, sleeps, key=None) as backend:
            with pytest.raises(SearchConfigError, match=r"^SERPER_API_KEY is not set: "):
                await backend.search(SearchQuery("eiffel"))
    assert fake.requests == []


async def test_unreachable_engine_is_a_clear_error(sleeps: Sleeps) -> None:
    port = closed_port()
    env = {"SERPER_API_KEY": KEY, "SERPER_BASE_URL": f"http://127.0.0.1:{port}"}
    backend = create_backend("serper", env=env, options=options(sleeps, attempts=2))
    async with backend:
        with pytest.raises(SearchUnavailableError) as error:
            await backend.search(SearchQuery("eiffel"))
    assert f"Could not reach Serper at http://127.0.0.1:{port}/search" in str(error.value)
    assert len(sleeps.waits) == 1  # retried once, as a dropped connection may come back


async def test_slow_engine_times_out(sleeps: Sleeps) -> None:
    with FakeSerper(api_key=KEY) as fake:
        fake.fail_next(SearchFault(200, "{}", delay=30))
        async with serper(fake, sleeps, attempts=1, timeout=1.0) as backend:
            with pytest.raises(SearchUnavailableError, match=r"did not answer within 1 s"):
                await backend.search(SearchQuery("eiffel"))


async def test_redirect_is_not_followed_with_the_key(sleeps: Sleeps) -> None:
    with FakeSerper(api_key=KEY) as fake, FakeSerper(api_key=KEY) as elsewhere:
        target = f"{elsewhere.base_url}/search"
        fake.fail_next(SearchFault(307, "", headers={"Location": target}))
        async with serper(fake, sleeps) as backend:
            with pytest.raises(SearchRejectedError, match="redirects to"):
                await backend.search(SearchQuery("eiffel"))
    assert elsewhere.requests == []


async def test_a_planted_key_never_appears_in_errors(sleeps: Sleeps) -> None:
    echo = SearchFault(400, f'{{"message": "Bad request with key {KEY}"}}')
    with FakeSerper(api_key=KEY) as fake:
        fake.fail_next(echo, SearchFault(500, f"upstream said {KEY}"), garbage())
        async with serper(fake, sleeps, attempts=1) as backend:
            messages = []
            for _ in range(3):
                with pytest.raises(SearchError) as error:
                    await backend.search(SearchQuery("eiffel"))
                messages.append(str(error.value))
    assert "Bad request with key ***" in messages[0]
    assert all(KEY not in message for message in messages)


# --- SearXNG ------------------------------------------------------------------------------


SEARXNG_EXTRAS = {
    "organic": EIFFEL,
    "answers": [{"answer": "330 m", "url": "https://example.org/height"}],
    "infoboxes": [{"infobox": "Eiffel Tower", "id": "https://en.wikipedia.org/wiki/Eiffel_Tower",
                   "content": "Lattice tower in Paris.", "engine": "wikipedia",
                   "attributes": [{"label": "Height", "value": "330 m"}]}],
    "suggestions": ["eiffel tower at night"],
    "unresponsive_engines": [["google", "CAPTCHA"]],
}  # fmt: skip


async def test_searxng_request_and_parsing(sleeps: Sleeps) -> None:
    with FakeSearxng({"eiffel": SEARXNG_EXTRAS}) as fake:
        env = {"SEARXNG_BASE_URL": fake.base_url + "/"}
        async with create_backend("searxng", env=env, options=options(sleeps)) as backend:
            response = await backend.search(
                SearchQuery("eiffel", num=2, hl="fr", gl="fr", tbs="qdr:w")
            )
    (request,) = fake.requests
    assert (request.method, request.path) == ("GET", "/search")
    assert request.params == {
        "q": "eiffel", "format": "json", "pageno": "1", "language": "fr-FR", "time_range": "week"
    }  # fmt: skip
    assert [r.link for r in response.results] == [EIFFEL[0]["link"], EIFFEL[1]["link"]]
    assert response.answer_box is not None and response.answer_box.answer == "330 m"
    assert response.knowledge_graph is not None
    assert response.knowledge_graph.attributes == (("Height", "330 m"),)
    assert response.related_searches == ("eiffel tower at night",)
    assert response.notes == ("Engines that did not respond: google (CAPTCHA).",)


async def test_searxng_without_json_output_explains_the_setting(sleeps: Sleeps) -> None:
    with FakeSearxng({"eiffel": EIFFEL}, json_enabled=False) as fake:
        env = {"SEARXNG_BASE_URL": fake.base_url}
        async with create_backend("searxng", env=env, options=options(sleeps)) as backend:
            with pytest.raises(SearchRejectedError, match=r"search\.formats.*settings\.yml"):
                await backend.search(SearchQuery("eiffel"))


async def test_searxng_needs_its_base_url(sleeps: Sleeps) -> None:
    async with create_backend("searxng", env={}, options=options(sleeps)) as backend:
        with pytest.raises(SearchConfigError, match=r"^SEARXNG_BASE_URL is not set"):
            await backend.search(SearchQuery("eiffel"))


# --- Tavily -------------------------------------------------------------------------------


async def test_tavily_bearer_key_answer_and_pages(sleeps: Sleeps) -> None:
    scripted = {"organic": EIFFEL, "answer": "The Eiffel Tower is 330 m tall."}
    with FakeTavily({"eiffel": scripted}, api_key=KEY) as fake:
        env = {"TAVILY_API_KEY": KEY, "TAVILY_BASE_URL": fake.base_url}
        async with create_backend("tavily", env=env, options=options(sleeps)) as backend:
            response = await backend.search(SearchQuery("eiffel", num=2, page=2, tbs="qdr:d"))
    (request,) = fake.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body is not None
    assert request.body["query"] == "eiffel"
    assert request.body["max_results"] == 4  # pages 1 and 2, since Tavily has no pages
    assert request.body["time_range"] == "day"
    assert [(r.position, r.link) for r in response.results] == [(3, "https://example.org/visit")]
    assert response.answer_box is not None
    assert response.answer_box.answer == "The Eiffel Tower is 330 m tall."


async def test_tavily_key_problems(sleeps: Sleeps) -> None:
    with FakeTavily(api_key="the-right-key") as fake:
        env = {"TAVILY_API_KEY": KEY, "TAVILY_BASE_URL": fake.base_url}
        async with create_backend("tavily", env=env, options=options(sleeps)) as backend:
            with pytest.raises(SearchRejectedError, match="check TAVILY_API_KEY") as error:
                await backend.search(SearchQuery("eiffel"))
        assert KEY not in str(error.value)
        env = {"TAVILY_BASE_URL": fake.base_url}
        async with create_backend("tavily", env=env, options=options(sleeps)) as backend:
            with pytest.raises(SearchConfigError, match=r"^TAVILY_API_KEY is not set"):
                await backend.search(SearchQuery("eiffel"))
    assert len(fake.requests) == 1


# --- Brave --------------------------------------------------------------------------------


async def test_brave_request_and_parsing(sleeps: Sleeps) -> None:
    scripted = {
        "organic": EIFFEL,
        "infobox": {"results": [{"title": "Eiffel Tower", "url": "https://example.org/kg",
                                 "description": "Tower in Paris", "attributes": [["Height",
                                                                                  "330 m"]]}]},
        "faq": {"results": [{"question": "How old is it?", "answer": "Built in 1889."}]},
    }  # fmt: skip
    with FakeBrave({"eiffel": scripted}, api_key=KEY) as fake:
        env = {"BRAVE_API_KEY": KEY, "BRAVE_BASE_URL": fake.base_url}
        async with create_backend("brave", env=env, options=options(sleeps)) as backend:
            response = await backend.search(SearchQuery("eiffel", num=2, page=2, gl="us"))
    (request,) = fake.requests
    assert request.path == "/res/v1/web/search"
    assert request.headers["x-subscription-token"] == KEY
    assert request.params["count"] == "2" and request.params["offset"] == "1"
    assert request.params["country"] == "US"
    assert [(r.position, r.link) for r in response.results] == [(3, "https://example.org/visit")]
    assert response.knowledge_graph is not None
    assert response.knowledge_graph.attributes == (("Height", "330 m"),)
    assert response.people_also_ask[0].snippet == "Built in 1889."


async def test_brave_rejected_and_missing_key(sleeps: Sleeps) -> None:
    with FakeBrave(api_key="the-right-key") as fake:
        env = {"BRAVE_API_KEY": KEY, "BRAVE_BASE_URL": fake.base_url}
        async with create_backend("brave", env=env, options=options(sleeps)) as backend:
            with pytest.raises(SearchRejectedError, match="subscription token is invalid"):
                await backend.search(SearchQuery("eiffel"))
        async with create_backend("brave", env={}, options=options(sleeps)) as backend:
            with pytest.raises(SearchConfigError, match=r"^BRAVE_API_KEY is not set"):
                await backend.search(SearchQuery("eiffel"))


# --- local --------------------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "corpus"
    (folder / "towers").mkdir(parents=True)
    (folder / "towers" / "eiffel.md").write_text(
        "# Eiffel Tower\n\nThe Eiffel Tower in Paris is 330 metres tall.\n"
    )
    (folder / "bridges.md").write_text("# Golden Gate\n\nA suspension bridge in San Francisco.\n")
    others = [{"title": f"Note {n}", "text": f"Filler document number {n}."} for n in range(4)]
    (folder / "notes.json").write_text(json.dumps(others))
    monkeypatch.setenv("DEEPLEDGER_CACHE_DIR", str(tmp_path / "cache"))
    return folder


async def test_local_backend_links_into_the_corpus(corpus: Path, tmp_path: Path) -> None:
    env = {"DEEPLEDGER_SEARCH_CORPUS": str(corpus), "DEEPLEDGER_CACHE_DIR": str(tmp_path / "c")}
    async with create_backend("local", env=env) as backend:
        response = await backend.search(SearchQuery("how tall is the eiffel tower"))
        later_page = await backend.search(SearchQuery("eiffel", num=1, page=2))
    first = response.results[0]
    assert first.title == "Eiffel Tower"
    assert first.link == "corpus://towers%2Feiffel.md"
    assert doc_id_from_corpus_link(first.link) == "towers/eiffel.md"
    assert later_page.results == ()
    assert list((tmp_path / "c" / "search").glob("*.sqlite3"))  # the index went where told


def test_corpus_links_round_trip_and_match_the_page_reader() -> None:
    from deepledger.web import pages

    for doc_id in ("0", "a/b c.md#3", "Ünïcode?&=%"):
        assert doc_id_from_corpus_link(corpus_link(doc_id)) == doc_id
        assert pages.corpus_link(doc_id) == corpus_link(doc_id)
    assert doc_id_from_corpus_link("https://example.org/") is None
    assert doc_id_from_corpus_link("corpus://") is None


async def test_local_backend_reports_a_missing_corpus(tmp_path: Path) -> None:
    env = {"DEEPLEDGER_SEARCH_CORPUS": str(tmp_path / "nowhere")}
    async with create_backend("local", env=env) as backend:
        with pytest.raises(SearchConfigError, match="does not exist"):
            await backend.search(SearchQuery("eiffel"))


# --- the registry and queries -------------------------------------------------------------


def test_registry_names_every_backend() -> None:
    assert set(backend_names()) >= {"serper", "searxng", "tavily", "brave", "local"}
    with pytest.raises(SearchConfigError, match=r"Unknown search backend 'bing'.*serper"):
        create_backend("bing", env={})


@pytest.mark.parametrize(
    ("tbs", "expected"),
    [("qdr:h", "hour"), ("qdr:d", "day"), ("qdr:w2", "week"), ("qdr:y", "year"),
     ("cdr:1", None), (None, None)],
)  # fmt: skip
def test_time_filter_words(tbs: str | None, expected: str | None) -> None:
    assert SearchQuery("x", tbs=tbs).time_range == expected


# --- each engine's own language codes -------------------------------------------------------


@pytest.mark.parametrize(
    ("hl", "gl", "language", "accept"),
    [
        ("zh-cn", "cn", "zh-CN", "zh-CN,zh;q=0.9"),
        ("zh_CN", None, "zh-CN", "zh-CN,zh;q=0.9"),
        ("zh-Hant", None, "zh-TW", "zh-TW,zh;q=0.9"),
        ("zh", "tw", "zh-TW", "zh-TW,zh;q=0.9"),
        ("en", "us", "en-US", "en-US,en;q=0.9"),
        ("de", None, "de", "de"),
        (None, "us", None, "*"),
    ],
)
async def test_searxng_gets_a_locale_and_an_accept_language(
    sleeps: Sleeps, hl: str | None, gl: str | None, language: str | None, accept: str
) -> None:
    """The fake answers 400 to a language that is not a locale (zh-cn-CN) and 429 to a
    request without Accept-Language, as SearXNG and its bot limiter do."""
    with FakeSearxng({"beijing": EIFFEL}) as fake:
        env = {"SEARXNG_BASE_URL": fake.base_url}
        async with create_backend("searxng", env=env, options=options(sleeps)) as backend:
            response = await backend.search(SearchQuery("beijing", hl=hl, gl=gl))
    assert len(response.results) == 3
    (request,) = fake.requests
    assert request.params.get("language") == language
    assert request.headers["accept-language"] == accept


async def test_the_searxng_fake_refuses_what_searxng_refuses(sleeps: Sleeps) -> None:
    import httpx

    with FakeSearxng({"beijing": EIFFEL}) as fake:
        url = fake.base_url + "/search"
        params = {"q": "beijing", "format": "json"}
        async with httpx.AsyncClient() as client:
            bare = await client.get(url, params=params)
            wrong = await client.get(
                url, params={**params, "language": "zh-cn-CN"}, headers={"Accept-Language": "*"}
            )
    assert (bare.status_code, wrong.status_code) == (429, 400)


@pytest.mark.parametrize(
    ("hl", "gl", "search_lang", "country"),
    [
        ("zh-cn", "cn", "zh-hans", "CN"),
        ("zh-TW", "tw", "zh-hant", "TW"),
        ("ja", "jp", "jp", "JP"),
        ("pt", "br", "pt-br", "BR"),
        ("pt-PT", None, "pt-pt", None),
        ("en", "uk", "en-gb", "GB"),
        ("en", "us", "en", "US"),
        ("no", "no", "nb", "NO"),
        ("sw", "ke", None, None),  # neither is one of Brave's: left to its defaults
    ],
)
async def test_brave_gets_its_own_language_and_country_codes(
    sleeps: Sleeps, hl: str, gl: str | None, search_lang: str | None, country: str | None
) -> None:
    """The fake answers 422 to a search_lang or country Brave does not document."""
    with FakeBrave({"beijing": EIFFEL}, api_key=KEY) as fake:
        env = {"BRAVE_API_KEY": KEY, "BRAVE_BASE_URL": fake.base_url}
        async with create_backend("brave", env=env, options=options(sleeps)) as backend:
            response = await backend.search(SearchQuery("beijing", hl=hl, gl=gl))
    assert len(response.results) == 3
    (request,) = fake.requests
    assert request.params.get("search_lang") == search_lang
    assert request.params.get("country") == country


async def test_the_brave_fake_refuses_an_undocumented_code(sleeps: Sleeps) -> None:
    with FakeBrave({"beijing": EIFFEL}, api_key=KEY) as fake:
        env = {"BRAVE_API_KEY": KEY, "BRAVE_BASE_URL": fake.base_url}
        async with create_backend("brave", env=env, options=options(sleeps)) as backend:
            from deepledger.web.search.brave import request_params

            params = request_params(SearchQuery("beijing"))
            with pytest.raises(SearchRejectedError, match="422"):
                await backend._http.request(  # type: ignore[attr-defined]
                    "GET",
                    fake.base_url + "/res/v1/web/search",
                    headers={"X-Subscription-Token": KEY},
                    params={**params, "search_lang": "zh-cn"},
                )


async def test_serper_keeps_sitelinks_and_attributes(sleeps: Sleeps) -> None:
    rich = {**EIFFEL[0], "sitelinks": [{"title": "History", "link": "https://example.org/h"}],
            "attributes": {"Height": "330 m", "Empty": ""}}  # fmt: skip
    with FakeSerper({"eiffel": [rich]}, api_key=KEY) as fake:
        env = {"SERPER_API_KEY": KEY, "SERPER_BASE_URL": fake.base_url}
        async with create_backend("serper", env=env, options=options(sleeps)) as backend:
            response = await backend.search(SearchQuery("eiffel"))
    (result,) = response.results
    assert result.sitelinks == (("History", "https://example.org/h"),)
    assert result.attributes == (("Height", "330 m"),)
