#!/usr/bin/env bash
# Regenerates benches/RESULTS.md: set-up as for the demo, then every benchmark in one run
# (criterion ring round trip with its socket peer, the main job's table, `ringenv bench`).
# Usage: scripts/bench.sh [--seconds S] [--criterion-seconds S]
set -euo pipefail
cd "$(dirname "$0")/.."
RINGENV_EXTRAS="${RINGENV_EXTRAS:-test,bench}" scripts/setup.sh
exec "${RINGENV_VENV:-.venv}/bin/python" scripts/bench.py "$@"
