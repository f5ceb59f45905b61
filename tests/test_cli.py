"""The installed `deepledger` command, run as a user would."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT, deepledger


def test_help_lists_the_commands():
    run = deepledger("--help")
    assert run.returncode == 0
    for command in ("bench", "run", "report", "replay"):
        assert f"deepledger {command}" in run.stdout


def test_cfg_job_prints_the_composed_config_with_overrides():
    run = deepledger(
        "bench", "--cfg", "job", "agent.keep_tool_result=5", "agent.context_compress_limit=3"
    )
    assert run.returncode == 0, run.stderr
    assert "keep_tool_result: 5" in run.stdout
    assert "context_compress_limit: 3" in run.stdout
    assert "max_context_length:" in run.stdout


def test_python_dash_m_is_the_same_command():
    run = subprocess.run(
        [sys.executable, "-m", "deepledger", "bench", "--cfg", "job"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "keep_tool_result: -1" in run.stdout


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("agent.keep_tool_reslt=5", "keep_tool_reslt"),
        ("agent.keep_tool_result=all", "agent.keep_tool_result"),
    ],
)
def test_bad_overrides_fail_naming_the_key_without_a_traceback(override, named):
    run = deepledger("bench", "--cfg", "job", override)
    assert run.returncode == 2
    assert named in run.stderr
    assert "Traceback" not in run.stderr


def test_missing_api_key_is_one_paragraph_naming_the_variable(tmp_path):
    run = deepledger(
        "bench",
        "llm=anthropic",
        f"hydra.run.dir={tmp_path}/run",
        env_drop=("ANTHROPIC_API_KEY",),
        cwd=tmp_path,
    )
    assert run.returncode == 2
    assert "ANTHROPIC_API_KEY" in run.stderr
    assert "Traceback" not in run.stderr


def test_max_tokens_above_the_window_is_refused(tmp_path):
    run = deepledger(
        "bench",
        "llm=openai_compatible",
        "llm.max_tokens=9000",
        "llm.max_context_length=4096",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert run.returncode == 2
    assert "llm.max_tokens=9000" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("command", ["bench", "run"])
def test_a_refused_config_leaves_no_new_run_folder_and_an_old_one_as_it_was(tmp_path, command):
    refused = ("llm=openai_compatible", "llm.max_tokens=9000", "llm.max_context_length=4096")
    question = ("What is 2 + 2?",) if command == "run" else ()
    new = tmp_path / "new"
    run = deepledger(command, *question, *refused, f"hydra.run.dir={new}/logs/run")
    assert run.returncode == 2 and "llm.max_tokens=9000" in run.stderr
    assert not new.exists()  # nor the parents made for it
    old = tmp_path / "old"
    old.mkdir()
    (old / "notes.txt").write_text("mine")
    run = deepledger(command, *question, *refused, f"hydra.run.dir={old}")
    assert run.returncode == 2
    assert [p.name for p in old.iterdir()] == ["notes.txt"]


def test_a_bench_refused_for_its_data_leaves_no_new_run_folder_nor_traces_in_an_old_one(tmp_path):
    # Refused inside the suite (no task file in data_dir), after the folder was claimed.
    refused = ("llm=openai_compatible", f"benchmark.data.data_dir={tmp_path}/missing")
    new = tmp_path / "new"
    run = deepledger("bench", *refused, f"hydra.run.dir={new}/run/sub")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "missing" in run.stderr
    assert not new.exists()  # nor the parents made for it
    old = tmp_path / "old"
    old.mkdir()
    (old / "notes.txt").write_text("mine")
    run = deepledger("bench", *refused, f"hydra.run.dir={old}")
    assert run.returncode == 2
    assert [p.name for p in old.iterdir()] == ["notes.txt"]


def test_unknown_command_is_a_usage_error():
    run = deepledger("benchmark")
    assert run.returncode == 2 and "unknown command" in run.stderr


END_PROBE = """
import atexit, sys, threading
atexit.register(lambda: print("atexit ran", flush=False))
if sys.argv[1] == "thread":  # a thread still running: the normal exit waits for it
    release = threading.Event()
    threading.Thread(target=release.wait).start()
