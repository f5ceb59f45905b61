"""Benchmarks' official data files, made here in each publisher's layout, load as
published (bench/formats.py): decrypted, with the fields a grader needs kept."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
from pathlib import Path

import pytest

from deepledger.bench.formats import canary_key_decrypt, sha256_key_decrypt
from deepledger.bench.inputs import _digested
from deepledger.bench.tasks import Task, TaskFile, load_tasks
from deepledger.config import BenchmarkDataConfig
from deepledger.errors import ConfigError
from deepledger.messages import Usage
from deepledger.records.results import TaskRecord
from tests.support.providers import PNG

CANARY = "BENCHMARK DATA SHOULD NEVER APPEAR AS PLAIN TEXT ONLINE. canary GUID test:1234"


def sha256_key_encrypt(text: str, canary: str) -> str:
    """BrowseComp's documented scheme: XOR with SHA-256(canary) repeated, then base64."""
    digest = hashlib.sha256(canary.encode()).digest()
    data = text.encode()
    return base64.b64encode(bytes(b ^ digest[i % 32] for i, b in enumerate(data))).decode()


def canary_key_encrypt(text: str, canary: str) -> str:
    """xbench's documented scheme: XOR with the canary's own bytes repeated, then base64."""
    key = canary.encode()
    data = text.encode()
    return base64.b64encode(bytes(b ^ key[i % len(key)] for i, b in enumerate(data))).decode()


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def load(folder: Path, name: str, **options) -> TaskFile:
    return load_tasks(BenchmarkDataConfig(data_dir=str(folder), metadata_file=name, **options))


def test_the_two_schemes_match_fixed_vectors():
    # SHA-256 of the empty text starts with 0xe3; "A" (0x41) XOR 0xe3 is 0xa2.
    assert sha256_key_decrypt(base64.b64encode(b"\xa2").decode(), "") == "A"
    # "ab" XOR "k" (0x6b) repeated is 0x0a 0x09.
    assert canary_key_decrypt(base64.b64encode(b"\x0a\x09").decode(), "k") == "ab"
    long = "a question longer than the 32 bytes of one SHA-256 digest, in full"
    assert sha256_key_decrypt(sha256_key_encrypt(long, CANARY), CANARY) == long


def test_browsecomp_csv_is_decrypted_and_keeps_its_topic(tmp_path):
    rows = [
        [sha256_key_encrypt(q, CANARY), sha256_key_encrypt(a, CANARY), topic, CANARY]
        for q, a, topic in [("Which river? Ünïcode", "Danube", "Geography"), ("Who?", "Ada", "")]
    ]
    rows.append(["not base64!", sha256_key_encrypt("x", CANARY), "Art", CANARY])
    write_csv(
        tmp_path / "browse_comp_test_set.csv",
        ["problem", "answer", "problem_topic", "canary"],
        rows,
    )
    loaded = load(tmp_path, "browse_comp_test_set.csv")
    assert loaded.format == "browsecomp"
    first, second = loaded.tasks
    assert (first.task_id, first.question, first.ground_truth) == (
        "browsecomp-0001",
        "Which river? Ünïcode",
        "Danube",
    )
    assert first.metadata == {"problem_topic": "Geography"}
    assert second.metadata == {}
    [problem] = loaded.problems
    assert problem.startswith(
        f"{tmp_path / 'browse_comp_test_set.csv'}:3: 'problem' cannot be decrypted"
    )


def test_browsecomp_zh_reads_its_workbook_and_its_csv(tmp_path):
    from openpyxl import Workbook

    header = ["Topic", "Question", "Answer", "canary"]
    row = [sha256_key_encrypt(t, CANARY) for t in ("艺术", "哪位画家？", "齐白石")] + [CANARY]
    book = Workbook()
    book.active.append(header)
    book.active.append(row)
    book.save(tmp_path / "browsecomp-zh-encrypted.xlsx")
    write_csv(tmp_path / "browsecomp-zh.csv", header, [row])
    for name in ("browsecomp-zh-encrypted.xlsx", "browsecomp-zh.csv"):
        loaded = load(tmp_path, name)
        [task] = loaded.tasks
        assert loaded.format == "browsecomp-zh"
        assert (task.task_id, task.question, task.ground_truth) == (
            "browsecomp-zh-0001",
            "哪位画家？",
            "齐白石",
        )
        assert task.metadata == {"Topic": "艺术"}


