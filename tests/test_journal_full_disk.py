"""A full disk while a journal or ``.hydra/`` is written: one clear message, exit 2, no
torn line and no traceback.

The disk is a small tmpfs mounted for the test (the machine runs as root; without the
right to mount, the tests skip and say so).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from deepledger.errors import RunDirectoryError
from tests.support.cli import deepledger
from tests.support.disks import whole_lines


def test_deepledger_run_on_a_disk_that_fills_exits_2_with_one_message(small_disk, tmp_path):
    from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply

    huge = "filler " * 450_000 + "\\boxed{42}"  # 3 MB: more than the disk has left
    with FakeLLMServer(responder=lambda request: Reply(huge)) as server:
        run = deepledger(
            "run",
            "question=What is six times seven?",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            "agent.main_agent.tools=[]",
            f"hydra.run.dir={small_disk / 'run'}",
            cwd=tmp_path,
        )
    assert run.returncode == 2, run.stderr
    assert "the disk is full" in run.stderr and "free some space" in run.stderr
    assert "Traceback" not in run.stderr
    whole_lines(small_disk / "run" / "journal.jsonl")


def test_hydra_files_the_disk_refuses_stop_the_job_with_the_usage_code(monkeypatch, tmp_path):
    from deepledger.bench import hydra_hooks

    def full_disk(root, config):
        raise RunDirectoryError(f"Could not write {root}/.hydra: the disk is full.")

    monkeypatch.setattr(hydra_hooks, "claim", lambda root, key: None)
    monkeypatch.setattr(hydra_hooks, "write_hydra_files", full_disk)
    config = SimpleNamespace(
        hydra=SimpleNamespace(
            runtime=SimpleNamespace(output_dir=str(tmp_path)), mode=SimpleNamespace(name="RUN")
        )
    )
    with pytest.raises(SystemExit) as stopped:
        hydra_hooks.RunDirectoryGuard().on_job_start(config)
    assert stopped.value.code == 2
