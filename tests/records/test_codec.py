"""Journal lines: encoded by orjson, or by the standard library when orjson refuses."""

from __future__ import annotations

import json
import math

import pytest

from deepledger.messages import Message, ToolCall
from deepledger.records.codec import decode, encode, encode_line
from deepledger.records.events import AssistantTurn


def test_a_line_is_the_events_json_in_one_line():
    event = AssistantTurn(ts="t", turn=1, message=Message.assistant('déjà vu 中文 "q"\n'))
    line = encode_line(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert b"\\u" not in line  # written as UTF-8, not escaped
    assert json.loads(line) == encode(event)
    assert decode(json.loads(line)) == event


def test_a_lone_surrogate_from_a_model_is_written_escaped_and_reads_back():
    event = AssistantTurn(ts="t", turn=1, message=Message.assistant("half \ud83d a pair"))
    line = encode_line(event)
    assert b"\\ud83d" in line
    assert decode(json.loads(line)).message.content == "half \ud83d a pair"


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_number_a_model_wrote_reads_back_as_written(text):
    call = ToolCall.from_raw("c1", "search", f'{{"x": {text}, "y": [1.5, {text}]}}')
    line = encode_line(AssistantTurn(ts="t", turn=1, message=Message.assistant("", (call,))))
    (read,) = [decode(json.loads(line))]
    x = read.message.tool_calls[0].arguments["x"]
    expected = float(text)
    assert x == expected or (math.isnan(x) and math.isnan(expected))
    assert read.message.tool_calls[0].arguments["y"][0] == 1.5
