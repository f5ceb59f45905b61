"""The SSRF guard: URLs a model or a page chose never reach internal addresses.

Every URL that comes from the model or from a page (the reader, the scraper, attachments
by URL, and each redirect) is checked here. It is refused unless its scheme is http or
https and every address its host stands for is a public one. Refused address classes:
loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), link-local (169.254/16,
fe80::/10), unspecified, multicast, reserved, CGNAT (100.64/10), cloud metadata
(169.254.169.254, fd00:ec2::254, 100.100.100.200) and any other non-global range.
IPv4 embedded in IPv6 (``::ffff:127.0.0.1``, NAT64 ``64:ff9b::/96``, 6to4) is judged by
the IPv4 address inside; the legacy IPv4 spellings that ``inet_aton`` accepts
(``2130706433``, ``0x7f.1``, ``0177.0.0.1``) are read as the address they spell; ``localhost``
and ``*.localhost`` are loopback without asking a resolver.

Two layers:

``check_url`` resolves the host and checks every address before a request is sent.

``guarded_transport`` is an httpx transport whose network backend resolves the host
itself, checks the addresses, and connects to exactly the address it checked. A name
that resolves to a public address when ``check_url`` asks and to a private one when the
connection is made (DNS rebinding) is therefore still refused. TLS still verifies the
certificate against the URL's host name. Environment proxies are not used with this
transport (a proxy would make the connect-time check meaningless).

``allow_private_networks`` allows every class but one: cloud-metadata addresses stay
refused whatever the switch says (they hand out the machine's cloud credentials, and
no research task needs them; the switch exists for local servers and intranets). Its
default comes from the environment variable ``DEEPLEDGER_ALLOW_PRIVATE_NETWORKS``
("1", "true", "yes" allow), which the runtime sets from the config key
``web.allow_private_networks``. With the switch on, names are still resolved at
connect time, but only to refuse metadata addresses.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread
import httpcore
import httpx

ALLOW_ENV = "DEEPLEDGER_ALLOW_PRIVATE_NETWORKS"
ALLOWED_SCHEMES = frozenset({"http", "https"})
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_METADATA = frozenset(
    ipaddress.ip_address(address)
    for address in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "169.254.170.2")
)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
# Ranges some Python versions' ipaddress tables count as global: named here so the
# guard does not depend on the interpreter (deprecated IPv6 site-local; IETF protocol
# assignments, which hold e.g. DS-Lite's 192.0.0.0/29 gateways).
_ALSO_PRIVATE = (ipaddress.ip_network("fec0::/10"), ipaddress.ip_network("192.0.0.0/24"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_HINT = "set web.allow_private_networks=true to allow it"

# The system resolver; tests replace it to make names resolve where they need.
_getaddrinfo = socket.getaddrinfo


class BlockedURLError(ValueError):
    """A URL the guard refuses: a scheme other than http(s), or an internal address.

    ``address_class`` names why ("loopback", "private", "cloud-metadata", "scheme",
    ...); ``address`` is the offending address when there is one.
    """

    def __init__(self, message: str, *, address_class: str, address: str | None = None):
        super().__init__(message)
        self.address_class = address_class
        self.address = address


def private_networks_allowed(allow: bool | None = None) -> bool:
    """``allow`` if given, else what ``DEEPLEDGER_ALLOW_PRIVATE_NETWORKS`` says (default no)."""
    if allow is not None:
        return allow
    return os.environ.get(ALLOW_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def classify(address: IPAddress) -> str | None:
    """The refused class ``address`` belongs to, or None for a public address."""
    address = _embedded_ipv4(address) or address
    if address in _METADATA:
        return "cloud-metadata"
    checks = (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("CGNAT", isinstance(address, ipaddress.IPv4Address) and address in _CGNAT),
        ("reserved", address.is_reserved),  # before private: Python counts 240/4 as both
        (
            "private",
            address.is_private
            or any(address.version == net.version and address in net for net in _ALSO_PRIVATE),
        ),
    )
    for name, matches in checks:
        if matches:
            return name
    return None if address.is_global else "non-global"


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4), if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def parse_ip_literal(host: str) -> IPAddress | None:
    """``host`` as an IP address if it spells one, legacy IPv4 forms included, else None.

    ``inet_aton`` (and so every resolver) reads ``2130706433``, ``0x7f.1`` and
    ``0177.0.0.1`` as 127.0.0.1; reading them the same way here means such spellings
    are judged by the address they reach.
    """
    host = host.strip().strip("[]").rstrip(".")
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass  # not a canonical literal: try the legacy IPv4 forms below
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers = [_inet_aton_part(part) for part in parts]
    if any(number is None for number in numbers):
        return None
    *leading, last = [number for number in numbers if number is not None]
    if any(number > 255 for number in leading) or last >= 256 ** (5 - len(parts)):
        return None
    value = last
    for index, number in enumerate(leading):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _inet_aton_part(part: str) -> int | None:
    """One dotted part as ``inet_aton`` reads it: 0x hex, leading-0 octal, else decimal."""
    lowered = part.lower()
    try:
        if lowered.startswith("0x"):
            return int(lowered[2:] or "0", 16)
        if len(lowered) > 1 and lowered.startswith("0"):
            return int(lowered[1:], 8)
        return int(lowered, 10) if lowered.isdigit() else None
    except ValueError:
        return None


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` stands for: itself if it is a literal, else the resolver's.

    ``localhost`` and its subdomains are loopback without asking (RFC 6761). Resolution
    runs on a worker thread; a name that does not resolve raises ``OSError``
    (``socket.gaierror``), as a failed connection would.
    """
    literal = parse_ip_literal(host)
    if literal is not None:
        return [literal]
    name = host.rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return [ipaddress.ip_address("127.0.0.1")]
    infos = await anyio.to_thread.run_sync(
        lambda: _getaddrinfo(name, port, type=socket.SOCK_STREAM)
    )
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


