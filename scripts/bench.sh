#!/usr/bin/env bash
# Regenerates benches/RESULTS.md: the demo's set-up plus the `bench` extra (envpool, minigrid),
# then benches/run_all.py with these options (benches/run_all.py --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
RINGENV_EXTRAS="${RINGENV_EXTRAS:-test,bench}" scripts/setup.sh
exec "${RINGENV_VENV:-.venv}/bin/python" benches/run_all.py "$@"
