#!/usr/bin/env bash
# Install deepledger as a pip user does — a fresh venv with the interpreter's own pip,
# not upgraded, the ranges of pyproject.toml and not the lock — and read an HTML page and
# a Word file through its reader. Catches what only an older pip or an unpinned
# dependency breaks (pip 23 skipped lxml's html_clean extra: every page failed to read).
# scripts/test.sh runs it; about a minute once pip's cache holds the wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m venv "$WORK/venv"
PIP_VERSION="$("$WORK/venv/bin/python" -m pip --version | cut -d' ' -f2)"
echo "Installing deepledger into a fresh venv with $("$PYTHON" --version)'s own pip $PIP_VERSION"
# A copy of the source: the build must not write into the work tree (build/, *.egg-info).
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$WORK" --one-top-level=src-copy
"$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$WORK/src-copy" \
  2> >(grep -v "^WARNING: Location" >&2)
"$WORK/venv/bin/python" scripts/check_pip_install.py
