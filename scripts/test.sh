#!/usr/bin/env bash
# The test command: the same set-up as the demo, then the Rust tests (unit, cross-process,
# pool integration, doctests), the wheel's smoke test under each CPython from 3.10 to 3.13, an RLlib
# smoke run (scripts/rllib_smoke.sh), and the Python tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# One build from a clean tree gains nothing from Cargo's incremental caches (1.9 GB in target/debug).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
scripts/setup.sh
scripts/disk_check.sh 1 "The tests' builds and throwaway virtualenvs (target/)"
scripts/docs.sh  # the docs site from docs/ and the docstrings, built strictly into target/site
echo "== cargo test"
cargo test --workspace --locked
echo "== the runtime without its cuda feature has no CUDA symbol (the workspace build turns it on)"
cargo test -p ringenv-runtime --locked --test staging
echo "== type stubs and annotations"
"${RINGENV_VENV:-.venv}/bin/python" -m mypy.stubtest ringenv._native
"${RINGENV_VENV:-.venv}/bin/python" -m mypy -p ringenv --ignore-missing-imports
echo "== loom models of the rings and the wake-up protocol (docs/RELIABILITY.md)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=3 \
    cargo test -p ringenv-runtime --release --locked --test loom_ring --test loom_wakeup
if cargo +nightly miri --version >/dev/null 2>&1; then
    echo "== Miri"
    cargo +nightly miri test -p ringenv-runtime --lib -- ring:: layout:: header:: descriptor:: futex:: wakeup:: wait::
fi
echo "== soak (short; scripts/soak.py --steps 10000000 for the full run)"
"${RINGENV_VENV:-.venv}/bin/python" scripts/soak.py --steps 200000
echo "== one wheel: the abi3 wheel that setup built, installed and smoke-tested under CPython 3.10 to 3.13 (3.10 with the oldest dependencies pyproject.toml allows, and their tests)"
scripts/wheel_smoke.sh
echo "== RLlib: one PPO iteration on ringenv pools (vector_entry_point), under RLlib's own Gymnasium in a throwaway venv"
scripts/rllib_smoke.sh
echo "== pytest"
"${RINGENV_VENV:-.venv}/bin/python" -m pytest tests/python -q -rs
