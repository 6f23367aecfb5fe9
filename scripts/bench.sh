#!/usr/bin/env bash
# Regenerates benches/RESULTS.md: set-up as for the demo (plus the `bench` extra: envpool,
# minigrid), then scripts/bench.py (issue 5's targets: Python envs of 0, 40 and 750 µs per step
# against Gymnasium's vector envs, Rust CartPole against EnvPool; the criterion ring round trip with
# its socket peer, the main job's table, `ringenv bench`, and issue 7's examples; ~15 min on 2
# cores), then benches/grid.py (issue 12's grid, quiet and with a busy neighbour, with its targets'
# verdicts; ~10 min on 2 cores), then benches/ray_scaling.py (issue 15: ringenv.ray on a simulated
# 2-node Ray cluster against a local pool and one actor per env; ~4 min), then
# benches/obs_copies.py (issue 12 item 3: the copies of a ~150 KB Dict observation; ~1 min), then
# benches/text_obs.py (Text observations of a text world; ~30 s), then benches/own_step.py (an env's
# own step inside each runtime, issue 12's "why is it slower in a worker"; ~1 min), then
# benches/wakeup_policy.py (issue 12's wake-up target: the default against fixed spin bounds, quiet
# and with a busy neighbour; ~11 min), then benches/async_share.py (asynchronous batches with and
# without the inline share; a few minutes), then benches/idle_cpu.py (what an idle pool costs, with
# the default wait policy and with spin_us=0; ~4 min), then benches/startup.py (how long a vector env
# takes to start and close, beside the peers; ~20 s); the last nine replace their own sections of
# the file.
# Usage: scripts/bench.sh [scripts/bench.py options]      all three, bench.py with these options
#        scripts/bench.sh --grid [benches/grid.py options] the grid only (e.g. --grid --quick)
#        scripts/bench.sh --ray [benches/ray_scaling.py options] the Ray benchmark only
# (scripts/bench.py --help and benches/grid.py --help list every option).
set -euo pipefail
cd "$(dirname "$0")/.."
RINGENV_EXTRAS="${RINGENV_EXTRAS:-test,bench}" scripts/setup.sh
PY="${RINGENV_VENV:-.venv}/bin/python"
if [ "${1:-}" = "--grid" ]; then
    shift
    exec "$PY" benches/grid.py "$@"
fi
if [ "${1:-}" = "--ray" ]; then
    shift
    exec "$PY" benches/ray_scaling.py "$@"
fi
"$PY" scripts/bench.py "$@"
"$PY" benches/grid.py
"$PY" benches/ray_scaling.py
"$PY" benches/obs_copies.py
"$PY" benches/text_obs.py
"$PY" benches/own_step.py
"$PY" benches/wakeup_policy.py
"$PY" benches/async_share.py
"$PY" benches/idle_cpu.py
exec "$PY" benches/startup.py
