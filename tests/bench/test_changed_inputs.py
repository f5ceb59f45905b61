"""A resume never keeps a result recorded for other inputs (bench/inputs.py): a task whose
question, ground truth or attached file changed under the same task_id is asked again
(or, with resume.on_changed_tasks=refuse, the resume stops naming it), and the others
are not. `deepledger bench` in a subprocess, against the loopback fake model."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bench import SUITE, bench_command, results
from tests.support.cli import ROOT
from tests.support.doubles.bench_model import respond_http
from tests.support.doubles.fake_llm_server import FakeLLMServer

DATA = "standardized_data.jsonl"
QUESTIONS = {
    "easy/1": "EASY: What is the capital of France?",
    "hard #2": "HARD: Which river flows through Vienna?",
    "näive 3": "EASY: Name the file's animal.",
    "open-4": "EASY: Anything without ground truth?",
}
NEW_QUESTION = "EASY: What is the capital of France, in one word?"


@pytest.fixture
def server():
    with FakeLLMServer(responder=respond_http) as fake:
        yield fake


@pytest.fixture
def suite(tmp_path) -> Path:
    """A copy of the test suite, to edit between runs."""
    return Path(shutil.copytree(SUITE, tmp_path / "suite"))


def bench(server: FakeLLMServer, suite: Path, run_dir: Path, *extra: str):
    command = bench_command(
        server.openai_base_url,
        run_dir,
        f"benchmark.data.data_dir={suite}",
        "benchmark.execution.report=false",
        "benchmark.execution.max_concurrent=1",
        *extra,
    )
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def edit_tasks(suite: Path, **changes: dict) -> None:
    """Change fields of some tasks in the suite's task file, by task id."""
    path = suite / DATA
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        line.update(changes.get(line["task_id"], {}))
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))


def asked(server: FakeLLMServer) -> set[str]:
    """The tasks whose question the model was sent (the task message of each request)."""
    texts = [str(r.messages[1].get("content")) for r in server.requests if len(r.messages) > 1]
    found = {t for t, q in QUESTIONS.items() if any(q in text for text in texts)}
    return found | ({"easy/1"} if any(NEW_QUESTION in text for text in texts) else set())


def latest(run_dir: Path) -> dict[str, dict]:
    return {line["task_id"]: line for line in results(run_dir)}


def snapshot(root: Path) -> dict[str, tuple]:
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else None)
        for p in [root, *sorted(root.rglob("*"))]
    }


@pytest.fixture
def first_run(server, suite, tmp_path) -> Path:
    run_dir = tmp_path / "run"
    done = bench(server, suite, run_dir)
    assert done.returncode == 0, done.stderr
    assert asked(server) == set(QUESTIONS)
    assert all(len(line["input_digest"]) == 64 for line in results(run_dir))
    server.requests.clear()
    return run_dir


def change_three(suite: Path) -> None:
    """easy/1's question, hard #2's ground truth and näive 3's attached file's bytes."""
    edit_tasks(suite, **{"easy/1": {"task_question": NEW_QUESTION}})
    edit_tasks(suite, **{"hard #2": {"ground_truth": "Donau"}})
    (suite / "animal.txt").write_text("The animal in this file is a lion, a big one.\n")


