"""One local Ray for the whole test session: ``local_ray``, a fixture every test can ask
for (``tests/conftest.py`` loads this module as a plugin).

Started on first use (~3 s) and shut down at the end of the session (a finalizer), so
its processes do not linger through the rest of the suite. In-process runs with
``benchmark.execution.backend=ray`` use it as they find it (``ray_backend.connect``).
Without Ray installed, or where a local Ray cannot start, the tests asking for it skip
and say why."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

RAY_MISSING = "Ray is not installed (pip install 'deepledger[ray]')"


@pytest.fixture(scope="session")
def local_ray(request: pytest.FixtureRequest) -> ModuleType:
    """The ``ray`` module, initialised with a local Ray of two CPUs and no dashboard."""
    ray = pytest.importorskip("ray", reason=RAY_MISSING)
    # A short folder of its own: Ray's Unix sockets live three levels inside it, and a
    # socket's path must stay under 108 bytes (pytest's tmp_path may not).
    temp = Path(tempfile.mkdtemp(prefix="dlt-ray-", dir="/tmp"))

    def shut_down() -> None:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)

    request.addfinalizer(shut_down)
    try:
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(temp), log_to_driver=True)
    except Exception as exc:  # no Ray on this machine: say why, once
        pytest.skip(f"a local Ray cannot start here: {type(exc).__name__}: {exc}")
    return ray
