"""The presets for the suites MiroThinker evaluates: names, data folders and judges."""

from __future__ import annotations

import json

import pytest

from deepledger.bench.judge import AimeJudge, LLMJudge, make_judge
from deepledger.bench.judge_rules import LLM_RULES
from deepledger.bench.tasks import load_tasks
from deepledger.config import validate
from deepledger.llm.scripted import ScriptedLLM
from tests.support.config import CONF, composed

# preset (MiroThinker's name) -> (data folder, judge name, llm rule)
PRESETS = {
    "hle-text-500": ("data/hle-text-500", "llm", "hle"),
    "hle-text-2158": ("data/hle-text-2158", "llm", "hle"),
    "browsecomp": ("data/browsecomp", "llm", "browsecomp"),
    "xbench-deepsearch": ("data/xbench-deepsearch", "llm", "xbench"),
    "frames": ("data/frames", "llm", "frames"),
    "gaia-validation-text-103": ("data/gaia-2023-validation-text-103", "llm", "gaia_text"),
    "webwalkerqa": ("data/webwalkerqa", "llm", "gaia_text"),
    "seal-0": ("data/seal-0", "llm", "gaia_text"),
    "deepsearchqa": ("data/deepsearchqa", "llm", "deepsearchqa"),
    "futurex": ("data/futurex", "llm", "gaia_text"),
    "aime2025": ("data/aime2025", "aime", None),
}


def test_every_preset_has_a_file():
    assert set(PRESETS) <= {p.stem for p in (CONF / "benchmark").glob("*.yaml")}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_composes_validates_and_names_a_judge_that_exists(name):
    cfg = composed(f"benchmark={name}")
    validate(cfg)
    folder, judge_name, rule = PRESETS[name]
    bench = cfg.benchmark
    assert bench.name == name
    assert (bench.data.source, bench.data.data_dir) == ("jsonl", folder)
    assert bench.data.metadata_file == "standardized_data.jsonl"
    assert bench.judge.name == judge_name
    judge = make_judge(bench.judge.name, rule=bench.judge.rule, llm=ScriptedLLM([]))
    if rule is None:
        assert isinstance(judge, AimeJudge)
    else:
        assert isinstance(judge, LLMJudge) and judge.rule == rule in LLM_RULES
        assert bench.judge.llm  # a judge model is named, so `bench` can build it


def test_a_mirothinker_command_line_carries_over():
    # The overrides MiroThinker's scripts/run_evaluate_multiple_runs_hle-text-500.sh passes.
    cfg = composed(
        "benchmark=hle-text-500",
        "benchmark.data.metadata_file=standardized_data.jsonl",
        "benchmark.execution.max_tasks=null",
        "benchmark.execution.max_concurrent=10",
        "benchmark.execution.pass_at_k=1",
        "benchmark.data.data_dir=../../data/hle-text-500",
    )
    assert cfg.benchmark.name == "hle-text-500"
    assert cfg.benchmark.data.data_dir == "../../data/hle-text-500"
    assert cfg.benchmark.execution.max_tasks is None


def _write_standardized(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_loads_standardized_jsonl_from_its_default_folder(name, tmp_path, monkeypatch):
    cfg = composed(f"benchmark={name}")
    data = cfg.benchmark.data
    monkeypatch.chdir(tmp_path)  # data_dir is relative to the working directory
    folder = tmp_path / data.data_dir
    _write_standardized(
        folder / data.metadata_file,
        [
            {"task_id": "t1", "task_question": "Q one?", "ground_truth": "42"},
            {"task_id": "t2", "task_question": "Q two?", "ground_truth": None},
            {"task_id": "t3", "task_question": "Q three?", "ground_truth": ["a", "b"],
             "file_name": "files/t3.txt"},
        ],
    )  # fmt: skip
    (folder / "files").mkdir()
    (folder / "files" / "t3.txt").write_text("attached", encoding="utf-8")
    loaded = load_tasks(data)
    assert loaded.problems == []
    assert [(t.task_id, t.question, t.ground_truth) for t in loaded.tasks] == [
        ("t1", "Q one?", "42"),
        ("t2", "Q two?", None),
        ("t3", "Q three?", "a, b"),
    ]
    assert loaded.tasks[2].file_path == str((folder / "files" / "t3.txt").resolve())


def test_other_field_names_map_through_field_mapping(tmp_path):
    cfg = composed(
        "benchmark=deepsearchqa",
        f"benchmark.data.data_dir={tmp_path}",
        "benchmark.data.metadata_file=raw.jsonl",
        "benchmark.data.field_mapping.task_id_field=id",
        "benchmark.data.field_mapping.task_question_field=problem",
        "benchmark.data.field_mapping.ground_truth_field=answer",
    )
    _write_standardized(tmp_path / "raw.jsonl", [{"id": 7, "problem": "Which?", "answer": "x"}])
    (task,) = load_tasks(cfg.benchmark.data).tasks
    assert (task.task_id, task.question, task.ground_truth) == ("7", "Which?", "x")


async def test_aime2025_judges_its_loaded_ground_truth(tmp_path):
    cfg = composed("benchmark=aime2025", f"benchmark.data.data_dir={tmp_path}")
    _write_standardized(
        tmp_path / "standardized_data.jsonl",
        [{"task_id": "I-1", "task_question": "Find n.", "ground_truth": 70}],
    )
    (task,) = load_tasks(cfg.benchmark.data).tasks
    judge = make_judge(cfg.benchmark.judge.name)
    assert (await judge.judge(task.question, "\\boxed{070}", task.ground_truth)).correct is True
    assert (await judge.judge(task.question, "\\boxed{71}", task.ground_truth)).correct is False


async def test_hle_preset_judge_sends_its_rule_prompt():
    cfg = composed("benchmark=hle-text-500")
    llm = ScriptedLLM(["Extracted answer: B\nINCORRECT\nReason: B is not C"])
    judge = make_judge(cfg.benchmark.judge.name, rule=cfg.benchmark.judge.rule, llm=llm)
    judgement = await judge.judge("Which option?", "I pick B", "C")
    assert judgement.correct is False
    assert judgement.reason == "scripted says INCORRECT (hle rule): extracted 'B'; B is not C"
    _, task = llm.calls[0].messages
    assert "Which option?" in task.content and "I pick B" in task.content
    assert "Correct answer:\nC" in task.content
