"""The answer-leak rules: which URLs count as pages publishing benchmark answers."""

from __future__ import annotations

import pytest

from deepledger.blocked_urls import (
    BLOCKED_URLS_ENV,
    BUILTIN_ENV,
    BlockedURLs,
    clean_patterns,
    url_key,
)
from deepledger.config import Config, leak_rules, server_environment, share_reading_rules
from tests.support.config import composed

BLOCKED = [
    "https://huggingface.co/datasets/gaia-benchmark/GAIA",
    "http://huggingface.co/datasets/cais/hle/viewer/default/test",
    "https://www.huggingface.co/datasets/x/y",
    "https://HuggingFace.CO/Datasets/x",
    "https://huggingface.co:443/spaces/gaia-benchmark/leaderboard",
    "https://hf.co/datasets/openai/browsecomp",
    "hf.co/spaces/a/b",
    "https://huggingface.co/%64atasets/x",
    "https://huggingface.co./datasets/x?row=3#answer",
    # The path the request will ask for: dot segments and doubled slashes resolved.
    "https://huggingface.co/x/../datasets/gaia",
    "https://huggingface.co/./datasets/x",
    "https://huggingface.co//datasets/x",
    "https://huggingface.co/a/b/%2E%2E/../datasets/x",
    # The Hub's API and its dataset viewer's server hand out the same rows.
    "https://huggingface.co/api/datasets/cais/hle/parquet",
    "https://datasets-server.huggingface.co/rows?dataset=gaia-benchmark/GAIA",
]
NOT_BLOCKED = [
    "https://huggingface.co/docs/datasets/index",
    "https://huggingface.co/models",
    "https://huggingface.co/meta-llama/Llama-3-8B",
    "https://huggingface.co/datasets",  # the search page, not a dataset
    "https://huggingface.co/datasets/../docs/x",  # resolves to the docs
    "https://huggingface.co/api/models/x",
    "https://example.com/a-post-about-huggingface.co/datasets/x",
    "https://example.com/?next=https://huggingface.co/datasets/x",
    "https://nothuggingface.co/datasets/x",
    "https://github.com/gaia-benchmark/GAIA",
    "corpus://doc-1",
    "not a url",
]


@pytest.mark.parametrize("url", BLOCKED)
def test_builtin_rules_block_dataset_and_space_pages(url: str) -> None:
    assert BlockedURLs().rule_for(url) is not None


@pytest.mark.parametrize("url", NOT_BLOCKED)
def test_near_misses_are_not_blocked(url: str) -> None:
    assert BlockedURLs().rule_for(url) is None


def test_a_user_pattern_adds_to_the_builtin_rules() -> None:
    rules = BlockedURLs(clean_patterns(["https://www.GitHub.com/gaia-benchmark/*", " ", "x"]))
    assert rules.extra == ("github.com/gaia-benchmark/*", "x")
    assert rules.rule_for("https://github.com/gaia-benchmark/GAIA/blob/main/a.json")
    assert rules.rule_for("https://github.com/other/GAIA") is None
    assert rules.rule_for("https://huggingface.co/datasets/x") == "huggingface.co/datasets/*"


def test_the_builtin_rules_go_only_when_cleared_explicitly() -> None:
    cleared = BlockedURLs(("github.com/x/*",), builtin=False)
    assert cleared.rule_for("https://huggingface.co/datasets/x") is None
    assert cleared.rule_for("https://github.com/x/y") == "github.com/x/*"


def test_url_key_is_host_and_path() -> None:
    assert url_key("HTTPS://www.Example.com:8080/A%20b?q=1#f") == "example.com/a b"
    assert url_key("https://example.com") == "example.com/"
    assert url_key("") is None and url_key("https://[bad") is None


def test_the_config_reaches_the_servers_environment() -> None:
    cfg = Config()
    assert leak_rules(cfg) == BlockedURLs()
    env = server_environment(cfg)
    assert BlockedURLs.from_environment(env) == BlockedURLs()
    cfg.web.blocked_urls = ["github.com/openai/simple-evals*", "example.org/answers/*"]
    cfg.web.block_answer_sites = False
    env = server_environment(cfg)
    assert env[BUILTIN_ENV] == "0"
    assert env[BLOCKED_URLS_ENV] == "github.com/openai/simple-evals*\nexample.org/answers/*"
    rules = BlockedURLs.from_environment(env)
    assert rules == BlockedURLs(("github.com/openai/simple-evals*", "example.org/answers/*"), False)


def test_no_environment_means_the_builtin_rules() -> None:
    assert BlockedURLs.from_environment({}) == BlockedURLs()


def test_a_preset_adds_its_own_patterns_and_the_user_adds_more() -> None:
    cfg = composed("benchmark=simpleqa", "web.blocked_urls=[github.com/me/answers*]")
    rules = BlockedURLs.from_environment(server_environment(cfg))
    csv = "https://openaipublic.blob.core.windows.net/simple-evals/simple_qa_test_set.csv"
    assert rules.rule_for(csv) == "openaipublic.blob.core.windows.net/simple-evals/*"
    assert rules.rule_for("https://github.com/me/answers/x") == "github.com/me/answers*"
    assert rules.rule_for("https://huggingface.co/datasets/basicv8vc/SimpleQA")
    plain = BlockedURLs.from_environment(server_environment(composed("benchmark=example")))
    assert plain.rule_for(csv) is None
    cleared = composed("benchmark=simpleqa", "web.block_answer_sites=false")
    rules = BlockedURLs.from_environment(server_environment(cleared))
    assert rules.rule_for("https://huggingface.co/datasets/basicv8vc/SimpleQA") is None
    assert rules.rule_for(csv) is not None


def test_this_process_gets_the_rules_for_the_scraper(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scraper reads pages in deepledger's own process: the run's rules must be there."""
    monkeypatch.setenv(BLOCKED_URLS_ENV, "")  # restored after the test, set or not
    monkeypatch.setenv(BUILTIN_ENV, "1")
    share_reading_rules(composed("benchmark=browsecomp", "web.block_answer_sites=false"))
    rules = BlockedURLs.from_environment()
    assert rules == BlockedURLs(("openaipublic.blob.core.windows.net/simple-evals/*",), False)
