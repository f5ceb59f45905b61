"""What a model hands a page reader, made fit to send: its URL and its extra headers.

``page_url`` forgives the two URL slips models make most:

- no scheme (``example.com/a``, ``www.example.org``, ``//cdn.example.net/x``): the
  address gets ``https://``. Only text that reads as a host name (a dotted name or an
  IPv4 address, maybe a port) is prefixed; anything else (``notes.txt`` has a dot too,
  but it fails at DNS, never on the disk) is left for the reader to refuse.
- a Jina reader address pasted in (``https://r.jina.ai/https://example.com/a``, or
  ``r.jina.ai/example.com/a``): the page behind it is read, so the Jina path does not
  prefix it a second time and the direct path does not fetch Jina's rendering.

``request_headers`` keeps the headers a model may choose (``User-Agent``, ``Accept``,
``Accept-Language``, ``Referer``, a site's own ``X-...`` headers) and drops:

- hop-by-hop and framing headers, which belong to one connection and which the HTTP
  client sets itself: ``Connection``, ``Keep-Alive``, ``TE``, ``Trailer``,
  ``Transfer-Encoding``, ``Upgrade``, ``Host``, ``Content-Length``, ``Expect``;
- credentials and what carries them: ``Authorization``, ``Cookie``, ``Set-Cookie``,
  every ``Proxy-*`` header, and the Jina reader's cookie forwarding ``X-Set-Cookie``
  and its proxy switch ``X-Proxy-Url``. A model has no credentials of its own to
  send: whatever it puts there came from a page it read, and through Jina it would
  replace our key;
- names or values that are not printable ASCII or hold line breaks (they cannot be
  sent as HTTP and could smuggle a second header).

What was dropped is returned by name (never by value) so the caller can say so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

JINA_HOST = "r.jina.ai"

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_HOSTLIKE = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z0-9-]{1,63}\.?"
    r"(?::\d{1,5})?(?:[/?#].*)?$",
    re.DOTALL,
)
_JINA_PREFIX = re.compile(r"^(?:https?://)?r\.jina\.ai/+", re.IGNORECASE)

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade", "host",
     "content-length", "expect"}
)  # fmt: skip
CREDENTIALS = frozenset({"authorization", "cookie", "set-cookie", "x-set-cookie", "x-proxy-url"})
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_VALUE = re.compile(r"^[\x20-\x7e\t]*$")


def page_url(url: str) -> str:
    """``url`` with ``https://`` added to a bare host and a pasted Jina prefix removed."""
    url = url.strip()
    inner = _JINA_PREFIX.sub("", url, count=1)
    if inner != url and inner:
        url = inner  # the page behind the reader's address
    if url.startswith("//"):
        return "https:" + url
    if _SCHEME.match(url) or not _HOSTLIKE.match(url):
        return url
    return "https://" + url


def request_headers(raw: Mapping[str, str] | None) -> tuple[dict[str, str], list[str]]:
    """The headers of ``raw`` that may be sent, and the names of those dropped."""
    kept: dict[str, str] = {}
    dropped: list[str] = []
    for name, value in (raw or {}).items():
        lowered = name.strip().lower()
        if (
            lowered in HOP_BY_HOP
            or lowered in CREDENTIALS
            or lowered.startswith("proxy-")
            or not _TOKEN.match(name.strip())
            or not _VALUE.match(value)
        ):
            dropped.append(name)
            continue
        kept[name.strip()] = value.strip()
    return kept, dropped
