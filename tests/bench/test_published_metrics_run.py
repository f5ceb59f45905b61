"""`deepledger bench benchmark=simpleqa` end to end on the fake model server: the run
prints SimpleQA's F1 and not-attempted rate and writes them to summary.json."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.cli import ROOT
from tests.support.doubles.bench_model import respond_http
from tests.support.doubles.fake_llm_server import FakeLLMServer, RecordedRequest, Reply

# The fake agent answers Paris, Lion and 42 (tests/support/doubles/bench_model.py).
TASKS = [
    {"task_id": "same", "task_question": "EASY: What is the capital of France?",
     "ground_truth": "Paris"},  # the same text: correct without asking the judge
    {"task_id": "wrong", "task_question": "EASY: Which animal is it?", "ground_truth": "Tiger"},
    {"task_id": "right", "task_question": "EASY: Anything at all?", "ground_truth": "forty-two"},
    {"task_id": "vague", "task_question": "EASY: Anything else?", "ground_truth": "forty-three"},
]  # fmt: skip
# SimpleQA's grader answers with a letter: A CORRECT, B INCORRECT, C NOT_ATTEMPTED.
VERDICTS = {"Tiger": "B", "forty-two": "A", "forty-three": "C"}


def _judge_or_agent(request: RecordedRequest) -> Reply:
    if "Gold target" in str(request.messages[-1].get("content")):  # the simpleqa rule's prompt
        asked = str(request.messages[-1].get("content"))
        return Reply(next(v for truth, v in VERDICTS.items() if truth in asked))
    return respond_http(request)


def test_a_simpleqa_run_prints_f1_and_the_not_attempted_rate(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    data = tmp_path / "data"
    data.mkdir()
    (data / "standardized_data.jsonl").write_text("\n".join(json.dumps(t) for t in TASKS))
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=_judge_or_agent) as server:
        judge = (conf / "llm" / "openai_compatible.yaml").read_text()
        (conf / "llm" / "fake_judge.yaml").write_text(
            judge.replace("http://127.0.0.1:8000/v1", server.openai_base_url)
        )
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "deepledger",
                "bench",
                "benchmark=simpleqa",
                "benchmark.data.source=jsonl",
                f"benchmark.data.data_dir={data}",
                "benchmark.judge.llm=fake_judge",
                "llm=openai_compatible",
                f"llm.base_url={server.openai_base_url}",
                "agent.main_agent.tools=[]",
                "agent.max_final_answer_retries=1",
                "benchmark.execution.report=false",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "DEEPLEDGER_CONFIG_DIR": str(conf)},
        )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "accuracy       0.500 (2/4)" in done.stdout, done.stdout
    # F1 = 2 · (2/3) · (2/4) / (2/3 + 2/4)
    assert "SimpleQA       F1 0.571 · accuracy given attempted 0.667 (2/3)" in done.stdout
    assert "not attempted 0.250 (1/4)" in done.stdout
    simpleqa = json.loads((run_dir / "summary.json").read_text())["protocol_metrics"]["simpleqa"]
    assert (simpleqa["correct"], simpleqa["incorrect"], simpleqa["not_attempted"]) == (2, 1, 1)
