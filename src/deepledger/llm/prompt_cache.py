"""Hints that keep a provider's prompt cache hitting: OpenAI's ``prompt_cache_key``.

The OpenAI API routes a request to a machine by a hash of its prompt's first tokens
and, when given, ``prompt_cache_key``; a machine's cache serves only the requests that
reach it. Every task of a suite starts with the same system prompt, so without a key
they all hash alike and pile onto the same machines, which overflow and send some away
from their cache; one key per task keeps each task's calls together and spreads the
tasks apart. (Anthropic's hints are cache breakpoints, set in ``llm/anthropic.py``.)
"""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit

from deepledger.messages import Message, Role

OPENAI_API_HOST = "api.openai.com"


def sends_prompt_cache_key(setting: bool | None, base_url: str) -> bool:
    """Whether a request carries ``prompt_cache_key`` (``llm.prompt_cache_key``): as set,
    or when unset only to the OpenAI API itself, the one server known to use it (vLLM
    accepts unknown fields but logs each one as ignored, on every request; stricter
    OpenAI-compatible servers and gateways refuse them)."""
    if setting is not None:
        return setting
    return urlsplit(base_url).hostname == OPENAI_API_HOST


def prompt_cache_key(messages: list[Message]) -> str:
    """One key per task: a digest of the system prompt and the task (the first user
    message), the same on every call of the task, after a resume too."""
    head = [m.content for m in messages if m.role is Role.SYSTEM]
    task = next((m.content for m in messages if m.role is Role.USER), "")
    digest = hashlib.sha256("\x00".join([*head, task]).encode("utf-8", "surrogatepass"))
    return f"deepledger-{digest.hexdigest()[:32]}"
