"""Shared test setup: no test may reach beyond loopback."""

from __future__ import annotations

import ipaddress
import shutil
import socket
from pathlib import Path

import pytest

# the small_disk fixture; local_ray, one Ray for the session
pytest_plugins = ["tests.support.disks", "tests.support.ray"]

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_local(address: object) -> bool:
    if not isinstance(address, tuple):  # AF_UNIX paths and the like
        return True
    host = str(address[0])
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _guarded(real):
    def connect(self, address):
        if not _is_local(address):
            raise ConnectionRefusedError(f"tests must not leave loopback (tried {address!r})")
        return real(self, address)

    return connect


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch):
    monkeypatch.setattr(socket.socket, "connect", _guarded(_real_connect))
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded(_real_connect_ex))


# -- run directories written by real runs (tests/support/runs.py), once a session -----
# Each test gets its own copy: some of them damage the files on purpose.


@pytest.fixture(scope="session")
def _recorded_runs(tmp_path_factory):
    return tmp_path_factory.mktemp("recorded-runs")


@pytest.fixture(scope="session")
def _finished_run(_recorded_runs):
    from tests.support.runs import record_run

    return record_run(_recorded_runs / "finished")


@pytest.fixture(scope="session")
def _killed_run(_recorded_runs):
    from tests.support.runs import record_killed_run

    return record_killed_run(_recorded_runs / "killed")


@pytest.fixture(scope="session")
def _runs_keeping(_recorded_runs):
    from tests.support.runs import record_runs_keeping

    return record_runs_keeping(_recorded_runs / "keeping", (-1, 5))


@pytest.fixture
def finished_run(_finished_run, tmp_path):
    """A finished run: six WorldFacts tasks, the last one an error."""
    return Path(shutil.copytree(_finished_run, tmp_path / "run"))


@pytest.fixture
def killed_run(_killed_run, tmp_path):
    """A run whose process was killed in its fourth task; two tasks never started."""
    return Path(shutil.copytree(_killed_run, tmp_path / "run"))


@pytest.fixture
def runs_keeping(_runs_keeping, tmp_path):
    """Two finished runs that differ in agent.keep_tool_result (-1 and 5), side by side."""
    return [Path(shutil.copytree(run, tmp_path / run.name)) for run in _runs_keeping]


def pytest_terminal_summary(terminalreporter):
    """Processes the tests started and left running, by command line: a test that builds
    a tool pool or a server and never closes it shows up here, not as a failure (the
    leak tests check their own processes), so it can be found and fixed."""
    import os

    from tests.support.processes import command_line, descendants_now

    left = sorted(descendants_now(os.getpid()))
    if left:
        terminalreporter.write_sep("-", f"{len(left)} processes the tests left running")
        for process in left:
            terminalreporter.write_line(f"{process[0]}: {command_line(process)[:300]}")
