"""The WorldFacts suite: reproducible, grounded in its pages, findable by search."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from deepledger.config import SEARCH_CORPUS_ENV, tool_servers, validate
from deepledger.errors import ConfigError
from deepledger.web.corpus import SearchIndex, build_index
from tests.support.config import composed

SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "worldfacts"
SPLITS = ("demo", "dev", "test")


def tasks(split: str) -> list[dict]:
    return [json.loads(line) for line in (SUITE / f"{split}.jsonl").read_text().splitlines()]


def page(path: str) -> str:
    return (SUITE / "corpus" / path).read_text()


def fact(path: str, name: str) -> int:
    match = re.search(rf"^- {name}: ([\d,]+)", page(path), re.MULTILINE)
    assert match, f"{path} has no {name}"
    return int(match.group(1).replace(",", ""))


def test_regenerating_gives_the_committed_files_byte_for_byte(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("worldfacts_generate", SUITE / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, generate)  # dataclasses look themselves up
    spec.loader.exec_module(generate)
    counts = generate.write(tmp_path)
    assert counts == {"demo": 10, "dev": 100, "test": 190, "pages": 774}
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(SUITE)
        for p in SUITE.rglob("*")
        if p.is_file() and p.suffix in (".md", ".jsonl") and p.name != "README.md"
    )
    assert fresh == committed
    for path in fresh:
        assert (tmp_path / path).read_bytes() == (SUITE / path).read_bytes(), path


def test_every_answer_is_grounded_in_its_pages():
    ids = set()
    for split in SPLITS:
        for task in tasks(split):
            ids.add(task["task_id"])
            kind, pages = task["metadata"]["type"], task["metadata"]["pages"]
            question, answer = task["task_question"], task["ground_truth"]
            assert all((SUITE / "corpus" / p).is_file() for p in pages), task["task_id"]
            if kind in ("lookup", "two_hop"):
                shown = f"{int(answer):,}" if answer.isdigit() and len(answer) > 3 else answer
                assert shown in page(pages[-1]), task["task_id"]
            elif kind == "comparison":
                key = "Population" if "population" in question else "Area"
                best = max(pages, key=lambda p: fact(p, key))
                assert page(best).startswith(f"# {answer}\n"), task["task_id"]
            elif "density" in question:
                density = fact(pages[0], "Population") / fact(pages[0], "Area")
                assert int(answer) == round(density), task["task_id"]
            elif "combined" in question:
                assert int(answer) == sum(fact(p, "Population") for p in pages), task["task_id"]
            else:
                ratio = fact(pages[0], "Area") / fact(pages[1], "Area")
                assert answer == f"{ratio:.1f}", task["task_id"]
    assert len(ids) == 300  # ids are unique across splits


def test_searching_a_question_finds_one_of_its_pages(tmp_path):
    """What a model would type first: the question itself puts a supporting page in the
    top 5, for every demo and dev question (for a two-hop question it may be the second
    page; the first is then found by the entity's name)."""
    index_file = tmp_path / "index.sqlite3"
    build_index(SUITE / "corpus", index_file)
    index = SearchIndex(index_file)
    for task in tasks("demo") + tasks("dev"):
        found = [hit.doc_id for hit in index.search(task["task_question"], 5)]
        assert set(found) & set(task["metadata"]["pages"]), (task["task_id"], found)


def test_the_preset_points_the_search_tool_at_the_corpus(monkeypatch):
    monkeypatch.chdir(SUITE.parents[1])  # relative paths are read from the repository root
    cfg = composed("benchmark=worldfacts")
    validate(cfg)
    env = tool_servers(cfg)["search"].env
    assert Path(env[SEARCH_CORPUS_ENV]) == SUITE / "corpus"
    assert (cfg.benchmark.judge.name, cfg.benchmark.judge.abs_tol) == ("numeric", 0.0)


def test_a_missing_corpus_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative corpus is looked for here, then in the project
    cfg = composed("benchmark=worldfacts", "benchmark.search_corpus=benchmarks/worldfacts/gone")
    with pytest.raises(ConfigError, match=r"benchmark\.search_corpus=benchmarks/worldfacts/gone"):
        validate(cfg)