sys.argv = ["deepledger", *sys.argv[2:]]
from deepledger.cli import main
code = main()
print("main returned", code, flush=True)
if "release" in globals():
    release.set()
sys.exit(code)
"""


@pytest.mark.parametrize(
    ("threads", "args", "code", "returned"),
    [
        ("none", ["--version"], 0, False),
        ("none", ["benchmark"], 2, False),
        ("thread", ["--version"], 0, True),
    ],
)
def test_the_process_ends_after_the_command_with_its_code_and_atexit(threads, args, code, returned):
    run = subprocess.run(
        [sys.executable, "-c", END_PROBE, threads, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == code, run.stderr
    assert "atexit ran" in run.stdout  # handlers run, and their output is flushed
    assert ("main returned" in run.stdout) is returned


def test_dotenv_supplies_a_key_but_never_blanks_an_exported_one(tmp_path):
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=from-dotenv\nOPENAI_API_KEY=\n")
    with socket.socket() as probe:  # a closed loopback port: the call fails after the key check
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    offline = ["question=hi", "agent.main_agent.tools=[]", "llm.retry.max_attempts=1"]
    with_dotenv = deepledger(
        "run",
        "llm=anthropic",
        f"llm.base_url={closed}",
        *offline,
        f"hydra.run.dir={tmp_path}/a",
        env_drop=("ANTHROPIC_API_KEY",),
        cwd=tmp_path,
    )
    assert "ANTHROPIC_API_KEY" not in with_dotenv.stderr  # the key check passed
    assert "Could not reach the anthropic server" in with_dotenv.stderr
    os.environ["OPENAI_API_KEY"] = "exported-key"
    try:
        exported = deepledger(
            "run",
            "llm=openai",
            f"llm.base_url={closed}/v1",
            *offline,
            f"hydra.run.dir={tmp_path}/b",
            cwd=tmp_path,
        )
    finally:
        del os.environ["OPENAI_API_KEY"]
    assert "OPENAI_API_KEY" not in exported.stderr, exported.stderr
    assert "Could not reach the openai server" in exported.stderr


def test_unknown_provider_lists_the_choices(tmp_path):
    run = deepledger(
        "bench", "llm=openai_compatible", "llm.provider=gemini", f"hydra.run.dir={tmp_path}/run"
    )
    assert run.returncode == 2
    assert "llm.provider='gemini'" in run.stderr and "anthropic" in run.stderr


def test_run_answers_one_question_against_an_openai_compatible_server(tmp_path):
    from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply

    tool_call = (
        "<use_mcp_tool><server_name>time</server_name><tool_name>get_current_time</tool_name>"
        '<arguments>{"timezone": "UTC"}</arguments></use_mcp_tool>'
    )
    replies = [Reply(tool_call), Reply("It is \\boxed{UTC time}."), Reply("\\boxed{UTC time}")]
    with FakeLLMServer(replies) as server:
        run = deepledger(
            "run",
            "question=What time is it in UTC?",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            "agent.main_agent.tools=[time]",
            f"hydra.run.dir={tmp_path}/run",
            cwd=tmp_path,
        )
        server.assert_all_consumed()
        second_request = server.requests[1].messages
    assert run.returncode == 0, run.stderr
    assert "Answer: UTC time" in run.stdout
    assert f"Log: {tmp_path}/run/journal.jsonl" in run.stdout
    assert '"timezone": "UTC"' in second_request[-1]["content"]  # the tool really ran
    events = [json.loads(line)["event"] for line in (tmp_path / "run/journal.jsonl").open()]
    assert events[:2] == ["journal_opened", "task_started"] and events[-1] == "task_finished"
    assert "tool_results" in events


# --------------------------------------------------------------------------- deepledger run


def boxed_replies(answer: str = "42"):
    """A fake server answering every request with a boxed answer (loop and closing call)."""
    from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply

    return FakeLLMServer(responder=lambda request: Reply(f"\\boxed{{{answer}}}"))


def run_one(server, tmp_path: Path, *args: str, run_dir: str = "run"):
    """``deepledger run ARGS`` against ``server``, no tools, in ``tmp_path/run_dir``."""
    return deepledger(
        "run",
        *args,
        "llm=openai_compatible",
        f"llm.base_url={server.openai_base_url}",
        "agent.main_agent.tools=[]",
        f"hydra.run.dir={tmp_path / run_dir}",
        cwd=tmp_path,
    )


def journal_task(run_dir: Path) -> str:
    opened, first = map(json.loads, (run_dir / "journal.jsonl").read_text("utf-8").splitlines()[:2])
    assert (opened["event"], first["event"]) == ("journal_opened", "task_started")
    return first["task"]


def recorded_question(run_dir: Path) -> tuple[str, str]:
    """The question as ``.hydra/config.yaml`` holds it, and as its entry in
    ``.hydra/overrides.yaml`` composes back (the run is reproducible from them)."""
    import yaml
    from omegaconf import OmegaConf

    from deepledger.config import compose

    saved = OmegaConf.load(run_dir / ".hydra/config.yaml").question
    # read as plain YAML: OmegaConf would already resolve the entries' \${ escapes
    overrides = yaml.safe_load((run_dir / ".hydra/overrides.yaml").read_text(encoding="utf-8"))
    entries = [o for o in overrides if o.startswith("question=")]
    assert len(entries) == 1, entries
    return saved, compose(ROOT / "conf", [entries[0]]).question


QUESTIONS = [
    "How tall is the Eiffel Tower, in feet?",
    "Which is larger: [1, 2] or (3, 4)? Answer {a} or {b}.",
    "What does O'Brien's \"Jack\" say?",
    'She said "hi", then left.',
    "If x=3 and y=x+2, what is y?",
    "a=b",
    "Costs $5 (${HOME} and $PATH are not variables here), 100%?",
    r"Escape C:\Users\me\ and \${x} and a trailing backslash \\",
    "Wie hoch ist der Kölner Dom? 東京タワーの高さは？ 🗼",
    "null",
    "42",
    "  spaced out  ",
    "-m is not a flag here",
]


# Run for real (a second or more each); every one of QUESTIONS is composed below.
RUN_QUESTIONS = [QUESTIONS[i] for i in (0, 1, 2, 4, 6, 7, 8)]


@pytest.mark.parametrize("question", RUN_QUESTIONS)
def test_a_positional_question_reaches_the_run_unchanged(tmp_path, question):
    with boxed_replies() as server:
        run = run_one(server, tmp_path, question)
        asked = server.requests[0].messages[-1]["content"]
    assert run.returncode == 0, run.stderr
    assert "Answer: 42" in run.stdout
    assert journal_task(tmp_path / "run") == question
    assert question in asked
    assert recorded_question(tmp_path / "run") == (question, question)
    assert (tmp_path / "run").is_dir()  # the folder is hydra.run.dir, untouched by the text


def composed(*args: str, cwd: Path = ROOT):
    """``deepledger run ARGS --cfg job``: the config the run would get, resolved."""
    import yaml
    from omegaconf import OmegaConf

    shown = deepledger("run", *args, "--cfg", "job", cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    return OmegaConf.create(yaml.safe_load(shown.stdout))


@pytest.mark.parametrize("question", QUESTIONS)
@pytest.mark.parametrize("form", ["positional", "question="])
def test_any_question_text_is_composed_unchanged(form, question):
    argument = question if form == "positional" else f"question={question}"
    assert composed(argument).question == question


def test_question_equals_runs_with_every_special_character(tmp_path):
    question = "Is 'a, b' [c] (d) {e}: f=g \"h\" $i ${j} \\k ü right?"
    with boxed_replies() as server:
        run = run_one(server, tmp_path, "llm.temperature=0", f"question={question}")
    assert run.returncode == 0, run.stderr
    assert journal_task(tmp_path / "run") == question
    assert recorded_question(tmp_path / "run") == (question, question)


def test_question_from_a_file_keeps_its_lines(tmp_path):
    question = "Line one: a, b.\nLine two [x] \"y\" 'z'\n\n  indented ü"
    (tmp_path / "q.txt").write_text("\ufeff" + question + "\n", encoding="utf-8")
    with boxed_replies() as server:
        run = run_one(server, tmp_path, "@q.txt")
        again = run_one(server, tmp_path, f"question=@{tmp_path / 'q.txt'}", run_dir="again")
    assert run.returncode == 0, run.stderr
    assert again.returncode == 0, again.stderr
    assert journal_task(tmp_path / "run") == question  # BOM and final newline dropped
    assert journal_task(tmp_path / "again") == question
    assert recorded_question(tmp_path / "run") == (question, question)


def test_a_double_at_sign_is_a_literal_at():
    assert composed("@@who tweeted this?").question == "@who tweeted this?"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["@no-such-file.txt"], "no such file"),
        (["question=@no-such-file.txt"], "no such file"),
        (["@latin1.txt"], "not UTF-8"),
        (["How tall", "is it?"], "takes one question"),
        (["first question", "question=second"], "given twice"),
        ([], "needs a question"),
        (["question="], "question is empty"),
        (["questoin=hi"], "did you mean question?"),
        (["what?", "agent.keep_tool_reslt=5"], "did you mean agent.keep_tool_result?"),
        (["what?", "task_file=missing [1].pdf"], "is not a file"),
        (["what?", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_run_usage_errors_exit_2_with_the_reason(tmp_path, args, message):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9?".encode("latin-1"))
    run = deepledger("run", *args, "llm=openai_compatible", cwd=tmp_path)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert message in run.stderr
    assert "Traceback" not in run.stderr


def test_task_file_takes_any_path(tmp_path):
    folder = tmp_path / "data, v2 [final] (copy)"
    folder.mkdir()
    attached = folder / 'it\'s a "file" = ok.txt'
    attached.write_text("The answer is 42.\n", encoding="utf-8")
    with boxed_replies() as server:
        run = run_one(server, tmp_path, "What does the file say?", f"task_file={attached}")
    assert run.returncode == 0, run.stderr
    assert str(attached) in journal_task(tmp_path / "run")
    from omegaconf import OmegaConf

    assert OmegaConf.load(tmp_path / "run/.hydra/config.yaml").task_file == str(attached)


@pytest.mark.parametrize(
    ("args", "hydra_args", "question"),
    [
        (
            ["q?", "llm=openai", "-m", "agent.keep_tool_result=1,2"],
            ["llm=openai", "-m", "agent.keep_tool_result=1,2"],
            "q?",
        ),
        (["--cfg", "job", "x=3, so x+1?"], ["--cfg", "job"], "x=3, so x+1?"),
        (["--cfg=job", "--info", "defaults", "q"], ["--cfg=job", "--info", "defaults"], "q"),
        (
            ["+tools.mine.command=x", "~tools.python", "q"],
            ["+tools.mine.command=x", "~tools.python"],
            "q",
        ),
        (
            ["hydra.run.dir=/a b", "benchmark=worldfacts", "q"],
            ["hydra.run.dir=/a b", "benchmark=worldfacts"],
            "q",
        ),
        (["agent.keep_tool_reslt=5", "q"], ["agent.keep_tool_reslt=5"], "q"),
        (["llm.extra_body.seed=1", "q"], ["llm.extra_body.seed=1"], "q"),
        (["--", "-5 + 3 = ?"], [], "-5 + 3 = ?"),
        (["Is 2+2=4?"], [], "Is 2+2=4?"),
        (["E=mc^2: who?"], [], "E=mc^2: who?"),
        (["--no-such-flag", "-m is not a flag here"], ["--no-such-flag"], "-m is not a flag here"),
        (["question"], [], "question"),
    ],
)
def test_which_arguments_are_overrides(args, hydra_args, question):
    from deepledger.cli import split_run_arguments

    parsed = split_run_arguments(args)
    assert parsed.hydra_args == hydra_args
    assert parsed.question == question


# --------------------------------------------------------------------------- exit codes


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("llm=nope", "llm=nope is not a preset (the closest is llm="),
        ("agent.keep_tool_result=all", "agent.keep_tool_result"),
        ("agent.keep_tool_result=[1,", "agent.keep_tool_result=[1,"),
        ("agent.keep_tool_reslt=5", "did you mean agent.keep_tool_result?"),
    ],
)
@pytest.mark.parametrize("command", ["bench", "run"])
def test_hydra_errors_are_usage_errors(tmp_path, command, override, message):
    question = ["q?"] if command == "run" else []
    run = deepledger(command, *question, override, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert message in run.stderr
    assert not (tmp_path / "run").exists()


def test_failed_work_exits_1_and_a_bad_flag_2(tmp_path):
    from tests.support.doubles.fake_llm_server import FakeLLMServer, server_error

    failing = ["llm.retry.max_attempts=1", "benchmark.execution.max_tasks=1"]
    with FakeLLMServer(responder=lambda request: server_error(500)) as server:
        one = run_one(server, tmp_path, "q?", *failing)
        suite = deepledger(
            "bench",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            "agent.main_agent.tools=[]",
            *failing,
            f"hydra.run.dir={tmp_path}/bench",
            cwd=tmp_path,
        )
    assert one.returncode == 1, one.stderr
    assert "HTTP 500" in one.stderr and "Traceback" not in one.stderr
    assert suite.returncode == 1, suite.stderr
    assert "1 task errored (a resume runs it again); to resume this run" in suite.stderr
    assert f"  deepledger resume {tmp_path}/bench\n" in suite.stderr
    flag = deepledger("bench", "--cfg", "everything")
    assert flag.returncode == 2 and "invalid choice" in flag.stderr
    both = deepledger("bench", "--cfg", "job", "-m", "agent.keep_tool_result=1,2")
    assert both.returncode == 2 and "Only one of" in both.stderr
    assert "Traceback" not in both.stderr


# --------------------------------------------------------------------------- replay


def test_replay_reads_a_run_folder(tmp_path):
    with boxed_replies() as server:
        run = run_one(server, tmp_path, "What is six times seven?")
    assert run.returncode == 0, run.stderr
    replay = deepledger("replay", str(tmp_path / "run"), "--price", "gpt-4.1-mini")
    assert replay.returncode == 0, replay.stderr
    assert "Replayed 1 attempt journals" in replay.stdout
    assert "keep 5 tool results" in replay.stdout
    saved = json.loads((tmp_path / "run/replay.json").read_text())
    recorded = saved["policies"][0]
    assert recorded["name"] == "recorded" and len(recorded["calls"]) == 2
    assert recorded["input_tokens"] > 0


def test_replay_of_a_folder_that_is_no_run_names_what_is_missing(tmp_path):
    replay = deepledger("replay", str(tmp_path))
    assert replay.returncode == 2
    assert "is not a run folder" in replay.stderr and "manifest.json" in replay.stderr


def test_the_question_stays_out_of_the_run_folders_names(tmp_path):
    question = "What is a/b, in [1, 2]: ../x?"
    with boxed_replies() as server:
        common = ["llm=openai_compatible", f"llm.base_url={server.openai_base_url}"]
        common.append("agent.main_agent.tools=[]")
        single = deepledger("run", question, *common, cwd=tmp_path)
        sweep = deepledger("run", question, *common, "-m", "llm.temperature=0,1", cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    assert sweep.returncode == 0, sweep.stderr
    # logs/<benchmark>/<model>/<time> and logs/<benchmark>/multirun/<time>/<job>
    (journal,) = [p for p in tmp_path.glob("logs/*/*/*/journal.jsonl") if "multirun" not in p.parts]
    assert journal_task(journal.parent) == question
    assert re.fullmatch(r"\d{8}_\d{6}", journal.parent.name)
    jobs = sorted(p.parent.name for p in tmp_path.glob("logs/*/multirun/*/*/journal.jsonl"))
    assert jobs == ["0_llm.temperature=0", "1_llm.temperature=1"]
    # Hydra's launcher lines are progress: stderr; stdout holds the two answer blocks only
    assert "Launching 2 jobs locally" in sweep.stderr and "#1 : " in sweep.stderr
    assert "[HYDRA]" not in sweep.stdout
    assert [line for line in sweep.stdout.splitlines() if line.startswith("Answer: ")] == [
        "Answer: 42",
        "Answer: 42",
    ]


def test_flags_may_come_after_the_overrides():
    run = deepledger("bench", "agent.keep_tool_result=5", "--cfg", "job")
    assert run.returncode == 0, run.stderr
    assert "keep_tool_result: 5" in run.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["bench", "--help"],
        ["run", "-h"],
        ["report", "--help"],
        ["bench", "--cfg", "job"],  # Hydra's own printing
        ["bench", "--hydra-help"],
    ],
)
def test_a_closed_stdout_ends_the_command_quietly(args):
    """`deepledger --help | head -1`: the reader is gone before the output is written (its
    end of the pipe is closed first, so this does not depend on who runs first)."""
    run = with_stdout_closed(*args)
    assert run.stderr == "" and run.returncode == 141  # 128 + SIGPIPE, as a shell reports


def with_stdout_closed(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``deepledger ARGS | head -0``, the reader gone before the command starts."""
    exe = shutil.which("deepledger", path=str(Path(sys.executable).parent))
    command = [exe] if exe else [sys.executable, "-m", "deepledger"]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [*command, *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            timeout=300,
        )
    finally:
        os.close(write_end)


