"""The web layer: fetching pages safely and turning what comes back into text.

``read_url`` is the entry point tools use (http(s) and ``corpus://`` links); beneath it,
``fetch`` (redirects and body caps, every hop through the SSRF guard in ``ssrf``),
``convert`` (bytes of any kind to a ``Document``) and ``jina_read`` (the optional Jina
reader). Exceptions::

    FetchError          not fetched: kind blocked | http_status | timeout | connect |
                        too_large | redirects | invalid_url | invalid_header | not_found
    ContentError        fetched, but not readable (unknown binary, damaged file)
    BlockedURLError     the SSRF guard's refusal (wrapped in FetchError by fetch)
    JinaError           the Jina reader failed: kind missing_key | blocked | auth | ...

Each name is imported on first use: a tool server that needs only one part (the
search server's ``corpus``) does not pay for the HTTP stack (httpx) the others load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deepledger.web.convert import ContentError, ConvertLimits, Document, convert, convert_async
    from deepledger.web.fetch import Fetched, FetchError, FetchLimits, fetch, guarded_client
    from deepledger.web.jina import JinaError, JinaLimits, jina_read
    from deepledger.web.pages import corpus_link, read_url
    from deepledger.web.ssrf import BlockedURLError, check_url, private_networks_allowed

_MODULE_OF = {
    **dict.fromkeys(
        ("ContentError", "ConvertLimits", "Document", "convert", "convert_async"), "convert"
    ),
    **dict.fromkeys(("Fetched", "FetchError", "FetchLimits", "fetch", "guarded_client"), "fetch"),
    **dict.fromkeys(("JinaError", "JinaLimits", "jina_read"), "jina"),
    **dict.fromkeys(("corpus_link", "read_url"), "pages"),
    **dict.fromkeys(("BlockedURLError", "check_url", "private_networks_allowed"), "ssrf"),
}


def __getattr__(name: str) -> object:
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'deepledger.web' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"deepledger.web.{_MODULE_OF[name]}"), name)
    globals()[name] = value  # the next lookup is a plain one
    return value


__all__ = [
    "BlockedURLError",
    "ContentError",
    "ConvertLimits",
    "Document",
    "FetchError",
    "FetchLimits",
    "Fetched",
    "JinaError",
    "JinaLimits",
    "check_url",
    "convert",
    "convert_async",
    "corpus_link",
    "fetch",
    "guarded_client",
    "jina_read",
    "private_networks_allowed",
    "read_url",
]
