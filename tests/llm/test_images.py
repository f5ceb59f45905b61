"""Images on every provider's wire, checked on the loopback fake (which refuses what the
real APIs refuse), and what the local text-only model gets instead."""

from __future__ import annotations

import base64
import json

import openai
import pytest

from deepledger.llm.local import LocalModelClient, bundled_model, images_as_notes
from deepledger.llm.local_template import LocalTemplate
from deepledger.llm.openai import OpenAIChatClient, to_wire_messages
from deepledger.llm.tokens import IMAGE_TOKENS, count_messages, default_counter
from deepledger.messages import ImagePart, Message, ToolCall, ToolResult
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply
from tests.support.providers import PNG, TASK, make_client, native_history, xml_history

JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"jpeg pixels" * 100).decode()
CHART = ImagePart("image/png", PNG, "chart.png")
PHOTO = ImagePart("image/jpeg", JPEG, "https://example.org/photo.jpg")


@pytest.fixture
def server():
    with FakeLLMServer() as fake:
        yield fake
        fake.assert_all_consumed()  # also fails on a request the fake refused (HTTP 400)


async def send(protocol: str, server: FakeLLMServer, messages: list[Message]) -> list:
    server.enqueue(Reply(text="ok"))
    async with make_client(protocol, server) as client:
        await client.generate(messages)
    return server.requests[-1].messages


def xml_with_image() -> list[Message]:
    call = ToolCall("x1", "screenshot", {"url": "a"}, server_name="web")
    result = ToolResult("x1", "a screenshot of a", name="screenshot", images=(CHART,))
    return [
        *TASK,
        Message.assistant("<use_mcp_tool>...</use_mcp_tool>", [call]),
        Message.text_tool_results("[web.screenshot result]\na screenshot of a", [result]),
    ]


def native_with_images() -> list[Message]:
    calls = [ToolCall("c1", "screenshot", {"url": "a"}), ToolCall("c2", "read", {"url": "b"})]
    results = [
        ToolResult("c1", "two views of a", name="screenshot", images=(CHART, PHOTO)),
        ToolResult("c2", "page b"),
    ]
    return [
        *TASK,
        Message.assistant("Let me look.", calls),
        Message.native_tool_results(results),
        Message.injected("Now answer."),
    ]


def task_with_image() -> list[Message]:
    return [Message.system("You research."), Message.task("What does it show?", [PHOTO])]


def openai_image(image: ImagePart) -> dict:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{image.mime_type};base64,{image.data}"},
    }


def anthropic_image(image: ImagePart) -> dict:
    source = {"type": "base64", "media_type": image.mime_type, "data": image.data}
    return {"type": "image", "source": source}


CACHED = {"cache_control": {"type": "ephemeral"}}

# ---------------------------------------------------------------------------- OpenAI


async def test_openai_xml_results_carry_their_images_as_parts_of_the_user_message(server):
    wire = await send("openai", server, xml_with_image())
    assert wire[3] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "[web.screenshot result]\na screenshot of a"},
            openai_image(CHART),
        ],
    }
    assert wire[2] == {"role": "assistant", "content": "<use_mcp_tool>...</use_mcp_tool>"}


async def test_openai_native_results_send_text_in_tool_messages_then_one_image_message(server):
    wire = await send("openai", server, native_with_images())
    assert [m["role"] for m in wire] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "user",
    ]
    assert wire[3:5] == [
        {"role": "tool", "tool_call_id": "c1", "content": "two views of a"},
        {"role": "tool", "tool_call_id": "c2", "content": "page b"},
    ]
    assert wire[5] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "[2 images from tool call screenshot c1]"},
            openai_image(CHART),
            openai_image(PHOTO),
        ],
    }
    assert wire[6] == {"role": "user", "content": "Now answer."}
    assert [(i.message, i.mime_type, i.data) for i in server.requests[0].images] == [
        (5, "image/png", PNG),
        (5, "image/jpeg", JPEG),
    ]


async def test_openai_task_attachment_follows_the_task_text(server):
    wire = await send("openai", server, task_with_image())
    assert wire[1] == {
        "role": "user",
        "content": [{"type": "text", "text": "What does it show?"}, openai_image(PHOTO)],
    }


async def test_the_openai_sdk_sends_the_same_wire_and_the_fake_accepts_it(server):
    """The messages our aiohttp transport builds, sent by the real ``openai`` SDK."""
    server.enqueue(Reply(text="seen"))
    wire = to_wire_messages(native_with_images())
    async with openai.AsyncOpenAI(
        base_url=server.openai_base_url, api_key="x", max_retries=0
    ) as sdk:
        completion = await sdk.chat.completions.create(model="m", messages=wire)
    assert completion.choices[0].message.content == "seen"
    assert server.requests[0].messages == wire


