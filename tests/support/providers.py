"""Both providers' clients against the loopback fake model server, and the histories
the wire tests send them."""

from __future__ import annotations

import base64

from deepledger.llm.anthropic import AnthropicClient
from deepledger.llm.openai import OpenAIChatClient
from deepledger.messages import Message, ToolCall, ToolResult
from tests.support.doubles.fake_llm_server import FakeLLMServer

PROTOCOLS = ["openai", "anthropic"]
TASK = [Message.system("You research."), Message.task("What is 2+2?")]
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8).decode()


def make_client(protocol: str, server: FakeLLMServer, timeout: float = 5.0):
    if protocol == "openai":
        return OpenAIChatClient(
            "fake-model", api_key="k", base_url=server.openai_base_url, timeout_seconds=timeout
        )
    return AnthropicClient(
        "fake-model", api_key="k", base_url=server.base_url, timeout_seconds=timeout
    )


def native_history() -> list[Message]:
    calls = [ToolCall("c1", "search", {"q": "a"}), ToolCall("c2", "read", {"url": "b"})]
    return [
        *TASK,
        Message.assistant("Let me look.", calls),
        Message.native_tool_results(
            [ToolResult("c1", "found a"), ToolResult("c2", "404", is_error=True)]
        ),
        Message.injected("Now answer with \\boxed{}."),
    ]


def xml_history() -> list[Message]:
    """XML protocol: the calls are in the reply's text, the results in a user message."""
    call = ToolCall("x1", "search", {"q": "a"}, server_name="web")
    return [
        *TASK,
        Message.assistant("<use_mcp_tool>...</use_mcp_tool>", [call]),
        Message.text_tool_results("search returned: a", [ToolResult("x1", "a")]),
    ]
