"""`benchmark.execution.report`: the default run writes report.html, `false` writes none."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from deepledger.testing.fake_llm_server import FakeLLMServer, Reply
from tests.report.helpers import embedded

ROOT = Path(__file__).resolve().parents[2]


def bench(
    tmp_path: Path, base_url: str, name: str, *extra: str, tasks: int = 1
) -> tuple[Path, str]:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    lines = [
        json.dumps({"task_id": f"t{n}", "task_question": f"Task {n}: six times seven?"})
        for n in range(1, tasks + 1)
    ]
    (data / "suite.jsonl").write_text("\n".join(lines) + "\n")
    run_dir = tmp_path / name
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepledger",
            "bench",
            f"benchmark.data.data_dir={data}",
            "benchmark.data.metadata_file=suite.jsonl",
            "benchmark.name=switch",
            "llm=openai_compatible",
            f"llm.base_url={base_url}",
            "agent.main_agent.tools=[]",
            f"hydra.run.dir={run_dir}",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return run_dir, done.stdout


@pytest.mark.parametrize("setting", ["default", "report=false"])
def test_the_report_switch(tmp_path, setting):
    extra = ["benchmark.execution.report=false"] if setting == "report=false" else []
    with FakeLLMServer(responder=lambda request: Reply(text="It is \\boxed{42}.")) as server:
        run_dir, stdout = bench(tmp_path, server.openai_base_url, "run", *extra)
    assert json.loads((run_dir / "summary.json").read_text())["tasks"]["finished"] == 1
    report = run_dir / "report.html"
    if extra:
        assert not report.exists() and "Report:" not in stdout
        return
    assert f"Report: {report}" in stdout
    data, trajectories = embedded(report)
    assert [t["id"] for t in data["tasks"]] == ["t1"] and len(trajectories) == 1
    assert set(data["charts"]) == {"prompt_run", "prompt_task", "cumulative", "turns"}
    assert "vegaEmbed" in report.read_text()


def test_report_false_writes_no_live_report_either(tmp_path):
    """The second task answers after 3 s while the live report is due every 0.1 s once
    the first has finished: only benchmark.execution.report=false keeps it unwritten."""

    def answer(request):
        slow = "Task 2" in json.dumps(request.body["messages"])
        return Reply(text="It is \\boxed{42}.", delay=3.0 if slow else 0.0)

    with FakeLLMServer(responder=answer) as server:
        run_dir, stdout = bench(
            tmp_path,
            server.openai_base_url,
            "run",
            "benchmark.execution.report=false",
            "benchmark.execution.report_every_seconds=0.1",
            "benchmark.execution.max_concurrent=1",
            tasks=2,
        )
    assert json.loads((run_dir / "summary.json").read_text())["tasks"]["finished"] == 2
    assert not (run_dir / "report.html").exists() and "Report:" not in stdout