async def test_openai_would_refuse_images_inside_a_tool_message(server):
    """What the separate user message avoids: the fake, like the API, refuses it."""
    wire = to_wire_messages(native_with_images())
    wire[3]["content"] = [{"type": "text", "text": "two views of a"}, openai_image(CHART)]
    async with openai.AsyncOpenAI(
        base_url=server.openai_base_url, api_key="x", max_retries=0
    ) as sdk:
        with pytest.raises(openai.BadRequestError, match="only allowed for messages with role"):
            await sdk.chat.completions.create(model="m", messages=wire)
    server.unexpected.clear()  # the refusal was the point


# ---------------------------------------------------------------------------- Anthropic


async def test_anthropic_xml_results_carry_their_images_after_the_text(server):
    wire = await send("anthropic", server, xml_with_image())
    assert wire[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "[web.screenshot result]\na screenshot of a"},
            anthropic_image(CHART) | CACHED,  # the newest user turn's last block
        ],
    }


async def test_anthropic_native_results_hold_their_images_in_the_tool_result(server):
    wire = await send("anthropic", server, native_with_images())
    assert wire[-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "c1",
            "content": [
                {"type": "text", "text": "two views of a"},
                anthropic_image(CHART),
                anthropic_image(PHOTO),
            ],
            "is_error": False,
        },
        {"type": "tool_result", "tool_use_id": "c2", "content": "page b", "is_error": False},
        {"type": "text", "text": "Now answer."} | CACHED,
    ]
    images = server.requests[0].images
    assert [(i.tool_use_id, i.mime_type) for i in images] == [
        ("c1", "image/png"),
        ("c1", "image/jpeg"),
    ]


async def test_anthropic_task_attachment_follows_the_task_text(server):
    wire = await send("anthropic", server, task_with_image())
    assert wire == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What does it show?"},
                anthropic_image(PHOTO) | CACHED,
            ],
        }
    ]


async def test_an_image_only_result_sends_no_blank_text_block(server):
    history = native_with_images()
    only = ToolResult("c1", "", images=(CHART,))
    history[3] = Message.native_tool_results([only, ToolResult("c2", "page b")])
    wire = await send("anthropic", server, history)
    assert wire[-1]["content"][0]["content"] == [anthropic_image(CHART)]


# ---------------------------------------------------------------------------- no images


# What both providers sent for these histories before images existed, byte for byte.
BEFORE = {
    ("openai", "native"): (
        '[{"role": "system", "content": "You research."}, {"role": "user", "content": '
        '"What is 2+2?"}, {"role": "assistant", "content": "Let me look.", "tool_calls": '
        '[{"id": "c1", "type": "function", "function": {"name": "search", "arguments": '
        '"{\\"q\\": \\"a\\"}"}}, {"id": "c2", "type": "function", "function": {"name": '
        '"read", "arguments": "{\\"url\\": \\"b\\"}"}}]}, {"role": "tool", "tool_call_id": '
        '"c1", "content": "found a"}, {"role": "tool", "tool_call_id": "c2", "content": '
        '"404"}, {"role": "user", "content": "Now answer with \\\\boxed{}."}]'
    ),
    ("anthropic", "native"): (
        '[{"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}, {"role": '
        '"assistant", "content": [{"type": "text", "text": "Let me look."}, {"type": '
        '"tool_use", "id": "c1", "name": "search", "input": {"q": "a"}}, {"type": '
        '"tool_use", "id": "c2", "name": "read", "input": {"url": "b"}}]}, {"role": "user", '
        '"content": [{"type": "tool_result", "tool_use_id": "c1", "content": "found a", '
        '"is_error": false}, {"type": "tool_result", "tool_use_id": "c2", "content": "404", '
        '"is_error": true}, {"type": "text", "text": "Now answer with \\\\boxed{}.", '
        '"cache_control": {"type": "ephemeral"}}]}]'
    ),
    ("openai", "xml"): (
        '[{"role": "system", "content": "You research."}, {"role": "user", "content": '
        '"What is 2+2?"}, {"role": "assistant", "content": "<use_mcp_tool>...</use_mcp_tool>"}, '
        '{"role": "user", "content": "search returned: a"}]'
    ),
    ("anthropic", "xml"): (
        '[{"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}, {"role": '
        '"assistant", "content": [{"type": "text", "text": "<use_mcp_tool>...</use_mcp_tool>"}]}, '
        '{"role": "user", "content": [{"type": "text", "text": "search returned: a", '
        '"cache_control": {"type": "ephemeral"}}]}]'
    ),
}


