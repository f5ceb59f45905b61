"""Reports opened in a real browser: they render with no console error, reach for no
network, show every task, a trajectory and the token charts."""

from __future__ import annotations

import json
import time
from pathlib import Path

from deepledger.bench.report import rebuild_summary
from deepledger.records.results import (
    CalibrationError,
    ProtocolMetrics,
    ProvenanceTally,
    SimpleQAMetrics,
)
from deepledger.report.compare import write_comparison
from deepledger.report.page import write_run_report
from tests.support.browser import open_report
from tests.support.config import CONF
from tests.support.doubles.synthetic_run import make_run
from tests.support.report import quick_summary

HOSTILE = '</script><script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


def add_hostile_result(root: Path) -> None:
    """A tool result holding markup, as a fetched web page would."""
    journal = next((root / "tasks").glob("worldfacts-demo-001-*/attempt-1-retry-0.jsonl"))
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    for event in events:
        if event["event"] == "tool_results":
            event["results"][0]["content"] = HOSTILE
            break
    journal.write_text("".join(json.dumps(e) + "\n" for e in events))


def test_a_one_task_report_renders_offline_with_its_trajectory(finished_run):
    root = finished_run
    add_hostile_result(root)
    report = write_run_report(root, rebuild_summary(root))
    with open_report(report) as visit:
        page = visit.page
        page.wait_for_selector("#chart-prompt canvas")
        page.wait_for_selector("#chart-cumulative canvas")
        page.wait_for_selector("#chart-turns canvas")
        assert page.locator("#task-table tbody tr").count() == 6
        page.click("#task-table tbody tr:first-child")
        page.wait_for_selector("#chart-task canvas")
        assert page.locator("#trajectory .journal").count() >= 1
        assert page.locator("#trajectory .ev.assistant").count() >= 1
        assert page.locator("#trajectory .ev.tool").count() >= 1
        # The markup in the tool result is shown as text, and none of it ran.
        assert page.get_by_text("window.pwned = 1", exact=False).count() >= 1
        assert page.evaluate("window.pwned") is None
        assert page.evaluate("location.hash") == "#task=worldfacts-demo-001"
        visit.screenshot("report-one-task.png")
    assert visit.problems == []
    assert visit.requests == []
    with open_report(report, "#task=50%") as visit:  # an address edited into nonsense
        assert visit.page.locator("#task-table tbody tr").count() == 6
    assert visit.problems == []


def test_a_500_task_report_opens_and_its_table_sorts_and_filters(tmp_path):
    # Made up in seconds by the forger (tests.support.doubles.synthetic_run): the size is
    # the point here, and a real run of 500 tasks would take minutes.
    root = make_run(tmp_path / "run", tasks=503, conf_dir=CONF, unfinished=3, errors=2)
    started = time.perf_counter()
    report = write_run_report(root, quick_summary(root))
    elapsed = time.perf_counter() - started
    print(f"500-task report: {report.stat().st_size / 1e6:.1f} MB in {elapsed:.1f} s")
    with open_report(report, "#task=synthetic-0042") as visit:
        page = visit.page
        page.wait_for_selector("#chart-prompt canvas")
        page.wait_for_selector("#chart-task canvas")  # the task in the address, opened
        assert "synthetic-0042" in page.locator("#trajectory h3").first.inner_text()
        assert page.locator("#task-table tbody tr").count() == 503
        assert page.locator("#task-count").inner_text() == "503 of 503 tasks"
        page.select_option("#filter-status", "unfinished")
        assert page.locator("#task-table tbody tr").count() == 3
        page.select_option("#filter-status", "error")
        assert page.locator("#task-table tbody tr").count() == 2
        page.select_option("#filter-status", "")
        page.fill("#filter-text", "synthetic-010")
        assert page.locator("#task-table tbody tr").count() == 10
        page.fill("#filter-text", "")
        page.click("#task-table th[data-key=turns]")
        page.click("#task-table th[data-key=turns]")  # descending
        turns = [
            int(t) for t in page.locator("#task-table tbody tr td:nth-child(7)").all_inner_texts()
        ]
        assert turns[:50] == sorted(turns[:50], reverse=True) and turns[0] > turns[-1]
        assert "has not finished" in page.locator("#banners").inner_text()
        page.click("#task-table th[data-key=post_mortems]")
        page.click("#task-table th[data-key=post_mortems]")  # tasks with a retry first
        page.click("#task-table tbody tr:first-child")
        carried = page.locator("#trajectory .ev.postmortem", has_text="this retry carries")
        carried.first.wait_for()
        assert "Failure type: incomplete" in carried.first.inner_text()
        visit.screenshot("report-500-tasks.png", full_page=False)
    assert visit.problems == []
    assert visit.requests == []


