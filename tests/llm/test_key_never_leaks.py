"""The API key reaches only ``llm.base_url``, in the provider's auth header: a redirect
is refused (never followed to another host), and a server that quotes the key back in
its error does not get it printed, logged or stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from deepledger.errors import EndpointRejectedError, FatalLLMError, LLMError
from deepledger.llm.anthropic import AnthropicClient
from deepledger.llm.base import GenerationSettings, LLMClient
from deepledger.llm.openai import AzureOpenAIChatClient, OpenAIChatClient
from deepledger.messages import Message

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-CANARY-key-0123456789abcdef"
AUTH_HEADERS = ("authorization", "api-key", "x-api-key")


def _handler(answer: Callable[[BaseHTTPRequestHandler], tuple[int, dict, bytes]], seen: list):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            seen.append({k.lower(): v for k, v in self.headers.items()})
            status, headers, body = answer(self)
            self.send_response(status)
            for name, value in {**headers, "content-length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    return Handler


@contextmanager
def serving(host: str, answer, seen: list) -> Iterator[str]:
    server = ThreadingHTTPServer((host, 0), _handler(answer, seen))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def completion(_: BaseHTTPRequestHandler) -> tuple[int, dict, bytes]:
    body = {
        "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    return 200, {"content-type": "application/json"}, json.dumps(body).encode()


def echoing_key(status: int):
    """An error that quotes back every auth header the request carried."""

    def answer(request: BaseHTTPRequestHandler) -> tuple[int, dict, bytes]:
        quoted = " ".join(f"{h}: {request.headers.get(h)}" for h in AUTH_HEADERS)
        body = {"type": "error", "error": {"type": "invalid", "message": f"Bad key ({quoted})"}}
        return status, {"content-type": "application/json"}, json.dumps(body).encode()

    return answer


CLIENTS: dict[str, Callable[[str], LLMClient]] = {
    "openai": lambda url: OpenAIChatClient(
        "gpt-4.1", api_key=KEY, base_url=f"{url}/v1", timeout_seconds=10
    ),
    "azure": lambda url: AzureOpenAIChatClient(
        "gpt-4.1",
        api_key=KEY,
        base_url=f"{url}/openai/deployments/d",
        api_version="2024-10-21",
        timeout_seconds=10,
    ),
    "anthropic": lambda url: AnthropicClient(
        "claude-test-model", api_key=KEY, base_url=url, timeout_seconds=10
    ),
}


async def ask(client: LLMClient) -> LLMError:
    try:
        await client.generate([Message.task("q")], settings=GenerationSettings(max_tokens=10))
    except LLMError as exc:
        return exc
    finally:
        await client.aclose()
    raise AssertionError("the call succeeded")


@pytest.mark.parametrize("provider", sorted(CLIENTS))
async def test_a_redirect_to_another_host_is_refused_and_the_key_stays_home(provider):
    home_seen: list = []
    other_seen: list = []
    with serving("127.0.0.2", completion, other_seen) as other:

        def redirect(request: BaseHTTPRequestHandler) -> tuple[int, dict, bytes]:
            return 307, {"location": f"{other}{request.path}"}, b""

        with serving("127.0.0.1", redirect, home_seen) as home:
            error = await ask(CLIENTS[provider](home))
    assert other_seen == []  # nothing at all reached the other host, with or without a key
    assert len(home_seen) == 1 and any(h in home_seen[0] for h in AUTH_HEADERS)
    assert isinstance(error, FatalLLMError) and error.status == 307
    assert "llm.base_url" in str(error) and other in str(error)
    assert KEY not in str(error)


@pytest.mark.parametrize("status", [401, 400])
@pytest.mark.parametrize("provider", sorted(CLIENTS))
async def test_a_key_quoted_in_an_error_is_blanked_out(provider, status):
    seen: list = []
    with serving("127.0.0.1", echoing_key(status), seen) as url:
        error = await ask(CLIENTS[provider](url))
    assert any(KEY in str(v) for v in seen[0].values())  # the server did get (and quote) it
    assert f"HTTP {status}" in str(error) and "Bad key" in str(error)
    assert KEY not in str(error) and KEY not in repr(error.args)
    if status == 401:
        assert isinstance(error, EndpointRejectedError)


def walk_for(folder: Path, secret: str) -> list[str]:
    """Every file under ``folder`` whose bytes contain ``secret``."""
    return [
        str(path.relative_to(folder))
        for path in sorted(folder.rglob("*"))
        if path.is_file() and secret.encode() in path.read_bytes()
    ]


def deepledger(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENAI_API_KEY": KEY, "DEEPLEDGER_PLAIN_PROGRESS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "deepledger", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


OFFLINE = ("llm=openai", "agent.main_agent.tools=[]", "llm.retry.max_attempts=1")


@pytest.mark.parametrize("status", [401, 400])
def test_deepledger_run_never_prints_or_stores_a_quoted_key(tmp_path, status):
    with serving("127.0.0.1", echoing_key(status), []) as url:
        run = deepledger(
            "run",
            "question=hi",
            *OFFLINE,
            f"llm.base_url={url}/v1",
            f"hydra.run.dir={tmp_path / 'run'}",
            cwd=tmp_path,
        )
    assert run.returncode != 0
    assert "Bad key" in run.stderr + run.stdout  # the server's words are still shown
    assert KEY not in run.stdout + run.stderr
    assert walk_for(tmp_path, KEY) == []


def test_deepledger_bench_never_prints_or_stores_a_quoted_key(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    task = {"task_id": "t1", "task_question": "What is 1 + 1?", "ground_truth": "2"}
    (data / "standardized_data.jsonl").write_text(json.dumps(task))
    with serving("127.0.0.1", echoing_key(400), []) as url:
        bench = deepledger(
            "bench",
            f"benchmark.data.data_dir={data}",
            "benchmark.name=tiny",
            "benchmark.judge.name=normalized",
            *OFFLINE,
            f"llm.base_url={url}/v1",
            f"hydra.run.dir={tmp_path / 'run'}",
            cwd=tmp_path,
        )
    results = (tmp_path / "run" / "benchmark_results.jsonl").read_text()
    assert "Bad key" in results, bench.stderr  # the 400 was recorded, key blanked out
    assert KEY not in bench.stdout + bench.stderr
    assert walk_for(tmp_path, KEY) == []
