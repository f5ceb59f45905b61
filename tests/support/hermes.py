"""A whole task run with the hermes tool protocol and the `time` tool, from config."""

from __future__ import annotations

from deepledger.messages import MessageKind
from tests.support.agents import solve
from tests.support.config import composed

TIME_CALL = (
    '<tool_call>\n{"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}\n'
    "</tool_call>"
)


async def solve_with_hermes(tmp_path, llm, *overrides):
    """Ask ``llm`` what time it is, with ``agent.tool_protocol=hermes``."""
    # llm.tool_protocol=null: the default model's profile (xml) would override the agent's
    cfg = composed(
        "agent.tool_protocol=hermes",
        "llm.tool_protocol=null",
        "agent.main_agent.tools=[time]",
        *overrides,
    )
    state, _ = await solve(cfg, llm, tmp_path)
    return state


def call_then_answer(messages, tools):
    """A scripted model's replies: the time call, then, shown its result, an answer."""
    if messages[-1].kind is MessageKind.TOOL_RESULTS:
        return "The tool says so: \\boxed{noon}"
    return "Let me check the clock.\n" + TIME_CALL
