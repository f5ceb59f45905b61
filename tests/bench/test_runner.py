"""The benchmark runner with the scripted model: retries, post-mortems, pass@k, resume."""

from __future__ import annotations

from pathlib import Path

from deepledger.bench.judge import make_judge
from deepledger.bench.progress import Progress
from deepledger.bench.rundir import RunDirectory, read_jsonl
from deepledger.bench.runner import BenchmarkRunner
from deepledger.bench.tasks import load_tasks
from deepledger.llm.scripted import ScriptedLLM
from deepledger.messages import MessageKind
from deepledger.tools.manager import ToolManager
from tests.bench.scripted_model import decide
from tests.test_config import composed

SUITE = Path(__file__).with_name("suite")


def config(*overrides: str):
    return composed(
        f"benchmark.data.data_dir={SUITE}",
        "agent.main_agent.tools=[]",
        "agent.max_final_answer_retries=1",
        *overrides,
    )


def model(decider=decide) -> ScriptedLLM:
    return ScriptedLLM(responder=lambda messages, tools: decider([m.content for m in messages]))


async def run(cfg, llm, root: Path, only: tuple[str, ...] = ()):
    tasks = [t for t in load_tasks(cfg.benchmark.data).tasks if not only or t.task_id in only]
    runner = BenchmarkRunner(
        cfg,
        llm=llm,
        tools=ToolManager({}),
        run_dir=RunDirectory(root),
        judge=make_judge("normalized"),
        progress=Progress(plain=True),
    )
    return await runner.run(tasks)


def task_texts(llm: ScriptedLLM) -> list[str]:
    return [c.messages[1].content for c in llm.calls if c.messages[1].kind is MessageKind.TASK]


async def test_the_format_retry_loop_carries_post_mortems_to_the_final_retry(tmp_path):
    llm = model()
    (record,) = await run(config("agent.context_compress_limit=2"), llm, tmp_path, ("hard #2",))
    (attempt,) = record["attempts"]
    retries = attempt["retries"]
    assert [r["carried_post_mortems"] for r in retries] == [0, 1, 2]
    assert [r["final_answer"] for r in retries] == [None, None, "Danube"]
    assert [r["failure_type"] for r in retries] == ["format_missed", "format_missed", None]
    assert (record["final_answer"], record["correct"]) == ("Danube", True)
    assert attempt["carried_post_mortems"] == 2
    last_text = task_texts(llm)[-1]
    assert last_text.count("=== Earlier attempts") == 1
    assert "finding-1" in last_text and "finding-2" in last_text
    assert record["turns"] == 3 and record["usage"]["input_tokens"] > 0


async def test_without_context_management_one_run_and_no_post_mortem(tmp_path):
    llm = model()
    (record,) = await run(config("agent.context_compress_limit=0"), llm, tmp_path, ("hard #2",))
    (attempt,) = record["attempts"]
    assert len(attempt["retries"]) == 1 and attempt["retries"][0]["post_mortem"] is None
    assert record["final_answer"] is None and record["correct"] is False


async def test_pass_at_k_stops_at_the_first_correct_attempt(tmp_path):
    answers = iter(["\\boxed{Lyon}", "\\boxed{Paris}", "\\boxed{never asked}"])

    def decider(contents):
        return next(answers) if "The work on this task is over" in contents[-1] else "Hmm."

    cfg = config("benchmark.execution.pass_at_k=3")
    (record,) = await run(cfg, model(decider), tmp_path, ("easy/1",))
    assert [a["correct"] for a in record["attempts"]] == [False, True]
    assert record["correct"] is True


async def test_tasks_without_ground_truth_get_one_unjudged_attempt(tmp_path):
    cfg = config("benchmark.execution.pass_at_k=3")
    (record,) = await run(cfg, model(), tmp_path, ("open-4",))
    assert len(record["attempts"]) == 1 and record["correct"] is None
    assert record["judgement"]["reason"] == "no ground truth"


async def test_a_resumed_task_continues_after_its_finished_retries(tmp_path):
    cfg = config("agent.context_compress_limit=2")
    first = model()
    await run(cfg, first, tmp_path, ("hard #2",))
    # Pretend the run was killed during the task's second retry: keep only the first
    # retry's progress line and no result line.
    rundir = RunDirectory(tmp_path)
    progress = rundir.task_dir("hard #2") / "progress.jsonl"
    lines = progress.read_text().splitlines()
    progress.write_text(lines[0] + "\n")
    rundir.results_path.unlink()
    second = model()
    (record,) = await run(cfg, second, tmp_path, ("hard #2",))
    texts = task_texts(second)
    assert texts and all("[Attempt 1]" in t for t in texts)  # retry 0 was not redone
    assert [r["carried_post_mortems"] for r in record["attempts"][0]["retries"]] == [0, 1, 2]
    assert record["final_answer"] == "Danube"
    interrupted = list(rundir.task_dir("hard #2").glob("attempt-1-retry-1.interrupted-*.jsonl"))
    assert interrupted  # the partial journal was kept


async def test_finished_tasks_are_not_run_again(tmp_path):
    cfg = config()
    await run(cfg, model(), tmp_path, ("easy/1", "open-4"))
    again = model()
    records = await run(cfg, again, tmp_path)
    assert [r["task_id"] for r in records] == ["easy/1", "hard #2", "näive 3", "open-4"]
    assert not any("France" in t or "Anything" in t for t in task_texts(again))
    assert len(read_jsonl(tmp_path / "benchmark_results.jsonl")) == 4


async def test_a_failing_task_is_an_error_record_and_the_suite_goes_on(tmp_path):
    def decider(contents):
        if "France" in contents[1]:
            raise RuntimeError("the model server fell over")
        return decide(contents)

    records = await run(config(), model(decider), tmp_path, ("easy/1", "open-4"))
    by_id = {r["task_id"]: r for r in records}
    assert by_id["easy/1"]["status"] == "error" and "fell over" in by_id["easy/1"]["error"]
    assert by_id["easy/1"]["correct"] is False  # counts as wrong, not as skipped
    assert by_id["open-4"]["status"] == "finished"
