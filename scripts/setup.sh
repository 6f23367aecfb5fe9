#!/usr/bin/env bash
# Set-up shared by scripts/demo.sh and scripts/test.sh, from nothing on a fresh machine:
# creates the virtualenv (RINGENV_VENV, default .venv) and installs ringenv into it with
# `pip install .[EXTRAS]` (RINGENV_EXTRAS, default `test`; scripts/bench.sh adds `bench`), which
# builds the Rust crates in release mode through maturin and installs numpy, gymnasium,
# cloudpickle, pytest, torch, torchrl and stable-baselines3 from the package registry.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RINGENV_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
fi
echo "== installing ringenv (release build) and its dependencies into $VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check ".[${RINGENV_EXTRAS:-test}]"
