"""OpenAI's prompt_cache_key on the wire: one key per task, sent to the OpenAI API by
default and to other servers only when asked."""

from __future__ import annotations

import pytest

from deepledger.llm.base import GenerationSettings
from deepledger.llm.factory import settings_from_config
from deepledger.llm.prompt_cache import sends_prompt_cache_key
from deepledger.messages import Message
from tests.support.config import composed
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply
from tests.support.providers import make_client, xml_history


def task(text: str) -> list[Message]:
    return [Message.system("You research."), Message.task(text)]


async def keys_sent(setting: bool | None, conversations: list[list[Message]]) -> list:
    with FakeLLMServer() as server:
        async with make_client("openai", server) as client:
            for messages in conversations:
                server.enqueue(Reply(text="ok"))
                settings = GenerationSettings(max_tokens=20, prompt_cache_key=setting)
                await client.generate(messages, settings=settings)
        return [r.body.get("prompt_cache_key") for r in server.requests]


async def test_each_task_has_one_key_for_all_its_calls():
    first, later, other = await keys_sent(
        True, [task("Who wrote X?"), [*task("Who wrote X?"), *xml_history()[2:]], task("Y?")]
    )
    assert first and first == later  # the same task, a longer conversation
    assert other and other != first
    assert first.startswith("deepledger-") and len(first) <= 64


async def test_by_default_only_the_openai_api_gets_a_key():
    assert await keys_sent(None, [task("Who wrote X?")]) == [None]  # a loopback server
    assert await keys_sent(False, [task("Who wrote X?")]) == [None]
    assert sends_prompt_cache_key(None, "https://api.openai.com/v1")
    assert not sends_prompt_cache_key(None, "http://127.0.0.1:8000/v1")
    assert not sends_prompt_cache_key(False, "https://api.openai.com/v1")


async def test_a_key_in_extra_body_is_the_one_sent():
    with FakeLLMServer() as server:
        async with make_client("openai", server) as client:
            server.enqueue(Reply(text="ok"))
            settings = GenerationSettings(
                max_tokens=20, prompt_cache_key=True, extra_body={"prompt_cache_key": "mine"}
            )
            await client.generate(task("Who wrote X?"), settings=settings)
    assert server.requests[-1].body["prompt_cache_key"] == "mine"


@pytest.mark.parametrize("setting", [True, None])
def test_the_setting_comes_from_the_config(setting):
    cfg = composed("llm=openai", *([] if setting is None else ["llm.prompt_cache_key=true"]))
    assert settings_from_config(cfg.llm).prompt_cache_key is setting
