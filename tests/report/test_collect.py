"""What the report reads from a run directory, and what it does with bad ones."""

from __future__ import annotations

import gc
import json
import threading
from datetime import UTC, datetime

import pytest

from deepledger.bench.report import rebuild_summary
from deepledger.errors import DeepLedgerError
from deepledger.records.codec import read_journal_file
from deepledger.records.results import SummaryRecord
from deepledger.report import page as page_module
from deepledger.report.collect import RESULT_LIMIT, collect, compact_event, wall_seconds
from deepledger.report.compare import _labels, default_output
from deepledger.report.page import write_run_report
from deepledger.store.layout import REPORT, RunLayout
from deepledger.store.run_store import RunStore
from tests.support.cli import deepledger
from tests.support.report import embedded
from tests.support.runs import WINDOW, demo_tasks


def test_a_finished_run_gives_a_row_and_a_trajectory_per_task(finished_run):
    root = finished_run
    data, trajectories = embedded(write_run_report(root, rebuild_summary(root)))
    assert data["run"]["state"] == "finished"
    assert [t["id"] for t in data["tasks"]] == [f"worldfacts-demo-{i:03d}" for i in range(1, 7)]
    assert data["tasks"][-1]["status"] == "error"
    assert {t["status"] for t in data["tasks"][:-1]} <= {"correct", "wrong"}
    assert len(trajectories) == 6
    first = trajectories[0]
    assert first["journals"][0]["journal"].startswith("tasks/worldfacts-demo-001-")
    events = [e["event"] for e in first["journals"][0]["events"]]
    assert events[:3] == ["retry_started", "task_started", "llm_call"]
    assert "system_prompt" not in first["journals"][0]["events"][1]  # replay-only, large
    assert first["calls"] and all(c["kind"] == "loop" for c in first["calls"])
    assert data["datasets"]["window"][0]["tokens"] == WINDOW
    assert data["run"]["summary"]["token_economics"].get("unavailable") is None
    assert (root / REPORT).stat().st_mode & 0o777 == 0o644


def test_a_run_in_progress_marks_unfinished_and_unstarted_tasks(killed_run):
    root = killed_run
    data = collect(root, rebuild_summary(root))
    assert data.run["state"] == "stopped"  # no process holds it
    assert [t["status"] for t in data.tasks[-2:]] == ["correct", "unfinished"]
    assert data.tasks[-1]["turns"] > 0 and data.tasks[-1]["input_tokens"] > 0
    assert data.tasks[-1]["question"] == demo_tasks()[3]["task_question"]
    assert data.run["tasks_not_started"] == 2


def test_long_tool_results_are_clipped_and_say_where_the_rest_is(finished_run):
    root = finished_run
    journal = next((root / "tasks").glob("worldfacts-demo-001-*/attempt-1-retry-0.jsonl"))
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    first = next(e for e in events if e["event"] == "tool_results")
    first["results"][0]["content"] = "x" * (RESULT_LIMIT + 5_000)
    journal.write_text("".join(json.dumps(e) + "\n" for e in events))
    _, trajectories = embedded(write_run_report(root, rebuild_summary(root)))
    shown = next(
        e for e in trajectories[0]["journals"][0]["events"] if e["event"] == "tool_results"
    )["results"][0]["content"]
    assert shown.startswith("x" * RESULT_LIMIT)
    assert shown.endswith("[5,000 more characters in the journal]")


def test_short_lines_skip_the_clipping_walk_and_show_the_same(finished_run, tmp_path):
    journal = next((finished_run / "tasks").glob("worldfacts-demo-001-*/attempt-1-retry-0.jsonl"))
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    answer = next(line for line in lines if line["event"] == "final_answer")
    answer["answer"] = "y" * 9000  # past the shortest limit, in a line that is no result
    results = next(line for line in lines if line["event"] == "tool_results")
    for result in results["results"]:
        result["content"] = "short"  # a short line whose results still get their length
    long_answer = tmp_path / "long.jsonl"
    long_answer.write_text("".join(json.dumps(line) + "\n" for line in [*lines, answer, results]))
    recorded = read_journal_file(long_answer)
    sized = zip(recorded.lines, recorded.sizes, strict=True)
    shown = [compact_event(line, size) for line, size in sized]
    assert shown == [compact_event(line) for line in recorded.lines]
    assert shown[-2]["answer"].endswith("[3,000 more characters in the journal]")
    assert shown[-1]["results"][0]["chars"] == len("short")


