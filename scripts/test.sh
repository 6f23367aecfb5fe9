#!/usr/bin/env bash
# The test command: the same set-up as the demo, then the Rust tests (unit, cross-process,
# pool integration, doctests) and the Python tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "== cargo test"
cargo test --workspace --locked
echo "== type stubs and annotations"
"${RINGENV_VENV:-.venv}/bin/python" -m mypy.stubtest ringenv._native
"${RINGENV_VENV:-.venv}/bin/python" -m mypy -p ringenv --ignore-missing-imports
echo "== pytest"
"${RINGENV_VENV:-.venv}/bin/python" -m pytest tests/python -q
