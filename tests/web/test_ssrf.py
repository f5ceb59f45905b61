"""The SSRF guard: which URLs are refused, how they are named, and the switch that allows them."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from deepledger.web import ssrf
from deepledger.web.fetch import FetchError, FetchLimits, fetch
from tests.support.doubles.fake_web_server import FakeWebServer, Page

PUBLIC = "93.184.215.14"


def fake_resolver(table: dict[str, list[str]]):
    """A getaddrinfo over ``table`` (name -> addresses); other names do not resolve."""

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM, 6, "",
             (address, port))
            for address in table[host]
        ]  # fmt: skip

    return getaddrinfo


@pytest.fixture(autouse=True)
def no_real_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names resolve only through the table a test sets; private networks off by default."""
    monkeypatch.setattr(ssrf, "_getaddrinfo", fake_resolver({}))
    monkeypatch.delenv(ssrf.ALLOW_ENV, raising=False)


@pytest.mark.parametrize(
    ("url", "address_class", "address"),
    [
        ("http://127.0.0.1/", "loopback", "127.0.0.1"),
        ("http://127.8.9.10:8080/x", "loopback", "127.8.9.10"),
        ("http://10.0.0.5/", "private", "10.0.0.5"),
        ("http://172.16.3.4/", "private", "172.16.3.4"),
        ("http://172.31.255.255/", "private", "172.31.255.255"),
        ("http://192.168.1.1/admin", "private", "192.168.1.1"),
        ("http://169.254.169.254/latest/meta-data/", "cloud-metadata", "169.254.169.254"),
        ("http://169.254.10.1/", "link-local", "169.254.10.1"),
        ("http://100.64.0.1/", "CGNAT", "100.64.0.1"),
        ("http://0.0.0.0/", "unspecified", "0.0.0.0"),
        ("http://224.0.0.1/", "multicast", "224.0.0.1"),
        ("http://240.0.0.1/", "reserved", "240.0.0.1"),
        ("http://[::1]/", "loopback", "::1"),
        ("http://[::ffff:127.0.0.1]/", "loopback", "127.0.0.1"),
        ("http://[::ffff:169.254.169.254]/", "cloud-metadata", "169.254.169.254"),
        ("http://[64:ff9b::a00:5]/", "private", "10.0.0.5"),
        ("http://[fd00:ec2::254]/", "cloud-metadata", "fd00:ec2::254"),
        ("http://[fe80::1]/", "link-local", "fe80::1"),
        ("http://[fc00::7]/", "private", "fc00::7"),
        ("http://2130706433/", "loopback", "127.0.0.1"),
        ("http://0x7f.1/", "loopback", "127.0.0.1"),
        ("http://0x7f000001/", "loopback", "127.0.0.1"),
        ("http://0177.0.0.1/", "loopback", "127.0.0.1"),
        ("http://localhost:8000/", "loopback", "127.0.0.1"),
        ("http://LOCALHOST./", "loopback", "127.0.0.1"),
        ("http://api.localhost/", "loopback", "127.0.0.1"),
    ],
)
async def test_internal_addresses_are_refused_naming_their_class(
    url: str, address_class: str, address: str
) -> None:
    with pytest.raises(ssrf.BlockedURLError) as caught:
        await ssrf.check_url(url)
    assert caught.value.address_class == address_class
    assert caught.value.address == str(ipaddress.ip_address(address))
    assert f"{address_class} address" in str(caught.value)
    assert "web.allow_private_networks=true" in str(caught.value)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.org/x", "gopher://a/"])
async def test_only_http_and_https_are_allowed(url: str) -> None:
    with pytest.raises(ssrf.BlockedURLError, match=r"only http and https"):
        await ssrf.check_url(url, allow_private_networks=True)


