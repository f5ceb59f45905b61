"""The reader server, run for real over stdio; URLs are served by the loopback page server."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver.exceptions import ToolError

from deepledger.tools.servers.reader import Reader, ReadLimits
from tests.support.documents import make_docx, make_pdf, make_png, make_xlsx, make_zip
from tests.support.doubles.fake_web_server import FakeWebServer, Page
from tests.support.mcp_client import call, hold_open

on_module_loop = pytest.mark.asyncio(loop_scope="module")

PAGE_HTML = """<!doctype html><html><head><title>Herons</title>
<style>body { color: red }</style><script>var tracking = "<p>hidden</p>";</script></head>
<body><h1>Grey   heron</h1><p>The grey heron is a <b>wading</b> bird.</p>
<p>It eats fish.</p><ul><li>Europe</li><li>Asia</li></ul></body></html>"""
PNG = make_png(4, 4)
LONG_TEXT = "".join(f"line {number:05d} of a long document\n" for number in range(1, 801))


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A root with one file of each kind and two symlinks out of it, and a folder outside it."""
    base = tmp_path_factory.mktemp("reader")
    root, outside = base / "root", base / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("outside secret\n")
    (root / "notes.txt").write_text("Plain notes about herons.\n")
    (root / "page.html").write_text(PAGE_HTML)
    (root / "data.json").write_text('{"b": [1, 2], "a": "x"}')
    (root / "table.csv").write_text("city,population\nOslo,709000\n")
    (root / "paper.pdf").write_bytes(make_pdf(["Hello PDF world", "Second page text"]))
    (root / "long.md").write_text(LONG_TEXT)
    (root / "photo.png").write_bytes(PNG)
    (root / "blob.bin").write_bytes(b"\x7fELF\2\1\1" + b"\0" * 40)
    (root / "report.docx").write_bytes(make_docx("Herons", ["They eat fish."], [["a", "b"]]))
    (root / "counts.xlsx").write_bytes(make_xlsx({"Birds": [["name", "count"], ["heron", 3]]}))
    (root / "bundle.zip").write_bytes(make_zip({"inner.txt": "zipped text", "pic.png": PNG}))
    (root / "sub" / "inner.md").write_text("# Inner\n")
    (root / "alias.txt").symlink_to(root / "notes.txt")
    (root / "escape.txt").symlink_to(outside / "secret.txt")
    (root / "outside-dir").symlink_to(outside)
    return {"root": root, "outside": outside}


