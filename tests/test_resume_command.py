"""Resume as promised: a bench names its run folder at start, Ctrl-C prints the exact
command that resumes it, and that command (or ``deepledger resume RUN_DIR``) resumes it
in the same folder, finished tasks kept; a key given on the command line never shown."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from deepledger.cli.hydra_command import take_command_line_key
from deepledger.cli.resume import resumed_overrides
from deepledger.cli.resuming import (
    KEY_PLACEHOLDER,
    bench_resume_command,
    how_to_resume,
    short_resume_command,
    sweep_resume_command,
)
from deepledger.config import COMMAND_LINE_KEY_ENV
from deepledger.errors import ConfigError
from deepledger.store.locate import runs_under
from tests.support.bench import arithmetic_suite, results
from tests.support.cli import deepledger
from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply
from tests.support.processes import takes_ctrl_c

SECRET = "sk-never-shown-4242"
TASKS = 4
DEEPLEDGER = [sys.executable, "-m", "deepledger"]


# --- the command, formatted -------------------------------------------------------------


def test_the_resume_command_is_quoted_and_sets_the_run_folder_once():
    overrides = ["llm=openai_compatible", "agent.note='it is, here'", "hydra.run.dir=old/run"]
    command = bench_resume_command(overrides, Path("/tmp/my runs/a$b"))
    words = shlex.split(command)
    assert words == [
        "deepledger", "bench", "llm=openai_compatible", "agent.note='it is, here'",
        "hydra.run.dir='/tmp/my runs/a$b'",  # quoted for Hydra too: it holds a space
    ]  # fmt: skip
    assert shlex.split(short_resume_command(overrides, Path("/tmp/my runs/a$b"))) == [
        "deepledger", "resume", "/tmp/my runs/a$b"
    ]  # fmt: skip


def test_a_key_given_on_the_command_line_is_never_shown(monkeypatch):
    monkeypatch.setenv(COMMAND_LINE_KEY_ENV, "")  # restored after take_command_line_key sets it
    overrides = take_command_line_key(
        ["llm=openai", f"llm.api_key={SECRET}", f"+tools.search.env.SERPER_API_KEY={SECRET}"]
    )
    said = how_to_resume(overrides, Path("/runs/r"), why="deepledger bench: interrupted")
    assert SECRET not in said
    bench, short = (shlex.split(s) for s in said.splitlines() if s.startswith("  deepledger "))
    assert f"llm.api_key={KEY_PLACEHOLDER}" in bench and f"llm.api_key={KEY_PLACEHOLDER}" in short
    assert f"+tools.search.env.SERPER_API_KEY={KEY_PLACEHOLDER}" in short
    assert f"llm.api_key_env={COMMAND_LINE_KEY_ENV}" not in bench
    assert f"Replace {KEY_PLACEHOLDER} with the key you gave" in said


def test_a_key_read_from_the_environment_is_shown_as_typed_a_default_never():
    lookup = "+tools.x.env.SERPER_API_KEY=${oc.env:SERPER_API_KEY}"
    fallback = f"+tools.y.env.MY_TOKEN=${{oc.env:MY_TOKEN,{SECRET}}}"
    words = shlex.split(bench_resume_command([lookup, fallback], Path("/r")))
    assert lookup in words and SECRET not in " ".join(words)
    assert f"+tools.y.env.MY_TOKEN={KEY_PLACEHOLDER}" in words
    short = shlex.split(short_resume_command([lookup, fallback], Path("/r")))
    assert short[3:] == [lookup, f"+tools.y.env.MY_TOKEN={KEY_PLACEHOLDER}"]  # kept as ***


def test_a_key_given_as_an_environment_lookup_names_its_variable(monkeypatch):
    monkeypatch.delenv(COMMAND_LINE_KEY_ENV, raising=False)
    overrides = take_command_line_key(["llm=openai", "llm.api_key=${oc.env:MY_OPENAI_KEY}"])
    assert overrides == ["llm=openai", "llm.api_key_env=MY_OPENAI_KEY"]
    assert COMMAND_LINE_KEY_ENV not in os.environ  # not the literal ${oc.env:...} as the key


def test_a_sweep_resumes_in_its_sweep_folder_and_a_job_alone_in_its_own():
    overrides = ["-m", "agent.keep_tool_result=1,5", "hydra.sweep.dir=old"]
    sweep = shlex.split(sweep_resume_command(overrides, Path("/s")))
    assert sweep == [
        "deepledger",
        "bench",
        "-m",
        "agent.keep_tool_result=1,5",
        "hydra.sweep.dir=/s",
    ]
    said = how_to_resume(overrides, Path("/s/0_agent.keep_tool_result=1"), Path("/s"))
    assert (
        "hydra.sweep.dir=/s" in said and "deepledger resume /s/0_agent.keep_tool_result=1" in said
    )


# --- deepledger resume's overrides ------------------------------------------------------


def saved_run(folder: Path, overrides: list[str]) -> Path:
    (folder / ".hydra").mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    (folder / ".hydra" / "overrides.yaml").write_text(
        "".join(f"- {json.dumps(o)}\n" for o in overrides)
    )
    return folder


def test_resume_takes_the_saved_overrides_then_the_extra_ones_then_the_folder(tmp_path):
    run = saved_run(tmp_path / "run", ["llm=openai_compatible", "benchmark.execution.max_tasks=3"])
    got = resumed_overrides(run, ["benchmark.execution.max_tasks=5", "agent.x=1"])
    assert got == [
        "llm=openai_compatible", "benchmark.execution.max_tasks=5", "agent.x=1",
        f"hydra.run.dir={run}",
    ]  # fmt: skip


@pytest.mark.parametrize("moving", ["-m", "hydra.run.dir=elsewhere", "hydra.sweep.dir=s"])
def test_resume_refuses_what_would_put_the_run_in_another_folder(tmp_path, moving):
    run = saved_run(tmp_path / "run", ["llm=openai"])
    with pytest.raises(ConfigError, match=f"^{moving}: deepledger resume runs in RUN_DIR"):
        resumed_overrides(run, [moving])


def test_resume_keeps_hydras_own_overrides_but_not_its_folder_or_mode(tmp_path):
    run = saved_run(tmp_path / "run", ["llm=openai"])
    hydra = [f"hydra.sweep.dir={tmp_path}", "hydra.mode=MULTIRUN", "hydra.searchpath=[file:///p]"]
    (run / ".hydra" / "hydra.yaml").write_text(
        json.dumps({"hydra": {"overrides": {"hydra": hydra}}})
    )
    assert resumed_overrides(run, []) == [
        "hydra.searchpath=[file:///p]", "llm=openai", f"hydra.run.dir={run}"
    ]  # fmt: skip


def test_resume_finds_the_presets_of_the_runs_config_dir_again(tmp_path):
    run = saved_run(tmp_path / "run", ["llm=mine"])
    sources = [
        {"path": "/pkg/conf", "schema": "file", "provider": "main"},
        {"path": "/home/me/my presets", "schema": "file", "provider": "command-line"},
    ]
    (run / ".hydra" / "hydra.yaml").write_text(
        json.dumps({"hydra": {"runtime": {"config_sources": sources}}})
    )
    folder = f"hydra.run.dir={run}"
    assert resumed_overrides(run, []) == ["-cd", "/home/me/my presets", "llm=mine", folder]
    assert resumed_overrides(run, ["-cd", "other"]) == ["llm=mine", "-cd", "other", folder]


def test_resume_works_where_the_run_was_started_so_its_relative_paths_hold(
    tmp_path, monkeypatch, capsys
):
    from deepledger.cli.resume import _go_where_started

    started = tmp_path / "project"
    started.mkdir()
    run = saved_run(tmp_path / "run", ["benchmark.data.data_dir=../../data"])
    (run / ".hydra" / "hydra.yaml").write_text(
        json.dumps({"hydra": {"runtime": {"cwd": str(started)}}})
    )
    monkeypatch.chdir(tmp_path)  # restored after the test
    _go_where_started(run)
    assert Path.cwd() == started
    assert f"working in {started}, where the run was started" in capsys.readouterr().err


def test_resume_asks_again_for_the_secrets_the_folder_never_kept(tmp_path, monkeypatch):
    monkeypatch.delenv(COMMAND_LINE_KEY_ENV, raising=False)
    run = saved_run(
        tmp_path / "run",
        ["llm=openai", f"llm.api_key_env={COMMAND_LINE_KEY_ENV}", "+tools.x.env.MY_TOKEN=***"],
    )
    with pytest.raises(ConfigError) as refused:
        resumed_overrides(run, [])
    assert str(refused.value) == (
        f"{run} was started with secrets on its command line, which a "
        f"run folder never keeps; give them again, your values in place of {KEY_PLACEHOLDER}: "
        f"deepledger resume {run} 'llm.api_key={KEY_PLACEHOLDER}' "
        f"'+tools.x.env.MY_TOKEN={KEY_PLACEHOLDER}'"
    )
    got = resumed_overrides(run, [f"llm.api_key={SECRET}", "+tools.x.env.MY_TOKEN=t"])
    assert got == ["llm=openai", f"llm.api_key={SECRET}", "+tools.x.env.MY_TOKEN=t",
                   f"hydra.run.dir={run}"]  # fmt: skip


def test_a_secret_inside_a_value_is_never_resumed_as_stars(tmp_path, monkeypatch):
    monkeypatch.delenv(COMMAND_LINE_KEY_ENV, raising=False)
    url = f"llm.base_url=https://h/v1?token={SECRET}"
    said = how_to_resume(["llm=openai", url], tmp_path / "run")
    assert SECRET not in said and f"'llm.base_url=https://h/v1?token={KEY_PLACEHOLDER}'" in said
    run = saved_run(tmp_path / "run", ["llm=openai", "llm.base_url=https://h/v1?token=***"])
    with pytest.raises(ConfigError) as refused:
        resumed_overrides(run, [])
    assert str(refused.value).endswith(
        f"deepledger resume {run} 'llm.base_url=https://h/v1?token={KEY_PLACEHOLDER}'"
    )
    assert resumed_overrides(run, [url]) == ["llm=openai", url, f"hydra.run.dir={run}"]


def test_a_resume_command_pasted_with_its_placeholder_is_refused_in_one_line(tmp_path):
    run = saved_run(tmp_path / "run", ["llm=openai"])
    pasted = deepledger("resume", str(run), f"llm.api_key={KEY_PLACEHOLDER}", cwd=tmp_path)
    assert pasted.returncode == 2, pasted.stderr
    assert pasted.stderr.splitlines()[-1].startswith(
        f"deepledger: llm.api_key={KEY_PLACEHOLDER} still holds the placeholder: put your key"
    )


def test_resume_refuses_a_folder_that_is_not_a_bench_run_in_one_line(tmp_path):
    single = tmp_path / "logs" / "question"
    single.mkdir(parents=True)
    (single / "journal.jsonl").write_text("")
    bench = saved_run(tmp_path / "logs" / "bench", ["llm=openai"])
    other = deepledger("resume", str(tmp_path / "logs" / "nothing-here"), cwd=tmp_path)
    assert other.returncode == 2 and len(other.stderr.strip().splitlines()) == 1
    assert f"the nearest run folder is {bench}" in other.stderr
    question = deepledger("resume", str(single), cwd=tmp_path)
    assert question.returncode == 2 and "is a `deepledger run` folder" in question.stderr
    assert "not resumed" in question.stderr and "Traceback" not in question.stderr


# --- the real command: interrupted, then resumed ----------------------------------------


def answering(released: threading.Event):
    """``\\boxed{2n}`` for "What is n + n?"; every task after the first held until
    ``released``, so the interrupt lands while the second task runs."""

    def respond(request) -> Reply:
        text = " ".join(str(m.get("content") or "") for m in request.messages)
        n = int(re.search(r"What is (\d+) \+", text)[1])  # type: ignore[index]
        if n > 1:
            released.wait(120)
        return Reply(f"\\boxed{{{2 * n}}}", delay=0.01)

    return respond


def interrupted_bench(
    tmp_path: Path, url: str, released: threading.Event, *extra: str, preexec=takes_ctrl_c
):
    """`deepledger bench` on the default run folder (under tmp_path/logs), Ctrl-C once
    its first task is recorded: the run folder and what the run said on stderr."""
    data = arithmetic_suite(tmp_path / "data", TASKS)
    command = [
        *DEEPLEDGER, "bench", f"benchmark.data.data_dir={data}", "benchmark.name=tiny",
        "benchmark.judge.name=normalized", "llm=openai_compatible", f"llm.base_url={url}",
        "agent.main_agent.tools=[]", "agent.max_final_answer_retries=1",
        "benchmark.execution.max_concurrent=1", *extra,
    ]  # fmt: skip
    env = {**os.environ, "DEEPLEDGER_PLAIN_PROGRESS": "1"}
    run = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=preexec,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _folders(tmp_path):
            time.sleep(0.05)
        [run_dir] = _folders(tmp_path)
        while time.monotonic() < deadline and not results(run_dir):
            time.sleep(0.05)
        assert results(run_dir), "no task was recorded"
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=120)
    finally:
        released.set()
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, stderr
    said = [line for line in stderr.splitlines() if not line.startswith("[")]  # Hydra's
    assert f"deepledger bench: run folder {run_dir} — resume with:" in said[0]
    return run_dir, stderr


def _folders(tmp_path: Path) -> list[Path]:
    logs = tmp_path / "logs"
    return [path for path, _ in runs_under(logs)] if logs.is_dir() else []


def assert_resumed(tmp_path: Path, run_dir: Path, server, asked_before: int, done) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    assert _folders(tmp_path) == [run_dir]  # no new folder under logs/
    finished = [r["task_id"] for r in results(run_dir) if r["status"] == "finished"]
    assert sorted(set(finished)) == [f"t{n}" for n in range(1, TASKS + 1)]
    assert finished.count("t1") == 1  # recorded before the interrupt, never run again
    later = " ".join(json.dumps(r.messages) for r in server.requests[asked_before:])
    assert "What is 1 +" not in later
    assert f"Run directory: {run_dir}" in done.stdout


def test_ctrl_c_prints_the_command_that_resumes_the_run_in_its_folder(tmp_path):
    released = threading.Event()
    with FakeLLMServer(responder=answering(released)) as server:
        run_dir, stderr = interrupted_bench(
            tmp_path, server.openai_base_url, released, f"llm.api_key={SECRET}"
        )
        assert SECRET not in stderr
        lines = stderr.splitlines()
        command = lines[lines.index(next(s for s in lines if "resume this run" in s)) + 1]
        words = shlex.split(command)
        assert words[:2] == ["deepledger", "bench"] and words[-1] == f"hydra.run.dir={run_dir}"
        assert f"llm.api_key={KEY_PLACEHOLDER}" in words  # the user puts the key back
        words = [w.replace(KEY_PLACEHOLDER, SECRET) for w in words]
        asked = len(server.requests)
        env = {**os.environ, "DEEPLEDGER_PLAIN_PROGRESS": "1"}
        done = subprocess.run(
            [*DEEPLEDGER, *words[1:]], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert_resumed(tmp_path, run_dir, server, asked, done)
    assert SECRET not in (run_dir / ".hydra" / "overrides.yaml").read_text()


def test_deepledger_resume_run_dir_resumes_it_in_its_folder(tmp_path):
    released = threading.Event()
    with FakeLLMServer(responder=answering(released)) as server:
        run_dir, stderr = interrupted_bench(tmp_path, server.openai_base_url, released)
        assert f"deepledger resume {run_dir}" in stderr
        asked = len(server.requests)
        done = deepledger("resume", str(run_dir), cwd=tmp_path, timeout=300)
        assert_resumed(tmp_path, run_dir, server, asked, done)
        assert f"deepledger resume: resuming {run_dir}" in done.stderr


def test_ctrl_c_in_a_sweep_prints_the_command_that_resumes_every_job_in_its_folder(tmp_path):
    released = threading.Event()
    with FakeLLMServer(responder=answering(released)) as server:
        job, stderr = interrupted_bench(
            tmp_path, server.openai_base_url, released, "-m", "agent.keep_tool_result=1,5"
        )
        lines = stderr.splitlines()
        command = lines[lines.index(next(s for s in lines if "resume the sweep" in s)) + 1]
        words = shlex.split(command)
        assert words[:3] == ["deepledger", "bench", "-m"]
        assert words[-1] == f"hydra.sweep.dir={job.parent}"
        env = {**os.environ, "DEEPLEDGER_PLAIN_PROGRESS": "1"}
        done = subprocess.run(
            [*DEEPLEDGER, *words[1:]], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # The interrupted job goes on in its folder, the next one starts beside it.
    assert _folders(tmp_path) == [job, job.parent / "1_agent.keep_tool_result=5"]
    assert [r["task_id"] for r in results(job)].count("t1") == 1


@pytest.mark.parametrize(
    "folder", ["/runs/0_agent.keep_tool_result=1,llm.x=2", "/my runs/it's", '/a"b', "/x/${HOME}"]
)
def test_a_folder_hydra_would_misread_is_quoted_in_its_override(folder):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from deepledger.cli.resuming import folder_override

    override = folder_override("hydra.run.dir", Path(folder))
    value = OverridesParser.create().parse_override(override).value()
    assert OmegaConf.create({"dir": value}).dir == folder


def test_a_stop_message_names_the_folder_so_it_pastes():
    from deepledger.bench.stopping import _unreachable

    folder = "/my runs/it's"
    said = str(_unreachable("the agent's model", "refused", 2, Path(folder)))
    assert f"(deepledger resume {shlex.quote(folder)})." in said


def test_ctrl_c_stops_a_bench_started_with_it_ignored(tmp_path: Path) -> None:
    """A background job of a script starts with SIGINT ignored: kill -INT still stops
    the bench and prints how to resume it (interrupted_bench asserts both)."""
    released = threading.Event()
    with FakeLLMServer(responder=answering(released)) as server:
        _, stderr = interrupted_bench(
            tmp_path, server.openai_base_url, released,
            preexec=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )  # fmt: skip
    assert "deepledger resume " in stderr and "Traceback" not in stderr
