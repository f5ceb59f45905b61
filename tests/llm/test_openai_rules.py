"""The OpenAI provider keeps each server's rules: reasoning models' parameters,
reasoning text never sent back, Azure's URL and key header; the fake enforces each."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from deepledger.config import compose, validate
from deepledger.errors import ConfigError, FatalLLMError
from deepledger.llm.base import GenerationSettings
from deepledger.llm.factory import create_client
from deepledger.llm.openai import AzureOpenAIChatClient, OpenAIChatClient
from deepledger.messages import Message, ToolResult, ToolSpec
from tests.support.cli import deepledger
from tests.support.config import CONF
from tests.support.doubles.fake_llm_server import (
    AzureDeployment,
    FakeLLMServer,
    FakeToolCall,
    Reply,
)

TASK = [Message.system("You research."), Message.task("What is 2+2?")]
TOOLS = [ToolSpec("search", "Search", {"type": "object", "properties": {"q": {"type": "string"}}})]
# What the config's defaults and a user's sampling choice send.
SAMPLING = GenerationSettings(max_tokens=500, temperature=0.3, top_p=0.9)


def search_then_answer(**first) -> list[Reply]:
    call = FakeToolCall("search", {"q": "2+2"}, id="call_a")
    return [Reply(tool_calls=(call,), **first), Reply(text="\\boxed{4}")]


async def two_turns(client, settings=SAMPLING):
    """A tool-using exchange: the call, then the answer once the result is back."""
    first = await client.generate(TASK, TOOLS, settings)
    results = Message.native_tool_results([ToolResult("call_a", "4", name="search")])
    second = await client.generate([*TASK, first.message, results], TOOLS, settings)
    return first, second


def openai_client(server: FakeLLMServer, model: str, **options) -> OpenAIChatClient:
    return OpenAIChatClient(
        model, api_key="k", base_url=server.openai_base_url, timeout_seconds=10, **options
    )


@pytest.mark.parametrize("model", ["o4-mini", "o3", "gpt-5", "gpt-5.1-mini", "openai/o1"])
async def test_a_reasoning_model_gets_max_completion_tokens_and_no_sampling(model):
    settings = GenerationSettings(
        max_tokens=500, temperature=0.3, top_p=0.9, stop=("</x>",), reasoning_effort="high"
    )
    with FakeLLMServer(search_then_answer(), openai_reasoning_models=True) as server:
        async with openai_client(server, model) as client:
            _, second = await two_turns(client, settings)
        server.assert_all_consumed()
    assert second.text == "\\boxed{4}"
    for request in server.requests:
        body = request.body
        assert body["max_completion_tokens"] == 500 and body["reasoning_effort"] == "high"
        assert not {"max_tokens", "temperature", "top_p", "stop"} & body.keys()


async def test_the_fake_refuses_what_reasoning_models_refuse():
    """The request the provider sent before it knew reasoning models (max_tokens and the
    sampling settings), refused as the OpenAI API does."""
    with FakeLLMServer([Reply(text="x")], openai_reasoning_models=True) as server:
        async with openai_client(server, "o3", reasoning_model=False) as client:
            with pytest.raises(FatalLLMError, match="Unsupported parameter: 'max_tokens'"):
                await client.generate(TASK, (), SAMPLING)
        server.enqueue(Reply(text="x"))  # a temperature other than 1 alone is refused too
        async with openai_client(server, "o3") as client:
            good = {"model": "o3", "max_completion_tokens": 5, "messages": []}
            with pytest.raises(FatalLLMError, match="Only the default"):
                await client.post(client._url, good | {"temperature": 0.3})
    assert len(server.rejected) == 2


async def test_other_models_keep_max_tokens_and_sampling():
    with FakeLLMServer(search_then_answer(), openai_reasoning_models=True) as server:
        async with openai_client(server, "gpt-4.1") as client:
            await two_turns(client, GenerationSettings(max_tokens=500, temperature=0.3))
        server.assert_all_consumed()
    body = server.requests[0].body
    assert (body["max_tokens"], body["temperature"]) == (500, 0.3)
    assert "max_completion_tokens" not in body and "reasoning_effort" not in body


async def test_reasoning_model_can_be_named_by_config_for_any_name():
    with FakeLLMServer([Reply(text="ok")]) as server:
        async with openai_client(server, "my-deployment", reasoning_model=True) as client:
            await client.generate(TASK, (), SAMPLING)
    assert "max_completion_tokens" in server.requests[0].body


async def test_reasoning_content_is_kept_but_never_sent_back():
    with FakeLLMServer(
        search_then_answer(reasoning="Let me search first."), reject_reasoning_content=True
    ) as server:
        async with openai_client(server, "deepseek-reasoner") as client:
            first, second = await two_turns(client)
        server.assert_all_consumed()
    assert first.message.reasoning == "Let me search first."
    assert second.text == "\\boxed{4}"
    assert all("reasoning_content" not in m for m in server.requests[1].messages)


async def test_the_fake_refuses_reasoning_content_in_a_request():
    with FakeLLMServer([Reply(text="x")], reject_reasoning_content=True) as server:
        async with openai_client(server, "m") as client:
            sent = {"role": "assistant", "content": "a", "reasoning_content": "thought"}
            body = {"model": "m", "messages": [{"role": "user", "content": "q"}, sent]}
            with pytest.raises(FatalLLMError, match="reasoning_content is not allowed"):
                await client.post(client._url, body)


AZURE = AzureDeployment(deployment="gpt41-prod", api_version="2024-10-21", api_key="az-secret")


def azure_client(server: FakeLLMServer, **options) -> AzureOpenAIChatClient:
    options = {"api_key": AZURE.api_key, "api_version": AZURE.api_version} | options
    return AzureOpenAIChatClient(
        "gpt-4.1", base_url=server.azure_base_url, timeout_seconds=10, **options
    )


async def test_azure_deployment_url_api_version_and_key_header():
    with FakeLLMServer(search_then_answer(), azure=AZURE) as server:
        async with azure_client(server) as client:
            _, second = await two_turns(client)
        server.assert_all_consumed()
    assert second.text == "\\boxed{4}"
    request = server.requests[0]
    assert request.path == "/openai/deployments/gpt41-prod/chat/completions"
    assert request.headers["api-key"] == "az-secret" and "authorization" not in request.headers


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"api_key": "wrong"}, "HTTP 401"),
        ({"api_version": None}, "Resource not found"),
    ],
)
async def test_the_fake_refuses_a_wrong_azure_request(options, refusal):
    with FakeLLMServer(azure=AZURE) as server:
        async with azure_client(server, **options) as client:
            with pytest.raises(FatalLLMError, match=refusal):
                await client.generate(TASK, (), SAMPLING)


def test_azure_preset_needs_the_deployment_url(monkeypatch):
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "k")
    cfg = compose(CONF, ["llm=azure_openai"])
    validate(cfg)
    with pytest.raises(ConfigError, match=r"llm\.base_url"):
        create_client(cfg.llm)


def test_azure_run_keeps_its_key_out_of_everything_written(tmp_path):
    """`deepledger run` through the preset: the key travels only in the api-key header,
    never in the output, the log, the journal or the saved config."""
    canary = "azure-canary-7f3e9b1c"
    azure = AzureDeployment(deployment="dep", api_key=canary)
    replies = [Reply("I know this: \\boxed{4}."), Reply("\\boxed{4}")]
    with FakeLLMServer(replies, azure=azure) as server:
        os.environ["AZURE_OPENAI_API_KEY"] = canary  # read by the child process only
        try:
            run = deepledger(
                "run",
                "question=What is 2+2?",
                "llm=azure_openai",
                f"llm.base_url={server.azure_base_url}",
                "agent.main_agent.tools=[]",
                f"hydra.run.dir={tmp_path}/run",
                cwd=tmp_path,
            )
        finally:
            del os.environ["AZURE_OPENAI_API_KEY"]
        assert server.requests and not server.rejected
        headers = server.requests[0].headers
    assert run.returncode == 0, run.stderr
    assert headers["api-key"] == canary
    assert canary not in run.stdout + run.stderr
    written = [p for p in Path(tmp_path).rglob("*") if p.is_file()]
    assert any(p.name == "journal.jsonl" for p in written)
    for path in written:
        assert canary not in path.read_text(errors="replace"), path
    config = json.dumps([p.read_text() for p in written if p.suffix == ".yaml"])
    assert "AZURE_OPENAI_API_KEY" in config  # the variable's name is kept, not its value
