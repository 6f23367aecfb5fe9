#!/usr/bin/env bash
# The measurements that need a machine with an NVIDIA GPU and 16 cores, as one prepared run of
# about six minutes (the GPU machines reach no package registry, and their Python is CPython 3.12
# with PyTorch, NumPy, cloudpickle and psutil).
#
#   scripts/device_check.sh prepare        # here: builds ringenv's wheel (scripts/setup.sh) and
#                                          # puts it in .whl/ (ignored by git) beside the wheels of
#                                          # its dependencies that the GPU machine lacks
#   scripts/device_check.sh run DIR [PHASE ...]
#                                          # there, with .whl/ carried: installs them into
#                                          # /tmp/site, then runs each PHASE (default all) under its
#                                          # own time limit, writing its section into DIR/RESULTS.md
#                                          # (a copy of benches/RESULTS.md) and its log into DIR/
#
# Phases: device_rows (the GPU path against the CPU path and the user's own copies), main_cost
# (the main process's CPU per batch with 16 workers), grid (the 16-core ceiling at 40 µs per
# step, beside the peers), train_loop (the actor loop with the policy on the GPU).
# RINGENV_DEVICE=cpu runs the same phases with the CPU in the GPU's place (PYTHON: the interpreter,
# default python3): a check of this script on any machine, not a measurement.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
prepare)
    scripts/setup.sh
    rm -rf .whl && mkdir .whl
    cp target/wheels/ringenv-*-abi3-*.whl .whl/
    # The GPU machine's CPython 3.12 lacks these; pinned to the versions this virtualenv runs.
    pins=$(.venv/bin/python - <<'PY'
from importlib.metadata import version
print(" ".join(f"{n}=={version(n)}" for n in
               ("gymnasium", "farama-notifications", "rich", "markdown-it-py", "mdurl", "pygments")))
PY
)
    # shellcheck disable=SC2086
    .venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl $pins
    ls -l .whl
    ;;
run)
    out=${2:?"run DIR: the folder for RESULTS.md and the logs"}
    shift 2
    phases=("$@")
    [ ${#phases[@]} -gt 0 ] || phases=(device_rows main_cost grid train_loop)
    mkdir -p "$out" /tmp/site
    python=${PYTHON:-python3}
    "$python" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
    cp benches/RESULTS.md "$out/RESULTS.md"
    device=${RINGENV_DEVICE:-cuda}
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/machine.txt" 2>&1 || true
    echo "cores: $(nproc)" >> "$out/machine.txt"
    status=0
    for phase in "${phases[@]}"; do
        case "$phase" in
        device_rows) limit=130 cmd=(benches/device_rows.py --device "$device" --seconds 0.8 --rounds 2) ;;
        main_cost) limit=70 cmd=(benches/main_cost.py --workers 16 --sizes 32,256 --seconds 0.6 --rounds 1) ;;
        grid) limit=100 cmd=(benches/grid.py --neighbour off --costs 40 --num-envs 32 --workers 16
                            --cartpole-envs 256 --seconds 0.6) ;;
        train_loop) limit=90 cmd=(benches/train_loop.py --devices "$device" --num-envs 32 --seconds 1
                                  --warmup 0.3) ;;
        *) echo "unknown phase $phase" >&2; exit 2 ;;
        esac
        echo "== $phase (at most $limit s): ${cmd[*]}"
        timeout -s INT "$limit" "$python" "${cmd[@]}" --output "$out/RESULTS.md" > "$out/$phase.log" 2>&1 || {
            echo "$phase ended with status $? (log: $out/$phase.log)"; status=1; }
        tail -n 25 "$out/$phase.log"
    done
    exit $status
    ;;
*)
    sed -n '2,19p' "$0" >&2
    exit 2
    ;;
esac
