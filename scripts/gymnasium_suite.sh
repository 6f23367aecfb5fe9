#!/usr/bin/env bash
# Runs Gymnasium's own vector-env test suite (`tests/vector` of Gymnasium at tag v1.4.0, the
# version ringenv is tested against) with `gymnasium.vector.AsyncVectorEnv` replaced by
# `ringenv.AsyncVectorEnv`, and prints pytest's summary. Gymnasium's code is fetched into
# target/gymnasium-suite/ (ignored by git), never committed.
#
#   scripts/gymnasium_suite.sh                 # ringenv.AsyncVectorEnv in place of Gymnasium's
#   scripts/gymnasium_suite.sh --gymnasium     # Gymnasium's own class, for comparison
#   scripts/gymnasium_suite.sh --source DIR    # take tests/ from DIR (a Gymnasium checkout)
#   scripts/gymnasium_suite.sh -- -k async     # anything after -- goes to pytest
#
# The tests come from --source DIR (or $GYMNASIUM_SRC), a checkout of Gymnasium at v1.4.0, else a
# shallow git clone of its tag (its sdist holds no tests/vector); the tree is kept in
# target/gymnasium-suite/ (delete it to fetch again). Needs ringenv built into $PYTHON (default
# .venv/bin/python), gymnasium==1.4.0, pytest and pygame. Exit status: pytest's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
VERSION=1.4.0
TAG="v$VERSION"
REPO_URL="https://github.com/Farama-Foundation/Gymnasium"
CACHE="$ROOT/target/gymnasium-suite"
SRC="$CACHE/gymnasium-$VERSION"
CLASS=ringenv
SOURCE="${GYMNASIUM_SRC:-}"
PYTEST_ARGS=()

while [ $# -gt 0 ]; do
    case "$1" in
        --gymnasium) CLASS=gymnasium ;;
        --ringenv) CLASS=ringenv ;;
        --source) SOURCE="$2"; shift ;;
        --) shift; PYTEST_ARGS=("$@"); break ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

installed="$("$PYTHON" -c 'import gymnasium; print(gymnasium.__version__)')"
if [ "$installed" != "$VERSION" ]; then
    echo "gymnasium $installed is installed for $PYTHON, but the suite is Gymnasium $VERSION's: install gymnasium==$VERSION" >&2
    exit 2
fi
"$PYTHON" -c 'import pytest' 2>/dev/null || { echo "pytest is not installed for $PYTHON" >&2; exit 2; }

# --- fetch tests/ (once) ------------------------------------------------------------------------
[ -n "$SOURCE" ] && rm -rf "$SRC"  # a source given replaces the cached tree
if [ ! -d "$SRC/tests/vector" ]; then
    rm -rf "$SRC" && mkdir -p "$CACHE"
    tmp="$(mktemp -d "$CACHE/fetch.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    found=""
    if [ -n "$SOURCE" ]; then
        [ -d "$SOURCE/tests/vector" ] || { echo "$SOURCE has no tests/vector" >&2; exit 2; }
        found="$SOURCE" origin="$SOURCE$( (git -C "$SOURCE" rev-parse HEAD 2>/dev/null || true) | sed 's/^/, commit /')"
    fi
    if [ -z "$found" ]; then
        echo "cloning $REPO_URL at $TAG ..."
        if GIT_TERMINAL_PROMPT=0 git clone --quiet --depth 1 --branch "$TAG" "$REPO_URL" "$tmp/repo" 2>/dev/null; then
            found="$tmp/repo" origin="$REPO_URL at $TAG, commit $(git -C "$tmp/repo" rev-parse HEAD)"
        else
            echo "cannot reach $REPO_URL: give a checkout of Gymnasium $TAG with --source DIR (or GYMNASIUM_SRC)" >&2
            exit 2
        fi
    fi
    mkdir -p "$SRC"
    cp -r "$found/tests" "$SRC/tests"
    echo "$origin" > "$SRC/ORIGIN"
    rm -rf "$tmp"
    trap - EXIT
fi

# --- conftest: swap the class before any test module imports it --------------------------------
# Only tests/ is copied (not Gymnasium's package), so the installed gymnasium is the one tested.
cat > "$SRC/conftest.py" <<'EOF'
"""Written by ringenv's scripts/gymnasium_suite.sh: with GYMNASIUM_SUITE_CLASS=ringenv, every
name under which the tests reach Gymnasium's AsyncVectorEnv (``gymnasium.vector.AsyncVectorEnv``,
``gymnasium.vector.async_vector_env.AsyncVectorEnv``, and through them ``gymnasium.make_vec(...,
vectorization_mode="async")``) is ``ringenv.AsyncVectorEnv``."""
import os

import gymnasium.vector
import gymnasium.vector.async_vector_env

if os.environ.get("GYMNASIUM_SUITE_CLASS") == "ringenv":
    import ringenv

    gymnasium.vector.AsyncVectorEnv = ringenv.AsyncVectorEnv
    gymnasium.vector.async_vector_env.AsyncVectorEnv = ringenv.AsyncVectorEnv


def pytest_report_header(config):
    cls = gymnasium.vector.AsyncVectorEnv
    return f"AsyncVectorEnv under test: {cls.__module__}.{cls.__qualname__}"
EOF
# Gymnasium's own pytest settings (pyproject.toml [tool.pytest.ini_options]).
printf '[pytest]\nfilterwarnings =\n    ignore::DeprecationWarning:gymnasium.*:\n' > "$SRC/pytest.ini"

cd "$SRC"
echo "Gymnasium's tests/vector from $(cat ORIGIN 2>/dev/null || echo '?'), gymnasium $installed, AsyncVectorEnv = $CLASS"
set +e
GYMNASIUM_SUITE_CLASS="$CLASS" "$PYTHON" -m pytest tests/vector -q -p no:cacheprovider --disable-warnings -rf "${PYTEST_ARGS[@]}"
status=$?
set -e
exit $status