def test_the_cycle_collector_is_back_after_a_report_written_or_failed(finished_run, monkeypatch):
    write_run_report(finished_run, rebuild_summary(finished_run))
    assert gc.isenabled()

    def broken(*args, **kwargs):
        assert not gc.isenabled()  # paused while the report is built
        raise RuntimeError("disk full")

    monkeypatch.setattr(page_module, "render", broken)
    with pytest.raises(RuntimeError):
        write_run_report(finished_run, rebuild_summary(finished_run))
    assert gc.isenabled()
    gc.disable()  # a caller that keeps it off finds it off
    try:
        with pytest.raises(RuntimeError):
            write_run_report(finished_run, rebuild_summary(finished_run))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_unreadable_journal_is_listed_not_fatal(finished_run):
    root = finished_run
    journal = next((root / "tasks").glob("worldfacts-demo-002-*/attempt-1-retry-0.jsonl"))
    with journal.open("a") as out:
        out.write('{"event": "llm_call", "usage": "not a dict"}\n{"event": "torn li')
    data, _ = embedded(write_run_report(root, rebuild_summary(root)))
    assert len(data["tasks"]) == 6
    assert any("worldfacts-demo-002" in m and "cannot read" in m for m in data["run"]["missing"])


def test_a_folder_that_is_not_a_run_gets_a_clear_error(tmp_path):
    with pytest.raises(DeepLedgerError, match="not a deepledger run directory"):
        collect(tmp_path, SummaryRecord())
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(DeepLedgerError, match=r"manifest\.json is unreadable"):
        collect(tmp_path, SummaryRecord())


def test_a_report_that_fails_midway_leaves_the_old_one_whole(finished_run, monkeypatch):
    root = finished_run
    report = write_run_report(root, rebuild_summary(root))
    before = report.read_bytes()

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(page_module, "render", broken)
    with pytest.raises(RuntimeError):
        write_run_report(root, rebuild_summary(root))
    assert report.read_bytes() == before
    assert [p.name for p in root.iterdir() if p.name.startswith(".report")] == []


def test_runs_are_labelled_by_the_settings_they_differ_in(tmp_path):
    configs = [
        {"agent.keep_tool_result": "-1", "llm.model_name": "m"},
        {"agent.keep_tool_result": "5", "llm.model_name": "m"},
        None,
    ]
    dirs = [tmp_path / "0", tmp_path / "1", tmp_path / "junk"]
    assert _labels(configs, dirs) == [
        "agent.keep_tool_result=-1",
        "agent.keep_tool_result=5",
        "junk",
    ]
    same = [{"a": "1"}, {"a": "1"}]
    assert _labels(same, dirs[:2]) == ["0", "1"]
    assert (
        default_output([tmp_path / "0", tmp_path / "1"]) == tmp_path.resolve() / "comparison.html"
    )


def test_the_report_command_rebuilds_one_run_and_compares_several(runs_keeping, tmp_path):
    runs = runs_keeping
    single = deepledger("report", str(runs[0]))
    assert single.returncode == 0, single.stderr
    assert f"Report: {runs[0] / REPORT}" in single.stdout
    both = deepledger("report", str(runs[0]), str(runs[1]), str(tmp_path / "missing"))
    assert both.returncode == 1  # one folder is no run: the average says so
    assert "missing" in both.stderr
    comparison = tmp_path / "comparison.html"
    assert f"Comparison: {comparison.resolve()}" in both.stdout
    data, _ = embedded(comparison)
    assert [r.get("problem") is None for r in data["runs"]] == [True, True, False]
    assert (runs[1] / REPORT).is_file()
    out = deepledger("report", str(runs[0]), str(runs[1]), "--out", str(tmp_path / "x" / "c.html"))
    assert out.returncode == 0 and (tmp_path / "x" / "c.html").is_file()
    usage = deepledger("report", "--out")
    assert usage.returncode != 0


def test_a_lone_surrogate_from_a_model_does_not_stop_the_report(finished_run):
    root = finished_run
    journal = next((root / "tasks").glob("worldfacts-demo-001-*/attempt-1-retry-0.jsonl"))
    with journal.open("a") as out:  # as Journal writes one: an escape in the JSON
        out.write('{"event": "assistant", "turn": 9, "message": {"content": "half \\ud83d"}}\n')
    _, trajectories = embedded(write_run_report(root, rebuild_summary(root)))
    last = trajectories[0]["journals"][0]["events"][-1]
    assert last["message"]["content"] == "half \ud83d"