def test_a_comparison_of_runs_renders_with_their_differences(runs_keeping, tmp_path):
    runs = runs_keeping
    summaries = {r: quick_summary(r) for r in runs}
    for run in runs:
        write_run_report(run, summaries[run])
    out = write_comparison(runs, summaries, tmp_path / "comparison.html")
    with open_report(out) as visit:
        page = visit.page
        page.wait_for_selector("#chart-accuracy canvas")
        page.wait_for_selector("#chart-cost canvas")
        labels = page.locator("#runs-table tbody td:first-child").all_inner_texts()
        assert labels == ["agent.keep_tool_result=-1", "agent.keep_tool_result=5"]
        differing = page.locator("#task-table tbody tr").count()
        page.uncheck("#only-differing")
        assert page.locator("#task-table tbody tr").count() == 6 >= differing
        assert page.locator("#runs-table a").first.get_attribute("href") == "./keep-1/report.html"
        visit.screenshot("report-comparison.png")
    assert visit.problems == []
    assert visit.requests == []


def test_the_task_view_shows_a_lost_worker_and_a_closing_call_s_move(finished_run):
    from deepledger.records.codec import encode
    from deepledger.records.events import EndpointMoved, LLMCallFailed, Looping

    root = finished_run
    results = root / "benchmark_results.jsonl"
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    lines[0]["worker_lost"] = 2
    results.write_text("".join(json.dumps(line) + "\n" for line in lines))
    journal = next((root / "tasks").glob("worldfacts-demo-001-*/attempt-1-retry-0.jsonl"))
    moved = EndpointMoved(from_endpoint="http://a/v1", to_endpoint="http://b/v1", reason="drained")
    failed = LLMCallFailed(purpose="summary", failed_endpoints=[], unsent=1, error="gave up")
    cycle = Looping(turn=6, repeats=2, cycle_length=2, since_turn=1)  # marks every turn
    with journal.open("a") as out:
        out.write("".join(json.dumps(encode(e)) + "\n" for e in (moved, failed, cycle)))
    with open_report(write_run_report(root, rebuild_summary(root))) as visit:
        visit.page.click("#task-table tbody tr:first-child")
        visit.page.wait_for_selector("#trajectory .journal")
        text = visit.page.inner_text("#trajectory")
    assert "worker lost" in text and "2 time(s)" in text
    assert "closing call: moved from http://a/v1 to http://b/v1 (drained)" in text
    assert "summary call request failed on every attempt · 1 refused unsent" in text
    assert "turn 6: a cycle of 2 turns gone round 3 times in a row from turn 1" in text
    assert "turn 1 · assistant · in the cycle that ended the loop" in text
    assert "null" not in text
    assert visit.problems == []


