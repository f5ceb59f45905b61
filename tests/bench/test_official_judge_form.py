"""`deepledger bench benchmark=browsecomp` (and the hle preset) end to end, with a judge
that answers in the official graders' form: "correct: no" must count as incorrect."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT
from tests.support.doubles.bench_model import respond_http
from tests.support.doubles.fake_llm_server import FakeLLMServer, RecordedRequest, Reply

# The official form: the judge never says CORRECT / INCORRECT, only yes / no.
OFFICIAL_NO = (
    "extracted_final_answer: {answer}\n"
    "reasoning: the response's answer is not the correct answer.\n"
    "correct: no\n"
    "confidence: 90"
)


def _tiny_suite(folder: Path) -> Path:
    """Two tasks the fake agent answers with text that differs from the ground truth, so
    the judge model is asked (equal texts are decided before it)."""
    folder.mkdir()
    lines = [
        {"task_id": "t1", "task_question": "EASY: What is the capital of France?",
         "ground_truth": "Lyon"},
        {"task_id": "t2", "task_question": "EASY: Anything at all?", "ground_truth": "41"},
    ]  # fmt: skip
    (folder / "standardized_data.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    return folder


def _judge_or_agent(request: RecordedRequest) -> Reply:
    system = request.messages[0].get("content") or ""
    if "extracted_final_answer" in system:  # the hle and browsecomp prompts: the judge
        return Reply(OFFICIAL_NO.format(answer="Paris"))
    return respond_http(request)


@pytest.mark.parametrize("preset", ["browsecomp", "hle-text-500"])
def test_a_judge_answering_correct_no_scores_zero(tmp_path, preset):
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    run_dir = tmp_path / "run"
    with FakeLLMServer(responder=_judge_or_agent) as server:
        judge = (conf / "llm" / "openai_compatible.yaml").read_text()
        judge = judge.replace("http://127.0.0.1:8000/v1", server.openai_base_url)
        (conf / "llm" / "fake_judge.yaml").write_text(judge)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "deepledger",
                "bench",
                f"benchmark={preset}",
                f"benchmark.data.data_dir={_tiny_suite(tmp_path / 'data')}",
                "benchmark.judge.llm=fake_judge",
                "llm=openai_compatible",
                f"llm.base_url={server.openai_base_url}",
                "agent.main_agent.tools=[]",
                "agent.max_final_answer_retries=1",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "DEEPLEDGER_CONFIG_DIR": str(conf)},
        )
        judged = [r for r in server.requests if "extracted_final_answer" in str(r.messages[0])]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert len(judged) == 2  # both answers went to the judge model
    assert "accuracy       0.000 (0/2)" in done.stdout
    lines = [json.loads(x) for x in (run_dir / "benchmark_results.jsonl").read_text().splitlines()]
    judgements = [r["attempts"][0]["judgement"] for r in lines]
    assert [(j["confidence"], j["extracted_answer"]) for j in judgements] == [(90.0, "Paris")] * 2
