"""The reader server, run for real over stdio; URLs are served from a loopback HTTP server."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import pytest_asyncio
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver.exceptions import ToolError

from deepledger.tools.servers.reader import ReadLimits, fetch
from tests.tools.servers.mcp_client import call, hold_open

on_module_loop = pytest.mark.asyncio(loop_scope="module")

PAGE_HTML = """<!doctype html><html><head><title>Herons</title>
<style>body { color: red }</style><script>var tracking = "<p>hidden</p>";</script></head>
<body><h1>Grey   heron</h1><p>The grey heron is a <b>wading</b> bird.</p>
<p>It eats fish.</p><ul><li>Europe</li><li>Asia</li></ul></body></html>"""
LONG_TEXT = "".join(f"line {number:05d} of a long document\n" for number in range(1, 801))


def make_pdf(pages: list[str]) -> bytes:
    """A minimal PDF with one line of Helvetica text a page (pypdf can only write blanks)."""
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "",  # the page tree, filled in once the pages are numbered
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    kids = []
    for text in pages:
        stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET"
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {len(objects)} 0 R"
            " /Resources << /Font << /F1 3 0 R >> >> >>"
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)


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
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    (root / "sub" / "inner.md").write_text("# Inner\n")
    (root / "alias.txt").symlink_to(root / "notes.txt")
    (root / "escape.txt").symlink_to(outside / "secret.txt")
    (root / "outside-dir").symlink_to(outside)
    return {"root": root, "outside": outside}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A loopback HTTP server over a folder with one page; yields its base URL."""
    folder = tmp_path_factory.mktemp("site")
    (folder / "article.html").write_text(PAGE_HTML)
    (folder / "big.txt").write_text("x" * 5000)

    class QuietHandler(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            """Keep test output clean."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def reader(folders: dict[str, Path]) -> AsyncIterator[Client]:
    """One reader confined to the root folder, shared by the module."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "deepledger.tools.servers.reader", "--root", str(folders["root"])],
    )
    async for client in hold_open(params, asyncio.Event()):
        yield client


async def read(client: Client, source: str, **arguments: object) -> tuple[bool, str]:
    """Call ``read``; return whether it failed and its text."""
    return await call(client, "read", source=source, **arguments)


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
        "Herons\n\n# Grey heron\n\nThe grey heron is a wading bird.\n\nIt eats fish.\n\n"
        "- Europe\n- Asia\n"
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
    failed, text = await read(reader, "photo.png")
    assert failed
    assert "looks binary" in text


@on_module_loop
async def test_url_is_fetched_and_converted(reader: Client, site: str) -> None:
    failed, text = await read(reader, f"{site}/article.html", max_chars=40)
    assert not failed
    assert text.startswith("[chars 0-")
    assert "Herons\n\n# Grey heron" in text
    assert "tracking" not in text


@on_module_loop
async def test_http_errors_and_unreachable_hosts_are_tool_errors(reader: Client, site: str) -> None:
    failed, text = await read(reader, f"{site}/missing.html")
    assert failed
    assert f"HTTP 404 File not found for {site}/missing.html" in text
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    failed, text = await read(reader, f"http://127.0.0.1:{closed_port}/")
    assert failed
    assert "Could not fetch" in text
    failed, text = await read(reader, "ftp://example.org/file.txt")
    assert failed
    assert "Cannot read ftp: URLs" in text


async def test_downloads_past_the_size_cap_are_refused(site: str) -> None:
    assert len((await fetch(f"{site}/big.txt", ReadLimits(max_bytes=5000))).data) == 5000
    with pytest.raises(ToolError, match="larger than the reader's limit"):
        await fetch(f"{site}/big.txt", ReadLimits(max_bytes=4999))


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
