#!/usr/bin/env bash
# The main job: set up from nothing, build in release mode, then step real environments
# through ringenv and through Gymnasium's own vector envs, and print steps per second.
# Usage: scripts/demo.sh [--seconds S]   (seconds per measurement, default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec "${RINGENV_VENV:-.venv}/bin/python" scripts/demo.py "$@"
