"""Messages from a stdio server are capped while they stream in, not after."""

from __future__ import annotations

import json

import pytest

from deepledger.tools.pool import ToolManager
from deepledger.tools.stdio_transport import LineAssembler, Oversized
from tests.support.tool_servers import call, flaky


def test_lines_within_the_cap_come_out_whole_across_chunks():
    assembler = LineAssembler(max_bytes=100)
    out = list(assembler.feed(b'{"a": 1}\n{"b"')) + list(assembler.feed(b": 2}\n\n"))
    assert out == [b'{"a": 1}', b'{"b": 2}', b""]


@pytest.mark.parametrize("id_first", [True, False])
def test_a_line_past_the_cap_is_dropped_as_it_streams_and_keeps_its_request_id(id_first):
    assembler = LineAssembler(max_bytes=1000)
    head = b'{"jsonrpc":"2.0","id":7,"result":{"text":"' if id_first else b'{"result":{"text":"'
    tail = b'"}}' if id_first else b'"},"jsonrpc":"2.0","id":"call-7"}'
    assert list(assembler.feed(head)) == []
    for _ in range(200):  # 2 MB in 10 kB chunks, never kept
        assert list(assembler.feed(b"y" * 10_000)) == []
        assert sum(map(len, assembler._parts)) <= 1000
    [out] = assembler.feed(tail + b"\n")
    assert out == Oversized(len(head) + 2_000_000 + len(tail), 7 if id_first else "call-7")
    assert list(assembler.feed(b'{"next": true}\n')) == [b'{"next": true}']


async def test_a_huge_result_becomes_an_error_and_the_server_goes_on():
    manager = ToolManager({"flaky": flaky(max_message_bytes=200_000, max_result_chars=0)})
    tools = manager.for_task(["flaky"])
    try:
        await tools.start()
        huge = await tools.call(call("big", size=20_000_000))
        assert huge.is_error
        # the text twice (content and structured content): 38 MiB of JSON, read 256 kB at a time
        assert "was 38.1 MiB, larger than the 195 KiB a tool result may be" in huge.content
        assert "dropped unread" in huge.content
        fine = await tools.call(call("big", size=60_000))
        assert not fine.is_error and fine.content == "y" * 60_000
        echo = await tools.call(call("echo", text="still here"))
        assert echo.content.startswith("echo: still here")
    finally:
        await tools.aclose()
        await manager.aclose()


def test_the_error_names_the_limit_and_the_setting():
    from deepledger.tools.stdio_transport import oversized_reply

    reply = oversized_reply(Oversized(50 * 2**20, 3), 16 * 2**20, "reader")
    data = json.loads(reply.message.model_dump_json(by_alias=True))
    assert data["id"] == 3 and data["result"]["isError"] is True
    assert "50.0 MiB, larger than the 16.0 MiB" in data["result"]["content"][0]["text"]
    assert "tools.reader.max_message_bytes" in data["result"]["content"][0]["text"]


def test_an_id_inside_the_result_is_never_taken_for_the_requests():
    assembler = LineAssembler(max_bytes=100)
    line = b'{"result":{"structuredContent":{"id": 9, "x": "' + b"y" * 500 + b'"}}}\n'
    [inner_only] = assembler.feed(line)
    assert inner_only == Oversized(len(line) - 1, None)  # dropped: its call times out
    line = b'{"result":{"x":"' + b"y" * 500 + b'","id":9}},"jsonrpc":"2.0","id":4}\n'
    [last] = assembler.feed(line)
    assert last.request_id == 4
