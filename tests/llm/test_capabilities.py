"""What each client says it can do (``LLMCapabilities``), built from config as a run
builds it: the layers above ask these instead of which provider it is."""

from __future__ import annotations

from deepledger.llm.base import LLMCapabilities
from deepledger.llm.factory import create_client, token_counter_for
from deepledger.llm.local import BUNDLED_FILE
from deepledger.llm.scripted import ScriptedLLM
from deepledger.llm.tokens import default_counter
from tests.support.config import composed


async def capabilities(*overrides: str) -> LLMCapabilities:
    client = create_client(composed(*overrides).llm)
    try:
        return client.capabilities  # the retrying wrapper answers with its provider's
    finally:
        await client.aclose()


async def test_an_openai_compatible_server_prefills_only_when_the_preset_says_so():
    assert not (await capabilities("llm=openai_compatible")).prefill
    told = await capabilities("llm=openai_compatible", "llm.assistant_prefill=true")
    assert told.prefill and told.native_tools and told.parallel_requests
    assert not told.exact_counting


async def test_images_are_the_preset_s_word(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    assert (await capabilities("llm=openai_compatible", "llm.accepts_images=true")).images
    assert not (await capabilities("llm=openai_compatible")).images
    assert (await capabilities("llm=anthropic", "llm.accepts_images=true")).images


async def test_anthropic_prefills_unless_thinking_is_on(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    assert (await capabilities("llm=anthropic")).prefill
    thinking = "llm.thinking={type: enabled, budget_tokens: 2048}"
    assert not (await capabilities("llm=anthropic", thinking)).prefill


async def test_the_bundled_model_counts_exactly_and_answers_one_request_at_a_time():
    local = await capabilities("llm=local")
    assert local.exact_counting and local.prefill and not local.parallel_requests
    assert not local.native_tools  # the XML protocol: tools are text in its prompt
    native = await capabilities("llm=local", "llm.tool_protocol=native")
    assert not native.prefill  # native calls go through the chat endpoint
    assert native.native_tools


def test_without_a_client_the_counter_is_the_one_an_exact_client_counts_with():
    """What a replay counts with: the local model's tokenizer where its client counts
    exactly, the default estimate where it would not (or its file is not here)."""
    assert token_counter_for(composed("llm=local").llm).name == f"gguf:{BUNDLED_FILE}"
    estimate = default_counter().name
    named_format = composed("llm=local", "llm.chat_format=chatml").llm
    assert token_counter_for(named_format).name == estimate  # llama.cpp renders: no template
    absent = composed("llm=local", "llm.model_path=/nonexistent/model.gguf").llm
    assert token_counter_for(absent).name == estimate
    assert token_counter_for(composed("llm=openai_compatible").llm).name == estimate


def test_the_scripted_double_takes_its_capabilities():
    assert ScriptedLLM(supports_prefill=True).capabilities.prefill
    serial = LLMCapabilities(parallel_requests=False)
    assert ScriptedLLM(capabilities=serial).capabilities == serial
