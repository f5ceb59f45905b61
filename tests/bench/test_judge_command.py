"""``deepledger judge RUN_DIR``: a finished run's answers graded again by another judge,
without the agent, into a judging of its own with its agreement with the run's judge."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from deepledger.bench.judging import cohen_kappa
from deepledger.records.results import AgreementTable, VerdictRow
from tests.support.bench import results
from tests.support.cli import ROOT
from tests.support.doubles.fake_llm_server import FakeLLMServer, Fault, RecordedRequest, Reply

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
# The run's own judge finds t1-t5 correct; the second judge t1-t3 and t6. By hand, on
# t1-t8 (t9 has no ground truth): a = 3 (both correct), b = 2 (run only), c = 1 (second
# only), d = 2 (neither); p_o = 5/8, p_e = 5/8 * 4/8 + 3/8 * 4/8 = 1/2, kappa = 1/4.
RUN_SAYS_CORRECT = {1, 2, 3, 4, 5}
SECOND_SAYS_CORRECT = {1, 2, 3, 6}


def data(folder: Path) -> Path:
    folder.mkdir()
    lines = [
        {"task_id": f"t{n}", "task_question": f"What is {n} + {n}?", "ground_truth": str(2 * n)}
        for n in range(1, 9)
    ]
    lines.append({"task_id": "t9", "task_question": "What is 9 + 9?", "ground_truth": None})
    (folder / "standardized_data.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    return folder


def number(request: RecordedRequest) -> int:
    return int(re.search(r"What is (\d+) \+", str(request.messages[1]["content"]))[1])


def agent(request: RecordedRequest) -> Reply:
    return Reply(f"\\boxed{{{2 * number(request)} exactly}}")  # in words: the judge is asked


def judge_saying(correct: set[int], down: set[int] = frozenset()):
    def reply(request: RecordedRequest) -> Reply | Fault:
        n = number(request)
        if n in down:
            return Fault(status=500)
        return Reply("CORRECT\nReason: same." if n in correct else "INCORRECT\nReason: no.")

    return reply


def deepledger(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEEPLEDGER_PLAIN_PROGRESS": "1"}
    command = [sys.executable, "-m", "deepledger", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def finished_run(tmp_path: Path, agent_url: str, judge_url: str) -> tuple[Path, Path]:
    conf, run_dir = tmp_path / "mine", tmp_path / "run"
    (conf / "llm").mkdir(parents=True)
    (conf / "llm" / "myjudge.yaml").write_text(MY_JUDGE)
    run = deepledger(
        "bench", f"benchmark.data.data_dir={data(tmp_path / 'data')}", "benchmark.name=tiny",
        "llm=openai_compatible", f"llm.base_url={agent_url}", "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1", "benchmark.judge.name=llm",
        "-cd", str(conf), "benchmark.judge.llm=myjudge",
        f"benchmark.judge.base_url={judge_url}", f"hydra.run.dir={run_dir}",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return conf, run_dir


def test_kappa_of_a_2x2_table_by_hand():
    table = AgreementTable(correct=VerdictRow(correct=3, incorrect=2))
    table.incorrect = VerdictRow(correct=1, incorrect=2)
    assert cohen_kappa(table) == 0.25
    table.incorrect.incorrect = 1  # one fewer: p_o = 4/7, p_e = 26/49, kappa = 2/23
    assert cohen_kappa(table) == round(2 / 23, 4)
    assert cohen_kappa(AgreementTable(correct=VerdictRow(correct=4))) is None  # p_e = 1
    assert cohen_kappa(AgreementTable()) is None


def test_a_second_judge_grades_the_run_beside_its_own_and_resumes(tmp_path):
    second_down = {8}
    with (
        FakeLLMServer(responder=agent) as agent_server,
        FakeLLMServer(responder=judge_saying(RUN_SAYS_CORRECT)) as first,
        FakeLLMServer(
            responder=lambda r: judge_saying(SECOND_SAYS_CORRECT, second_down)(r)
        ) as second,
    ):
        conf, run_dir = finished_run(tmp_path, agent_server.openai_base_url, first.openai_base_url)
        own = (run_dir / "benchmark_results.jsonl").read_bytes()
        agent_calls = len(agent_server.requests)
        judge_args = (
            "judge", str(run_dir), "-cd", str(conf), "--name", "second",
            f"benchmark.judge.base_url={second.openai_base_url}",
            "benchmark.judge.model=second-judge", "benchmark.execution.max_concurrent=3",
        )  # fmt: skip
        judged = deepledger(*judge_args)
        asked_first = len(second.requests)
        second_down.clear()
        resumed = deepledger(*judge_args)
        asked_again = len(second.requests) - asked_first
        assert len(agent_server.requests) == agent_calls  # the agent was never asked
    folder = run_dir / "judgings" / "second"
    # t8's judge failed: unjudged, left out of the agreement, and said.
    assert judged.returncode == 0, judged.stderr
    assert "1 task was left unjudged" in judged.stderr
    assert "[8/9]" in judged.stderr or "[9/9]" in judged.stderr  # progress on stderr
    assert "Cohen's kappa 0.087" in judged.stdout, judged.stdout
    assert asked_first == 8 and {r.body["model"] for r in second.requests} == {"second-judge"}
    # The resume asked only about t8.
    assert resumed.returncode == 0, resumed.stderr
    assert asked_again == 1
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["tasks"] == 9 and summary["judged"] == 8 and summary["ungraded"] == 1
    assert summary["correct"] == 4 and summary["unjudged"] == 0
    assert summary["judge_tokens"]["input"] > 0  # every call the judging made, in all
    agreement = summary["agreement"]
    assert agreement["kappa"] == 0.25 and agreement["percent"] == 62.5
    assert agreement["compared"] == 8 and agreement["agree"] == 5
    assert agreement["table"] == {
        "correct": {"correct": 3, "incorrect": 2},
        "incorrect": {"correct": 1, "incorrect": 2},
    }
    assert agreement["left_out_unjudged"] == 0 and agreement["left_out_ungraded"] == 1
    assert "62.5% (5/8)" in resumed.stdout and "Cohen's kappa 0.250" in resumed.stdout
    lines = {r["task_id"]: r for r in results(folder)}  # the newest line of each task
    assert lines["t6"]["correct"] is True and lines["t4"]["correct"] is False
    assert lines["t9"]["correct"] is None
    # The run's own results are untouched.
    assert (run_dir / "benchmark_results.jsonl").read_bytes() == own


def test_another_judge_under_a_judgings_name_and_a_bad_key_are_refused(tmp_path):
    with (
        FakeLLMServer(responder=agent) as agent_server,
        FakeLLMServer(responder=judge_saying(RUN_SAYS_CORRECT)) as first,
    ):
        conf, run_dir = finished_run(tmp_path, agent_server.openai_base_url, first.openai_base_url)
        url = f"benchmark.judge.base_url={first.openai_base_url}"
        same = deepledger("judge", str(run_dir), "-cd", str(conf), url)
        other = deepledger(
            "judge", str(run_dir), "-cd", str(conf), url, "--name", "llm-default-my-judge-model",
            "benchmark.judge.model=other",
        )  # fmt: skip
    bad_key = deepledger("judge", str(run_dir), "llm.model_name=x")
    missing = deepledger("judge", str(run_dir), "benchmark.judge.llm=nosuch")
    not_a_run = deepledger("judge", str(tmp_path / "nowhere"))
    helped = deepledger("judge", "--help")
    assert same.returncode == 0, same.stderr
    # The same judge as the run's: full agreement; the default name says the judge.
    assert (
        "100.0% (8/8)" in same.stdout
        and (run_dir / "judgings" / "llm-default-my-judge-model").is_dir()
    )
    assert other.returncode == 2 and "was made by another judge" in other.stderr
    assert bad_key.returncode == 2 and "cannot change 'llm.model_name=x'" in bad_key.stderr
    assert missing.returncode == 2 and "'nosuch' is not an llm preset" in missing.stderr
    assert not_a_run.returncode == 2 and "nowhere does not exist" in not_a_run.stderr
    assert helped.returncode == 0 and "usage: deepledger judge RUN_DIR" in helped.stdout
    assert "Traceback" not in other.stderr + bad_key.stderr + missing.stderr + not_a_run.stderr


def test_a_judging_computes_the_runs_published_metrics_from_its_own_verdicts():
    from deepledger.bench.judging import JudgingSetup, format_judging, judging_summary
    from deepledger.config import JudgeConfig
    from deepledger.records.results import JudgedAnswer, JudgementRecord, TaskRecord

    # The run's judge said all four correct; the judging says 1 correct, 1 incorrect and
    # 2 not attempted: SimpleQA's numbers must be the judging's, not the run's.
    said = {"a": "CORRECT", "b": "INCORRECT", "c": "NOT_ATTEMPTED", "d": "NOT_ATTEMPTED"}
    records = [
        TaskRecord(
            task_id=task,
            ground_truth="x",
            final_answer="x",
            correct=True,
            judgement=JudgementRecord(correct=True, judge="llm", label="CORRECT"),
        )
        for task in said
    ]
    judged = {
        task: JudgedAnswer(
            task_id=task,
            correct=label == "CORRECT",
            judgement=JudgementRecord(correct=label == "CORRECT", judge="llm", label=label),
        )
        for task, label in said.items()
    }
    setup = JudgingSetup(JudgeConfig(name="llm"), 1, ("simpleqa",), ())
    summary = judging_summary("second", {}, records, judged, setup)
    simpleqa = summary.protocol_metrics.simpleqa
    assert (simpleqa.correct, simpleqa.incorrect, simpleqa.not_attempted) == (1, 1, 2)
    assert simpleqa.accuracy_given_attempted == 0.5 and simpleqa.not_attempted_rate == 0.5
    assert "SimpleQA" in format_judging(summary, Path("j"))
    # Without metrics chosen by the run, the judging has none either.
    assert judging_summary("second", {}, records, judged).protocol_metrics is None


async def test_a_judging_grades_each_tasks_first_attempt_as_accuracy_counts_it():
    from deepledger.bench.judge import make_judge
    from deepledger.bench.judging import agreement, judge_answer
    from deepledger.records.results import AttemptRecord, JudgedAnswer, JudgementRecord, TaskRecord

    # Wrong first, right on the second attempt: pass@1 counts the first answer; judging
    # the last one would grade pass@k as if it were accuracy.
    wrong = JudgementRecord(correct=False, judge="exact")
    right = JudgementRecord(correct=True, judge="exact")
    record = TaskRecord(
        task_id="t",
        ground_truth="Paris",
        final_answer="Paris",
        correct=True,
        judgement=right,
        attempts=[
            AttemptRecord(attempt=1, final_answer="Lyon", correct=False, judgement=wrong),
            AttemptRecord(attempt=2, final_answer="Paris", correct=True, judgement=right),
        ],
    )
    judgement = await judge_answer(make_judge("exact"), record)
    assert judgement.correct is False and "Lyon" in judgement.reason
    line = JudgedAnswer(task_id="t", final_answer="Lyon", correct=False, judgement=wrong)
    agreed = agreement([record], {"t": line})
    assert agreed.table.incorrect.incorrect == 1 and agreed.kappa is None  # one task: agree
