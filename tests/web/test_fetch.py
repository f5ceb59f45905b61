"""fetch and read_url against the loopback page server: redirects, caps, errors, corpus:// links."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from deepledger.web import pages, ssrf
from deepledger.web.fetch import FetchError, FetchLimits, fetch
from deepledger.web.pages import corpus_link, read_url
from tests.support.doubles.fake_web_server import FakeWebServer, Page, slow, streamed

HTML = (
    b"<html><head><title>Herons</title></head><body><nav>Home | About</nav>"
    b"<article><h1>Grey heron</h1><p>The grey heron is a wading bird of the family Ardeidae."
    b"</p></article></body></html>"
)
MIB = 1024 * 1024
LIMITS = FetchLimits(max_bytes=MIB, timeout_seconds=5.0, total_seconds=20.0)


@pytest.fixture
def site() -> Iterator[FakeWebServer]:
    with FakeWebServer({"/page.html": Page(HTML)}) as server:
        yield server


@pytest.fixture
def loopback_is_public(monkeypatch: pytest.MonkeyPatch) -> None:
    """Treat 127.0.0.1 (the test server) as a public address, and only it: the redirect
    targets below still go through the real classification."""
    real = ssrf.classify
    server = ipaddress.ip_address("127.0.0.1")
    monkeypatch.setattr(
        ssrf, "classify", lambda address: None if address == server else real(address)
    )
    monkeypatch.delenv(ssrf.ALLOW_ENV, raising=False)


async def test_a_page_is_fetched_with_its_type(site: FakeWebServer) -> None:
    fetched = await fetch(site.url("/page.html"), limits=LIMITS, allow_private=True)
    assert (fetched.status, fetched.data, fetched.truncated) == (200, HTML, False)
    assert fetched.content_type == "text/html; charset=utf-8"
    assert fetched.charset == "utf-8"
    assert fetched.final_url == site.url("/page.html")


async def test_loopback_is_refused_without_the_switch(
    site: FakeWebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ssrf.ALLOW_ENV, raising=False)
    with pytest.raises(FetchError) as caught:
        await fetch(site.url("/page.html"), limits=LIMITS)
    assert caught.value.kind == "blocked"
    assert "is a loopback address 127.0.0.1" in str(caught.value)
    assert site.requests == []
    monkeypatch.setenv(ssrf.ALLOW_ENV, "1")
    assert (await fetch(site.url("/page.html"), limits=LIMITS)).data == HTML


async def test_redirects_are_followed_and_recorded(site: FakeWebServer) -> None:
    site.redirect("/old", "/middle", status=301)
    site.redirect("/middle", site.url("/page.html"), status=307)
    fetched = await fetch(site.url("/old"), limits=LIMITS, allow_private=True)
    assert fetched.data == HTML
    assert fetched.final_url == site.url("/page.html")
    assert fetched.redirects == (site.url("/old"), site.url("/middle"))


@pytest.mark.parametrize(
    ("target", "address_class"),
    [("http://169.254.169.254/latest/meta-data/", "cloud-metadata"),
     ("http://10.0.0.5/admin", "private"), ("http://[::ffff:192.168.0.1]/", "private"),
     ("http://0x7f.0.0.2/", "loopback")],
)  # fmt: skip
async def test_every_redirect_hop_is_checked(
    site: FakeWebServer, loopback_is_public: None, target: str, address_class: str
) -> None:
    site.redirect("/go", target)
    with pytest.raises(FetchError) as caught:
        await fetch(site.url("/go"), limits=LIMITS)
    assert caught.value.kind == "blocked"
    assert f"{address_class} address" in str(caught.value)
    assert site.paths_requested() == ["/go"]  # the allowed first hop was fetched


async def test_redirect_loops_stop_at_the_limit(site: FakeWebServer) -> None:
    site.redirect("/a", "/b")
    site.redirect("/b", "/a")
    with pytest.raises(FetchError, match=r"Too many redirects") as caught:
        await fetch(site.url("/a"), limits=FetchLimits(max_redirects=3), allow_private=True)
    assert caught.value.kind == "redirects"
    assert len(site.requests) == 4


async def test_a_huge_text_body_is_cut_while_it_streams(site: FakeWebServer) -> None:
    site.add("/huge.txt", streamed(50 * MIB))
    fetched = await fetch(site.url("/huge.txt"), limits=LIMITS, allow_private=True)
    assert fetched.truncated
    assert len(fetched.data) == MIB
    assert site.wait_finished("/huge.txt")
    # The server stopped when the client hung up: what it wrote is the 1 MiB read plus
    # what the loopback socket buffers held, far from the 50 MiB it would have sent.
    assert site.bytes_sent("/huge.txt") < 20 * MIB


async def test_a_huge_binary_body_is_refused_while_it_streams(site: FakeWebServer) -> None:
    site.add("/huge.pdf", streamed(50 * MIB, content_type="application/pdf"))
    with pytest.raises(FetchError, match=r"larger than the limit of 1.0 MiB") as caught:
        await fetch(site.url("/huge.pdf"), limits=LIMITS, allow_private=True)
    assert caught.value.kind == "too_large"
    assert site.wait_finished("/huge.pdf")
    assert site.bytes_sent("/huge.pdf") < 20 * MIB


async def test_a_declared_length_over_the_cap_is_refused_before_reading(
    site: FakeWebServer,
) -> None:
    big = streamed(50 * MIB, content_type="application/zip")
    site.add("/big.zip", Page(big.body, content_type="application/zip", declared_length=50 * MIB))
    with pytest.raises(FetchError) as caught:
        await fetch(site.url("/big.zip"), limits=LIMITS, allow_private=True)
    assert caught.value.kind == "too_large"
    assert site.wait_finished("/big.zip")
    assert site.bytes_sent("/big.zip") < 20 * MIB


async def test_http_errors_and_refused_connections(site: FakeWebServer) -> None:
    with pytest.raises(FetchError, match=r"HTTP 404 Not Found for") as caught:
        await fetch(site.url("/missing"), limits=LIMITS, allow_private=True)
    assert (caught.value.kind, caught.value.status) == ("http_status", 404)
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    with pytest.raises(FetchError, match=r"Could not fetch") as caught:
        await fetch(f"http://127.0.0.1:{closed}/", limits=LIMITS, allow_private=True)
    assert caught.value.kind == "connect"
    with pytest.raises(FetchError, match=r"only http and https") as caught:
        await fetch("file:///etc/passwd", limits=LIMITS, allow_private=True)
    assert caught.value.kind == "blocked"


async def test_a_stalled_body_times_out(site: FakeWebServer) -> None:
    site.add("/slow", slow([b"first part ", b"never sent"], delay=10.0))
    with pytest.raises(FetchError, match=r"Timed out after 1 s") as caught:
        await fetch(site.url("/slow"), limits=FetchLimits(timeout_seconds=1.0), allow_private=True)
    assert caught.value.kind == "timeout"


async def test_custom_headers_go_to_the_page_but_never_into_errors(site: FakeWebServer) -> None:
    secret = {"Authorization": "Bearer s3cr3t-token", "X-Api-Key": "k3y-value"}
    with FakeWebServer({"/elsewhere": Page(b"other origin")}) as other:
        site.redirect("/hop", other.url("/elsewhere"))
        fetched = await fetch(site.url("/hop"), limits=LIMITS, allow_private=True, headers=secret)
        assert fetched.data == b"other origin"
        assert site.requests[0].headers["Authorization"] == "Bearer s3cr3t-token"
        assert "Authorization" not in other.requests[0].headers  # another origin: dropped
        assert "X-Api-Key" not in other.requests[0].headers
    with pytest.raises(FetchError) as caught:
        await fetch(site.url("/missing"), limits=LIMITS, allow_private=True, headers=secret)
    assert "s3cr3t" not in str(caught.value) and "k3y" not in str(caught.value)


async def test_read_url_fetches_and_converts(site: FakeWebServer) -> None:
    document = await read_url(site.url("/page.html"), limits=LIMITS, allow_private=True)
    assert document.kind == "html"
    assert document.title == "Herons"
    assert "The grey heron is a wading bird" in document.text
    site.add("/cut.txt", Page(b"word " * 1000, content_type="text/plain"))
    cut = await read_url(
        site.url("/cut.txt"), limits=FetchLimits(max_bytes=100), allow_private=True
    )
    assert cut.text == "word " * 20
    assert cut.notes == ("only the first 100 bytes of the page were read",)
    with pytest.raises(FetchError, match=r"give an http"):
        await read_url("ftp://example.org/x", limits=LIMITS)


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "corpus"
    (folder / "birds").mkdir(parents=True)
    (folder / "birds" / "heron.md").write_text("# Grey heron\n\nHerons stand still in water.\n")
    monkeypatch.setenv("DEEPLEDGER_SEARCH_CORPUS", str(folder))
    monkeypatch.setenv("DEEPLEDGER_CACHE_DIR", str(tmp_path / "cache"))
    pages.reset_corpus_index()
    yield folder
    pages.reset_corpus_index()


async def test_corpus_links_open_local_documents(corpus: Path) -> None:
    link = corpus_link("birds/heron.md")
    assert link == "corpus://birds%2Fheron.md"
    document = await read_url(link, limits=LIMITS)
    assert document.kind == "corpus"
    assert document.title == "Grey heron"
    assert "Herons stand still in water." in document.text
    assert pages.corpus_index() is pages.corpus_index()  # opened once, reused
    with pytest.raises(FetchError, match=r"no document 'birds/crane.md'") as caught:
        await read_url(corpus_link("birds/crane.md"), limits=LIMITS)
    assert caught.value.kind == "not_found"


async def test_a_custom_header_that_is_not_ascii_is_a_fetch_error():
    with (
        FakeWebServer({"/a": Page(b"<p>hi</p>")}) as site,
        pytest.raises(FetchError, match="must be ASCII") as caught,
    ):
        headers = {"X-Token": "caf\u00e9"}
        await fetch(site.url("/a"), limits=FetchLimits(), allow_private=True, headers=headers)
    assert caught.value.kind == "invalid_header"