def test_wall_time_counts_a_killed_session_up_to_its_last_write():
    def at(seconds: int) -> str:
        return datetime.fromtimestamp(1_700_000_000 + seconds, UTC).isoformat()

    runs = [
        {"started_at": at(0), "finished_at": None},  # killed; its last write at 100 s
        {"started_at": at(1_000), "finished_at": at(1_600)},
    ]
    writes = [datetime.fromisoformat(at(t)) for t in (50, 100, 1_200, 1_600)]

    def activity() -> list[datetime]:
        return writes

    assert wall_seconds(runs, live=False, activity=activity) == 700
    runs[1]["finished_at"] = None  # the second one still going: up to now
    assert wall_seconds(runs, live=True, activity=activity) > 10**6
    assert wall_seconds(runs, live=False, activity=activity) == 700
    naive = [{"started_at": "2020-01-01T00:00:00", "finished_at": "2020-01-01T00:01:00+00:00"}]
    assert wall_seconds(naive, live=False, activity=activity) == 60  # no zone: UTC


def test_a_run_held_by_a_process_is_running_and_one_without_is_stopped(killed_run):
    root = killed_run
    held = RunStore(root)
    try:
        data = collect(root, SummaryRecord())
        assert data.run["state"] == "running"
        assert data.tasks[-1]["judgement"] == "running now"
    finally:
        held.close()
    data = collect(root, SummaryRecord())
    assert data.run["state"] == "stopped"
    assert data.tasks[-1]["judgement"].startswith("stopped before it finished")


def test_sub_agent_and_interrupted_journals(killed_run):
    root = killed_run
    task_dir = next((root / "tasks").glob("worldfacts-demo-004-*"))  # the one killed
    main = task_dir / "attempt-1-retry-0.jsonl"
    before = collect(root, SummaryRecord()).tasks[-1]
    nested = task_dir / "attempt-1-retry-0.subagents"
    for name in ("browsing-10", "browsing-2", "browsing-2.subagents/browsing-1"):
        (nested / name).parent.mkdir(parents=True, exist_ok=True)
        (nested / f"{name}.jsonl").write_text(main.read_text())
    (task_dir / "attempt-1-retry-0.interrupted-20261130T000000.jsonl").write_text(main.read_text())
    data = collect(root, SummaryRecord())
    labels = [j["label"] for j in data.trajectories[-1]]
    assert labels == [
        "attempt 1 · retry 0",
        "attempt 1 · retry 0 · sub-agent browsing-2",
        "attempt 1 · retry 0 · sub-agent browsing-2 › browsing-1",
        "attempt 1 · retry 0 · sub-agent browsing-10",
    ]
    row = data.tasks[-1]
    assert row["turns"] == before["turns"]  # the loop's turns, as a finished record counts
    assert row["input_tokens"] == 4 * before["input_tokens"]  # sub-agents' tokens are the task's
    kinds = {c["kind"] for c in data.calls if c["task"] == len(data.tasks) - 1}
    assert kinds == {"loop", "subagent", "interrupted"}


def test_out_is_for_comparisons(finished_run, tmp_path):
    root = finished_run
    done = deepledger("report", str(root), "--out", str(tmp_path / "c.html"))
    assert done.returncode != 0 and "--out names the comparison" in done.stderr


def test_a_live_report_that_comes_after_the_end_of_the_run_writes_nothing(finished_run):
    from deepledger.bench.suite import _write_report

    root = finished_run
    (root / REPORT).unlink()  # the one the run wrote at its end
    ended = threading.Event()
    ended.set()
    assert _write_report(root, rebuild_summary(root), ended) is None
    assert not (root / REPORT).exists()
    assert _write_report(root, rebuild_summary(root)) == root / REPORT


def test_a_task_whose_judge_gave_no_verdict_is_shown_apart(finished_run):
    results = RunLayout(finished_run).results
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    first = lines[0]
    first["correct"] = None
    first["judgement"] = {"correct": None, "judge": "llm", "reason": "unreadable", "unjudged": True}
    for attempt in first["attempts"]:
        attempt["correct"], attempt["judgement"] = None, first["judgement"]
    results.write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = rebuild_summary(finished_run)
    assert summary.tasks.unjudged == 1
    data, _ = embedded(write_run_report(finished_run, summary))
    assert data["tasks"][0]["status"] == "no-verdict"
    assert data["run"]["summary"]["tasks"]["unjudged"] == 1


def test_a_cut_reply_asked_again_is_one_of_the_calls_the_usage_counts():
    from deepledger.messages import Message, Usage
    from deepledger.records.events import LLMCall, ReplyCut
    from deepledger.report.collect import _calls

    cut = ReplyCut(
        turn=1,
        attempt=1,
        max_tokens=100,
        next_max_tokens=110,
        message=Message.assistant("<think>half"),
        usage=Usage(50, 100),
    )
    kept = LLMCall(turn=1, usage=Usage(50, 80))
    points = _calls([cut, kept], 0, "attempt 1 · retry 0", None)
    assert [(p["kind"], p["output"]) for p in points] == [("reply_cut", 100), ("loop", 80)]
