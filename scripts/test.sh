#!/usr/bin/env bash
# The test command (CI's .ci/run): the set-up with the `test` extra (scripts/setup.sh), then the
# docs site, the Rust tests, the type checks, the loom models, a short soak, the wheel (manylinux
# check, and a smoke test under CPython 3.10 to 3.13), an RLlib smoke run and pytest. Each stage
# prints its time.
set -euo pipefail
cd "$(dirname "$0")/.."
# One build per tree: Cargo's incremental caches would only take disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
PY="${RINGENV_VENV:-.venv}/bin/python"
START=$SECONDS

stage() {  # stage NAME COMMAND...: runs the command under a heading, then prints its time
    local name=$1 start=$SECONDS
    shift
    echo "== $name"
    "$@"
    echo "-- $name: $((SECONDS - start)) s"
}

stage "set-up" scripts/setup.sh
stage "docs site from docs/ and the docstrings, built strictly into target/site" scripts/docs.sh
stage "cargo test (unit, cross-process, pool integration, doctests)" cargo test --workspace --locked
stage "the runtime without its cuda feature has no CUDA symbol" cargo test -p ringenv-runtime --locked --test staging
stage "type stubs" "$PY" -m mypy.stubtest ringenv._native
stage "type annotations" "$PY" -m mypy -p ringenv --ignore-missing-imports
stage "loom models of the rings and the wake-up protocol (docs/RELIABILITY.md)" \
    env RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=3 \
    cargo test -p ringenv-runtime --release --locked --test loom_ring --test loom_wakeup
if cargo +nightly miri --version >/dev/null 2>&1; then
    stage "Miri" cargo +nightly miri test -p ringenv-runtime --lib -- ring:: layout:: header:: descriptor:: futex:: wakeup:: wait::
fi
stage "soak (short; scripts/soak.py --steps 10000000 for the full run)" "$PY" scripts/soak.py
stage "one wheel: manylinux (auditwheel), installed and smoke-tested under CPython 3.10 to 3.13" scripts/wheel_smoke.sh
stage "RLlib: one PPO iteration on ringenv pools, under RLlib's own Gymnasium" scripts/rllib_smoke.sh
echo "-- all but pytest: $((SECONDS - START)) s"
echo "== pytest"
"${RINGENV_VENV:-.venv}/bin/python" -m pytest tests/python -q -rs -n 2 --dist loadfile