async def test_names_are_judged_by_what_they_resolve_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        ssrf,
        "_getaddrinfo",
        fake_resolver(
            {
                "innocent.example": ["127.0.0.1"],
                "metadata.google.internal": ["169.254.169.254"],
                "mixed.example": [PUBLIC, "10.1.1.1"],
                "public.example": [PUBLIC, "2606:2800:220:1::1"],
            }
        ),
    )
    with pytest.raises(ssrf.BlockedURLError, match=r"resolves to a loopback address 127.0.0.1"):
        await ssrf.check_url("https://innocent.example/page")
    with pytest.raises(ssrf.BlockedURLError, match=r"cloud-metadata address 169.254.169.254"):
        await ssrf.check_url("http://metadata.google.internal/computeMetadata/v1/")
    with pytest.raises(ssrf.BlockedURLError, match=r"private address 10.1.1.1"):
        await ssrf.check_url("http://mixed.example/")  # one internal address is enough
    parsed = await ssrf.check_url("https://public.example/a?b=c")
    assert parsed.host == "public.example"
    with pytest.raises(OSError):
        await ssrf.check_url("http://unknown.example/")


async def test_the_switch_allows_private_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (await ssrf.check_url("http://127.0.0.1/", allow_private_networks=True)).port is None
    monkeypatch.setenv(ssrf.ALLOW_ENV, "true")
    await ssrf.check_url("http://10.0.0.5/")
    assert (await ssrf.check_url("http://[::1]:81/")).port == 81
    with pytest.raises(ssrf.BlockedURLError):  # an explicit argument beats the environment
        await ssrf.check_url("http://10.0.0.5/", allow_private_networks=False)
    monkeypatch.setenv(ssrf.ALLOW_ENV, "0")
    with pytest.raises(ssrf.BlockedURLError):
        await ssrf.check_url("http://10.0.0.5/")


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/", "http://[fd00:ec2::254]/", "http://[::ffff:a9fe:a9fe]/"]
)
async def test_metadata_addresses_stay_refused_with_the_switch(url: str) -> None:
    with pytest.raises(ssrf.BlockedURLError, match=r"cloud-metadata address .*; never allowed"):
        await ssrf.check_url(url, allow_private_networks=True)


async def test_with_the_switch_names_are_still_checked_for_metadata_at_connect_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        ssrf, "_getaddrinfo", fake_resolver({"metadata.google.internal": ["169.254.169.254"]})
    )
    with pytest.raises(FetchError, match=r"cloud-metadata address 169.254.169.254") as caught:
        await fetch("http://metadata.google.internal/", limits=FetchLimits(), allow_private=True)
    assert caught.value.kind == "blocked"


@pytest.mark.parametrize(
    ("host", "expected"),
    [("0x7f.1", "127.0.0.1"), ("1.2.3", "1.2.0.3"), ("3232235777", "192.168.1.1"),
     ("010.0.0.1", "8.0.0.1"), ("256.1.1.1", None), ("example.com", None), ("1.2.3.4.5", None),
     ("[::1]", "::1"), ("08.1.1.1", None)],
)  # fmt: skip
def test_legacy_ipv4_spellings_are_read_as_inet_aton_reads_them(
    host: str, expected: str | None
) -> None:
    parsed = ssrf.parse_ip_literal(host)
    assert (str(parsed) if parsed else None) == expected


async def test_connect_time_check_defeats_dns_rebinding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The name is public when checked before the request and loopback when connecting:
    the guarded transport resolves again, refuses, and never connects."""
    answers = [[PUBLIC], ["127.0.0.1"]]

    def rebinding(host, port, *args, **kwargs):
        return fake_resolver({host: answers.pop(0) if answers else ["127.0.0.1"]})(host, port)

    monkeypatch.setattr(ssrf, "_getaddrinfo", rebinding)
    with FakeWebServer({"/": Page(b"internal secrets")}) as site:
        port = site.base_url.rsplit(":", 1)[1]
        with pytest.raises(FetchError) as caught:
            await fetch(f"http://rebind.example:{port}/", limits=FetchLimits())
        assert caught.value.kind == "blocked"
        assert "loopback address 127.0.0.1" in str(caught.value)
        assert site.requests == []
    assert answers == []  # both resolutions happened


@pytest.mark.parametrize("address", ["fec0::1", "192.0.0.1", "192.0.0.170"])
def test_ranges_some_pythons_count_as_global_are_refused_here(address):
    assert ssrf.classify(ipaddress.ip_address(address)) is not None