def test_a_closed_stdout_ends_run_quietly_after_its_work(tmp_path):
    """`deepledger run ... | head -1`: Hydra runs the command and would print the
    BrokenPipeError of its answer block as a crash (exit 1); it ends 141, the run whole."""
    with boxed_replies() as server:
        run = with_stdout_closed(
            "run",
            "What is six times seven?",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            "agent.main_agent.tools=[]",
            f"hydra.run.dir={tmp_path / 'run'}",
            cwd=tmp_path,
        )
    assert run.returncode == 141, run.stderr
    assert "Traceback" not in run.stderr and "Error" not in run.stderr, run.stderr
    events = [json.loads(line)["event"] for line in (tmp_path / "run/journal.jsonl").open()]
    assert events[-1] == "task_finished"


def test_a_closed_stdout_ends_bench_report_and_replay_quietly(tmp_path):
    from deepledger.store.layout import SUMMARY

    with boxed_replies() as server:
        bench = with_stdout_closed(
            "bench",
            "llm=openai_compatible",
            f"llm.base_url={server.openai_base_url}",
            "agent.main_agent.tools=[]",
            f"benchmark.data.data_dir={ROOT / 'benchmarks/example'}",
            "benchmark.execution.max_tasks=1",
            f"hydra.run.dir={tmp_path / 'run'}",
            cwd=tmp_path,
        )
    assert bench.returncode == 141, bench.stderr
    assert "Traceback" not in bench.stderr, bench.stderr
    assert (tmp_path / "run" / SUMMARY).is_file()  # the run finished all the same
    for command in ("report", "replay"):
        run = with_stdout_closed(command, str(tmp_path / "run"), cwd=tmp_path)
        assert (run.returncode, run.stderr) == (141, ""), command
