"""The judge as its own endpoint: its preset found on Hydra's search path (``-cd``),
its model and server given apart (``benchmark.judge.model``, ``benchmark.judge.base_url``),
and a judge model that fails leaving answers unjudged, never an agent error; a resume
judges them from their recorded answers without running the agent again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from deepledger.bench.judge import LLMJudge
from deepledger.bench.progress import Progress
from deepledger.bench.runner import BenchmarkRunner
from deepledger.bench.services import PresetPath, judge_llm_config, load_llm_preset
from deepledger.bench.tasks import load_tasks
from deepledger.config import JudgeConfig
from deepledger.errors import ConfigError, EndpointUnreachableError, TransientLLMError
from deepledger.llm.scripted import ScriptedLLM
from deepledger.store.run_store import RunStore
from deepledger.tools.pool import ToolManager
from tests.support.bench import arithmetic_suite, results
from tests.support.cli import ROOT
from tests.support.config import composed
from tests.support.doubles.fake_llm_server import FakeLLMServer, Fault, RecordedRequest, Reply

TASKS = 3
# A judge preset of the user's own, in a folder of their own: no retry, so a failing
# judge fails at once.
MY_JUDGE = """\
provider: openai
model_name: my-judge-model
base_url: http://127.0.0.1:9/v1
api_key_required: false
max_context_length: 8192
max_tokens: 256
temperature: 0.0
retry:
  max_attempts: 1
  initial_wait_seconds: 0
  jitter_seconds: 0
  unreachable_after_seconds: 0
