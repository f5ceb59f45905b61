"""The ``mirothinker`` export, read back the way MiroThinker's own scripts read a run.

The readers here restate, as facts, what MiroThinker's scripts do (not their code):
``benchmarks/evaluators/calculate_average_score.py`` globs
``run_*/benchmark_results_pass_at_*_accuracy.txt``, takes k from the first file's name,
reads each file of that k as a percentage and averages them; ``check_progress/common.py``
takes each ``run_*/task_*.json``, keeps a task's newest log by ``start_time`` (the id
from the file name up to the first ``_``), counts it running, completed or failed by
``status`` / ``end_time`` / ``error`` / ``final_boxed_answer``, correct by
``final_judge_result``, and pass@n over the runs by task id.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import statistics
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from deepledger.bench.report import rebuild_summary
from deepledger.errors import ConfigError
from deepledger.export import ExportRequest, export
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import Message
from tests.support.bench import config, run

TASKS = ("easy/1", "hard #2", "näive 3")  # ids with "/", " ", "#", a non-ASCII letter
SECRET = "sk-exported-never-0451"
# check_progress_*.py's id pattern for benchmarks whose ids are not hex
TASK_ID_PATTERN = r"task_([^_]+(?:-[^_]+)*)"
# What MiroThinker's files hold, as its source has them: the fields of a task log (its
# TaskLog), of a step log, of a benchmark_results.jsonl line and of one of its attempts,
# in their order; a step's levels; its times (UTC+8, to the second, no offset); the stamp
# in a task log's name, as its resume parses it.
TASK_LOG_FIELDS = [
    "status",
    "start_time",
    "end_time",
    "task_id",
    "input",
    "ground_truth",
    "final_boxed_answer",
    "final_judge_result",
    "judge_type",
    "eval_details",
    "error",
    "current_main_turn_id",
    "current_sub_agent_turn_id",
    "sub_agent_counter",
    "current_sub_agent_session_id",
    "env_info",
    "log_dir",
    "main_agent_message_history",
    "sub_agent_message_history_sessions",
    "step_logs",
    "trace_data",
]
STEP_FIELDS = ["step_name", "message", "timestamp", "info_level", "metadata"]
STEP_LEVELS = {"info", "warning", "error", "debug"}
RESULT_FIELDS = [
    "task_id",
    "task_question",
    "ground_truth",
    "file_path",
    "status",
    "model_boxed_answer",
    "metadata",
    "error_message",
    "final_judge_result",
    "judge_type",
    "log_file_path",
    "attempts",
    "pass_at_k_success",
    "k_value",
]
ATTEMPT_FIELDS = [
    "attempt_number",
    "model_boxed_answer",
    "status",
    "log_file_path",
    "final_judge_result",
    "judge_type",
    "is_correct",
]
UTC_PLUS_8 = timezone(timedelta(hours=8))
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
NAME_STAMP_FORMAT = "%Y-%m-%d-%H-%M-%S"


def scripted_model() -> ScriptedLLM:
    """France right at once; Vienna wrong on the first attempt, right on the second;
    the animal wrong on both: pass@1 is 1/3 and pass@2 is 2/3."""
    starts: Counter[str] = Counter()

    def respond(messages: list[Message], tools: object) -> str:
        task = messages[1].content
        key = next(k for k in ("France", "Vienna", "animal") if k in task)
        if len(messages) == 2:  # an attempt's first call: the system prompt and the task
            starts[key] += 1
        if key == "France":
            return f"Paris (a key I saw: OPENAI_API_KEY={SECRET}). \\boxed{{Paris}}"
        if key == "Vienna":
            return "\\boxed{Danube}" if starts[key] >= 2 else "\\boxed{Rhine}"
        return "\\boxed{Tiger}"

    return ScriptedLLM(responder=respond)


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench") / "run"
    # One task at a time: the results lines (and the tests) follow the tasks' order.
    cfg = config("benchmark.execution.pass_at_k=2", "benchmark.execution.max_concurrent=1")
    asyncio.run(run(cfg, scripted_model(), root, only=TASKS, manifest=True))
    return root


# -- MiroThinker's reading rules, restated --------------------------------------------
def average_score(results_dir: Path) -> tuple[int, float]:
    """calculate_average_score.py: k from the first accuracy file, the mean of every
    run's accuracy file of that k, each read as ``NN.NN%``."""
    found = sorted(results_dir.glob("run_*/benchmark_results_pass_at_*_accuracy.txt"))
    match = re.search(r"pass_at_(\d+)_accuracy\.txt", found[0].name)
    assert match is not None
    k = int(match.group(1))
    files = sorted(results_dir.glob(f"run_*/benchmark_results_pass_at_{k}_accuracy.txt"))
    scores = [float(f.read_text().strip().replace("%", "")) for f in files]
    return k, statistics.mean(scores)


