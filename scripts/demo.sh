#!/usr/bin/env bash
# The main job: set up from nothing (scripts/setup.sh with the `demo` extra: ringenv's core
# dependencies and MiniGrid), then step real environments through ringenv and through Gymnasium's
# SyncVectorEnv, AsyncVectorEnv and vectorised CartPole in the same run, default settings
# everywhere, and print steps per second with ringenv's ratio to the best peer (scripts/demo.py).
# Usage: scripts/demo.sh [--seconds S] [--json PATH] [--markdown PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
RINGENV_EXTRAS="${RINGENV_EXTRAS:-demo}" scripts/setup.sh
exec "${RINGENV_VENV:-.venv}/bin/python" scripts/demo.py "$@"
