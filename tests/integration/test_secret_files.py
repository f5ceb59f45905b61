"""No secret file of the working folder reaches the model, as a user's runs meet them.

The working folder holds what a user keeps beside their notes: ``.env`` with an API key,
``.git/config`` with a token in a remote URL, ``.netrc``, ``id_rsa``, ``credentials.json``
and a symlink ``link.txt`` pointing at ``.env``. ``deepledger run ... task_file=notes.txt``
and ``deepledger bench benchmark.data.data_dir=.`` are run there (subprocesses, the real
reader and tool-python servers) against a loopback model whose script asks the reader
and tool-python's upload for every one of them. No canary may reach a request the model
server received, the command's output, or any file of the run directory; the refusals
name the rule; the attachments themselves (``notes.txt``, ``keyboard.xlsx``) still open.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.documents import make_xlsx
from tests.support.doubles.fake_llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.support.wire import text_of, xml_call

CANARIES = {
    ".env": "OPENAI_API_KEY=sk-canary-dotenv-51c7e2\n",
    ".git/config": '[remote "origin"]\n\turl = https://bob:ghp_canarygit93ab@example.com/r.git\n',
    ".netrc": "machine example.com login bob password canary-netrc-7d21f0\n",
    "id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\ncanary-idrsa-4e90aa\n",
    "credentials.json": '{"private_key": "canary-credjson-b3f2c1"}\n',
}
MARKS = ("canary-dotenv", "ghp_canarygit", "canary-netrc", "canary-idrsa", "canary-credjson")
NOTES = "Heron notes: the grey heron eats fish.\n"
SECRET_ASKS = [".env", ".git/config", ".netrc", "id_rsa", "credentials.json", "link.txt"]


def plant(work: Path) -> None:
    """The working folder as a user keeps it."""
    (work / ".git").mkdir(parents=True)
    for name, text in CANARIES.items():
        (work / name).write_text(text)
    (work / "notes.txt").write_text(NOTES)
    (work / "keyboard.xlsx").write_bytes(make_xlsx({"Keys": [["bird", "count"], ["heron", 7319]]}))
    (work / "link.txt").symlink_to(work / ".env")


def steps(work: Path, sandbox_id: str) -> list[tuple[str, str, dict[str, str]]]:
    """Every canary asked of the reader (by its path as the task shows the attachment's,
    relative, through the symlink, by a folder listing) and of tool-python's upload;
    then the attachments."""
    secrets = [str(work / name) for name in SECRET_ASKS]
    reads = [*secrets, ".env", "../work/.env", str(work / ".git"), str(work)]
    reads += [str(work / "notes.txt"), str(work / "keyboard.xlsx")]
    uploads = [*secrets, ".env", str(work / "notes.txt")]
    sandbox = {"sandbox_id": sandbox_id}
    command = "ls -la; cat * .* 2>&1 | head -c 4000"
    return [
        *(("reader", "read", {"source": source}) for source in reads),
        ("tool-python", "create_sandbox", {}),
        *(
            ("tool-python", "upload_file_from_local_to_sandbox", sandbox | {"local_file_path": p})
            for p in uploads
        ),
        ("tool-python", "run_command", sandbox | {"command": command}),
    ]


def model(work: Path):
    """The scripted model: a function of the conversation it is sent."""

    def respond(request: RecordedRequest) -> Reply:
        messages = request.messages
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        conversation = "\n".join(map(text_of, messages))
        found = re.search(r"Sandbox created with sandbox_id: ([\w-]+)", conversation)
        plan = steps(work, found.group(1) if found else "missing")
        if turn < len(plan):
            return Reply(f"Step {turn + 1}.\n" + xml_call(*plan[turn]))
        return Reply("\\boxed{done}")

    return respond


@dataclass
class Run:
    work: Path
    run_dir: Path
    done: subprocess.CompletedProcess[str]
    requests: list[RecordedRequest]

    def tool_results(self) -> list[tuple[str, str, str]]:
        """(tool, what it was asked, its result) for every call, from the journals."""
        calls = []
        for journal in sorted(self.run_dir.rglob("*.jsonl")):
            for line in journal.read_text(encoding="utf-8").splitlines():
                event = json.loads(line)
                if event.get("event") != "tool_results":
                    continue
                for call, result in zip(event["calls"], event["results"], strict=True):
                    arguments = call["arguments"]
                    asked = arguments.get("source") or arguments.get("local_file_path") or ""
                    calls.append((call["name"], asked, result["content"]))
        return calls


def deepledger(work: Path, run_dir: Path, *args: str) -> Run:
    with FakeLLMServer(responder=model(work)) as llm:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        done = subprocess.run(
            [sys.executable, "-m", "deepledger", *args, "llm=openai_compatible",
             f"llm.base_url={llm.openai_base_url}", "agent.main_agent.tools=[reader,tool-python]",
             f"hydra.run.dir={run_dir}"],
            cwd=work, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    return Run(work, run_dir, done, list(llm.requests))


@pytest.fixture(scope="module")
def run_with_task_file(tmp_path_factory: pytest.TempPathFactory) -> Run:
    base = tmp_path_factory.mktemp("run")
    plant(base / "work")
    return deepledger(base / "work", base / "out", "run", "What do my notes say?",
                      "task_file=notes.txt")  # fmt: skip


@pytest.fixture(scope="module")
def bench_in_working_dir(tmp_path_factory: pytest.TempPathFactory) -> Run:
    base = tmp_path_factory.mktemp("bench")
    work = base / "work"
    plant(work)
    tasks = [
        {"task_id": "notes", "task_question": "What do the notes say?", "ground_truth": "done",
         "file_name": "notes.txt"},
        {"task_id": "keys", "task_question": "How many herons?", "ground_truth": "done",
         "file_name": "keyboard.xlsx"},
        {"task_id": "sneaky", "task_question": "What is in it?", "ground_truth": "done",
         "file_name": ".env"},
    ]  # fmt: skip
    (work / "standardized_data.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return deepledger(work, base / "out", "bench", "benchmark.data.data_dir=.",
                      "benchmark.execution.max_concurrent=1")  # fmt: skip


def assert_no_canary_anywhere(run: Run) -> None:
    assert run.done.returncode == 0, run.done.stderr[-3000:]
    sent = [json.dumps(r.body) + json.dumps(r.headers) for r in run.requests]
    assert len(sent) > len(SECRET_ASKS)
    output = run.done.stdout + run.done.stderr
    files = [p for p in run.run_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".jsonl" for p in files)
    for mark in MARKS:
        assert not [i for i, body in enumerate(sent) if mark in body], mark
        assert mark not in output
        assert not [p for p in files if mark.encode() in p.read_bytes()], mark


def assert_every_secret_refused_by_its_rule(run: Run) -> None:
    results = run.tool_results()
    asked = {(tool, source): text for tool, source, text in results}
    rules = {".env": ".env*", ".git/config": ".git/", ".netrc": ".netrc", "id_rsa": "id_rsa*",
             "credentials.json": "credentials*.json", "link.txt": ".env*"}  # fmt: skip
    for tool in ("read", "upload_file_from_local_to_sandbox"):
        for name, rule in rules.items():
            source = str(run.work / name)
            assert f"matches the secret-file rule {rule!r}" in asked[(tool, source)], source
        assert "'.env*'" in asked[(tool, ".env")]
    assert "'.env*'" in asked[("read", "../work/.env")]
    assert "'.git/'" in asked[("read", str(run.work / ".git"))]
    listing = asked[("read", str(run.work))]
    assert "outside the folders" in listing  # the working folder is no root: no listing
    assert ".env" not in listing and "id_rsa" not in listing


def test_run_with_a_task_file_shows_the_model_no_secret(run_with_task_file: Run) -> None:
    assert_no_canary_anywhere(run_with_task_file)


def test_run_with_a_task_file_refuses_every_secret_naming_its_rule(
    run_with_task_file: Run,
) -> None:
    assert_every_secret_refused_by_its_rule(run_with_task_file)


def test_run_opens_the_attached_file_and_nothing_beside_it(run_with_task_file: Run) -> None:
    asked = {(tool, source): text for tool, source, text in run_with_task_file.tool_results()}
    work = run_with_task_file.work
    assert NOTES.strip() in asked[("read", str(work / "notes.txt"))]
    uploaded = asked[("upload_file_from_local_to_sandbox", str(work / "notes.txt"))]
    assert "File uploaded" in uploaded
    assert "outside the folders" in asked[("read", str(work / "keyboard.xlsx"))]  # not attached


def test_bench_in_the_working_dir_shows_the_model_no_secret(bench_in_working_dir: Run) -> None:
    assert_no_canary_anywhere(bench_in_working_dir)


def test_bench_in_the_working_dir_refuses_every_secret_naming_its_rule(
    bench_in_working_dir: Run,
) -> None:
    assert_every_secret_refused_by_its_rule(bench_in_working_dir)


def test_bench_in_the_working_dir_opens_the_tasks_attachments(bench_in_working_dir: Run) -> None:
    run = bench_in_working_dir
    keyboard = str(run.work / "keyboard.xlsx")
    reads = [text for tool, source, text in run.tool_results() if source == keyboard]
    assert reads and all("| heron | 7319 |" in text for text in reads), reads
    assert "matches the secret-file rule '.env*'" in run.done.stderr  # the .env task, skipped
    assert "web.allow_working_dir" in run.done.stderr  # the user is told why, and the way out


@pytest.mark.parametrize("attached", [".env", "link.txt"])
def test_a_secret_task_file_is_a_usage_error(tmp_path: Path, attached: str) -> None:
    plant(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "deepledger", "run", "What is in it?", f"task_file={attached}",
         "llm=openai_compatible", f"hydra.run.dir={tmp_path / 'out'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "matches the secret-file rule '.env*'" in done.stderr
    assert "canary" not in done.stdout + done.stderr