def test_xbench_deepsearch_csv_is_decrypted_with_its_own_scheme(tmp_path):
    header = ["id", "prompt", "answer", "reference_steps", "canary"]
    steps = canary_key_encrypt("1. 搜索", CANARY)
    rows = [
        [
            "101",
            canary_key_encrypt("人均预期寿命？", CANARY),
            canary_key_encrypt("1.1", CANARY),
            steps,
            CANARY,
        ]
    ]
    write_csv(tmp_path / "DeepSearch-2510.csv", header, rows)
    [task] = load(tmp_path, "DeepSearch-2510.csv").tasks
    assert (task.task_id, task.question, task.ground_truth) == ("101", "人均预期寿命？", "1.1")
    assert task.metadata == {}  # the reference steps are the solution: not carried


def test_simpleqa_csv_keeps_topic_and_answer_type(tmp_path):
    described = "{'topic': 'Art', 'answer_type': 'Person', 'urls': ['https://a.example']}"
    rows = [[described, "Who painted it?", "Monet"], ["{'topic': ", "Broken?", "x"]]
    write_csv(tmp_path / "simple_qa_test_set.csv", ["metadata", "problem", "answer"], rows)
    loaded = load(tmp_path, "simple_qa_test_set.csv")
    [task] = loaded.tasks
    assert (task.task_id, task.question, task.ground_truth) == (
        "simpleqa-0001",
        "Who painted it?",
        "Monet",
    )
    assert task.metadata == {"topic": "Art", "answer_type": "Person"}
    assert loaded.problems == [
        f"{tmp_path / 'simple_qa_test_set.csv'}:2: "
        "its 'metadata' is not a Python literal (SyntaxError)"
    ]


HLE_ROWS = [
    {
        "id": "hle-text",
        "question": "EASY: Which river flows through Vienna?",
        "image": "",
        "answer": "Danube",
        "answer_type": "exactMatch",
        "category": "Humanities",
        "raw_subject": "Geography",
        "rationale": "r" * 1000,
    },
    {
        "id": "hle/img 1",
        "question": "EASY: Which animal is in the picture?",
        "image": f"data:image/png;base64,{PNG}",
        "answer": "Lion",
        "answer_type": "multipleChoice",
        "category": "Biology/Medicine",
        "raw_subject": "Zoology",
        "rationale": "",
    },
]


def write_hle_parquet(path: Path, rows: list[dict] = HLE_ROWS) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_hle_parquet_writes_the_image_beside_it_and_attaches_it(tmp_path):
    write_hle_parquet(tmp_path / "test.parquet")
    loaded = load(tmp_path, "test.parquet")
    text, picture = loaded.tasks
    assert loaded.format == "hle" and not loaded.problems
    assert text.file_path is None
    assert text.metadata == {
        "answer_type": "exactMatch",
        "category": "Humanities",
        "raw_subject": "Geography",
    }
    image = Path(picture.file_path)
    assert image.parent == (tmp_path / "test_images").resolve()
    assert image.suffix == ".png" and image.name.startswith("hle_img_1-")
    assert image.read_bytes() == base64.b64decode(PNG)
    assert picture.metadata["category"] == "Biology/Medicine"
    assert load(tmp_path, "test.parquet").tasks[1].file_path == picture.file_path  # rewritten alike


def test_text_only_skips_the_image_questions_and_says_how_many(tmp_path):
    write_hle_parquet(tmp_path / "test.parquet")
    loaded = load(tmp_path, "test.parquet", text_only=True)
    assert [t.task_id for t in loaded.tasks] == ["hle-text"]
    assert any("skipped 1 task(s)" in w and "text_only" in w for w in loaded.warnings)
    assert not (tmp_path / "test_images").exists()