@pytest.fixture(scope="module")
def site() -> Iterator[FakeWebServer]:
    """The loopback page server: an article, redirects, an image, a PDF, a 5,000-byte text."""
    pages = {
        "/article.html": Page(PAGE_HTML.encode()),
        "/big.txt": Page(b"x" * 5000, content_type="text/plain"),
        "/chart": Page(PNG, content_type="image/png"),
        "/paper.pdf": Page(make_pdf(["Remote PDF text"]), content_type="application/pdf"),
    }
    with FakeWebServer(pages) as server:
        server.redirect("/moved", "/article.html", status=301)
        server.redirect("/to-metadata", "http://169.254.169.254/latest/meta-data/")
        yield server


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A one-document search corpus and a cache folder, as the reader's environment."""
    base = tmp_path_factory.mktemp("corpus")
    (base / "docs").mkdir()
    (base / "docs" / "heron.md").write_text("# Grey heron\n\nHerons stand still in water.\n")
    return {
        "DEEPLEDGER_SEARCH_CORPUS": str(base / "docs"),
        "DEEPLEDGER_CACHE_DIR": str(base / "cache"),
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def reader(folders: dict[str, Path], corpus: dict[str, str]) -> AsyncIterator[Client]:
    """One reader confined to the root folder, allowed onto loopback, shared by the module."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "deepledger.tools.servers.reader", "--root", str(folders["root"])],
        env={"DEEPLEDGER_ALLOW_PRIVATE_NETWORKS": "1", **corpus},
    )
    async for client in hold_open(params, asyncio.Event()):
        yield client


async def read(client: Client, source: str, **arguments: object) -> tuple[bool, str]:
    """Call ``read``; return whether it failed and its text."""
    return await call(client, "read", source=source, **arguments)


async def images(client: Client, source: str, **arguments: object) -> tuple[str, list]:
    """Call ``read`` on something with images; return its text and its image blocks."""
    result = await client.call_tool("read", {"source": source, **arguments})
    assert not result.is_error
    texts = [block.text for block in result.content if block.type == "text"]
    return "\n".join(texts), [block for block in result.content if block.type == "image"]


@on_module_loop
async def test_lists_read_tool_naming_its_root(reader: Client, folders: dict[str, Path]) -> None:
    (tool,) = (await reader.list_tools()).tools
    assert tool.name == "read"
    assert set(tool.input_schema["properties"]) == {"source", "start", "max_chars"}
    assert str(folders["root"].resolve()) in tool.description


@on_module_loop
async def test_text_file_reads_whole_under_a_header(reader: Client) -> None:
    assert await read(reader, "notes.txt") == (
        False,
        "[chars 0-26 of 26; end of document]\nPlain notes about herons.\n",
    )


@on_module_loop
async def test_html_file_becomes_readable_text(reader: Client) -> None:
    failed, text = await read(reader, "page.html")
    assert not failed
    body = text.split("\n", 1)[1]
    assert body == (
        "# Herons\n\n# Grey heron\n\nThe grey heron is a **wading** bird.\n\nIt eats fish.\n\n"
        "* Europe\n* Asia\n"
    )


@on_module_loop
async def test_json_is_pretty_printed_and_csv_kept_as_is(reader: Client) -> None:
    failed, text = await read(reader, "data.json")
    assert not failed
    assert text.split("\n", 1)[1] == json.dumps({"b": [1, 2], "a": "x"}, indent=2)
    failed, text = await read(reader, "table.csv")
    assert not failed
    assert text.split("\n", 1)[1] == "city,population\nOslo,709000\n"


@on_module_loop
async def test_pdf_text_is_extracted_page_by_page(reader: Client) -> None:
    failed, text = await read(reader, "paper.pdf")
    assert not failed
    assert text.split("\n", 1)[1] == "[page 1]\nHello PDF world\n\n[page 2]\nSecond page text"


@on_module_loop
async def test_office_files_and_archives_are_read(reader: Client) -> None:
    failed, text = await read(reader, "report.docx")
    assert not failed and "# Herons" in text and "They eat fish." in text
    failed, text = await read(reader, "counts.xlsx")
    assert not failed and "| heron | 3 |" in text
    text, _ = await images(reader, "bundle.zip")
    assert "## File: inner.txt\n\nzipped text" in text


@on_module_loop
async def test_an_image_file_comes_back_as_an_image(reader: Client) -> None:
    text, blocks = await images(reader, "photo.png")
    assert text.startswith("[chars 0-")
    assert "[image: photo.png (image/png, " in text
    (block,) = blocks
    assert (block.mime_type, base64.b64decode(block.data)) == ("image/png", PNG)
    _, blocks = await images(reader, "bundle.zip")  # images inside an archive too
    assert [base64.b64decode(block.data) for block in blocks] == [PNG]


@on_module_loop
async def test_pages_join_back_into_the_whole_document(reader: Client) -> None:
    pages, start = [], 0
    while True:
        failed, text = await read(reader, "long.md", start=start, max_chars=10_000)
        assert not failed
        header, body = text.split("\n", 1)
        pages.append(body)
        if header.endswith("end of document]"):
            break
        end = start + len(body)
        assert header == f"[chars {start}-{end} of {len(LONG_TEXT)}; next: start={end}]"
        assert body.endswith("\n")  # cut at a line break, not mid-line
        start = end
    assert len(pages) == 3
    assert "".join(pages) == LONG_TEXT


@on_module_loop
async def test_start_past_the_end_is_an_error(reader: Client) -> None:
    failed, text = await read(reader, "notes.txt", start=26)
    assert failed
    assert "start=26 is past the end: the document has 26 chars" in text


@on_module_loop
async def test_paths_inside_the_root_read(reader: Client, folders: dict[str, Path]) -> None:
    assert (await read(reader, "sub/inner.md"))[1].endswith("\n# Inner\n")
    assert (await read(reader, str(folders["root"] / "sub" / "inner.md")))[1].endswith("# Inner\n")
    assert (await read(reader, "sub/../notes.txt"))[1].endswith("Plain notes about herons.\n")
    assert (await read(reader, "alias.txt"))[1].endswith("Plain notes about herons.\n")
    failed, listing = await read(reader, "sub")
    assert not failed
    assert listing.endswith("(1 entries):\ninner.md\n")


@on_module_loop
@pytest.mark.parametrize(
    "source",
    ["../outside/secret.txt", "sub/../../outside/secret.txt", "/etc/passwd", "escape.txt",
     "outside-dir/secret.txt", "{outside}/secret.txt", "file://{outside}/secret.txt"],
)  # fmt: skip
async def test_paths_leaving_the_root_are_refused(
    reader: Client, folders: dict[str, Path], source: str
) -> None:
    failed, text = await read(reader, source.format(outside=folders["outside"]))
    assert failed
    assert "is outside the folders this reader may open" in text
    assert "secret" not in text.split("is outside")[1]


@on_module_loop
async def test_missing_and_binary_files_are_errors(reader: Client) -> None:
    failed, text = await read(reader, "nothing-here.txt")
    assert failed
    assert "No such file: nothing-here.txt" in text
    failed, text = await read(reader, "blob.bin")
    assert failed
    assert "blob.bin: blob.bin looks binary" in text


@on_module_loop
async def test_url_is_fetched_and_converted(reader: Client, site: FakeWebServer) -> None:
    failed, text = await read(reader, site.url("/article.html"), max_chars=40)
    assert not failed
    assert text.startswith("[chars 0-")
    assert "# Herons\n\n# Grey heron" in text
    assert "tracking" not in text
    failed, text = await read(reader, site.url("/moved"))  # a redirect, checked and followed
    assert not failed and "The grey heron is a **wading** bird." in text
    failed, text = await read(reader, site.url("/paper.pdf"))
    assert not failed and text.endswith("[page 1]\nRemote PDF text")


@on_module_loop
async def test_an_image_url_comes_back_as_an_image(reader: Client, site: FakeWebServer) -> None:
    text, blocks = await images(reader, site.url("/chart"))
    assert f"[image: {site.url('/chart')} (image/png" in text
    assert [base64.b64decode(block.data) for block in blocks] == [PNG]


@on_module_loop
async def test_corpus_links_are_read(reader: Client) -> None:
    failed, text = await read(reader, "corpus://heron.md")
    assert not failed
    assert text.startswith(
        "[chars 0-76 of 76; end of document]\n# Grey heron\n[doc_id: heron.md]\n"
    )
    assert "Herons stand still in water." in text
    failed, text = await read(reader, "corpus://nothing.md")
    assert failed and "The local corpus has no document 'nothing.md'" in text


@on_module_loop
async def test_redirects_to_metadata_are_refused(reader: Client, site: FakeWebServer) -> None:
    # Even with private networks allowed (this reader's setting), metadata addresses are not.
    failed, text = await read(reader, site.url("/to-metadata"))
    assert failed
    assert "is a cloud-metadata address 169.254.169.254; never allowed" in text


@on_module_loop
async def test_http_errors_and_unreachable_hosts_are_tool_errors(
    reader: Client, site: FakeWebServer
) -> None:
    failed, text = await read(reader, site.url("/missing.html"))
    assert failed
    assert f"HTTP 404 Not Found for {site.url('/missing.html')}" in text
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    failed, text = await read(reader, f"http://127.0.0.1:{closed_port}/")
    assert failed
    assert "Could not fetch" in text
    failed, text = await read(reader, "ftp://example.org/file.txt")
    assert failed
    assert "Cannot read ftp: URLs" in text


async def test_private_addresses_are_refused_without_the_switch(site: FakeWebServer) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "deepledger.tools.servers.reader"], env={}
    )
    before = len(site.requests)
    async with Client(params) as client:
        failed, text = await read(client, site.url("/article.html"))
    assert failed
    assert "127.0.0.1 is a loopback address 127.0.0.1" in text
    assert "web.allow_private_networks=true" in text
    assert len(site.requests) == before  # refused before any request was sent


async def test_downloads_past_the_size_cap_are_cut_with_a_note(
    site: FakeWebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPLEDGER_ALLOW_PRIVATE_NETWORKS", "1")
    (whole,) = await Reader([], ReadLimits(max_bytes=5000)).read(site.url("/big.txt"), 0, 10_000)
    assert whole.text == "[chars 0-5000 of 5000; end of document]\n" + "x" * 5000
    (cut,) = await Reader([], ReadLimits(max_bytes=4999)).read(site.url("/big.txt"), 0, 10_000)
    assert cut.text.endswith(
        "x" * 4999 + "\n\n[only the first 4,999 bytes of the page were read]\n"
    )
    with pytest.raises(ToolError, match=r"larger than the limit of"):
        await Reader([], ReadLimits(max_bytes=10)).read(site.url("/paper.pdf"), 0, 10_000)


async def test_roots_can_come_from_the_environment(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (second / "b.txt").write_text("from the second root\n")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "deepledger.tools.servers.reader"],
        env={"DEEPLEDGER_READER_ROOTS": f"{first}:{second}"},
    )
    async with Client(params) as client:
        assert (await read(client, str(second / "b.txt")))[1].endswith("from the second root\n")
        failed, text = await read(client, "b.txt")  # relative paths start at the first root
        assert failed
        assert "No such file" in text


async def test_a_reader_started_outside_the_repository_finds_the_presets_root(
    tmp_path: Path,
) -> None:
    """``--root benchmarks/example`` (the default tools' root, as the preset writes it)
    from a working directory that has no such folder: read from the project's root."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "deepledger.tools.servers.reader", "--root", "benchmarks/example"],
        cwd=tmp_path,
    )
    async with Client(params) as client:
        failed, text = await read(client, "standardized_data.jsonl")
    assert not failed and '"task_id": "example-1"' in text


def test_a_missing_root_says_where_it_was_looked_for(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=rf"looked for {tmp_path}/no/such or .*/no/such"):
        Reader([Path("no/such")])
