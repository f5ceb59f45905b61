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

Importable from here: ``read_url`` and ``corpus_link``; ``Document``, ``ConvertLimits``
and ``convert_async``; ``Fetched``, ``FetchLimits`` and ``guarded_client``;
``jina_read`` and ``JinaLimits``; ``check_url`` and ``private_networks_allowed``; the
four exceptions above. Each name is imported on first use: a tool server that needs
only one part (the search server's ``corpus``) does not pay for the HTTP stack (httpx)
the others load. The functions ``fetch`` and ``convert`` share their module's name,
which the package holds once the module is imported: they are imported from
``deepledger.web.fetch`` and ``deepledger.web.convert``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepledger.lazy import lazy_exports

if TYPE_CHECKING:
    from deepledger.web.convert import ContentError, ConvertLimits, Document, convert_async
    from deepledger.web.fetch import Fetched, FetchError, FetchLimits, guarded_client
    from deepledger.web.jina import JinaError, JinaLimits, jina_read
    from deepledger.web.pages import corpus_link, read_url
    from deepledger.web.ssrf import BlockedURLError, check_url, private_networks_allowed

__getattr__ = lazy_exports(
    __name__,
    {
        "convert": ("ContentError", "ConvertLimits", "Document", "convert_async"),
        "fetch": ("Fetched", "FetchError", "FetchLimits", "guarded_client"),
        "jina": ("JinaError", "JinaLimits", "jina_read"),
        "pages": ("corpus_link", "read_url"),
        "ssrf": ("BlockedURLError", "check_url", "private_networks_allowed"),
    },
)


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
    "convert_async",
    "corpus_link",
    "guarded_client",
    "jina_read",
    "private_networks_allowed",
    "read_url",
]
