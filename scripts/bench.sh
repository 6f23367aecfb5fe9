#!/usr/bin/env bash
# Regenerates benches/RESULTS.md: set-up as for the demo (plus the `bench` extra: envpool,
# psutil), then every benchmark in one run: the speed targets of issue 5 (Python envs of 0, 40 and
# 750 µs per step against Gymnasium's vector envs; Rust CartPole against EnvPool), the criterion
# ring round trip with its socket peer, the main job's table, `ringenv bench`, and the examples
# (SB3 PPO on CartPole; TorchRL's ParallelEnv against ringenv's under a collector). ~15 min on
# 2 cores. Usage: scripts/bench.sh [--seconds S] [--skip-examples] [--max-workers N] [--device cuda]
# (scripts/bench.py --help lists every option).
set -euo pipefail
cd "$(dirname "$0")/.."
RINGENV_EXTRAS="${RINGENV_EXTRAS:-test,bench}" scripts/setup.sh
exec "${RINGENV_VENV:-.venv}/bin/python" scripts/bench.py "$@"