def test_a_resume_asks_again_exactly_the_tasks_whose_inputs_changed(server, suite, first_run):
    before = latest(first_run)
    change_three(suite)
    done = bench(server, suite, first_run)
    assert done.returncode == 0, done.stderr
    assert asked(server) == {"easy/1", "hard #2", "näive 3"}  # open-4 is not asked again
    # Named once, before the tasks run.
    lines = [line for line in done.stderr.splitlines() if "inputs of 3 tasks changed" in line]
    assert len(lines) == 1 and all(t in lines[0] for t in ("easy/1", "hard #2", "näive 3"))
    now = latest(first_run)
    assert now["open-4"] == before["open-4"]
    for task in ("easy/1", "hard #2", "näive 3"):
        assert now[task]["inputs_changed"] is True
        assert now[task]["input_digest"] != before[task]["input_digest"]
    assert now["easy/1"]["question"] == NEW_QUESTION
    # The old verdict is gone: Danube is no longer the truth.
    assert before["hard #2"]["correct"] is True and now["hard #2"]["correct"] is False
    # hard #2 walked its retries afresh: none of the old question's post-mortems carried.
    (attempt,) = now["hard #2"]["attempts"]
    assert [r["carried_post_mortems"] for r in attempt["retries"]] == [0, 1, 2]
    summary = json.loads((first_run / "summary.json").read_text())
    assert summary["tasks"]["total"] == 4  # the old lines are not counted
    assert summary["inputs_changed"] == {
        "tasks": 3,
        "task_ids": ["easy/1", "hard #2", "näive 3"],
        "unverified": 0,
    }
    assert "3 tasks run again on resume" in done.stdout
    # The old work, kept apart: the three folders and the old result lines.
    kept = sorted(p.name for p in (first_run / "superseded").iterdir() if not p.is_dir())
    assert len(list((first_run / "superseded").iterdir())) == 4
    assert kept == ["benchmark_results.jsonl"]
    old_lines = (first_run / "superseded" / "benchmark_results.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in old_lines] == [
        before[t] for t in ("easy/1", "hard #2", "näive 3")
    ]
    assert len(results(first_run)) == 4  # the new lines, and open-4's
    # Resumed again with nothing changed: nothing is asked, the count stays.
    server.requests.clear()
    again = bench(server, suite, first_run)
    assert again.returncode == 0, again.stderr
    assert server.requests == [] and "changed" not in again.stderr
    assert json.loads((first_run / "summary.json").read_text())["inputs_changed"]["tasks"] == 3


def test_with_refuse_the_resume_exits_2_naming_the_changed_tasks_and_writes_nothing(
    server, suite, first_run
):
    change_three(suite)
    before = snapshot(first_run)
    done = bench(server, suite, first_run, "+resume.on_changed_tasks=refuse")
    assert done.returncode == 2, done.stderr
    assert "the inputs of 3 tasks changed" in done.stderr
    assert all(t in done.stderr for t in ("easy/1", "hard #2", "näive 3"))
    assert "open-4" not in done.stderr
    assert server.requests == []
    assert snapshot(first_run) == before


def test_a_run_directory_without_digests_resumes_keeping_what_it_cannot_check(
    server, suite, first_run
):
    """As an older release wrote it: no digest on any line. A finished task whose
    question and truth are as recorded is kept; one whose question changed runs again."""
    for path in [first_run / "benchmark_results.jsonl", *first_run.glob("tasks/*/progress.jsonl")]:
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for line in lines:
            line.pop("input_digest", None)
        path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    before = latest(first_run)
    edit_tasks(suite, **{"easy/1": {"task_question": NEW_QUESTION}})
    done = bench(server, suite, first_run)
    assert done.returncode == 0, done.stderr
    assert asked(server) == {"easy/1"}
    assert "3 finished tasks were recorded before input digests" in done.stderr
    now = latest(first_run)
    assert {t: now[t] for t in ("hard #2", "näive 3", "open-4")} == {
        t: before[t] for t in ("hard #2", "näive 3", "open-4")
    }
    assert now["easy/1"]["inputs_changed"] is True
    summary = json.loads((first_run / "summary.json").read_text())
    assert summary["inputs_changed"] == {"tasks": 1, "task_ids": ["easy/1"], "unverified": 3}


def test_a_resume_that_stops_before_the_changed_tasks_run_again_counts_none_of_them(
    server, suite, first_run, tmp_path
):
    """The old results leave benchmark_results.jsonl when the tasks are set aside, so the
    summary, `deepledger report` and the report agree even when no task runs again (here
    the model cannot be reached: the run stops at the first call)."""
    change_three(suite)
    url = server.openai_base_url
    server.close()
    command = bench_command(
        url,
        first_run,
        f"benchmark.data.data_dir={suite}",
        "benchmark.execution.report=false",
        "benchmark.execution.max_concurrent=1",
    )
    stopped = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert stopped.returncode != 0
    assert "inputs of 3 tasks changed" in stopped.stderr
    assert set(latest(first_run)) == {"open-4"}
    rebuilt = subprocess.run(
        [sys.executable, "-m", "deepledger", "report", str(first_run)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr
    summary = json.loads((first_run / "summary.json").read_text())
    # open-4 alone (not judged): no old verdict is counted, easy/1's "Paris" or hard #2's
    # "Danube" among them.
    assert summary["tasks"] | {"expected": 4} == {
        "total": 1,
        "finished": 1,
        "errors": 0,
        "judged": 0,
        "expected": 4,
    }
    assert summary["accuracy"] is None
    # The report's task table shows no old answer either.
    page = (first_run / "report.html").read_text()
    assert "Paris" not in page and "Danube" not in page
