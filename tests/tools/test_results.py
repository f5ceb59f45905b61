"""What tool results become on their way to the model: images or notes, the run's cache
of identical calls, and the archive for results too long for the window."""

from __future__ import annotations

import pytest

from deepledger.messages import ToolCall
from deepledger.tools.archive import ResultArchive, archive_tools
from deepledger.tools.pool import ToolManager
from deepledger.tools.task_tools import ResultPolicy
from deepledger.tools.types import LocalTool, ToolInfo
from tests.support.tool_servers import call, flaky


@pytest.fixture
async def manager():
    manager = ToolManager({"flaky": flaky(cache_results=True)})
    yield manager
    await manager.aclose()


async def test_an_image_goes_to_a_model_that_sees_images_and_is_named_for_one_that_does_not(
    manager,
):
    seeing = manager.for_task(["flaky"], policy=ResultPolicy(accepts_images=True))
    blind = manager.for_task(["flaky"])
    for tools in (seeing, blind):
        await tools.start()
    shown = await seeing.call(call("picture"))
    assert [(i.mime_type, i.source) for i in shown.images] == [("image/png", "flaky.picture")]
    assert shown.content == "a chart\n[resource: file:///data/chart.csv (chart data)]"
    noted = await blind.call(call("picture"))
    assert noted.images == ()
    assert "[image: flaky.picture, image/png, 1 KB — not shown, this model does not accept" in (
        noted.content
    )
    await seeing.aclose()
    await blind.aclose()


async def test_the_same_call_twice_in_a_run_is_answered_once_and_marked_cached(manager):
    first_task, second_task = manager.for_task(["flaky"]), manager.for_task(["flaky"])
    await first_task.start()
    await second_task.start()
    first = await first_task.call(call("counted", query="eiffel"))
    again = await second_task.call(call("counted", query="eiffel"))
    other = await first_task.call(call("counted", query="louvre"))
    assert (first.content, first.cached) == ("eiffel: call 1", False)
    assert (again.content, again.cached) == ("eiffel: call 1", True)
    assert again.call_id == "id-counted"
    assert other.content == "louvre: call 2"  # other arguments: a real call
    await first_task.aclose()
    await second_task.aclose()


async def test_errors_are_not_cached(manager):
    tools = manager.for_task(["flaky"])
    await tools.start()
    assert (await tools.call(call("fail"))).is_error
    assert not (await tools.call(call("fail"))).cached
    await tools.aclose()


def long_tool(size: int) -> LocalTool:
    async def run(arguments):
        return "".join(f"line {i:05d}\n" for i in range(size))

    info = ToolInfo("pages", "long", "A long text.", {"type": "object"})
    return LocalTool(info, run, max_result_chars=1000, preview_chars=200)


async def test_a_long_result_is_archived_whole_and_read_back_page_by_page(manager, tmp_path):
    archive = ResultArchive(tmp_path / "archive")
    policy = ResultPolicy(archive=archive, archive_callable=True)
    tools = manager.for_task(
        [], local_tools=[long_tool(5000)], policy=policy, hidden_tools=archive_tools(archive)
    )
    await tools.start()
    assert [t.qualified_name for t in tools.tools] == ["pages.long"]  # archive.read unlisted
    result = await tools.call(ToolCall("c1", "long", {}, server_name="pages"))
    whole = "".join(f"line {i:05d}\n" for i in range(5000))
    assert result.archived == str(tmp_path / "archive" / "r1.txt")
    assert (tmp_path / "archive" / "r1.txt").read_text() == whole
    assert result.content.startswith(whole[:200])
    assert f"this result is {len(whole)} characters long" in result.content
    assert '"handle": "r1", "start": 200' in result.content
    page = await tools.call(
        ToolCall("c2", "read", {"handle": "r1", "start": 200, "max_chars": 100}, "archive")
    )
    assert page.content == f"[chars 200-300 of {len(whole)}; next: start=300]\n" + whole[200:300]
    missing = await tools.call(ToolCall("c3", "read", {"handle": "r9"}, server_name="archive"))
    assert missing.is_error and "no archived result 'r9' (archived: r1)" in missing.content
    await tools.aclose()


async def test_without_a_readable_archive_a_long_result_is_cut_with_a_marker(manager):
    tools = manager.for_task([], local_tools=[long_tool(5000)])
    await tools.start()
    result = await tools.call(ToolCall("c1", "long", {}, server_name="pages"))
    assert result.archived is None
    assert len(result.content) < 1100 and "...[truncated: " in result.content
    await tools.aclose()


async def test_archive_pages_are_never_archived_again_and_a_resumed_retry_keeps_old_handles(
    manager, tmp_path
):
    folder = tmp_path / "archive"
    folder.mkdir()
    (folder / "r1.txt").write_text("left by an interrupted run")
    archive = ResultArchive(folder)
    policy = ResultPolicy(archive=archive, archive_callable=True)
    tools = manager.for_task(
        [], local_tools=[long_tool(9000)], policy=policy, hidden_tools=archive_tools(archive)
    )
    await tools.start()
    result = await tools.call(ToolCall("c1", "long", {}, server_name="pages"))
    assert result.archived == str(folder / "r2.txt")
    assert (folder / "r1.txt").read_text() == "left by an interrupted run"
    page = await tools.call(
        ToolCall("c2", "read", {"handle": "r2", "max_chars": 50_000}, server_name="archive")
    )
    assert page.archived is None and page.content.startswith("[chars 0-50000 of 99000;")
    assert sorted(p.name for p in folder.iterdir()) == ["r1.txt", "r2.txt"]
    traversal = await tools.call(
        ToolCall("c3", "read", {"handle": "../../etc/passwd"}, server_name="archive")
    )
    assert traversal.is_error and "no archived result" in traversal.content
    await tools.aclose()
