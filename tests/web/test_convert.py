"""convert: every kind of content a research agent meets, and what is refused."""

from __future__ import annotations

import base64
import json
import sys
import threading
from pathlib import Path

import pytest

from deepledger.web.convert import ContentError, ConvertLimits, convert, convert_async
from tests.support.documents import (
    make_docx,
    make_pdf,
    make_png,
    make_pptx,
    make_word_docx,
    make_xlsx,
    make_zip,
)

PAGES = Path(__file__).parent.parent / "fixtures" / "pages"


@pytest.mark.parametrize(
    ("name", "title", "body_sentence"),
    [
        ("python-functools.html", "functools — Higher-order functions",
         "module is for higher-order functions: functions that act on"),
        ("python-tutorial-classes.html", "9. Classes",
         "Classes provide a means of bundling data and functionality together."),
        ("python-howto-logging.html", "Logging HOWTO",
         "Logging is a means of tracking events that happen when some software runs."),
    ],
)  # fmt: skip
def test_real_pages_keep_their_main_content_and_drop_the_chrome(
    name: str, title: str, body_sentence: str
) -> None:
    document = convert((PAGES / name).read_bytes(), name=name)
    assert document.kind == "html"
    assert document.title is not None and document.title.startswith(title)
    flat = " ".join(document.text.split())
    assert body_sentence in flat
    assert document.notes[0].startswith("main content")
    for chrome in ("Quick search", "Theme Auto Light Dark", "<script", "Navigation", "©"):
        assert chrome not in flat
    assert "](#" not in document.text  # same-page anchor links are dropped


def test_too_little_main_content_falls_back_to_the_whole_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import trafilatura

    items = "".join(
        f'<li><a href="/p/{n}">Article number {n} of the archive</a></li>' for n in range(40)
    )
    html = f"<html><head><title>Index</title></head><body><ul>{items}</ul><p>All.</p></body></html>"
    # Extraction that keeps one short block of a long page, as it does on many listings.
    monkeypatch.setattr(trafilatura, "extract", lambda *args, **kwargs: "All.")
    document = convert(html.encode(), name="index.html")
    assert document.notes == ("the whole page (main-content extraction found too little)",)
    assert document.text.startswith("# Index\n")
    assert "[Article number 39 of the archive](/p/39)" in document.text


def test_a_tiny_page_is_read_whole() -> None:
    html = b"<html><head><title>Hours</title></head><body><div>Open 9-17</div></body></html>"
    document = convert(html, content_type="text/html")
    assert document.text == "# Hours\n\nOpen 9-17\n"


def test_html_charset_comes_from_the_meta_tag() -> None:
    html = '<html><head><meta charset="iso-8859-1"><title>Caf\xe9</title></head><body>x</body>'
    assert convert(html.encode("latin-1"), content_type="text/html").title == "Café"


def test_pdf_pages_are_marked() -> None:
    document = convert(make_pdf(["Hello PDF world", "Second page"]), name="paper.pdf")
    assert document.kind == "pdf"
    assert document.text == "[page 1]\nHello PDF world\n\n[page 2]\nSecond page"


def test_docx_becomes_markdown_with_its_table() -> None:
    data = make_docx("Herons", ["Grey herons eat fish."], [["city", "pop"], ["Oslo", "709000"]])
    document = convert(data, name="report.docx")
    assert document.kind == "docx"
    assert "# Herons" in document.text
    assert "Grey herons eat fish." in document.text
    assert "| Oslo | 709000 |" in document.text


def test_docx_laid_out_as_word_writes_it_keeps_every_part() -> None:
    # A file as Word saves it (namespaces of every extension, mc:Ignorable, revision ids,
    # proofing marks, numbering, a hyperlink relationship, styles, theme): lxml 6.2.0
    # lost the body of such a file while the minimal package above still converted.
    data = make_word_docx(
        "Grey herons",
        ["Grey herons eat fish.", "They nest in colonies."],
        ["Wingspan 155-195 cm", "Weight 1-2 kg"],
        [["city", "colonies"], ["Oslo", "12"]],
        link="https://example.org/herons",
    )
    document = convert(data, name="field notes.docx")
    assert document.kind == "docx"
    lines = document.text.splitlines()
    assert "# Grey herons" in lines
    assert "Grey herons eat fish." in lines and "They nest in colonies." in lines
    assert any(line.endswith("Wingspan 155-195 cm") and line[0] in "*-" for line in lines)
    assert "Source: <https://example.org/herons>" in lines
    assert "| Oslo | 12 |" in document.text


def test_xlsx_sheets_become_tables() -> None:
    data = make_xlsx({"Birds": [["name", "count"], ["heron", 3]], "Fish": [["kind"], ["trout"]]})
    document = convert(data, content_type="application/octet-stream", name="download")
    assert document.kind == "xlsx"  # recognised from the zip's parts, not the name
    assert "## Birds" in document.text and "| heron | 3 |" in document.text
    assert "## Fish" in document.text and "| trout |" in document.text


