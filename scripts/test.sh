#!/usr/bin/env bash
# Set everything up on a fresh machine and run the whole test suite (and the linter).
# Extra arguments go to pytest, e.g. scripts/test.sh -k retry
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check src tests
.venv/bin/python -m pytest "$@"
