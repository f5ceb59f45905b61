"""`deepledger view` in a real browser: a bench started during the test appears in the
list as running, its page shows the task's trajectory (two turns calling a tool, then
one without) while the model is held before its answer, and once it is let go the run
finishes and the page says so."""

from __future__ import annotations

import os

from tests.support.cli import ROOT
from tests.support.doubles.fake_llm_server import FakeLLMServer
from tests.view.support import GatedModel, bench, browser_on, one_task_suite, viewer

SCREENSHOT = ROOT / "docs" / "images" / "view-trajectory.png"
WAIT = 120_000  # ms: generous, the machine is shared


def test_a_bench_started_during_the_test_is_watched_live(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    data = one_task_suite(tmp_path / "data")
    model = GatedModel(tools=True)
    with FakeLLMServer(responder=model) as server, viewer(logs) as view:
        run = bench(server.openai_base_url, data, logs / "tiny" / "live-run", tools="[time]")
        try:
            with browser_on(view.url) as (page, problems):
                page.goto(view.url)
                row = page.locator('#runs tr[data-id="tiny/live-run"][data-status="running"]')
                row.wait_for(timeout=WAIT)  # the list reads itself again while runs are live
                assert model.waiting.wait(timeout=WAIT / 1000)  # held before its answer
                row.locator("a").click()
                page.wait_for_selector("body[data-ready=true]", timeout=WAIT)
                assert page.evaluate("document.body.dataset.liveState") == "running"
                page.click("#task-table tbody tr:first-child")
                # Every turn so far is shown: the two with tool results, and the third.
                page.wait_for_function(
                    "document.querySelectorAll('#trajectory .ev.tool').length === 2"
                    " && document.querySelectorAll('#trajectory .ev.assistant').length === 3",
                    timeout=WAIT,
                )
                before = page.locator("#trajectory .ev").count()
                assert page.locator("#task-table .status.unfinished").count() == 1
                if os.environ.get("DEEPLEDGER_DOCS_SCREENSHOT"):  # docs/view.md's picture
                    page.wait_for_selector("#trajectory .panel canvas", timeout=WAIT)
                    _picture(page)
                model.release()
                page.wait_for_selector("body[data-live-state=finished]", timeout=WAIT)
                page.wait_for_function(
                    f"document.querySelectorAll('#trajectory .ev').length > {before}",
                    timeout=WAIT,
                )
                assert page.locator("#task-table .status.correct").count() == 1
                page.click("#all-runs")
                page.locator('#runs tr[data-id="tiny/live-run"][data-status="finished"]').wait_for(
                    timeout=WAIT
                )
                assert problems == []
        finally:
            model.release()
            _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err


def _picture(page) -> None:
    """docs/images/view-trajectory.png: the open task's prompt chart and its trajectory
    so far, cut from the whole page (the tool calls lie below the viewport's end)."""
    box = page.evaluate(
        """() => {
          const chart = [...document.querySelectorAll("#trajectory .panel")]
            .find((panel) => panel.querySelector("canvas"));
          const top = chart.getBoundingClientRect();
          const end = document.querySelector("#trajectory .journal").getBoundingClientRect();
          return {x: 0, y: top.top + window.scrollY - 8, width: window.innerWidth,
                  height: Math.min(end.bottom - top.top + 16, 1400)};
        }"""
    )
    page.screenshot(path=str(SCREENSHOT), full_page=True, clip=box)
