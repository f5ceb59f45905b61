"""The fault-injection suite's seed: fixed unless DEEPLEDGER_FAULT_SEED says otherwise.

Every random choice of these tests (which requests fail, where a run is killed) derives
from it, and each test prints it, so a failure can be replayed with the same faults.
"""

from __future__ import annotations

import os

import pytest

DEFAULT_SEED = 20261201


@pytest.fixture
def seed(request) -> int:
    value = int(os.environ.get("DEEPLEDGER_FAULT_SEED", DEFAULT_SEED))
    print(f"{request.node.name}: DEEPLEDGER_FAULT_SEED={value}")
    return value
