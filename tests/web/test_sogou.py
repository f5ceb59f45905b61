"""Sogou through Tencent Cloud's web search API (web/search/sogou.py), as MiroThinker's
sogou_search calls it: the request signed as Tencent's own SDK signs it, against a
loopback fake that checks the signature over the exact bytes; and the sogou_search tool
of the search_and_scrape_webpage server, run for real over stdio."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from deepledger.web.search import (
    BackendOptions,
    SearchConfigError,
    SearchQuery,
    SearchRejectedError,
    create_backend,
)
from deepledger.web.search.sogou import SogouBackend, tc3_authorization
from tests.support.doubles.fake_search_server import FakeTencentSearch
from tests.support.mcp_client import call

SECRET_ID, SECRET_KEY = "AKIDplanted0a1b2c3", "planted-secret-key-77ee"
TOWER = [
    {"title": "埃菲尔铁塔", "link": "https://baike.example.cn/eiffel",
     "snippet": "埃菲尔铁塔高330米。", "date": "2024-03-03 10:00:00", "site": "百科"},
    {"title": "Leaked answers", "link": "https://huggingface.co/datasets/x/answers",
     "snippet": "330"},
    {"title": "Eiffel Tower facts", "link": "https://facts.example.com/eiffel",
     "snippet": "Completed in 1889."},
]  # fmt: skip


def test_the_signature_is_the_one_tencents_sdk_computes():
    # Computed with tencentcloud-sdk-python-common 3.1.195 (CommonClient("wsa",
    # "2025-05-08").call_json("SearchPro", ...)) for these credentials, body and time.
    payload = json.dumps({"Query": "埃菲尔铁塔 高度", "Mode": 0, "Cnt": 10}).encode()
    header = tc3_authorization(
        "AKIDtestsecretid0001", "testsecretkey0002", "wsa.tencentcloudapi.com", payload,
        1767225600,
    )  # fmt: skip
    assert header == (
        "TC3-HMAC-SHA256 Credential=AKIDtestsecretid0001/2026-01-01/wsa/tc3_request, "
        "SignedHeaders=content-type;host, "
        "Signature=716d78156b8f810c9bd591e6f4446f7665b6ecd0b36c07bcc34a6fc4f29c0db5"
    )


def backend(fake: FakeTencentSearch, secret_key: str = SECRET_KEY) -> SogouBackend:
    env = {"TENCENTCLOUD_SECRET_ID": SECRET_ID, "TENCENTCLOUD_SECRET_KEY": secret_key,
           "TENCENTCLOUD_WSA_BASE_URL": fake.base_url}  # fmt: skip
    made = create_backend("sogou", env=env, options=BackendOptions(timeout_seconds=5))
    assert isinstance(made, SogouBackend)
    return made


async def test_a_signed_search_returns_the_pages():
    with FakeTencentSearch({"eiffel tower": TOWER}, secret_id=SECRET_ID,
                           secret_key=SECRET_KEY) as fake:  # fmt: skip
        async with backend(fake) as sogou:
            query, pages = await sogou.search_pages("eiffel tower", 2)
            response = await sogou.search(SearchQuery("eiffel tower", num=1))
    sent = fake.requests[0]
    assert sent.body == {"Query": "eiffel tower", "Mode": 0, "Cnt": 10}  # Cnt: 10 at least
    assert sent.headers["x-tc-action"] == "SearchPro"
    assert sent.headers["x-tc-version"] == "2025-05-08"
    assert SECRET_KEY not in json.dumps(sent.headers)  # only the id and the signature
    assert query == "eiffel tower" and len(pages) == 2
    assert pages[0]["site"] == "百科" and pages[0]["passage"] == "埃菲尔铁塔高330米。"
    (result,) = response.results
    assert (result.title, result.link, result.date) == (
        "埃菲尔铁塔", "https://baike.example.cn/eiffel", "2024-03-03 10:00:00")  # fmt: skip


async def test_a_wrong_secret_is_a_rejection_naming_the_variables_never_the_secret():
    with FakeTencentSearch(secret_id=SECRET_ID, secret_key=SECRET_KEY) as fake:
        async with backend(fake, secret_key="wrong-secret-key-1234") as sogou:
            with pytest.raises(SearchRejectedError) as caught:
                await sogou.search_pages("eiffel tower")
    message = str(caught.value)
    assert "AuthFailure.SignatureFailure" in message
    assert "TENCENTCLOUD_SECRET_ID" in message and "TENCENTCLOUD_SECRET_KEY" in message
    assert "wrong-secret-key-1234" not in message


async def test_missing_credentials_name_the_variable():
    sogou = create_backend("sogou", env={"TENCENTCLOUD_SECRET_ID": SECRET_ID})
    with pytest.raises(SearchConfigError, match="TENCENTCLOUD_SECRET_KEY is not set"):
        await sogou.search_pages("eiffel tower")
    await sogou.aclose()


async def test_sogou_search_tool_answers_mirothinkers_fields(tmp_path: Path):
    with FakeTencentSearch({"eiffel tower": TOWER}, secret_id=SECRET_ID,
                           secret_key=SECRET_KEY) as fake:  # fmt: skip
        env = {"TENCENTCLOUD_SECRET_ID": SECRET_ID, "TENCENTCLOUD_SECRET_KEY": SECRET_KEY,
               "TENCENTCLOUD_WSA_BASE_URL": fake.base_url}  # fmt: skip
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "deepledger.tools.servers.web_search", "--backend", "serper",
                  "--names", "mirothinker", "--retry-wait", "0"],
            env=env,
        )  # fmt: skip
        with (tmp_path / "stderr.log").open("a") as log:
            async with Client(stdio_client(params, errlog=log)) as client:
                tools = {tool.name: tool for tool in (await client.list_tools()).tools}
                failed, text = await call(client, "sogou_search", Query="eiffel tower")
    schema = tools["sogou_search"].input_schema
    assert list(schema["properties"]) == ["Query", "Cnt"] and schema["required"] == ["Query"]
    assert schema["properties"]["Cnt"]["default"] == 10
    assert not failed, text
    data = json.loads(text)
    assert list(data) == ["Query", "Pages"]  # MiroThinker's fields and no others
    assert data["Query"] == "eiffel tower"
    assert [list(page) for page in data["Pages"]] == [["title", "url", "passage", "date",
                                                       "site"]] * 2  # fmt: skip
    assert "huggingface.co" not in text  # an answer leak, dropped
    assert SECRET_KEY not in text and SECRET_KEY not in (tmp_path / "stderr.log").read_text()
