"""A reader that goes away (``deepledger ... | head -1``, ``... 2>&1 | head -1``): the
guard of the standard streams (cli/common.py) cuts the stream quietly, once, from any
thread, and leaves every other error, and every other pipe's, to be seen."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import pytest

from deepledger.cli import main
from deepledger.cli.common import EXIT_STDOUT_CLOSED, _PipeGuardedStream, closed_pipe_guard
from tests.support.cli import ROOT, deepledger_command

BIG = "x" * 200_000  # more than a pipe and the stream's buffer hold: the write meets the pipe


@contextmanager
def closed_pipe() -> Iterator[TextIO]:
    """A text stream onto a pipe whose reader has gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "w", encoding="utf-8") as stream:
        yield stream


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_closed_pipe_cuts_the_stream_quietly_and_for_good():
    with closed_pipe() as stream:
        guarded = _PipeGuardedStream(stream)
        assert not guarded.cut
        guarded.write(BIG)
        assert guarded.cut
        assert guarded.write("more") == 4
        guarded.flush()
        guarded.writelines(["a\n", "b\n"])
        os.write(stream.fileno(), b"the descriptor now goes nowhere\n")  # no EPIPE


def test_two_threads_meeting_the_closed_pipe_cut_it_once():
    with closed_pipe() as stream:
        guarded = _PipeGuardedStream(stream)
        before = open_fds()
        barrier = threading.Barrier(4)
        failures: list[BaseException] = []

        def write() -> None:
            barrier.wait(timeout=30)
            try:
                for _ in range(5):
                    guarded.write(BIG)
                    guarded.flush()
            except BaseException as exc:  # the assertion below names it
                failures.append(exc)

        threads = [threading.Thread(target=write) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert failures == [] and guarded.cut
        assert open_fds() == before  # /dev/null opened for the cut, and closed again


class OtherPipe:
    """A stream whose own descriptor is a healthy pipe, writing through another pipe
    that broke (a subprocess's): its BrokenPipeError is no reader of ours gone."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()

    def fileno(self) -> int:
        return self.write_end

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def close(self) -> None:
        os.close(self.read_end)
        os.close(self.write_end)


def test_a_broken_pipe_that_is_not_the_streams_own_is_raised():
    other = OtherPipe()
    try:
        guarded = _PipeGuardedStream(other)  # type: ignore[arg-type]
        with pytest.raises(BrokenPipeError):
            guarded.write("x")
        with pytest.raises(BrokenPipeError):
            guarded.flush()
        assert not guarded.cut
    finally:
        other.close()


def test_a_guarded_terminal_is_still_a_terminal_to_rich():
    from rich.console import Console

    leader, follower = os.openpty()
    try:
        with open(follower, "w", encoding="utf-8") as tty:
            guarded = _PipeGuardedStream(tty)
            assert guarded.isatty() and guarded.fileno() == follower
            assert guarded.encoding == "utf-8" and guarded.buffer is tty.buffer
            assert Console(file=guarded).is_terminal  # type: ignore[arg-type]
    finally:
        os.close(leader)


def test_the_guard_covers_stdout_and_stderr_and_gives_them_back(monkeypatch):
    with closed_pipe() as out, closed_pipe() as err:
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        with closed_pipe_guard() as streams:
            print(BIG, file=sys.stderr)  # progress lines piped into head (2>&1)
            assert streams.cut and streams.stderr.cut and not streams.stdout.cut
        assert (sys.stdout, sys.stderr) == (out, err)


def test_a_command_that_failed_keeps_its_code_when_the_pipe_closed_too(monkeypatch):
    from deepledger.cli import replay

    def command(code: int) -> object:
        def run(args: list[str]) -> int:
            print(BIG)
            return code

        return run

    for code, exits in ((0, EXIT_STDOUT_CLOSED), (1, 1)):  # 1: the pipe is not why it failed
        with closed_pipe() as out:  # a new one: the cut made the last one /dev/null
            monkeypatch.setattr(sys, "stdout", out)
            monkeypatch.setattr(replay, "replay_command", command(code))
            assert main(["replay", "x"]) == exits


def test_a_broken_pipe_of_the_commands_own_is_not_swallowed(monkeypatch):
    from deepledger.cli import replay

    def command(args: list[str]) -> int:
        read_end, write_end = os.pipe()  # a subprocess's stdin, say, whose reader died
        os.close(read_end)
        try:
            os.write(write_end, b"x")
        finally:
            os.close(write_end)
        return 0

    monkeypatch.setattr(replay, "replay_command", command)
    with pytest.raises(BrokenPipeError):
        main(["replay", "x"])


def test_a_bench_whose_progress_pipe_closed_finishes_its_run(tmp_path: Path):
    """`deepledger bench ... 2>&1 | head -1`: the progress lines meet the closed pipe; the
    run still ends whole (its summary written), quietly, with 141."""
    from deepledger.store.layout import SUMMARY
    from tests.support.doubles.fake_llm_server import FakeLLMServer, Reply

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        with FakeLLMServer(responder=lambda request: Reply("\\boxed{42}")) as server:
            bench = subprocess.run(
                [
                    *deepledger_command(),
                    "bench",
                    "llm=openai_compatible",
                    f"llm.base_url={server.openai_base_url}",
                    "agent.main_agent.tools=[]",
                    f"benchmark.data.data_dir={ROOT / 'benchmarks/example'}",
                    "benchmark.execution.max_tasks=2",
                    f"hydra.run.dir={tmp_path / 'run'}",
                ],
                stdout=subprocess.PIPE,
                stderr=write_end,
                text=True,
                cwd=tmp_path,
                env={**os.environ, "DEEPLEDGER_PLAIN_PROGRESS": "1"},
                timeout=300,
            )
    finally:
        os.close(write_end)
    assert bench.returncode == EXIT_STDOUT_CLOSED
    assert "2 tasks of 2 expected" in bench.stdout  # the summary, after the cut stderr
    assert (tmp_path / "run" / SUMMARY).is_file()
