"""An in-process model driven by a script: the test double for everything above ``llm/``.

Each step is one of:

- an :class:`LLMResponse` (or a plain ``str``, shorthand for a text reply that ends its turn),
- an exception instance, raised from ``generate`` (e.g. ``RateLimitedError``),
- a function ``(messages, tools) -> LLMResponse | str`` for replies that depend on what
  was sent.

Steps are consumed in order; ``responder`` (a function as above), if given, answers
every call after the script runs out. A call with no step left fails loudly, and
:meth:`ScriptedLLM.assert_consumed` fails if steps were left over. Every call is
recorded (messages exactly as received, tools, settings).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from deepledger.llm.base import GenerationSettings, LLMCapabilities, LLMClient
from deepledger.llm.tokens import count_messages
from deepledger.messages import LLMResponse, Message, StopReason, ToolCall, ToolSpec, Usage

Responder = Callable[[list[Message], list[ToolSpec]], "LLMResponse | str"]
Step = LLMResponse | str | BaseException | Responder


class ScriptExhaustedError(AssertionError):
    """The code under test made a model call the script did not plan for."""


@dataclass(frozen=True)
class RecordedCall:
    messages: list[Message]
    tools: list[ToolSpec]
    settings: GenerationSettings


def reply(
    text: str = "",
    tool_calls: Iterable[ToolCall] = (),
    *,
    stop_reason: StopReason | None = None,
    usage: Usage | None = None,
) -> LLMResponse:
    """A scripted response; stop reason and usage default to what a real one would say."""
    calls = tuple(tool_calls)
    stop = stop_reason or (StopReason.TOOL_USE if calls else StopReason.END_TURN)
    return LLMResponse(Message.assistant(text, calls), stop, usage or Usage(), model="scripted")


class ScriptedLLM(LLMClient):
    provider = "scripted"

    def __init__(
        self,
        steps: Iterable[Step] = (),
        *,
        responder: Responder | None = None,
        model: str = "scripted",
        supports_prefill: bool = False,
        capabilities: LLMCapabilities | None = None,
    ) -> None:
        # supports_prefill: the one capability most tests vary, as a keyword of its own
        super().__init__(model, capabilities or LLMCapabilities(prefill=supports_prefill))
        self._steps: deque[Step] = deque(steps)
        self._responder = responder
        self.calls: list[RecordedCall] = []

    def add(self, *steps: Step) -> None:
        self._steps.extend(steps)

    @property
    def remaining(self) -> int:
        return len(self._steps)

    def assert_consumed(self) -> None:
        if self._steps:
            raise AssertionError(
                f"{len(self._steps)} scripted step(s) never used: {list(self._steps)!r}"
            )

    async def _call(
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> LLMResponse:
        self.calls.append(RecordedCall(list(messages), list(tools), settings))
        if self._steps:
            step = self._steps.popleft()
        elif self._responder is not None:
            step = self._responder
        else:
            last = messages[-1].content[:200] if messages else ""
            raise ScriptExhaustedError(
                f"unexpected model call #{len(self.calls)}: the script is used up "
                f"(last message: {last!r})"
            )
        if isinstance(step, BaseException):
            raise step
        if callable(step) and not isinstance(step, LLMResponse):
            step = step(list(messages), list(tools))
        if isinstance(step, str):
            step = reply(step)
        return self._with_usage(step, messages)

    def _with_usage(self, response: LLMResponse, messages: list[Message]) -> LLMResponse:
        """Fill in an estimated usage when the script gave none, as a real server would."""
        if response.usage != Usage():
            return response
        counter = self.token_counter
        usage = Usage(
            count_messages(counter, messages), count_messages(counter, [response.message])
        )
        return replace(response, usage=usage)
