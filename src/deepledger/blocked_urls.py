"""The answer-leak guard: pages that publish benchmark answers are never shown to the model.

Benchmark questions and their answer keys are published on Hugging Face (GAIA,
BrowseComp, HLE, ...): a search for a question can land on the dataset page that holds
its answer, which would inflate a score. The search tools drop such results, and the
readers (the reader server, the scraper, the Jina path) refuse such URLs, redirects
included.

Rules
    A rule is a shell-style glob (``*``, ``?``, ``[...]``) matched against a URL's
    ``host/path``: the scheme, port, query and fragment are left out, a leading
    ``www.`` is dropped, percent-escapes in the path are decoded, and the match ignores
    case. ``*`` also matches ``/``, so ``github.com/google/benchmark*`` blocks that
    repository and every page under it.

    Built in (always on unless ``web.block_answer_sites`` is false)::

        huggingface.co/datasets/*   huggingface.co/spaces/*
        hf.co/datasets/*            hf.co/spaces/*

    ``huggingface.co/docs``, ``huggingface.co/<model>`` and pages that merely mention
    huggingface.co are not blocked. The user's and a benchmark preset's patterns
    (``web.blocked_urls``) are added to these.

Environment
    Tool servers learn the rules from :data:`BLOCKED_URLS_ENV` (extra patterns, one a
    line) and :data:`BUILTIN_ENV` (``0`` turns the built-in rules off); the config
    sets both (``config.server_environment``). With neither set, the built-in rules
    apply.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

BLOCKED_URLS_ENV = "DEEPLEDGER_BLOCKED_URLS"
BUILTIN_ENV = "DEEPLEDGER_BLOCK_ANSWER_SITES"
BUILTIN_RULES = (
    "huggingface.co/datasets/*",
    "huggingface.co/spaces/*",
    "hf.co/datasets/*",
    "hf.co/spaces/*",
    # The same datasets' files and rows through the Hub's API and its viewer's server.
    "huggingface.co/api/datasets/*",
    "hf.co/api/datasets/*",
    "datasets-server.huggingface.co/*",
)


def url_key(url: str) -> str | None:
    """``host/path`` of ``url`` as rules see it, or None when it has no host."""
    text = url.strip()
    if "://" not in text and not text.startswith("//"):
        text = "//" + text  # a bare "huggingface.co/datasets/x" is still that page
    try:
        parts = urlsplit(text)
        host = (parts.hostname or "").rstrip(".").lower()
    except ValueError:
        return None
    if not host:
        return None
    host = host.removeprefix("www.")
    return f"{host}{_request_path(unquote(parts.path))}".lower()


def _request_path(path: str) -> str:
    """The path the request will ask for: HTTP clients drop ``.`` and ``..`` segments
    before sending (RFC 3986, 5.2.4), and servers read ``//`` as ``/``, so
    ``/x/../datasets/y`` and ``//datasets/y`` are ``/datasets/y`` to the rules too."""
    kept: list[str] = []
    segments = path.split("/")
    for segment in segments:
        if segment == "..":
            if kept:
                kept.pop()
        elif segment not in (".", ""):
            kept.append(segment)
    trailing = "/" if segments[-1] in ("", ".", "..") and kept else ""
    return "/" + "/".join(kept) + trailing


def clean_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    """Patterns as rules: trimmed, a scheme dropped, empty ones and repeats left out."""
    cleaned: list[str] = []
    for pattern in patterns:
        text = str(pattern).strip().lower()
        text = text.split("://", 1)[1] if "://" in text else text
        text = text.removeprefix("www.")
        if text and text not in cleaned:
            cleaned.append(text)
    return tuple(cleaned)


@dataclass(frozen=True, slots=True)
class BlockedURLs:
    """The rules of one run: the built-in ones (unless turned off) and ``extra``."""

    extra: tuple[str, ...] = ()
    builtin: bool = True

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> BlockedURLs:
        """The rules :data:`BLOCKED_URLS_ENV` and :data:`BUILTIN_ENV` describe."""
        env = os.environ if env is None else env
        extra = clean_patterns(env.get(BLOCKED_URLS_ENV, "").splitlines())
        builtin = env.get(BUILTIN_ENV, "1").strip().lower() not in {"0", "false", "no"}
        return cls(extra, builtin)

    @property
    def rules(self) -> tuple[str, ...]:
        return (BUILTIN_RULES if self.builtin else ()) + self.extra

    def rule_for(self, url: str) -> str | None:
        """The first rule that blocks ``url``, or None when it may be shown."""
        key = url_key(url)
        if key is None:
            return None
        return next((rule for rule in self.rules if fnmatch.fnmatchcase(key, rule)), None)

    def environment(self) -> dict[str, str]:
        """These rules as a tool server's environment variables."""
        return {BLOCKED_URLS_ENV: "\n".join(self.extra), BUILTIN_ENV: "1" if self.builtin else "0"}


def refusal(url: str, rule: str) -> str:
    """What the model reads when a URL is refused."""
    return (
        f"Refused {url}: it matches the answer-leak rule {rule!r} (pages that publish "
        "benchmark answers are not read; web.blocked_urls)."
    )
