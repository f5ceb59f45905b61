"""A secret given on the command line (``+tools.search.env.SERPER_API_KEY=...``) is
written nowhere: not in ``.hydra/``, the manifest's argv, the report, a sweep's folder
names or ``multirun.yaml``, nor printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply

ROOT = Path(__file__).resolve().parents[2]
CANARY = "sk-CANARY-1234"


def suite(folder: Path) -> Path:
    folder.mkdir()
    task = {"task_id": "t1", "task_question": "What is 1 + 1?", "ground_truth": "2"}
    (folder / "standardized_data.jsonl").write_text(json.dumps(task))
    return folder


def bench(base_url: str, data: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "deepledger", "bench",
        f"benchmark.data.data_dir={data}", "benchmark.name=tiny", "benchmark.judge.name=normalized",
        "llm=openai", "llm.model_name=gpt-4.1-mini", f"llm.base_url={base_url}",
        "agent.main_agent.tools=[]", *extra,
    ]  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "DEEPLEDGER_PLAIN_PROGRESS": "1"}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def files_holding(folder: Path, secret: str) -> list[str]:
    """Every file under ``folder`` whose bytes contain ``secret``, and every path that
    names it."""
    return [
        str(path.relative_to(folder))
        for path in sorted(folder.rglob("*"))
        if secret in str(path.relative_to(folder))
        or (path.is_file() and secret.encode() in path.read_bytes())
    ]


def answer(_request) -> Reply:
    return Reply("\\boxed{2}")


def test_a_secret_override_is_in_no_file_of_the_run_and_not_printed(tmp_path):
    data, run_dir = suite(tmp_path / "data"), tmp_path / "run"
    with FakeLLMServer([], responder=answer) as server:
        run = bench(
            server.openai_base_url,
            data,
            f"+tools.search.env.SERPER_API_KEY={CANARY}",
            "+llm.extra_headers.x-api-key=sk-CANARY-hyphen",
            f"hydra.run.dir={run_dir}",
        )
    assert run.returncode == 0, run.stderr
    assert (run_dir / "report.html").exists() and (run_dir / ".hydra" / "hydra.yaml").exists()
    overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert "SERPER_API_KEY=***" in overrides and "x-api-key=***" in overrides
    for secret in (CANARY, "sk-CANARY-hyphen"):
        assert files_holding(tmp_path, secret) == []
        assert secret not in run.stdout + run.stderr


def test_a_swept_secret_names_no_folder_and_is_in_no_file(tmp_path):
    data, sweep_dir = suite(tmp_path / "data"), tmp_path / "sweep"
    with FakeLLMServer([], responder=answer) as server:
        run = bench(
            server.openai_base_url,
            data,
            "-m",
            f"+tools.search.env.SERPER_API_KEY={CANARY}-a,{CANARY}-b",
            f"hydra.sweep.dir={sweep_dir}",
        )
    assert run.returncode == 0, run.stderr
    jobs = sorted(p.name for p in sweep_dir.iterdir() if p.is_dir())
    assert len(jobs) == 2, jobs
    assert (sweep_dir / "multirun.yaml").exists()
    assert files_holding(tmp_path, CANARY) == []
    assert CANARY not in run.stdout + run.stderr
