#!/usr/bin/env bash
# Set everything up on a fresh machine and run the whole test suite (with the linter, the
# type checker and the docs site's build, which tests/test_docs.py runs).
# Extra arguments go to pytest, e.g. scripts/test.sh -k retry
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The Ray backend's tests start a local Ray: its optional extra.
.venv/bin/python -m pip install --quiet --constraint requirements.lock -e '.[ray]'
.venv/bin/python scripts/check_lock.py
# The report tests open reports in headless Chromium: Debian's package (no browser is
# downloaded). Without it those tests fail rather than skip under this script.
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  if command -v apt-get >/dev/null 2>&1; then
    echo "Installing Debian's chromium for the report tests"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium is missing and apt-get is not here: install Chromium to run the report tests" >&2
  fi
fi
export DEEPLEDGER_REQUIRE_BROWSER=1
# setup.sh installs bubblewrap: the sandbox escape tests must run, not skip.
export DEEPLEDGER_REQUIRE_SANDBOX=1
# Installed as a pip user installs it (Python's own pip, no lock), the reader still reads
# HTML and docx.
scripts/check_pip_install.sh
.venv/bin/ruff check src tests scripts
# Every module of src/ and the test doubles type-check under mypy --strict (settings in
# pyproject.toml).
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
