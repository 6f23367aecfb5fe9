#!/usr/bin/env bash
# Stable-Baselines3's own vector env tests against ringenv: tests/test_vec_envs.py and
# tests/test_dict_env.py of the installed SB3 version, with SB3's SubprocVecEnv replaced by
# ringenv.sb3.SubprocVecEnv through a conftest.py (or, with --own, with SB3's own class, for
# comparison). The tests are fetched into a scratch directory, never into the repository:
#
#   1. $SB3_SRC, if set: a checkout of github.com/DLR-RM/stable-baselines3 at the tag of the
#      installed version (v2.x.y);
#   2. else the sdist from the package registry (`pip download --no-binary :all:`), if it holds
#      tests/;
#   3. else a shallow `git clone` of that tag (needs github.com).
#
# Usage: scripts/sb3_suite.sh [--own] [pytest arguments...]   (prints pytest's summary line)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-${RINGENV_VENV:-.venv}/bin/python}"
[[ "$PY" == */* ]] && PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"  # the suite runs elsewhere
OWN=0
if [[ "${1:-}" == "--own" ]]; then OWN=1; shift; fi
VERSION="$("$PY" -c 'import stable_baselines3; print(stable_baselines3.__version__)')"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/sb3_suite.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

SRC="${SB3_SRC:-}"
if [[ -z "$SRC" ]]; then
    echo "== stable-baselines3 $VERSION: sdist from the package registry"
    if "$PY" -m pip download --quiet --no-deps --no-binary :all: "stable-baselines3==$VERSION" -d "$WORK/dist"; then
        tar -xzf "$WORK"/dist/*.tar.gz -C "$WORK"
        for d in "$WORK"/stable_baselines3-* "$WORK"/stable-baselines3-*; do
            if [[ -f "$d/tests/test_vec_envs.py" ]]; then SRC="$d"; fi
        done
        [[ -n "$SRC" ]] || echo "   the sdist of stable-baselines3 $VERSION has no tests/ directory"
    fi
fi
if [[ -z "$SRC" ]]; then
    echo "== git clone --branch v$VERSION of github.com/DLR-RM/stable-baselines3"
    if git clone --quiet --depth 1 --branch "v$VERSION" https://github.com/DLR-RM/stable-baselines3 "$WORK/repo"; then
        SRC="$WORK/repo"
    else
        echo "No source of SB3's tests: set SB3_SRC to a checkout of stable-baselines3 at tag v$VERSION" >&2
        exit 2
    fi
fi

SUITE="$WORK/suite"
mkdir -p "$SUITE"
cp "$SRC/tests/test_vec_envs.py" "$SRC/tests/test_dict_env.py" "$SUITE/"
if [[ "$OWN" == 0 ]]; then
    # Before the test modules import it (their parametrize lists hold the class itself).
    cat > "$SUITE/conftest.py" <<'PYEOF'
import stable_baselines3.common.vec_env as vec_env
import stable_baselines3.common.vec_env.subproc_vec_env as subproc_vec_env

from ringenv.sb3 import SubprocVecEnv

vec_env.SubprocVecEnv = SubprocVecEnv
subproc_vec_env.SubprocVecEnv = SubprocVecEnv


def pytest_report_header(config):
    return f"SubprocVecEnv is {SubprocVecEnv.__module__}.{SubprocVecEnv.__qualname__}"


def pytest_collection_finish(session):
    import sys

    for name in ("test_vec_envs", "test_dict_env"):
        assert sys.modules[name].SubprocVecEnv is SubprocVecEnv, f"{name} kept SB3's SubprocVecEnv"
PYEOF
    echo "== SB3 $VERSION's test_vec_envs.py and test_dict_env.py with ringenv.sb3.SubprocVecEnv"
else
    echo "== SB3 $VERSION's test_vec_envs.py and test_dict_env.py with SB3's own SubprocVecEnv"
fi
cd "$SUITE"
# SB3's tests make a logger folder per model in the temporary directory (SB3-<date>); keep them in
# this run's work folder, removed on exit, instead of leaving ~150 folders in /tmp.
LOGS="$WORK/tmp"
mkdir -p "$LOGS"
status=0
TMPDIR="$LOGS" "$PY" -m pytest -q -p no:cacheprovider -o addopts="" "$@" test_vec_envs.py test_dict_env.py | tail -n 25 || status=$?
exit "$status"