def test_the_published_metrics_and_the_unjudged_are_shown_apart(finished_run):
    summary = rebuild_summary(finished_run)
    summary.tasks.unjudged = 2
    summary.protocol_metrics = ProtocolMetrics(
        simpleqa=SimpleQAMetrics(
            graded=5,
            correct=3,
            incorrect=1,
            not_attempted=1,
            accuracy=0.6,
            not_attempted_rate=0.2,
            accuracy_given_attempted=0.75,
            f1=0.9 / 1.35,
        ),
        calibration_error=CalibrationError(answers=5, reason="5 graded answers: too few"),
        breakdown={"Level": {"1": ProvenanceTally(tasks=2, judged=2, correct=1, accuracy=0.5)}},
    )
    report = write_run_report(finished_run, summary)
    with open_report(report) as visit:
        page = visit.page
        page.wait_for_selector("#protocol-metrics")
        shown = page.inner_text("#protocol-metrics")
        assert "SimpleQA F1" in shown and "0.667" in shown
        assert "0.200 (1/5)" in shown  # not attempted
        assert "n/a: 5 graded answers: too few" in shown
        assert "Accuracy by Level" in shown
        assert "not in accuracy" in page.inner_text("#unjudged-card")
    assert visit.problems == []


def test_the_cost_card_says_who_priced_the_run(finished_run):
    summary = rebuild_summary(finished_run)
    summary.prices = {"gpt-4.1": "genai-prices 0.2.5 (openai/gpt-4.1)", "mystery": "unpriced"}
    report = write_run_report(finished_run, summary)
    with open_report(report) as visit:
        card = visit.page.locator("#run-cards").inner_text()
        assert "gpt-4.1 priced by genai-prices 0.2.5 (openai/gpt-4.1); unpriced: mystery" in card
    assert visit.problems == []


IN_VIEW = """(selector) => {
  const box = document.querySelector(selector)?.getBoundingClientRect();
  return !!box && box.top >= 0 && box.top < window.innerHeight;
}"""

# Where a clicked task's trajectory is brought: to the top of the window.
AT_TOP = """(selector) => {
  const box = document.querySelector(selector)?.getBoundingClientRect();
  return !!box && Math.abs(box.top) < 2;
}"""


def test_an_address_naming_a_task_opens_it_in_view_by_id_or_by_its_place(tmp_path):
    root = make_run(tmp_path / "run", tasks=60, conf_dir=CONF)
    report = write_run_report(root, quick_summary(root))
    heading = "#trajectory h3"
    opened = "(id) => document.querySelector('#trajectory h3')?.textContent.includes(id)"
    for fragment, task in (
        ("#task=synthetic-0040", "synthetic-0040"),
        ("#task=12", "synthetic-0011"),
    ):
        with open_report(report, fragment) as visit:
            page = visit.page
            page.wait_for_selector("#chart-turns canvas")  # every chart above it drawn
            page.wait_for_selector("#chart-task canvas")
            assert task in page.locator(heading).first.inner_text()
            page.wait_for_function(IN_VIEW, arg=heading, timeout=20_000)
            assert page.evaluate("window.scrollY") > 0
            # The run's prompts reach 29k of a 32k window: the window is drawn with them.
            run_scale = "document.getElementById('chart-prompt').vegaView.scale('y').domain()"
            assert page.evaluate(run_scale)[1] >= 32_000
            assert page.evaluate("location.hash") == f"#task={task}"
            # Another address typed while the page is open: that task, in view too.
            page.evaluate("window.scrollTo(0, 0); location.hash = '#task=3'")
            page.wait_for_function(opened, arg="synthetic-0002")
            page.wait_for_function(IN_VIEW, arg=heading, timeout=20_000)
        assert visit.problems == []
    with open_report(report, "#task=61") as visit:  # past the last task: said, nothing opened
        page = visit.page
        assert "does not have" in page.inner_text("#trajectory")
        # A task clicked in the table: opened, brought into view, and in the address to share.
        page.wait_for_selector("#chart-turns canvas")
        page.click('#task-table tr[data-index="7"]')  # (the click scrolls to the row)
        page.wait_for_function(opened, arg="synthetic-0007")
        page.wait_for_function(AT_TOP, arg="#trajectory-section", timeout=20_000)
        assert page.evaluate("location.hash") == "#task=synthetic-0007"
        page.evaluate("location.hash = '#task=nothing-such'")  # typed: said, nothing marked
        page.wait_for_function(
            "() => document.getElementById('trajectory').innerText.includes('does not have')"
        )
        assert page.locator("#task-table tr.selected").count() == 0
    assert visit.problems == []
