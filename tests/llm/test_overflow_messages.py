"""Each server's own words for a prompt that does not fit are read as an overflow.

The strings are the ones each server's source writes (llama.cpp's llama-server in its
task-error path, Anthropic's API, vLLM's OpenAI server and its V1 engine), with the
numbers filled in. A refusal read as an overflow ends the task the way the window guard
ends it (``window_exhausted`` with the summary's answer), never as an error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepledger.context.guard import stated_limit
from deepledger.errors import ContextOverflowError
from deepledger.llm.classify import status_error
from deepledger.llm.factory import create_client
from deepledger.store.files import read_jsonl
from tests.support.bench import run
from tests.support.config import composed
from tests.support.doubles.fake_llm_server import FakeLLMServer, Fault, Reply

# (server, HTTP status, error body as the server writes it, the window it states)
REFUSALS = [
    (
        "llama-server",
        400,
        {
            "error": {
                "code": 400,
                "message": "request (2100 tokens) exceeds the available context size "
                "(2048 tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 2100,
                "n_ctx": 2048,
            }
        },
        2048,
    ),
    (
        "llama-server, older builds",
        400,
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "invalid_request_error",
            }
        },
        None,
    ),
    (
        "llama-server, oldest builds",
        400,
        {
            "error": {
                "code": 400,
                "message": "input (2100 tokens) is larger than the max context size "
                "(2048 tokens). skipping",
                "type": "exceed_context_size_error",
            }
        },
        2048,
    ),
    (
        "anthropic, prompt alone",
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 2100 tokens > 2048 maximum",
            },
        },
        2048,
    ),
    (
        "anthropic, prompt and reply budget",
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "input length and `max_tokens` exceed context limit: "
                "1900 + 256 > 2048, decrease input length or `max_tokens` and try again",
            },
        },
        2048,
    ),
    (
        "vllm, older OpenAI server",
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 2048 tokens. However, you "
            "requested 2356 tokens (2100 in the messages, 256 in the completion). Please "
            "reduce the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        2048,
    ),
    (
        "vllm, V1 engine",
        400,
        {
            "object": "error",
            "message": "The decoder prompt (length 2100) is longer than the maximum model "
            "length of 2048. Make sure that `max_model_len` is no smaller than the number "
            "of text tokens.",
            "type": "BadRequestError",
            "code": 400,
        },
        2048,
    ),
]
IDS = [server for server, *_ in REFUSALS]


def said(body: dict) -> str:
    error = body.get("error", body)
    return str(error["message"])


@pytest.mark.parametrize(("server", "status", "body", "window"), REFUSALS, ids=IDS)
def test_each_servers_refusal_is_an_overflow_and_its_window_is_read(server, status, body, window):
    error = status_error("openai", status, {}, said(body))
    assert type(error) is ContextOverflowError, server
    assert stated_limit(str(error)) == window


def test_other_refusals_stay_plain_bad_requests():
    for words in ("bad parameter: top_k", "invalid tool schema", "model not loaded"):
        assert type(status_error("openai", 400, {}, words)) is not ContextOverflowError


def suite(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    line = {"task_id": "t1", "task_question": "Capital of France?", "ground_truth": "Paris"}
    (folder / "standardized_data.jsonl").write_text(json.dumps(line) + "\n")
    return folder


XML_CALL = (
    "Let me look.\n<use_mcp_tool><server_name>kb</server_name><tool_name>lookup"
    '</tool_name><arguments>{"query": "x"}</arguments></use_mcp_tool>'
)


@pytest.mark.parametrize(("server", "status", "body", "window"), REFUSALS, ids=IDS)
async def test_a_refused_turn_ends_the_task_cleanly_over_http(
    tmp_path, monkeypatch, server, status, body, window
):
    anthropic = server.startswith("anthropic")
    script = [Reply(XML_CALL), Fault(status=status, body=json.dumps(body)), Reply("\\boxed{Paris}")]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with FakeLLMServer(script) as fake:
        preset = (
            ["llm=anthropic", f"llm.base_url={fake.base_url}"]
            if anthropic
            else ["llm=openai_compatible", f"llm.base_url={fake.openai_base_url}"]
        )
        cfg = composed(
            *preset,
            "llm.max_context_length=32768",
            "llm.max_tokens=256",
            f"benchmark.data.data_dir={suite(tmp_path / 'data')}",
            "agent.main_agent.tools=[]",
            "agent.max_final_answer_retries=1",
            "benchmark.execution.max_concurrent=1",
        )
        llm = create_client(cfg.llm)
        try:
            (record,) = await run(cfg, llm, tmp_path / "run")
        finally:
            await llm.aclose()
        fake.assert_all_consumed()
    assert (record["status"], record["final_answer"], record["end_reason"]) == (
        "finished",
        "Paris",
        "window_exhausted",
    )
    events = read_jsonl(tmp_path / "run" / record["attempts"][0]["retries"][0]["journal"])
    overflow = next(e for e in events if e["event"] == "context_overflow")
    assert (overflow["server_limit"], overflow["action"]) == (window, "ended_loop")


def test_llama_servers_error_type_is_an_overflow_whatever_its_words():
    """A later build may word it otherwise; its error type stays."""
    from deepledger.llm.openai import error_message

    body = {
        "error": {"code": 400, "message": "prompt too big", "type": "exceed_context_size_error"}
    }
    said = error_message(json.dumps(body).encode(), "")
    assert said == "prompt too big (exceed_context_size_error)"
    assert type(status_error("openai", 400, {}, said)) is ContextOverflowError
    plain = {"error": {"code": 400, "message": "prompt too big", "type": "invalid_request_error"}}
    assert error_message(json.dumps(plain).encode(), "") == "prompt too big"
