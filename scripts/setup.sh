#!/usr/bin/env bash
# Set-up shared by scripts/demo.sh and scripts/test.sh, from nothing on a fresh machine:
# creates the virtualenv (RINGENV_VENV, default .venv), builds ringenv's wheel once with
# `pip wheel .` (maturin builds the Rust crates with Cargo.toml's `wheel` profile, release with
# fat LTO; one abi3 wheel for CPython 3.10 and later, left in target/wheels for
# scripts/wheel_smoke.sh), and installs it with its extras (RINGENV_EXTRAS, default `test`;
# scripts/bench.sh adds `bench`): numpy, gymnasium, cloudpickle, pytest, torch, torchrl and
# stable-baselines3 from the package registry.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RINGENV_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
if [ ! -x "$VENV/bin/python" ]; then
    # From nothing the disk peaked 9.0 GiB above where it started, during the install (the
    # virtualenv is 5.9 GiB, torch's CUDA libraries most of it, and pip's downloads sit in TMPDIR
    # meanwhile); the Rust builds and tests after it stay below that peak.
    scripts/disk_check.sh 8 "A set-up from nothing (a virtualenv with torch, and the Rust builds)"
    echo "== creating virtualenv $VENV"
    "$PYTHON" -m venv "$VENV"
fi
echo "== building ringenv's wheel (Cargo's wheel profile: release with fat LTO) into target/wheels"
rm -f target/wheels/ringenv-*.whl
"${PIP[@]}" wheel --quiet --no-deps --wheel-dir target/wheels .
WHEEL=$(ls target/wheels/ringenv-*.whl)
echo "== installing $WHEEL and its dependencies into $VENV"
"${PIP[@]}" install --quiet --force-reinstall --no-deps "$WHEEL"
"${PIP[@]}" install --quiet "$WHEEL[${RINGENV_EXTRAS:-test}]"