@pytest.mark.parametrize(("protocol", "history"), list(BEFORE))
async def test_messages_without_images_go_on_the_wire_as_before(protocol, history, server):
    messages = native_history() if history == "native" else xml_history()
    wire = await send(protocol, server, messages)
    assert json.dumps(wire) == BEFORE[protocol, history]


async def test_an_image_leaves_the_earlier_messages_byte_identical(server):
    """What a prompt cache reuses: the request up to the message with the image."""
    history = xml_history()
    before = await send("openai", server, history)
    call = ToolCall("x2", "screenshot", {}, server_name="web")
    after = await send(
        "openai",
        server,
        [
            *history,
            Message.assistant("<use_mcp_tool>2</use_mcp_tool>", [call]),
            Message.text_tool_results("shot", [ToolResult("x2", "shot", images=(CHART,))]),
        ],
    )
    assert json.dumps(after[: len(before)]) == json.dumps(before)


# ---------------------------------------------------------------------------- local, counting

PHOTO_NOTE = (
    "[image: https://example.org/photo.jpg, image/jpeg, 1 KB — this model cannot see images]"
)
NOTE_CHART = "[image: chart.png, image/png, 2 KB — this model cannot see images]"  # 2,056 bytes


def test_the_local_model_gets_a_note_for_every_image_never_nothing():
    xml = images_as_notes(xml_with_image())[-1]
    assert xml.content == f"[web.screenshot result]\na screenshot of a\n{NOTE_CHART}"
    native = images_as_notes(native_with_images())[3]
    assert native.tool_results[0].content.splitlines() == [
        "two views of a",
        NOTE_CHART,
        PHOTO_NOTE,
    ]
    assert native.tool_results[1] == ToolResult("c2", "page b")
    task = images_as_notes(task_with_image())[1]
    assert task.content.startswith("What does it show?\n[image: https://example.org/photo.jpg")
    # Nothing left that a text template would have to drop, and every wire content is text.
    converted = images_as_notes(native_with_images() + task_with_image()[1:])
    assert not any(m.all_images for m in converted)
    assert all(isinstance(m["content"], str) for m in to_wire_messages(converted))


def test_a_message_without_images_reaches_the_local_model_unchanged():
    history = native_history()
    assert all(a is b for a, b in zip(images_as_notes(history), history, strict=True))


def test_an_image_counts_as_a_fixed_estimate_not_its_base64_length():
    counter = default_counter()
    text_only = Message.task("What does it show?")
    small = Message.task("What does it show?", [ImagePart("image/png", "AAAA")])
    huge = Message.task("What does it show?", [ImagePart("image/png", "A" * 4_000_000)])
    base = count_messages(counter, [text_only])
    assert count_messages(counter, [small]) == count_messages(counter, [huge]) == base + 765
    assert IMAGE_TOKENS == 765
    # A tool result's images count in both protocols.
    xml, native = xml_with_image()[-1], native_with_images()[3]
    assert (
        count_messages(counter, [xml])
        - count_messages(counter, [Message.text_tool_results(xml.content)])
        == IMAGE_TOKENS
    )
    stripped = Message.native_tool_results(
        [ToolResult(r.call_id, r.content, name=r.name) for r in native.tool_results]
    )
    assert count_messages(counter, [native]) - count_messages(counter, [stripped]) == 2 * 765


def test_the_local_models_own_template_renders_the_note():
    prompt = LocalTemplate(bundled_model()).render(
        to_wire_messages(images_as_notes(task_with_image()))
    )
    assert f"What does it show?\n{PHOTO_NOTE}<|im_end|>" in prompt


async def test_the_local_client_sends_notes_not_images_through_llama_cpps_chat_endpoint(server):
    """A chat_format override sends chat requests; the fake stands in for llama.cpp."""
    client = LocalModelClient(
        "m", model_path=bundled_model(), context_size=2048, timeout_seconds=5, chat_format="chatml"
    )
    client._chat = OpenAIChatClient(
        "m", api_key="EMPTY", base_url=server.openai_base_url, timeout_seconds=5
    )
    server.enqueue(Reply(text="ok"))
    async with client:
        await client.generate(native_with_images())
    wire = server.requests[0].messages
    assert server.requests[0].images == []
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert wire[3]["content"] == f"two views of a\n{NOTE_CHART}\n{PHOTO_NOTE}"
