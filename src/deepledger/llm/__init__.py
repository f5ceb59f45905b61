"""The LLM layer: model providers behind one interface, the retry policy, usage and tokens.

What a user builds or implements, importable from here::

    LLMClient, LLMCapabilities, GenerationSettings   the interface a provider implements
                                                     (base.py)
    create_client                                    config -> client with retries
                                                     (factory.py)
    RetryPolicy, RetryingClient                      the one retry policy (retry.py)
    ScriptedLLM, ScriptExhaustedError, RecordedCall  the in-process scripted model, for
                                                     a user's own tests (scripted.py)
    UsageLedger                                      tokens and cost per call, per task
                                                     (usage.py)
    TokenCounter, count_messages                     token counting (tokens.py)

Each name is imported on first use: importing one provider does not load the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepledger.lazy import lazy_exports

if TYPE_CHECKING:
    from deepledger.llm.base import GenerationSettings, LLMCapabilities, LLMClient
    from deepledger.llm.factory import create_client
    from deepledger.llm.retry import RetryingClient, RetryPolicy
    from deepledger.llm.scripted import RecordedCall, ScriptedLLM, ScriptExhaustedError
    from deepledger.llm.tokens import TokenCounter, count_messages
    from deepledger.llm.usage import UsageLedger

__getattr__ = lazy_exports(
    __name__,
    {
        "base": ("GenerationSettings", "LLMCapabilities", "LLMClient"),
        "factory": ("create_client",),
        "retry": ("RetryPolicy", "RetryingClient"),
        "scripted": ("RecordedCall", "ScriptExhaustedError", "ScriptedLLM"),
        "tokens": ("TokenCounter", "count_messages"),
        "usage": ("UsageLedger",),
    },
)

__all__ = [
    "GenerationSettings",
    "LLMCapabilities",
    "LLMClient",
    "RecordedCall",
    "RetryPolicy",
    "RetryingClient",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "TokenCounter",
    "UsageLedger",
    "count_messages",
    "create_client",
]
