"""stdout carries what a script reads (``deepledger run``'s answer block); warnings and
errors the run logs go to stderr, and to the run directory's deepledger.log."""

from __future__ import annotations

from tests.support.cli import deepledger


def test_deepledger_run_prints_only_the_answer_block_on_stdout_when_a_warning_is_logged(
    tmp_path,
):
    from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply

    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=lambda request: Reply("\\boxed{42}")) as server:
        run = deepledger(
            "run",
            "question=What is six times seven?",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            "agent.main_agent.tools=[reader]",  # a reader that cannot start: a warning
            f"benchmark.data.data_dir={tmp_path / 'no-such-folder'}",
            f"hydra.run.dir={run_dir}",
            cwd=tmp_path,
        )
    assert run.returncode == 0, run.stderr
    assert "tool server 'reader' failed to start" in run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "Answer: 42"
    assert lines[1].startswith("(") and lines[-1] == f"Log: {run_dir / 'journal.jsonl'}"
    assert len(lines) == 3 and "WARNING" not in run.stdout
    assert "tool server 'reader' failed to start" in (run_dir / "deepledger.log").read_text()
    assert (run_dir / ".hydra" / "config.yaml").is_file()
