"""`deepledger bench` on task files a newcomer might bring, and from another folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.bench import bench_command, results
from tests.support.doubles.bench_model import respond_http
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply

ROOT = Path(__file__).resolve().parents[2]


def bench(command: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_a_non_utf8_line_is_skipped_and_the_other_tasks_run(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    lines = [
        b"\xef\xbb\xbf"
        + json.dumps(
            {"task_id": "one", "task_question": "EASY: France?", "ground_truth": "Paris"}
        ).encode(),
        '{"task_id": "two", "task_question": "EASY: Zürich?"}'.encode("latin-1"),
        json.dumps(
            {"task_id": "three", "task_question": "EASY: animal?", "ground_truth": "Lion"}
        ).encode(),
    ]
    (data / "standardized_data.jsonl").write_bytes(b"\r\n".join(lines) + b"\r\n")
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=respond_http) as server:
        command = bench_command(server.openai_base_url, run_dir)
        done = bench([*command, f"benchmark.data.data_dir={data}"])
    assert done.returncode == 0, done.stderr
    assert "standardized_data.jsonl:2: not UTF-8 text" in done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(r["task_id"] for r in results(run_dir)) == ["one", "three"]
    assert "accuracy       1.000 (2/2)" in done.stdout


def test_a_suite_of_no_task_exits_2_with_the_reason_and_writes_nothing(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "qa.jsonl").write_text(
        "".join(json.dumps({"id": n, "q": "?"}) + "\n" for n in range(4))
    )
    run_dir = tmp_path / "run"
    command = bench_command("http://127.0.0.1:9/v1", run_dir)  # never reached
    done = bench(
        [
            *command,
            f"benchmark.data.data_dir={data}",
            "benchmark.data.metadata_file=qa.jsonl",
            "benchmark.data.field_mapping.task_id_field=id",
        ]
    )
    assert done.returncode == 2, done.stderr
    assert f"deepledger: no task in {data / 'qa.jsonl'}: 4 of its 4 lines skipped" in done.stderr
    assert "benchmark.data.field_mapping.task_question_field" in done.stderr
    assert not (run_dir / "benchmark_results.jsonl").exists()
    assert not (run_dir / "manifest.json").exists()


def reads_the_task_file(request) -> Reply:
    """First turn: read the task file through the reader by a path relative to its root
    (the preset's benchmarks/example); then answer."""
    if len(request.messages) <= 2:
        return Reply(
            "<use_mcp_tool><server_name>reader</server_name><tool_name>read</tool_name>"
            '<arguments>{"source": "standardized_data.jsonl"}</arguments></use_mcp_tool>'
        )
    return Reply("\\boxed{Paris}")


def test_bench_from_another_folder_finds_the_presets_data_and_the_readers_root(tmp_path):
    """The default benchmark, tools and paths, started outside the repository."""
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=reads_the_task_file) as server:
        command = [
            sys.executable,
            "-m",
            "deepledger",
            "bench",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            "benchmark.execution.max_tasks=1",
            f"hydra.run.dir={run_dir}",
        ]
        done = bench(command, cwd=tmp_path)
        tool_results = [m["content"] for r in server.requests for m in r.messages[3:4]]
    assert done.returncode == 0, done.stderr
    assert "failed to start" not in done.stderr and "unavailable" not in done.stderr
    assert any('"task_id": "example-2"' in str(text) for text in tool_results), tool_results
    assert [r["task_id"] for r in results(run_dir)] == ["example-1"]
    assert (run_dir / "tool_servers" / "reader.stderr.log").read_text() == ""


def reads_the_attached_file(request) -> Reply:
    """Read the file the task names (its announced path), then answer."""
    task = request.messages[1]["content"]
    if len(request.messages) <= 2:
        path = task.split("A file is attached to this task: ", 1)[1].split("\n", 1)[0]
        return Reply(
            "<use_mcp_tool><server_name>reader</server_name><tool_name>read</tool_name>"
            f"<arguments>{json.dumps({'source': path})}</arguments></use_mcp_tool>"
        )
    return Reply("\\boxed{Lion}")


def test_run_with_a_task_file_of_the_users_choice_lets_the_reader_open_it(tmp_path):
    """A file outside any data folder, named by a relative path through a link: the
    user's own choice, so the reader may open it (a suite's file could not)."""
    work, files, real = tmp_path / "work", tmp_path / "files", tmp_path / "real"
    for folder in (work, files, real):
        folder.mkdir()
    (real / "animal.txt").write_text("The animal is a lion.\n")
    (files / "link.txt").symlink_to(real / "animal.txt")
    with FakeLLMServer(responder=reads_the_attached_file) as server:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "deepledger",
                "run",
                "question=Which animal is in the file?",
                "task_file=../files/link.txt",
                "llm=openai_compatible",
                f"llm.base_url={server.openai_base_url}",
                "agent.main_agent.tools=[reader]",
                f"hydra.run.dir={tmp_path / 'run'}",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
        )
        tool_result = server.requests[1].messages[3]["content"]
    assert done.returncode == 0, done.stderr
    assert "The animal is a lion." in tool_result, tool_result
    assert "Answer: Lion" in done.stdout


def test_the_presets_search_corpus_is_found_from_another_folder(tmp_path, monkeypatch):
    from deepledger.config import SEARCH_CORPUS_ENV, server_environment, validate
    from tests.support.config import composed

    monkeypatch.chdir(tmp_path)
    cfg = composed("benchmark=worldfacts", "llm=openai_compatible")
    validate(cfg)  # benchmark.search_corpus=benchmarks/worldfacts/corpus exists
    assert server_environment(cfg)[SEARCH_CORPUS_ENV] == str(ROOT / "benchmarks/worldfacts/corpus")