def _start(data: dict) -> float:
    return datetime.fromisoformat(data["start_time"].replace("Z", "+00:00")).timestamp()


def newest_logs(run_dir: Path) -> dict[str, dict]:
    """check_progress: each task id's newest ``task_*.json`` by its start_time."""
    newest: dict[str, tuple[float, dict]] = {}
    for path in run_dir.glob("task_*.json"):
        match = re.match(TASK_ID_PATTERN, path.name)
        if match is None:
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        start = _start(data)
        if match.group(1) not in newest or start > newest[match.group(1)][0]:
            newest[match.group(1)] = (start, data)
    return {task_id: data for task_id, (_, data) in newest.items()}


def completed(data: dict) -> bool:
    end, error, answer = (
        data.get("end_time", ""),
        data.get("error", ""),
        data.get("final_boxed_answer", ""),
    )
    return (
        (end != "" and error == "")
        or data.get("status") == "completed"
        or (answer != "" and error == "")
    )


def judged_correct(result: object) -> bool:
    """A text verdict counts as correct when it is CORRECT or SUCCESS, holds
    PASS_AT_K_SUCCESS, or is true, 1, yes or pass (any case); a bool is itself."""
    if isinstance(result, bool):
        return result
    text = str(result).casefold() if isinstance(result, str) else ""
    return text in {"correct", "success", "true", "1", "yes", "pass"} or (
        "pass_at_k_success" in text
    )


