"""What the reader and tool-python's upload open: root folders and single files, the
secret-file rules on the real path whatever the root, folder listings without secrets,
zip members and search-corpus files under the same rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import TextContent

from deepledger.secret_files import SECRET_FILES_ENV
from deepledger.tools.servers.confinement import Confinement, LocalFileRefused
from deepledger.tools.servers.python_sandbox import SandboxLimits
from deepledger.tools.servers.reader import Reader
from deepledger.tools.servers.sandbox_isolation import Isolation
from deepledger.tools.servers.tool_python import SandboxPool, ToolFailure
from deepledger.web.corpus import corpus_files
from tests.support.documents import make_xlsx, make_zip

CANARY = "sk-canary-confinement-61d0"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A working folder as a user keeps it: notes, a spreadsheet, and keys beside them."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text(f"url = https://bob:{CANARY}@example.com/r\n")
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={CANARY}\n")
    (tmp_path / "id_rsa").write_text(CANARY)
    (tmp_path / "notes.txt").write_text("heron notes\n")
    (tmp_path / "keyboard.xlsx").write_bytes(make_xlsx({"Keys": [["heron", 7319]]}))
    (tmp_path / "link.txt").symlink_to(tmp_path / ".env")
    return tmp_path


async def text_of(reader: Reader, source: str) -> str:
    blocks = await reader.read(source, 0, 10_000)
    assert isinstance(blocks[0], TextContent)
    return blocks[0].text


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        (".env", ".env*"),
        ("link.txt", ".env*"),  # a harmless name, a symlink to .env
        ("sub/../.env", ".env*"),
        (".git/config", ".git/"),
        (".git", ".git/"),  # the folder itself: no listing either
        ("id_rsa", "id_rsa*"),
        (".env.missing", ".env*"),  # refused before existence is looked at
    ],
)
async def test_the_reader_refuses_secrets_in_its_root_naming_the_rule(
    work: Path, source: str, rule: str
) -> None:
    (work / "sub").mkdir(exist_ok=True)
    with pytest.raises(ToolError) as refused:
        await text_of(Reader([work]), source)
    assert str(refused.value).startswith(f"{source} is refused: ")
    assert f"matches the secret-file rule '{rule}'" in str(refused.value)
    assert CANARY not in str(refused.value)


async def test_near_misses_beside_them_still_open(work: Path) -> None:
    reader = Reader([work])
    assert "| heron | 7319 |" in await text_of(reader, "keyboard.xlsx")
    assert "heron notes" in await text_of(reader, "notes.txt")


async def test_a_folder_listing_leaves_secrets_out(work: Path) -> None:
    listing = await text_of(Reader([work]), ".")
    names = listing.split("\n")[2:]
    assert "notes.txt" in names and "keyboard.xlsx" in names and "link.txt" in names
    assert not {".env", ".git/", "id_rsa"} & set(names)
    assert "3 left out by the secret-file rules" in listing


async def test_a_single_file_is_admitted_without_its_folder(work: Path) -> None:
    reader = Reader([], files=[work / "notes.txt"])
    assert "heron notes" in await text_of(reader, str(work / "notes.txt"))
    assert "heron notes" in await text_of(reader, "notes.txt")  # from the file's folder
    for source in ("keyboard.xlsx", str(work), str(work / "keyboard.xlsx")):
        with pytest.raises(ToolError, match="outside the folders"):
            await text_of(reader, source)


def test_a_secret_cannot_be_given_as_a_single_file(work: Path) -> None:
    with pytest.raises(PermissionError, match=re.escape("'.env*'")):
        Confinement(files=[work / "link.txt"])


async def test_the_users_own_rules_apply(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_FILES_ENV, "*.xlsx")
    with pytest.raises(ToolError, match=re.escape("'*.xlsx'")):
        await text_of(Reader([work]), "keyboard.xlsx")


async def test_a_zips_secret_members_are_not_read(work: Path) -> None:
    members = {"notes.txt": "zipped heron notes", ".env": CANARY, "deploy/server.key": CANARY}
    (work / "bundle.zip").write_bytes(make_zip(members))
    text = await text_of(Reader([work]), "bundle.zip")
    assert "zipped heron notes" in text and CANARY not in text
    assert "(not read: it matches the secret-file rule '*.key')" in text


def test_tool_pythons_upload_refuses_secrets_and_takes_attachments(work: Path) -> None:
    isolation = Isolation("none", "no isolation in this test")
    pool = SandboxPool(SandboxLimits(), isolation, Confinement([work]), None)
    try:
        for path in (".env", "link.txt", str(work / ".git/config"), "id_rsa"):
            with pytest.raises(ToolFailure, match="secret-file rule") as refused:
                pool.local_source(path)
            assert CANARY not in str(refused.value)
        assert pool.local_source("keyboard.xlsx") == work / "keyboard.xlsx"
    finally:
        pool.cleanup()


def test_the_search_corpus_leaves_credentials_out(tmp_path: Path) -> None:
    (tmp_path / "facts.md").write_text("# Herons\nThey eat fish.\n")
    (tmp_path / "credentials.json").write_text('{"text": "' + CANARY + '"}')
    (tmp_path / "environment.json").write_text('{"text": "weather"}')
    names = [path.name for path in corpus_files(tmp_path)]
    assert names == ["environment.json", "facts.md"]


def test_nothing_outside_any_root(work: Path) -> None:
    with pytest.raises(LocalFileRefused, match="no folder or file"):
        Confinement().resolve("notes.txt")


@pytest.mark.parametrize(
    "url",
    [".env", "{work}/.env", "file://{work}/.env", "corpus://.env", "corpus://credentials-gcp.json",
     "corpus://credentials-gcp.json%230"],
)  # fmt: skip
async def test_the_scraper_reads_no_local_secret(
    work: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scrape_and_extract_info reads URLs and the search corpus only: a path, a file://
    URL or a corpus:// link to .env (the corpus being the working folder) gets no content."""
    from deepledger.llm.base import GenerationSettings
    from deepledger.llm.scripted import ScriptedLLM
    from deepledger.llm.usage import UsageLedger
    from deepledger.store.journal import Journal
    from deepledger.tools.scrape import ExtractionModel, PageScraper
    from deepledger.web.pages import reset_corpus_index

    (work / "credentials-gcp.json").write_text('{"text": "' + CANARY + '"}')
    (work / "facts.md").write_text("# Herons\nThey eat fish.\n")  # the corpus is not empty
    monkeypatch.setenv("DEEPLEDGER_CACHE_DIR", str(work.parent / "cache"))
    reset_corpus_index()
    model = ExtractionModel(ScriptedLLM(), GenerationSettings(max_tokens=300), None, 32768)
    scraper = PageScraper(model, "direct", corpus=work)
    try:
        outcome = await scraper.scrape_and_extract(
            url.format(work=work), "", {}, Journal(None), UsageLedger()
        )
    finally:
        reset_corpus_index()
    assert not outcome["success"] and CANARY not in str(outcome)
