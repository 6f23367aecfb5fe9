#!/usr/bin/env bash
# The main job: set up from nothing (scripts/setup.sh: a release build of ringenv with its `test`
# extra, which brings minigrid), then step real environments through ringenv and through
# Gymnasium's SyncVectorEnv, AsyncVectorEnv and vectorised CartPole in the same run, default
# settings everywhere, and print steps per second with ringenv's ratio to the best peer (about a
# minute after the set-up on 2 cores).
# Usage: scripts/demo.sh [--seconds S] [--json PATH]   (seconds per measurement, default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
RINGENV_EXTRAS="${RINGENV_EXTRAS:-test}" scripts/setup.sh
exec "${RINGENV_VENV:-.venv}/bin/python" scripts/demo.py "$@"