def test_text_only_skips_attached_images_but_not_attached_text(tmp_path):
    lines = [
        {"task_id": "pic", "task_question": "Q?", "file_name": "chart.PNG"},
        {"task_id": "doc", "task_question": "Q?", "file_name": "notes.txt"},
    ]
    (tmp_path / "standardized_data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "chart.PNG").write_bytes(base64.b64decode(PNG))
    (tmp_path / "notes.txt").write_text("notes")
    loaded = load(tmp_path, "standardized_data.jsonl", text_only=True)
    assert [t.task_id for t in loaded.tasks] == ["doc"]
    assert loaded.text_only_skipped == 1


def test_hle_json_and_jsonl_exports_load_alike(tmp_path):
    (tmp_path / "hle.json").write_text(json.dumps(HLE_ROWS))
    (tmp_path / "hle.jsonl").write_text("".join(json.dumps(r) + "\n" for r in HLE_ROWS))
    for name in ("hle.json", "hle.jsonl"):
        loaded = load(tmp_path, name)
        assert loaded.format == "hle"
        assert [t.ground_truth for t in loaded.tasks] == ["Danube", "Lion"]
        assert loaded.tasks[1].file_path is not None
        assert "rationale" not in loaded.tasks[0].metadata


def test_an_hle_image_that_is_not_an_image_is_reported_on_its_row(tmp_path):
    rows = [dict(HLE_ROWS[1], image="data:text/html;base64,PGI+")]
    write_hle_parquet(tmp_path / "test.parquet", rows)
    loaded = load(tmp_path, "test.parquet")
    assert loaded.problems == [
        f"{tmp_path / 'test.parquet'}:1: "
        "its image has the media type 'text/html', not an image we read"
    ]


def test_the_input_digest_covers_the_image(tmp_path):
    for folder, data in (("a", PNG), ("b", base64.b64encode(b"\x89PNG\r\n\x1a\nother").decode())):
        (tmp_path / folder).mkdir()
        write_hle_parquet(
            tmp_path / folder / "t.parquet",
            [dict(HLE_ROWS[1], image=f"data:image/png;base64,{data}")],
        )
    one, other = (load(tmp_path / f, "t.parquet").tasks[0] for f in ("a", "b"))
    judge = {"name": "normalized"}
    assert _digested([one], judge)[0].digest != _digested([other], judge)[0].digest


GAIA_LINES = [
    {
        "task_id": "g1",
        "Question": "EASY: Capital of France?",
        "Level": 1,
        "Final answer": "Paris",
        "file_name": "",
        "Annotator Metadata": {"Steps": "look it up"},
    },
    {
        "task_id": "g2",
        "Question": "EASY: Which animal is in the file?",
        "Level": "3",
        "Final answer": "Lion",
        "file_name": "g2.txt",
        "Annotator Metadata": {},
    },
]


def test_gaia_metadata_keeps_level_and_attachments(tmp_path):
    (tmp_path / "metadata.jsonl").write_text("".join(json.dumps(x) + "\n" for x in GAIA_LINES))
    (tmp_path / "g2.txt").write_text("a lion")
    loaded = load(tmp_path, "metadata.jsonl")
    one, two = loaded.tasks
    assert loaded.format == "gaia"
    assert (one.question, one.ground_truth, one.metadata) == (
        "EASY: Capital of France?",
        "Paris",
        {"Level": 1},
    )
    assert two.metadata == {"Level": "3"}
    assert two.file_path == str((tmp_path / "g2.txt").resolve())


def test_gaia_test_split_hidden_answers_are_not_judged(tmp_path):
    hidden = dict(GAIA_LINES[0], **{"Final answer": "?"})
    (tmp_path / "metadata.jsonl").write_text(json.dumps(hidden) + "\n")
    [task] = load(tmp_path, "metadata.jsonl").tasks
    assert task.ground_truth is None


def test_a_file_in_no_format_we_read_exits_2_naming_it(tmp_path):
    import subprocess
    import sys

    (tmp_path / "tasks.txt").write_text("What?\n")
    command = [sys.executable, "-m", "deepledger", "bench", f"benchmark.data.data_dir={tmp_path}"]
    command += ["benchmark.data.metadata_file=tasks.txt", f"hydra.run.dir={tmp_path / 'run'}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert (
        f"{tmp_path / 'tasks.txt'}: .txt is no format we read. The formats read: jsonl"
        in done.stderr
    )


def test_standardized_jsonl_keeps_short_scalars_and_names_the_rest_once(tmp_path):
    lines = [
        {
            "task_id": "a",
            "task_question": "Q?",
            "ground_truth": "x",
            "Level": 2,
            "type": "single",
            "hint": "h" * 301,
            "steps": ["s"],
            "ok": True,
            "score": 0.5,
            "none": None,
        },
        {"task_id": "b", "task_question": "Q2?", "ground_truth": "y", "steps": {"a": 1}},
    ]
    (tmp_path / "standardized_data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    loaded = load(tmp_path, "standardized_data.jsonl")
    assert loaded.format == "jsonl"
    assert loaded.tasks[0].metadata == {
        "Level": 2,
        "type": "single",
        "ok": True,
        "score": 0.5,
        "none": None,
    }
    [warning] = [w for w in loaded.warnings if "not kept" in w]
    assert "'hint' (longer than 300 characters: 1 row(s))" in warning
    assert "'steps' (not a single value (a list or an object): 2 row(s))" in warning


def test_a_file_in_a_format_we_do_not_read_is_refused_naming_it(tmp_path):
    (tmp_path / "tasks.txt").write_text("What?\n")
    with pytest.raises(ConfigError) as refused:
        load(tmp_path, "tasks.txt")
    message = str(refused.value)
    assert str(tmp_path / "tasks.txt") in message
    for name in ("jsonl", "gaia", "hle (.parquet/.jsonl/.json)", "browsecomp (.csv)", "simpleqa"):
        assert name in message


def test_a_csv_of_no_known_layout_is_refused_with_its_header(tmp_path):
    write_csv(tmp_path / "q.csv", ["question", "solution"], [["a", "b"]])
    with pytest.raises(ConfigError, match=r"q\.csv: a CSV whose header \('question', 'solution'\)"):
        load(tmp_path, "q.csv")


def test_a_named_format_missing_a_column_names_the_file_and_the_column(tmp_path):
    write_csv(tmp_path / "bc.csv", ["problem", "answer", "problem_topic"], [["a", "b", "c"]])
    with pytest.raises(ConfigError) as refused:
        load(tmp_path, "bc.csv", format="browsecomp")
    assert f"{tmp_path / 'bc.csv'}: benchmark.data.format=browsecomp needs the columns" in str(
        refused.value
    )
    assert "missing 'canary'" in str(refused.value)


def test_an_unknown_format_name_and_a_wrong_extension_are_refused(tmp_path):
    (tmp_path / "t.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match=r"benchmark\.data\.format='excel': use auto or one of"):
        load(tmp_path, "t.jsonl", format="excel")
    with pytest.raises(ConfigError, match=r"format=browsecomp reads \.csv files, not \.jsonl"):
        load(tmp_path, "t.jsonl", format="browsecomp")


class _Spent:
    usage = Usage()
    cost = None
    elapsed_seconds = None


def test_the_result_line_carries_the_metadata_for_failed_tasks_too():
    task = Task("g1", "Q?", "Paris", metadata={"Level": 1})
    failed = TaskRecord.failed(task, RuntimeError("boom"), 1.0, _Spent(), [])
    assert failed.to_json()["metadata"] == {"Level": 1}
    assert (
        "metadata"
        not in TaskRecord.failed(Task("g2", "Q?"), RuntimeError("x"), 1.0, _Spent(), []).to_json()
    )


def bench(*overrides: str, server, run_dir: Path):
    import subprocess

    from tests.support.bench import bench_command
    from tests.support.cli import ROOT

    command = bench_command(server.openai_base_url, run_dir, *overrides)
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_gaia_level_reaches_the_result_line(tmp_path):
    from tests.support.bench import results
    from tests.support.doubles.bench_model import respond_http
    from tests.support.doubles.fake_llm_server import FakeLLMServer

    data = tmp_path / "gaia"
    data.mkdir()
    (data / "metadata.jsonl").write_text("".join(json.dumps(x) + "\n" for x in GAIA_LINES))
    (data / "g2.txt").write_text("a lion")
    with FakeLLMServer(responder=respond_http) as server:
        done = bench(
            f"benchmark.data.data_dir={data}",
            "benchmark.data.metadata_file=metadata.jsonl",
            server=server,
            run_dir=tmp_path / "run",
        )
    assert done.returncode == 0, done.stderr
    levels = {r["task_id"]: r["metadata"] for r in results(tmp_path / "run")}
    assert levels == {"g1": {"Level": 1}, "g2": {"Level": "3"}}


def test_an_hle_image_reaches_a_model_that_sees_images(tmp_path):
    from tests.support.bench import results
    from tests.support.doubles.bench_model import respond_http
    from tests.support.doubles.fake_llm_server import FakeLLMServer

    data = tmp_path / "hle"
    data.mkdir()
    write_hle_parquet(data / "test.parquet")
    with FakeLLMServer(responder=respond_http) as server:
        done = bench(
            f"benchmark.data.data_dir={data}",
            "benchmark.data.metadata_file=test.parquet",
            "llm.accepts_images=true",
            server=server,
            run_dir=tmp_path / "run",
        )
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    seen = [(i.role, i.mime_type, i.data) for r in requests for i in r.images]
    assert ("user", "image/png", PNG) in seen
    asked_with_image = [r for r in requests if r.images]
    assert all("Which animal" in json.dumps(r.messages[1]) for r in asked_with_image)
    records = {r["task_id"]: r for r in results(tmp_path / "run")}
    assert records["hle/img 1"]["correct"] is True
    assert records["hle/img 1"]["metadata"]["raw_subject"] == "Zoology"
