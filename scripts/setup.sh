#!/usr/bin/env bash
# Set-up shared by scripts/demo.sh and scripts/test.sh, from nothing: creates the virtualenv
# (RINGENV_VENV, default .venv), builds ringenv's one wheel into target/wheels and installs it
# with its extras (RINGENV_EXTRAS, default `test`).
#
# The wheel: maturin, Cargo.toml's `wheel` profile, abi3 for CPython 3.10 and later, tagged
# manylinux for the glibc it links (RINGENV_MANYLINUX, default manylinux_2_34: this machine's
# symbols; maturin refuses a tag the symbols do not meet), so it installs without Rust on any
# x86_64 Linux with that glibc or later. The release workflow (.github/workflows/release.yml)
# builds the manylinux2014 (glibc 2.17) wheel in the manylinux container. Not zig: its bundled
# unwinder replaces libgcc_s, and glibc's forced unwind of a daemon thread at interpreter exit
# then crashes inside the extension (tests/python/test_threads.py).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RINGENV_VENV:-.venv}"
EXTRAS="${RINGENV_EXTRAS:-test}"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --quiet)
if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating virtualenv $VENV"
    "${PYTHON:-python3}" -m venv "$VENV"
fi
# The dependencies (pyproject.toml's and its extras') install beside maturin and the build.
mkdir -p target
"$VENV/bin/python" - "$EXTRAS" > target/requirements.txt <<'PY'
import sys
try:
    import tomllib  # CPython 3.11 and later; under 3.10 the wheel's install brings them
except ImportError:
    sys.exit()
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = [e for e in sys.argv[1].split(",") if e]
print("\n".join(project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]))
PY
"${PIP[@]}" install -r target/requirements.txt &
DEPENDENCIES=$!
"${PIP[@]}" install "maturin>=1.5,<2"
echo "== building ringenv's wheel (${RINGENV_MANYLINUX:-manylinux_2_34}, Cargo's wheel profile) into target/wheels"
rm -f target/wheels/ringenv-*.whl
PATH="$(cd "$VENV/bin" && pwd):$PATH" "$VENV/bin/maturin" build --locked --quiet \
    --compatibility "${RINGENV_MANYLINUX:-manylinux_2_34}" --interpreter "$VENV/bin/python" --out target/wheels
wait "$DEPENDENCIES"
WHEEL=$(ls target/wheels/ringenv-*.whl)
echo "== installing $WHEEL[$EXTRAS] into $VENV"
"${PIP[@]}" install --force-reinstall --no-deps "$WHEEL"
"${PIP[@]}" install "$WHEEL[$EXTRAS]"
