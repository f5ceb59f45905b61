"""Serving the viewer with uvicorn: the port taken (the next free one when the asked one
is in use), the address printed, and Ctrl-C ending it quietly."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

from deepledger.errors import ConfigError

PORTS_TRIED = 50  # the asked port and the next ones, before giving up


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reached only from this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host`` at ``port`` or, when that one is in use, the next
    free port after it; a one-line error when none of the next few is free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for candidate in range(port, min(port + PORTS_TRIED, 65536)):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, candidate))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                continue
            raise ConfigError(
                f"cannot listen on {host}:{candidate} ({exc.strerror}); choose another --host."
            ) from exc
        sock.listen(128)
        return sock
    raise ConfigError(
        f"ports {port}-{port + PORTS_TRIED - 1} on {host} are all in use; "
        "choose another with --port."
    )


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def allowed_hosts(host: str) -> list[str] | None:
    """The names a request may address a viewer bound to ``host`` by: on loopback only
    loopback names (a DNS name rebound to 127.0.0.1 or ::1 is refused); elsewhere any."""
    if not is_loopback(host):
        return None
    return ["127.0.0.1", "localhost", f"[{host}]" if ":" in host else host]


def serve(logs: Path, sock: socket.socket, *, allow_questions: bool) -> None:
    """Serve the viewer of ``logs`` on ``sock`` until interrupted."""
    import uvicorn

    from deepledger.view.app import create_app

    hosts = allowed_hosts(sock.getsockname()[0])
    app = create_app(logs, allow_questions=allow_questions, hosts=hosts)
    config = uvicorn.Config(
        app,
        log_level="warning",
        # Open event streams of live runs must not hold Ctrl-C up for long.
        timeout_graceful_shutdown=1,
        lifespan="off",
    )
    try:
        _quiet_server_class()(config).run(sockets=[sock])
    finally:  # the questions asked here end with the viewer, reaped
        from deepledger.view.questions import stop_all

        stop_all(app.state.viewer.asked.values())


def _quiet_server_class() -> type:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """uvicorn's server, except that the Ctrl-C which stops it is not raised again
        once it has stopped (uvicorn does, and the process would die of the signal at
        whatever line it had reached): ``deepledger view`` ends with 130 itself."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            stops = (signal.SIGINT, signal.SIGTERM)
            before = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

    return QuietServer
