"""The installed `deepledger` command, run as a user would."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def deepledger(
    *args: str, env_drop: tuple[str, ...] = (), cwd: Path = ROOT, timeout: float = 120
) -> subprocess.CompletedProcess:
    """The command as a user types it (other tests use it too), its output captured."""
    exe = shutil.which("deepledger", path=str(Path(sys.executable).parent))
    command = [exe] if exe else [sys.executable, "-m", "deepledger"]
    env = {k: v for k, v in os.environ.items() if k not in env_drop}
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


def test_help_lists_the_commands():
    run = deepledger("--help")
    assert run.returncode == 0
    for command in ("bench", "run", "report", "replay"):
        assert f"deepledger {command}" in run.stdout


def test_cfg_job_prints_the_composed_config_with_overrides():
    run = deepledger(
        "bench", "--cfg", "job", "agent.keep_tool_result=5", "agent.context_compress_limit=3"
    )
    assert run.returncode == 0, run.stderr
    assert "keep_tool_result: 5" in run.stdout
    assert "context_compress_limit: 3" in run.stdout
    assert "max_context_length:" in run.stdout


def test_python_dash_m_is_the_same_command():
    run = subprocess.run(
        [sys.executable, "-m", "deepledger", "bench", "--cfg", "job"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "keep_tool_result: -1" in run.stdout


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("agent.keep_tool_reslt=5", "keep_tool_reslt"),
        ("agent.keep_tool_result=all", "agent.keep_tool_result"),
    ],
)
def test_bad_overrides_fail_naming_the_key_without_a_traceback(override, named):
    run = deepledger("bench", "--cfg", "job", override)
    assert run.returncode != 0
    assert named in run.stderr
    assert "Traceback" not in run.stderr


def test_missing_api_key_is_one_paragraph_naming_the_variable(tmp_path):
    run = deepledger(
        "bench",
        "llm=anthropic",
        f"hydra.run.dir={tmp_path}/run",
        env_drop=("ANTHROPIC_API_KEY",),
        cwd=tmp_path,
    )
    assert run.returncode == 2
    assert "ANTHROPIC_API_KEY" in run.stderr
    assert "Traceback" not in run.stderr


def test_max_tokens_above_the_window_is_refused(tmp_path):
    run = deepledger(
        "bench",
        "llm=openai_compatible",
        "llm.max_tokens=9000",
        "llm.max_context_length=4096",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert run.returncode == 2
    assert "llm.max_tokens=9000" in run.stderr and "Traceback" not in run.stderr


def test_unknown_command_is_a_usage_error():
    run = deepledger("benchmark")
    assert run.returncode == 2 and "unknown command" in run.stderr


def test_dotenv_supplies_a_key_but_never_blanks_an_exported_one(tmp_path):
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=from-dotenv\nOPENAI_API_KEY=\n")
    with socket.socket() as probe:  # a closed loopback port: the call fails after the key check
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    offline = ["question=hi", "agent.main_agent.tools=[]", "llm.retry.max_attempts=1"]
    with_dotenv = deepledger(
        "run",
        "llm=anthropic",
        f"llm.base_url={closed}",
        *offline,
        f"hydra.run.dir={tmp_path}/a",
        env_drop=("ANTHROPIC_API_KEY",),
        cwd=tmp_path,
    )
    assert "ANTHROPIC_API_KEY" not in with_dotenv.stderr  # the key check passed
    assert "Could not reach the anthropic server" in with_dotenv.stderr
    os.environ["OPENAI_API_KEY"] = "exported-key"
    try:
        exported = deepledger(
            "run",
            "llm=openai",
            f"llm.base_url={closed}/v1",
            *offline,
            f"hydra.run.dir={tmp_path}/b",
            cwd=tmp_path,
        )
    finally:
        del os.environ["OPENAI_API_KEY"]
    assert "OPENAI_API_KEY" not in exported.stderr, exported.stderr
    assert "Could not reach the openai server" in exported.stderr


def test_unknown_provider_lists_the_choices(tmp_path):
    run = deepledger(
        "bench", "llm=openai_compatible", "llm.provider=gemini", f"hydra.run.dir={tmp_path}/run"
    )
    assert run.returncode == 2
    assert "llm.provider='gemini'" in run.stderr and "anthropic" in run.stderr


def test_run_answers_one_question_against_an_openai_compatible_server(tmp_path):
    from deepledger.testing.fake_llm_server import FakeLLMServer, Reply

    tool_call = (
        "<use_mcp_tool><server_name>time</server_name><tool_name>get_current_time</tool_name>"
        '<arguments>{"timezone": "UTC"}</arguments></use_mcp_tool>'
    )
    replies = [Reply(tool_call), Reply("It is \\boxed{UTC time}."), Reply("\\boxed{UTC time}")]
    with FakeLLMServer(replies) as server:
        run = deepledger(
            "run",
            "question=What time is it in UTC?",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            "agent.main_agent.tools=[time]",
            f"hydra.run.dir={tmp_path}/run",
            cwd=tmp_path,
        )
        server.assert_all_consumed()
        second_request = server.requests[1].messages
    assert run.returncode == 0, run.stderr
    assert "Answer: UTC time" in run.stdout
    assert f"Log: {tmp_path}/run/journal.jsonl" in run.stdout
    assert '"timezone": "UTC"' in second_request[-1]["content"]  # the tool really ran
    events = [json.loads(line)["event"] for line in (tmp_path / "run/journal.jsonl").open()]
    assert events[0] == "task_started" and events[-1] == "task_finished"
    assert "tool_results" in events