"""


def user_conf(folder: Path) -> Path:
    (folder / "llm").mkdir(parents=True)
    (folder / "llm" / "myjudge.yaml").write_text(MY_JUDGE)
    return folder


def agent_reply(request: RecordedRequest) -> Reply:
    """``What is n + n?`` answered in words, so that the judge model is asked."""
    n = int(re.search(r"What is (\d+) \+", str(request.messages[1]["content"]))[1])
    return Reply(f"\\boxed{{{2 * n} exactly}}")


def bench(agent: str, data: Path, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "deepledger", "bench",
        f"benchmark.data.data_dir={data}", "benchmark.name=tiny",
        "llm=openai_compatible", f"llm.base_url={agent}",
        "agent.main_agent.tools=[]", "agent.max_final_answer_retries=1",
        "benchmark.judge.name=llm", "benchmark.execution.max_concurrent=1",
        f"hydra.run.dir={run_dir}", *extra,
    ]  # fmt: skip
    env = {**os.environ, "DEEPLEDGER_PLAIN_PROGRESS": "1"}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("where", ["-cd", "hydra.searchpath"])
def test_a_preset_in_a_config_dir_is_found_and_model_and_base_url_replace_its_own(tmp_path, where):
    conf = user_conf(tmp_path / "mine")
    found_by = ["-cd", str(conf)] if where == "-cd" else [f"hydra.searchpath=[file://{conf}]"]
    data, run_dir = arithmetic_suite(tmp_path / "data", TASKS), tmp_path / "run"
    with (
        FakeLLMServer(responder=agent_reply) as agent,
        FakeLLMServer(responder=lambda r: Reply("CORRECT\nReason: the same number.")) as judge,
    ):
        run = bench(
            agent.openai_base_url, data, run_dir, *found_by, "benchmark.judge.llm=myjudge",
            "benchmark.judge.model=official-judge-2025",
            f"benchmark.judge.base_url={judge.openai_base_url}",
        )  # fmt: skip
        asked = [r.body["model"] for r in judge.requests]
    assert run.returncode == 0, run.stderr
    assert asked == ["official-judge-2025"] * TASKS  # the judge's own server and model
    assert all(r["correct"] for r in results(run_dir))


def test_a_missing_preset_exits_2_naming_every_place_looked(tmp_path):
    conf = user_conf(tmp_path / "mine")
    data, run_dir = arithmetic_suite(tmp_path / "data", TASKS), tmp_path / "run"
    run = bench(
        "http://127.0.0.1:9/v1", data, run_dir, "-cd", str(conf), "benchmark.judge.llm=nosuch"
    )
    assert run.returncode == 2, run.stderr
    assert "benchmark.judge.llm='nosuch' is not an llm preset" in run.stderr
    assert str(conf / "llm" / "nosuch.yaml") in run.stderr  # the -cd folder
    assert str(ROOT / "conf" / "llm" / "nosuch.yaml") in run.stderr  # the packaged one
    assert "myjudge" in run.stderr and "Traceback" not in run.stderr


def test_a_preset_path_looks_in_order_and_says_where_it_looked(tmp_path):
    mine = user_conf(tmp_path / "mine")
    (mine / "llm" / "openai.yaml").write_text(MY_JUDGE)  # shadows the packaged one
    presets = PresetPath((mine, ROOT / "conf"))
    assert load_llm_preset("openai", presets).model_name == "my-judge-model"
    assert load_llm_preset("anthropic", presets).provider == "anthropic"
    with pytest.raises(ConfigError) as refused:
        load_llm_preset("nosuch", presets, "tools.extract_llm")
    assert str(mine / "llm" / "nosuch.yaml") in str(refused.value)
    assert "tools.extract_llm='nosuch'" in str(refused.value)


def test_a_failing_judge_leaves_answers_unjudged_and_a_resume_judges_them(tmp_path):
    conf = user_conf(tmp_path / "mine")
    data, run_dir = arithmetic_suite(tmp_path / "data", TASKS), tmp_path / "run"
    judge_up = False

    def judge(request: RecordedRequest) -> Reply | Fault:
        return Reply("CORRECT\nReason: the same number.") if judge_up else Fault(status=500)

    with FakeLLMServer(responder=agent_reply) as agent, FakeLLMServer(responder=judge) as server:
        args = ("-cd", str(conf), "benchmark.judge.llm=myjudge")
        url = f"benchmark.judge.base_url={server.openai_base_url}"
        first = bench(agent.openai_base_url, data, run_dir, *args, url)
        agent_calls = len(agent.requests)
        summary = json.loads((run_dir / "summary.json").read_text())
        judge_up = True
        resumed = bench(agent.openai_base_url, data, run_dir, *args, url)
        agent_calls_after = len(agent.requests)
    assert first.returncode == 0, first.stderr  # the run is not failed ...
    recorded = results(run_dir)[:TASKS]
    assert all(r["status"] == "finished" and r["correct"] is None for r in recorded)
    assert all(r["judgement"]["unjudged"] for r in recorded)
    assert all("the judge's model failed" in r["judgement"]["reason"] for r in recorded)
    assert all(r["final_answer"].endswith("exactly") for r in recorded)  # answers kept
    # ... and says so loudly, with the way to judge them
    assert f"{TASKS} tasks were left unjudged" in first.stderr
    assert f"deepledger judge {run_dir}" in first.stderr
    assert summary["tasks"]["unjudged"] == TASKS and summary["tasks"]["judged"] == 0
    # The resume judged the recorded answers; the agent was not asked again.
    assert resumed.returncode == 0, resumed.stderr
    assert agent_calls_after == agent_calls
    latest = {r["task_id"]: r for r in results(run_dir)}
    assert all(r["correct"] is True for r in latest.values())
    assert "unjudged" not in resumed.stderr


async def test_an_unreachable_judge_is_no_agent_error_and_the_other_tasks_go_on(tmp_path):
    cfg = composed(
        f"benchmark.data.data_dir={arithmetic_suite(tmp_path / 'data', TASKS)}",
        "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1",
        "benchmark.judge.llm=openai",
        "benchmark.execution.max_concurrent=1",
        "benchmark.execution.pass_at_k=3",
    )
    agent = ScriptedLLM(responder=lambda messages, tools: "\\boxed{seven}")
    down = EndpointUnreachableError("connection refused at http://127.0.0.1:9/v1")
    flaky = TransientLLMError("HTTP 503 after 5 attempts")
    judge_llm = ScriptedLLM([down, flaky, down], model="judge-model")
    tasks = load_tasks(cfg.benchmark.data).tasks

    async def run(judge: LLMJudge) -> None:
        store = RunStore(tmp_path / "run")
        runner = BenchmarkRunner(
            cfg, llm=agent, tools=ToolManager({}), run_dir=store, judge=judge,
            progress=Progress(plain=True),
        )  # fmt: skip
        try:
            await runner.run(tasks)
        finally:
            store.close()

    await run(LLMJudge(judge_llm))
    first = {r["task_id"]: r for r in results(tmp_path / "run")}
    assert [r["status"] for r in first.values()] == ["finished"] * TASKS
    assert all(r["judgement"]["unjudged"] and r["correct"] is None for r in first.values())
    # pass@3: an unjudged attempt is not taken as wrong, so no other attempt ran
    assert all(len(r["attempts"]) == 1 for r in first.values())
    asked = len(agent.calls)
    verdicts = ScriptedLLM(
        responder=lambda messages, tools: "INCORRECT\nReason: no.", model="judge-model"
    )
    await run(LLMJudge(verdicts))
    latest = {r["task_id"]: r for r in results(tmp_path / "run")}
    assert all(r["correct"] is False for r in latest.values())
    assert all(r["attempts"][0]["judgement"].get("unjudged") is None for r in latest.values())
    # Judged wrong now, so pass@3's next attempts ran; the first answer was not redone.
    assert all(len(r["attempts"]) == 3 for r in latest.values())
    per_attempt = asked // TASKS
    assert len(verdicts.calls) == 3 * TASKS
    assert len(agent.calls) == asked + 2 * TASKS * per_attempt


def test_the_judges_base_url_is_checked_as_llm_base_url_is(tmp_path):
    presets = PresetPath((user_conf(tmp_path / "mine"), ROOT / "conf"))
    bad = JudgeConfig(name="llm", llm="myjudge", base_url="127.0.0.1:8000/v1")
    with pytest.raises(ConfigError) as refused:
        judge_llm_config(bad, presets)
    message = str(refused.value)
    assert "benchmark.judge.base_url=127.0.0.1:8000/v1" in message
    assert "is not an http(s) URL" in message
    good = JudgeConfig(name="llm", llm="myjudge", model="o3-mini-2025-01-31")
    pinned = judge_llm_config(good, presets)
    assert (pinned.model_name, pinned.base_url) == ("o3-mini-2025-01-31", "http://127.0.0.1:9/v1")


def test_the_judges_model_and_server_are_part_of_its_identity():
    from deepledger.bench.inputs import judge_identity
    from deepledger.config import LLMConfig

    model = LLMConfig(provider="openai", model_name="m", max_context_length=8192)
    plain = judge_identity(JudgeConfig(name="llm", llm="x"), model)
    served = judge_identity(JudgeConfig(name="llm", llm="x", base_url="http://h:1/v1"), model)
    assert "base_url" not in plain  # earlier runs' digests stay as they were
    assert served == plain | {"base_url": "http://h:1/v1"}
