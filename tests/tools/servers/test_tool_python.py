"""``tool-python`` (MiroThinker's python tool names over our sandbox), driven over real stdio."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import pytest_asyncio
from mcp import Client, StdioServerParameters

from tests.support.mcp_client import call, hold_open

pytestmark = pytest.mark.asyncio(loop_scope="module")

MODULE = "deepledger.tools.servers.tool_python"
TOOLS = {
    "create_sandbox",
    "run_python_code",
    "run_command",
    "upload_file_from_local_to_sandbox",
    "download_file_from_sandbox_to_local",
}


def _params(*args: str) -> StdioServerParameters:
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": os.environ.get("HOME", "/")}
    return StdioServerParameters(command=sys.executable, args=["-m", MODULE, *args], env=env)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("tool-python")
    data, downloads, outside = base / "data", base / "downloads", base / "outside"
    for folder in (data, downloads, outside):
        folder.mkdir()
    (data / "table.csv").write_text("a,b\n1,2\n")
    (data / "nested").mkdir()
    (data / "nested" / "notes.txt").write_text("nested notes")
    (outside / "secret.txt").write_text("outside-secret")
    (data / "link.txt").symlink_to(outside / "secret.txt")
    return {"data": data, "downloads": downloads, "outside": outside}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(folders: dict[str, Path]) -> AsyncIterator[Client]:
    args = ("--root", str(folders["data"]), "--download-dir", str(folders["downloads"]))
    async for connected in hold_open(_params(*args), asyncio.Event()):
        yield connected


async def new_sandbox(client: Client) -> str:
    failed, text = await call(client, "create_sandbox")
    assert not failed, text
    match = re.search(r"Sandbox created with sandbox_id: (\S+)$", text)
    assert match, text
    return match.group(1)


def section(text: str, title: str) -> str:
    match = re.search(rf"\[{title}\]\n(.*?)(?:\n\n\[|\Z)", text, re.DOTALL)
    assert match, text
    return match.group(1)


async def test_names_and_arguments_match_mirothinkers_python_server(client: Client):
    assert client.server_info is not None and client.server_info.name == "tool-python"
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    schemas = {name: tool.input_schema for name, tool in tools.items()}
    assert schemas["create_sandbox"]["properties"]["timeout"]["type"] == "integer"
    assert schemas["create_sandbox"]["properties"]["timeout"]["default"] == 600
    assert schemas["create_sandbox"].get("required", []) == []
    assert schemas["run_python_code"]["required"] == ["code_block", "sandbox_id"]
    assert schemas["run_command"]["required"] == ["command", "sandbox_id"]
    upload = schemas["upload_file_from_local_to_sandbox"]
    assert list(upload["properties"]) == ["sandbox_id", "local_file_path", "sandbox_file_path"]
    assert upload["required"] == ["sandbox_id", "local_file_path"]
    assert upload["properties"]["sandbox_file_path"]["default"] == "/home/user"
    download = schemas["download_file_from_sandbox_to_local"]
    assert list(download["properties"]) == ["sandbox_id", "sandbox_file_path", "local_filename"]
    assert download["required"] == ["sandbox_id", "sandbox_file_path"]
    assert download["properties"]["local_filename"]["default"] is None
    for tool in tools.values():  # every description says what isolation is in force
        assert "Isolation: " in (tool.description or "")


async def test_sandboxes_are_persistent_and_separate(client: Client):
    first, second = await new_sandbox(client), await new_sandbox(client)
    assert first != second
    failed, _ = await call(client, "run_python_code", code_block="x = 41", sandbox_id=first)
    assert not failed
    failed, text = await call(client, "run_python_code", code_block="x + 1", sandbox_id=first)
    assert (failed, section(text, "value")) == (False, "42")
    failed, text = await call(client, "run_python_code", code_block="x", sandbox_id=second)
    assert failed
    assert "NameError" in text
    code = "import os\nopen('mine.txt', 'w').write('first')\nos.getcwd()"
    _, text = await call(client, "run_python_code", code_block=code, sandbox_id=first)
    workdir = eval(section(text, "value"))
    failed, text = await call(client, "run_command", command="ls", sandbox_id=second)
    assert (failed, "mine.txt" in text) == (False, False)  # work folders are separate too
    failed, text = await call(
        client, "run_command", command="cat mine.txt; echo; pwd", sandbox_id=first
    )
    assert (failed, section(text, "stdout")) == (False, f"first\n{workdir}")


async def test_run_command_reports_output_and_exit_code(client: Client):
    sandbox_id = await new_sandbox(client)
    command = "echo out; echo err >&2; exit 3"
    failed, text = await call(client, "run_command", command=command, sandbox_id=sandbox_id)
    assert failed
    assert (section(text, "stdout"), section(text, "stderr")) == ("out", "err")
    assert section(text, "exit code") == "3"
    failed, text = await call(client, "run_command", command="true", sandbox_id=sandbox_id)
    assert (failed, text) == (False, "[exit code]\n0")


async def test_an_unknown_sandbox_id_is_an_error_that_says_what_to_do(client: Client):
    for tool, argument in (
        ("run_python_code", {"code_block": "1"}),
        ("run_command", {"command": "true"}),
        ("upload_file_from_local_to_sandbox", {"local_file_path": "table.csv"}),
        ("download_file_from_sandbox_to_local", {"sandbox_file_path": "x"}),
    ):
        failed, text = await call(client, tool, sandbox_id="default", **argument)
        assert failed
        assert "no sandbox with sandbox_id 'default'" in text
        assert "create_sandbox" in text


async def test_uploads_come_only_from_the_data_folder(client: Client, folders: dict[str, Path]):
    sandbox_id = await new_sandbox(client)
    failed, text = await call(
        client,
        "upload_file_from_local_to_sandbox",
        sandbox_id=sandbox_id,
        local_file_path=str(folders["data"] / "table.csv"),
    )
    assert not failed, text
    assert text.startswith("File uploaded to ")
    uploaded = text.removeprefix("File uploaded to ").split(" in sandbox")[0]
    assert uploaded.endswith("/table.csv")
    read = f"open({uploaded!r}).read()"
    _, text = await call(client, "run_python_code", code_block=read, sandbox_id=sandbox_id)
    assert section(text, "value") == repr("a,b\n1,2\n")

    failed, text = await call(  # relative to the data folder, into a file path that is new
        client,
        "upload_file_from_local_to_sandbox",
        sandbox_id=sandbox_id,
        local_file_path="nested/notes.txt",
        sandbox_file_path="inputs/renamed.txt",
    )
    assert not failed, text
    _, text = await call(
        client, "run_command", command="cat inputs/renamed.txt", sandbox_id=sandbox_id
    )
    assert section(text, "stdout") == "nested notes"

    for local, reason in (
        (str(folders["outside"] / "secret.txt"), "outside the folders"),
        ("../outside/secret.txt", "outside the folders"),
        ("link.txt", "outside the folders"),  # a symlink leading out
        ("missing.csv", "not an existing file"),
        ("nested", "a folder, not a file"),
    ):
        failed, text = await call(
            client,
            "upload_file_from_local_to_sandbox",
            sandbox_id=sandbox_id,
            local_file_path=local,
        )
        assert failed, local
        assert reason in text, text
        assert "outside-secret" not in text


async def test_downloads_go_only_into_the_download_folder(client: Client, folders: dict[str, Path]):
    downloads = folders["downloads"]
    sandbox_id = await new_sandbox(client)
    code = "open('result.txt', 'w').write('the answer')"
    await call(client, "run_python_code", code_block=code, sandbox_id=sandbox_id)
    failed, text = await call(
        client,
        "download_file_from_sandbox_to_local",
        sandbox_id=sandbox_id,
        sandbox_file_path="/home/user/result.txt",
    )
    assert not failed, text
    local = Path(re.search(r"File downloaded to (\S+) ", text).group(1))
    assert (local.parent, await anyio.Path(local).read_text()) == (downloads, "the answer")

    for name, expected in (("../../escaped.txt", "escaped.txt"), (None, "result-1.txt")):
        failed, text = await call(
            client,
            "download_file_from_sandbox_to_local",
            sandbox_id=sandbox_id,
            sandbox_file_path="result.txt",
            local_filename=name,
        )
        assert not failed, text
        assert await anyio.Path(downloads / expected).read_text() == "the answer"
    assert not await anyio.Path(folders["data"].parent / "escaped.txt").exists()

    for path, reason in (("missing.txt", "No such file"), (".", "Is a directory")):
        failed, text = await call(
            client,
            "download_file_from_sandbox_to_local",
            sandbox_id=sandbox_id,
            sandbox_file_path=path,
        )
        assert failed
        assert reason in text, text


async def test_a_timeout_restarts_the_session_and_keeps_the_files(folders: dict[str, Path]):
    async for client in hold_open(_params("--timeout", "2"), asyncio.Event()):
        sandbox_id = await new_sandbox(client)
        code = "open('kept.txt', 'w').write('kept')\nx = 1\nimport time\ntime.sleep(60)"
        failed, text = await call(client, "run_python_code", code_block=code, sandbox_id=sandbox_id)
        assert failed
        assert "Timed out" in text
        failed, text = await call(client, "run_command", command="sleep 60", sandbox_id=sandbox_id)
        assert failed
        assert "Timed out" in text
        failed, text = await call(client, "run_python_code", code_block="x", sandbox_id=sandbox_id)
        assert failed
        assert "NameError" in text
        _, text = await call(client, "run_command", command="cat kept.txt", sandbox_id=sandbox_id)
        assert section(text, "stdout") == "kept"
        failed, text = await call(
            client,
            "upload_file_from_local_to_sandbox",
            sandbox_id=sandbox_id,
            local_file_path="table.csv",
        )
        assert failed
        assert "no --root folder" in text
        failed, text = await call(
            client,
            "download_file_from_sandbox_to_local",
            sandbox_id=sandbox_id,
            sandbox_file_path="kept.txt",
        )
        assert failed
        assert "without --download-dir" in text
