"""The OpenAI client's request bytes: each message is encoded once (llm.openai.WireCache),
and every body stays byte for byte what encoding the whole request at once gives,
through a multi-turn run in which older tool results are blanked."""

from __future__ import annotations

import dataclasses
import json
import tracemalloc

import pytest

from deepledger.context.trim import OMITTED_PLACEHOLDER
from deepledger.llm.openai import OpenAIChatClient, WireCache, encode_json, to_wire_messages
from deepledger.messages import JSONObject, Message, ToolCall
from deepledger.records.codec import encode
from deepledger.records.events import AssistantTurn
from deepledger.tools.protocols import NativeProtocol, XmlProtocol
from tests.support.agent import call, make
from tests.support.doubles.fake_llm_server import FakeLLMServer, FakeToolCall, Reply


class RecordingClient(OpenAIChatClient):
    """The real client over HTTP, keeping each body it sent and the messages it was given."""

    def __init__(self, base_url: str) -> None:
        super().__init__("fake-model", api_key="k", base_url=base_url, timeout_seconds=30)
        self.sent: list[tuple[list[Message], bytes]] = []
        self._given: list[Message] = []

    async def _call(self, messages, tools, settings):
        self._given = list(messages)
        return await super()._call(messages, tools, settings)

    async def post_body(self, url: str, body: bytes) -> JSONObject:
        self.sent.append((self._given, body))
        return await super().post_body(url, body)


def whole_request_body(messages: list[Message], body: bytes) -> bytes:
    """The body as it was built before the cache: the request with its messages converted
    afresh, encoded at once."""
    fields = json.loads(body)
    request = {"model": fields.pop("model"), "messages": to_wire_messages(messages)}
    del fields["messages"]
    return encode_json(request | fields)


@pytest.mark.parametrize("native", [False, True], ids=["xml", "native"])
async def test_bodies_match_whole_encoding_while_results_are_blanked(native):
    queries = ["paris", "lyon", "nice", "caen é 中文"]
    if native:
        steps = [
            Reply(
                tool_calls=(FakeToolCall("kb__lookup", {"query": q}),), finish_reason="tool_calls"
            )
            for q in queries
        ]
    else:
        steps = [Reply(f"Step {i}. {call(q)}") for i, q in enumerate(queries)]
    with FakeLLMServer([*steps, Reply("\\boxed{x}"), Reply("\\boxed{x}")]) as server:
        llm = RecordingClient(server.openai_base_url)
        protocol = NativeProtocol() if native else XmlProtocol()
        orchestrator, _ = await make(llm, keep=2, protocol=protocol)
        await orchestrator.run("task")
        await llm.aclose()
    assert len(llm.sent) >= 5
    for messages, body in llm.sent:
        assert body == whole_request_body(messages, body)
    # the last requests blanked the oldest results: the cache did not send them whole
    assert OMITTED_PLACEHOLDER.encode() in llm.sent[-1][1]
    assert b"facts about paris" not in llm.sent[-1][1]
    assert b"facts about paris" in llm.sent[1][1]


def test_extra_fields_follow_the_messages_and_an_empty_history_is_an_empty_list():
    cache = WireCache()
    messages = [Message.system("s"), Message.task("t \ud7ff")]
    request = {"model": "m", "max_tokens": 5, "stop": ["x"]}
    expected = {
        "model": "m",
        "messages": to_wire_messages(messages),
        "max_tokens": 5,
        "stop": ["x"],
    }
    assert cache.request_body(request, messages) == encode_json(expected)
    assert cache.request_body({"model": "m"}, []) == encode_json({"model": "m", "messages": []})
    assert cache.request_body({"model": "m"}, messages[:1]) == encode_json(
        {"model": "m", "messages": to_wire_messages(messages[:1])}
    )


def test_an_assistant_message_is_encoded_again_when_native_results_come_to_follow_it():
    cache = WireCache()
    reply = Message.assistant("", (ToolCall("c1", "kb__lookup", {"query": "q"}),))
    alone = cache.request_body({"model": "m"}, [reply])
    answered = [reply, Message.native_tool_results(())]
    assert alone == encode_json({"model": "m", "messages": to_wire_messages([reply])})
    assert cache.request_body({"model": "m"}, answered) == encode_json(
        {"model": "m", "messages": to_wire_messages(answered)}
    )
    assert b"tool_calls" in cache.request_body({"model": "m"}, answered)


def test_a_replaced_message_is_encoded_afresh_and_the_kept_bytes_stay_out_of_its_fields():
    cache = WireCache()
    message = Message.task("first")
    assert b"first" in cache.request_body({"model": "m"}, [message])
    replaced = dataclasses.replace(message, content="second")
    body = cache.request_body({"model": "m"}, [replaced])
    assert b"second" in body and b"first" not in body
    assert message == Message.task("first") and hash(message) == hash(Message.task("first"))
    assert (
        encode(AssistantTurn(ts="t", turn=1, message=message))["message"]
        == (encode(AssistantTurn(ts="t", turn=1, message=Message.task("first")))["message"])
    )


def test_what_the_fast_encoder_refuses_is_still_sent_as_valid_utf8():
    """A lone surrogate (a model can write one) or an integer beyond 64 bits goes the
    standard library's way; the body is valid UTF-8 JSON that reads back the same."""
    cache = WireCache()
    messages = [Message.task("half a pair: \ud800"), Message.task("fine")]
    body = cache.request_body({"model": "m", "seed": 2**70}, messages)
    body.decode("utf-8")  # no UnicodeDecodeError
    fields = json.loads(body)
    assert fields["seed"] == 2**70
    assert fields["messages"][0]["content"] == "half a pair: \ud800"
    assert body == cache.request_body({"model": "m", "seed": 2**70}, messages)


def test_kept_message_bytes_take_about_their_length_in_memory():
    """Each message's bytes are kept while the message lives: held at orjson's grown
    buffer (about 12x a 5 KB message's length), 2,048 tasks held a gigabyte."""
    cache = WireCache()
    messages = [Message.task(f"{i} " + "fact " * 1000) for i in range(50)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        body = cache.request_body({"model": "m"}, messages)
        held = tracemalloc.get_traced_memory()[0] - before  # the body and the kept bytes
    finally:
        tracemalloc.stop()
    assert len(body) > 50 * 5000
    assert held < 2.5 * len(body)
