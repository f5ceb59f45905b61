"""A reader whose installation is broken says why, instead of the SDK's bare "Error
executing tool read"."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from mcp import StdioServerParameters

from tests.support.mcp_client import call, hold_open

# The reader as pip 23 (Python 3.11's own) installed it: jusText asks for
# `lxml[html_clean]`, that pip skipped the extra, and `lxml_html_clean` was missing.
# A None in sys.modules makes every import of the module fail as a missing one would.
WITHOUT_HTML_CLEAN = (
    "import sys; sys.modules['lxml_html_clean'] = None; "
    "from deepledger.tools.servers.reader import main; main()"
)


async def test_an_import_error_reaches_the_model_with_its_message(tmp_path: Path) -> None:
    (tmp_path / "page.html").write_text(
        "<html><head><title>Herons</title></head><body>"
        + "<p>The grey heron is a wading bird of the heron family.</p>" * 20
        + "</body></html>"
    )
    (tmp_path / "notes.txt").write_text("Plain notes.\n")
    params = StdioServerParameters(
        command=sys.executable, args=["-c", WITHOUT_HTML_CLEAN, "--root", str(tmp_path)]
    )
    async for client in hold_open(params, asyncio.Event()):
        failed, text = await call(client, "read", source="page.html")
        assert failed
        assert "ImportError" in text and "lxml_html_clean" in text, text
        # The server itself stays up: other files still read.
        assert await call(client, "read", source="notes.txt") == (
            False,
            "[chars 0-13 of 13; end of document]\nPlain notes.\n",
        )
