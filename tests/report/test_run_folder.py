"""`deepledger report` on a `deepledger run` folder: one question read as a run of one
task (question, answer, trajectory with its sub-agents, tokens), never judged, and
nothing written into the folder but report.html."""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path

import pytest

from deepledger.bench.report import current_summary, run_report_page
from deepledger.report.collect import NOT_JUDGED, RUN_BENCHMARK, collect
from deepledger.report.page import render_run_report
from tests.support.browser import open_report
from tests.support.cli import deepledger
from tests.support.doubles.fake_llm_server import FakeLLMServer, FakeUsage, Reply
from tests.support.report import embedded

QUESTION = "What is six times seven?"
PROMPT_TOKENS = 1_800  # far below the preset's window: the chart must not sit on 0
WINDOW = 131_072  # llm=openai_compatible's llm.max_context_length


@pytest.fixture(scope="module")
def _asked(tmp_path_factory) -> Path:
    """A real `deepledger run` folder, plus a sub-agent journal beside its journal (a
    sub-agent's journal is a journal like the loop's)."""
    tmp = tmp_path_factory.mktemp("asked")
    reply = Reply("It is \\boxed{42}.", usage=FakeUsage(input_tokens=PROMPT_TOKENS))
    with FakeLLMServer(responder=lambda request: reply) as server:
        run = deepledger(
            "run",
            f"question={QUESTION}",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            "agent.main_agent.tools=[]",
            f"hydra.run.dir={tmp / 'run'}",
            cwd=tmp,
        )
    assert run.returncode == 0, run.stderr
    folder = tmp / "run"
    subagents = folder / "journal.subagents"
    subagents.mkdir()
    shutil.copy(folder / "journal.jsonl", subagents / "browsing-1.jsonl")
    return folder


@pytest.fixture
def asked(_asked, tmp_path) -> Path:
    return Path(shutil.copytree(_asked, tmp_path / "run"))


def files_in(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


def test_the_report_command_reads_a_run_folder_and_writes_only_its_report(asked):
    before = files_in(asked)
    done = deepledger("report", str(asked))
    assert done.returncode == 0, done.stderr
    assert "not judged" in done.stdout
    assert f"question  {QUESTION}" in done.stdout and "answer    42" in done.stdout
    assert "correct" not in done.stdout and "wrong" not in done.stdout
    assert files_in(asked) - before == {"report.html"}  # no summary.json in a run folder
    data, trajectories = embedded(asked / "report.html")
    assert data["run"]["kind"] == "run" and data["run"]["state"] == "finished"
    (task,) = data["tasks"]
    assert (task["question"], task["answer"], task["status"]) == (QUESTION, "42", "unjudged")
    labels = [journal["label"] for journal in trajectories[0]["journals"]]
    assert labels == ["the question", "the question · sub-agent browsing-1"]


def test_a_run_folder_collected_as_one_unjudged_task(asked):
    data = collect(asked, current_summary(asked))
    (task,) = data.tasks
    assert task["id"] == asked.name and task["judgement"] == NOT_JUDGED
    assert task["provenance"] == "summary" and task["end_reason"] == "model_finished"
    assert task["input_tokens"] >= PROMPT_TOKENS and task["turns"] == 1
    assert data.run["benchmark"] == RUN_BENCHMARK
    assert data.run["config"]["llm.max_context_length"] == WINDOW
    assert {c["kind"] for c in data.calls} >= {"loop", "subagent"}
    summary = current_summary(asked)
    assert (summary.tasks.total, summary.tasks.judged, summary.accuracy) == (1, 0, None)


def test_a_question_stopped_midway_is_shown_unfinished_and_the_page_is_rendered_unwritten(asked):
    journal = asked / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    kept = [line for line in lines if '"closing_call"' not in line and "final_answer" not in line]
    kept = [line for line in kept if "task_finished" not in line]
    journal.write_text("".join(kept) + '{"ts": "2026', encoding="utf-8")  # torn at its end
    data = collect(asked, current_summary(asked))
    assert data.run["state"] == "stopped"
    assert data.tasks[0]["status"] == "unfinished" and data.tasks[0]["answer"] is None
    assert current_summary(asked).tasks.total == 0
    page = run_report_page(asked)
    assert page.startswith("<!doctype html>") and QUESTION in page
    assert render_run_report(asked, current_summary(asked)).startswith("<!doctype html>")
    assert not (asked / "report.html").exists()
    done = deepledger("report", str(asked))
    assert done.returncode == 0 and "stopped before it finished" in done.stdout
    with (asked / ".lock").open("rb") as held:  # as the question's own process holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        data = collect(asked, current_summary(asked))
        assert data.run["state"] == "running" and data.tasks[0]["judgement"] == "running now"
        assert "running now" in deepledger("report", str(asked)).stdout
    so_far = data.tasks[0]["input_tokens"]
    assert so_far >= PROMPT_TOKENS
    with open_report(asked / "report.html") as visit:  # the page of the question running
        assert "being answered now" in visit.page.inner_text("#banners")
        cards = visit.page.inner_text("#run-cards")  # its tokens so far, not the summary's 0
        assert f"{so_far:,}" in cards and "priced once the question is answered" in cards
    assert visit.problems == []


def test_a_folder_that_is_no_run_gets_one_line_naming_the_nearest(asked):
    done = deepledger("report", str(asked.parent))
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert "is not a run folder" in line and f"the nearest run folder is {asked}" in line
    done = deepledger("report", str(asked), str(asked))  # a question is not compared
    assert done.returncode == 2
    assert "only bench runs are compared" in done.stderr.strip().splitlines()[-1]


def test_the_run_folder_page_opens_its_task_with_a_chart_scaled_to_it(asked):
    assert deepledger("report", str(asked)).returncode == 0
    with open_report(asked / "report.html") as visit:
        page = visit.page
        page.wait_for_selector("#chart-task canvas")  # the only task, opened
        assert QUESTION in page.inner_text("#trajectory")
        low, high = page.evaluate(
            "document.getElementById('chart-task').vegaView.scale('y').domain()"
        )
        assert low == 0 and PROMPT_TOKENS <= high < WINDOW / 4  # the data's, not the window's
        # The task's point is drawn well above the axis, not flat on 0.
        zero, point = page.evaluate(
            "(() => { const y = document.getElementById('chart-task').vegaView.scale('y');"
            f" return [y(0), y({PROMPT_TOKENS})]; }})()"
        )
        assert zero - point > 100  # pixels: y grows downwards
        assert "is far above these prompts" in page.inner_text("#trajectory")
        assert "being answered" not in page.inner_text("#banners")
        cards = page.inner_text("#run-cards")
        assert "not judged" in cards and "accuracy" not in cards
        # Nothing judged, nothing carried: no accuracy tables, no verdict anywhere, and no
        # ground truth or post-mortem column.
        shown = page.inner_text("#report").lower()
        assert [w for w in ("correct", "wrong", "accuracy", "post-mortem") if w in shown] == []
        assert "End reasons" in page.inner_text("#outcomes")
        assert page.locator("#task-table th[data-key=ground_truth]").count() == 0
    assert visit.problems == []