def test_pptx_slides_are_read() -> None:
    document = convert(make_pptx([("Migration", "Herons fly south")]), name="talk.pptx")
    assert document.kind == "pptx"
    assert "# Migration" in document.text and "Herons fly south" in document.text


def test_zip_members_are_converted_in_turn() -> None:
    png = make_png()
    data = make_zip({"notes.txt": "hello", "data.csv": "x,y\n1,2\n", "pic.png": png,
                     "broken.pdf": b"%PDF-1.4 damaged", "blob.bin": b"\0\1\2" * 50})  # fmt: skip
    document = convert(data, name="bundle.zip", source="bundle.zip")
    assert document.kind == "zip"
    assert document.text.startswith("Archive bundle.zip (5 files):")
    assert "## File: notes.txt\n\nhello\n" in document.text
    assert "## File: data.csv\n\nx,y\n1,2\n" in document.text
    assert "[image: bundle.zip/pic.png (image/png" in document.text
    assert "## File: broken.pdf\n\n(not converted: Could not read the PDF" in document.text
    assert "## File: blob.bin\n\n(not converted: blob.bin looks binary" in document.text
    assert [image.data for image in document.images] == [base64.b64encode(png).decode()]


def test_zip_bombs_stop_at_the_archive_limit() -> None:
    data = make_zip({"a.txt": "a" * 5000, "b.txt": "b" * 5000})
    document = convert(data, name="x.zip", limits=ConvertLimits(max_archive_bytes=6000))
    assert "## File: a.txt\n\naaaa" in document.text
    assert "## File: b.txt\n\n(not read: 4.9 KiB would pass the archive limit)" in document.text


def test_json_csv_and_text() -> None:
    assert convert(b'{"b": [1, 2], "a": "x"}', name="d.json").text == json.dumps(
        {"b": [1, 2], "a": "x"}, indent=2
    )
    assert convert(b"{broken", content_type="application/json").text.startswith("(not valid JSON")
    assert convert(b"city,pop\nOslo,1\n", name="t.csv").text == "city,pop\nOslo,1\n"
    assert convert(b"# Notes\n", name="n.md").text == "# Notes\n"
    assert convert("caf\xe9".encode("cp1252"), name="n.txt").text == "café"  # not UTF-8


def test_images_become_image_parts_with_a_note() -> None:
    png = make_png(3, 3)
    document = convert(png, name="chart.png", source="https://example.org/chart.png")
    assert document.kind == "image"
    assert document.text.startswith("[image: https://example.org/chart.png (image/png, ")
    (image,) = document.images
    assert (image.mime_type, base64.b64decode(image.data)) == ("image/png", png)
    assert image.source == "https://example.org/chart.png"
    gif = convert(b"GIF89a" + b"\0" * 20, name="a.gif")
    assert gif.images[0].mime_type == "image/gif"


def test_images_over_the_cap_are_refused() -> None:
    with pytest.raises(ContentError, match=r"images are passed on up to"):
        convert(make_png(64, 64), limits=ConvertLimits(max_image_bytes=50))


@pytest.mark.parametrize(
    ("data", "options", "message"),
    [
        (b"\x7fELF\2\1\1\0\0\0\0", {"name": "program"}, "looks binary"),
        (b"not a png", {"content_type": "image/png"}, "does not look like a PNG"),
        (b"%PDF-1.4\nthis is no pdf", {"name": "a.pdf"}, "Could not read the PDF"),
        (b"PK\3\4 damaged", {"name": "a.docx"}, "Could not read the docx file"),
        (b"PK\3\4 damaged", {"name": "a.zip"}, "The zip archive is damaged"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 50, {"name": "old.doc"}, "Word .doc"),
        (make_pdf([" "]), {"name": "scan.pdf"}, "no text layer"),
    ],
)
def test_unreadable_content_is_a_content_error(
    data: bytes, options: dict[str, str], message: str
) -> None:
    with pytest.raises(ContentError, match=message):
        convert(data, **options)


def test_office_conversion_never_opens_an_http_session(monkeypatch: pytest.MonkeyPatch) -> None:
    import requests

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("markitdown tried to build an HTTP session")

    monkeypatch.setattr(requests.Session, "__init__", refuse)
    assert "Herons fly" in convert(make_pptx([("T", "Herons fly")]), name="a.pptx").text
    assert "eat fish" in convert(make_docx("H", ["eat fish"], [["a"]]), name="a.docx").text


async def test_convert_async_runs_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    convert_module = sys.modules["deepledger.web.convert"]  # the package exports the function
    threads = []
    real = convert_module.convert

    def recording(data: bytes, **options: object):
        threads.append(threading.current_thread())
        return real(data, **options)

    monkeypatch.setattr(convert_module, "convert", recording)
    document = await convert_async(b"hello", name="a.txt")
    assert document.text == "hello"
    assert threads and threads[0] is not threading.main_thread()
