"""Shared test setup: no test may reach beyond loopback."""

from __future__ import annotations

import ipaddress
import socket

import pytest

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