def progress(results_dir: Path) -> dict[str, object]:
    """check_progress's counts over every run_* folder, and its pass@n by task id."""
    counts: Counter[str] = Counter()
    by_task: dict[str, list[bool]] = {}
    turns: list[int] = []
    for run_dir in sorted(p for p in results_dir.iterdir() if p.name.startswith("run_")):
        for task_id, data in newest_logs(run_dir).items():
            if data.get("status", "") == "running":
                counts["running"] += 1
            elif completed(data):
                counts["completed"] += 1
                correct = data.get("final_judge_result") is not None and judged_correct(
                    data["final_judge_result"]
                )
                counts["correct"] += correct
                by_task.setdefault(task_id, []).append(correct)
                history = data["main_agent_message_history"]["message_history"]
                turns.append(len([m for m in history if m.get("role") != "system"]) // 2)
            else:
                counts["failed"] += 1
    return {**counts, "pass_at_n": sum(any(r) for r in by_task.values()), "turns": turns}


# -- the tests ------------------------------------------------------------------------
def test_mirothinkers_scripts_read_the_runs_accuracy_and_pass_at_k(
    bench_run: Path, tmp_path: Path
) -> None:
    summary = rebuild_summary(bench_run)
    assert (summary.accuracy, summary.pass_at_k) == (pytest.approx(1 / 3), pytest.approx(2 / 3))
    out = tmp_path / "mirothinker"

    outcome = export(ExportRequest(run_dirs=(bench_run,), format="mirothinker", out=out))

    # The averaging script: one run of pass@2, its accuracy the run's pass@2.
    assert average_score(out) == (2, float(f"{summary.pass_at_k:.2%}".rstrip("%")))
    # The progress script: every task finished, and (its newest log per task being
    # the attempt that stopped the task) correct where any attempt was.
    seen = progress(out)
    assert seen["completed"] == len(TASKS) and "running" not in seen and "failed" not in seen
    assert seen["correct"] == seen["pass_at_n"] == summary.correct_any_attempt == 2
    assert all(n >= 1 for n in seen["turns"])
    # benchmark_results.jsonl: a line per task; its attempts' is_correct give pass@1.
    lines = [
        json.loads(x) for x in (out / "run_1" / "benchmark_results.jsonl").read_text().splitlines()
    ]
    assert [line["task_id"] for line in lines] == list(TASKS)
    first = [line["attempts"][0]["is_correct"] for line in lines]
    assert sum(first) / len(lines) == pytest.approx(summary.accuracy)
    assert [len(line["attempts"]) for line in lines] == [1, 2, 2]  # pass@k stops when right
    # collect-trace's rule: the logs of PASS_AT_K_SUCCESS lines, each one judged CORRECT
    kept = [line for line in lines if line["final_judge_result"] == "PASS_AT_K_SUCCESS"]
    for line in kept:
        log = json.loads(Path(line["log_file_path"]).read_text(encoding="utf-8"))
        assert log["task_id"].startswith(f"{line['task_id']}_attempt-")
        assert log["final_judge_result"] == "CORRECT"
    assert [line["model_boxed_answer"] for line in kept] == ["Paris", "Danube"]
    logs = sorted((out / "run_1").glob("task_*.json"))
    assert len(logs) == 5 and len(outcome.written) == 7 and outcome.rows == 3
    assert not any(SECRET in p.read_text(encoding="utf-8") for p in out.rglob("*") if p.is_file())


def test_the_files_have_mirothinkers_names_fields_and_times(
    bench_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "mirothinker"
    export(ExportRequest(run_dirs=(bench_run,), format="mirothinker", out=out))

    logs = sorted((out / "run_1").glob("task_*.json"))
    assert logs
    for path in logs:
        log = json.loads(path.read_text(encoding="utf-8"))
        assert list(log) == TASK_LOG_FIELDS
        named = re.fullmatch(r"(.+)_attempt-(\d+)_format-retry-(\d+)", log["task_id"])
        assert named is not None
        task_id, attempt, retry = named.groups()
        assert task_id in TASKS and log["status"] == "success" and log["error"] == ""
        stamp = re.sub(r"[:. ]", "-", log["start_time"])
        assert path.name.endswith(f"_attempt-{attempt}_format-retry-{retry}_{stamp}.json")
        datetime.strptime(path.stem.split("_")[-1], NAME_STAMP_FORMAT)
        start = datetime.strptime(log["start_time"], TIME_FORMAT)
        assert datetime.strptime(log["end_time"], TIME_FORMAT) >= start
        # the retry's start in its journal, in UTC+8 (a later one may be a second after)
        journal = bench_run / log["trace_data"]["deepledger"]["journal"]
        lines = map(json.loads, journal.read_text(encoding="utf-8").splitlines())
        first = next(x["ts"] for x in lines if x["event"] == "retry_started")
        began = datetime.fromisoformat(first).astimezone(UTC_PLUS_8).replace(tzinfo=None)
        began = began.replace(microsecond=0)
        assert start == began if (attempt, retry) == ("1", "0") else start >= began
        assert set(log["input"]) == {"task_description", "task_file_name"}
        assert set(log["main_agent_message_history"]) == {"system_prompt", "message_history"}
        assert log["main_agent_message_history"]["message_history"][0]["role"] == "user"
        assert isinstance(log["current_main_turn_id"], int) and log["current_main_turn_id"] >= 1
        assert log["final_judge_result"] in {"CORRECT", "INCORRECT", "NOT_ATTEMPTED"}
        for step in log["step_logs"]:
            assert list(step) == STEP_FIELDS and step["info_level"] in STEP_LEVELS
            datetime.strptime(step["timestamp"], TIME_FORMAT)

    results = (out / "run_1" / "benchmark_results.jsonl").read_text(encoding="utf-8")
    for line in map(json.loads, results.splitlines()):
        assert list(line) == RESULT_FIELDS
        assert line["status"] == "success" and line["judge_type"] == "pass_at_k"
        assert isinstance(line["pass_at_k_success"], bool) and line["k_value"] == 2
        for attempt_line in line["attempts"]:
            assert list(attempt_line) == ATTEMPT_FIELDS
            assert Path(attempt_line["log_file_path"]) in logs


def test_a_folder_that_holds_files_is_refused_and_left_as_it_was(
    bench_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")

    with pytest.raises(ConfigError, match="already holds files; name a new or empty folder"):
        export(ExportRequest(run_dirs=(bench_run,), format="mirothinker", out=out))
    assert [p.name for p in out.iterdir()] == ["notes.txt"]

    with pytest.raises(ConfigError, match="is given twice"):
        export(
            ExportRequest(run_dirs=(bench_run, bench_run), format="mirothinker", out=tmp_path / "a")
        )
    with pytest.raises(ConfigError, match="is not a run folder"):
        export(ExportRequest(run_dirs=(tmp_path,), format="mirothinker", out=tmp_path / "b"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()

    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder is taken
    export(ExportRequest(run_dirs=(bench_run,), format="mirothinker", out=empty))
    assert (empty / "run_1" / "benchmark_results_pass_at_2_accuracy.txt").read_text() == "66.67%"


def test_a_run_still_going_shows_its_task_running_and_has_no_results_yet(
    bench_run: Path, tmp_path: Path
) -> None:
    live = tmp_path / "live"
    shutil.copytree(bench_run, live)
    results = live / "benchmark_results.jsonl"
    lines = results.read_text(encoding="utf-8").splitlines()
    results.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")  # the last task goes on
    journal = max((live / "tasks").glob("n*ive_3-*/attempt-2-retry-0.jsonl"))
    kept = [x for x in journal.read_text(encoding="utf-8").splitlines() if "task_finished" not in x]
    journal.write_text("\n".join(kept) + '\n{"event": "assis', encoding="utf-8")  # torn
    out = tmp_path / "out"

    outcome = export(ExportRequest(run_dirs=(live,), format="mirothinker", out=out))

    seen = progress(out)
    assert (seen["completed"], seen["running"], seen["correct"]) == (2, 1, 2)
    assert not (out / "run_1" / "benchmark_results.jsonl").exists()
    assert not list(out.glob("run_1/*accuracy.txt"))
    assert any("unfinished run" in reason for reason in outcome.skipped)