def refuse_internal(
    url: str, host: str, addresses: Iterable[IPAddress], *, allowed: bool = False
) -> None:
    """Raise ``BlockedURLError`` if any of ``addresses`` is internal (with ``allowed``,
    only if one is a cloud-metadata address).

    Any one is enough: a name with a public and a private address is the classic
    rebinding set-up, and which one a connection would use is not ours to pick.
    """
    for address in addresses:
        address_class = classify(address)
        if address_class is None or (allowed and address_class != "cloud-metadata"):
            continue
        address = _embedded_ipv4(address) or address  # name the address that is reached
        article = "an" if address_class[0] in "aeiou" else "a"
        via = "is" if parse_ip_literal(host) is not None else "resolves to"
        hint = "never allowed" if allowed else _HINT
        raise BlockedURLError(
            f"Refused {url}: {host} {via} {article} {address_class} address {address}; {hint}.",
            address_class=address_class,
            address=str(address),
        )


def check_scheme(url: str) -> httpx.URL:
    """``url`` parsed, if it is an absolute http(s) URL with a host."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        # httpx rejects some legacy spellings (``0177.0.0.1``) that resolvers accept: name
        # the address they spell, so the refusal says what it really is.
        host = urlsplit(url).hostname or ""
        literal = parse_ip_literal(host)
        if literal is not None and urlsplit(url).scheme in ALLOWED_SCHEMES:
            refuse_internal(url, host, [literal])
        message = f"Refused {url}: not a valid URL ({exc})."
        raise BlockedURLError(message, address_class="url") from exc
    if parsed.scheme not in ALLOWED_SCHEMES:
        raise BlockedURLError(
            f"Refused {url}: only http and https URLs can be fetched.", address_class="scheme"
        )
    if not parsed.host:
        raise BlockedURLError(f"Refused {url}: the URL has no host.", address_class="url")
    return parsed


async def check_url(url: str, *, allow_private_networks: bool | None = None) -> httpx.URL:
    """``url`` parsed, after refusing a bad scheme or a host that reaches an internal address.

    Raises ``BlockedURLError`` (with the address class in its message) or ``OSError``
    when the host name does not resolve. With private networks allowed only the scheme
    is checked.
    """
    parsed = check_scheme(url)
    if private_networks_allowed(allow_private_networks):
        literal = parse_ip_literal(parsed.host)  # names are checked at connect time
        refuse_internal(url, parsed.host, [literal] if literal else [], allowed=True)
        return parsed
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    refuse_internal(url, parsed.host, await resolve(parsed.host, port))
    return parsed


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves, checks, and connects to the checked address: the connect-time guard."""

    def __init__(self, allowed: bool) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._allowed = allowed

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's backend signature)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await resolve(host, port)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from exc
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        refuse_internal(f"a connection to {host}:{port}", host, addresses, allowed=self._allowed)
        failure: Exception | None = None
        for address in addresses:  # as a resolver-driven connect would, in order
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore.ConnectError(f"{host} has no addresses")

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("Unix sockets are never used for fetched URLs")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport with its connection pool built on the guarded backend."""

    def __init__(self, allowed: bool) -> None:
        super().__init__()
        # httpx 0.28 has no public hook for a network backend; the pool it builds is
        # replaced by the same pool class over ours (verified TLS, HTTP/1.1, as before).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            network_backend=_GuardedBackend(allowed),
        )


def guarded_transport(allow_private_networks: bool | None = None) -> httpx.AsyncBaseTransport:
    """A transport that checks the address of every connection it opens (see the module
    docstring for what is refused with private networks allowed)."""
    return _GuardedTransport(private_networks_allowed(allow_private_networks))
