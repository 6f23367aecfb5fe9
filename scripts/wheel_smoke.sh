#!/usr/bin/env bash
# One wheel for every CPython from 3.10 on: checks that the wheel scripts/setup.sh built
# (target/wheels/ringenv-*-cp310-abi3-manylinux*.whl) is manylinux (`auditwheel show` of the
# symbols it links agrees with its tag), then installs it into a
# fresh virtualenv under CPython 3.10, 3.11, 3.12 and 3.13 (target/smoke-venv-3.X) and runs
# scripts/smoke.py there: reset, step, a worker's death, close, with built-in Rust and Python envs.
# Run by scripts/test.sh and .github/workflows/release.yml.
#
# - The install sees no Rust toolchain and builds nothing; dependencies come from
#   target/wheelhouse-3.X (filled from the registry on the first run).
# - An interpreter is python3.X on PATH, else the newest ${PYENV_ROOT:-~/.pyenv}/versions/3.X.*;
#   a missing one fails unless RINGENV_SMOKE_ALLOW_MISSING=1. RINGENV_SMOKE_PYTHONS picks them.
# - 3.10 (RINGENV_SMOKE_FLOORS) gets the oldest dependency versions pyproject.toml allows and also
#   runs $FLOOR_TESTS; the others get the newest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VERSIONS="${RINGENV_SMOKE_PYTHONS:-3.10 3.11 3.12 3.13}"
FLOORS="${RINGENV_SMOKE_FLOORS:-3.10}"
FLOOR_TESTS=(test_main_script.py test_spawn_main.py test_errors.py test_inline.py
             test_worker_death.py test_gymnasium_equivalence.py test_scalar_observations.py)

shopt -s nullglob
wheels=(target/wheels/ringenv-*-abi3-*.whl)
shopt -u nullglob
if [ "${#wheels[@]}" -ne 1 ]; then
    echo "expected one abi3 wheel in target/wheels (built by scripts/setup.sh), found ${#wheels[@]}: ${wheels[*]:-none}" >&2
    exit 1
fi
WHEEL="$ROOT/${wheels[0]}"
python3 -c "import sys, zipfile; sys.exit('ringenv/_native.abi3.so' not in zipfile.ZipFile(sys.argv[1]).namelist())" \
    "$WHEEL" || { echo "$WHEEL holds no ringenv/_native.abi3.so" >&2; exit 1; }
echo "wheel: ${wheels[0]} (ringenv/_native.abi3.so)"
# The tag says manylinux_2_N, and so do the glibc symbol versions the extension links.
tag=$(basename "$WHEEL" | grep -o "manylinux_2_[0-9]*_$(uname -m)" | head -n 1 || true)
tag="${tag:-no manylinux tag}"
AUDITWHEEL=$(command -v auditwheel || echo "$ROOT/${RINGENV_VENV:-.venv}/bin/auditwheel")
if [[ "$WHEEL" != *"$tag"* ]] || ! "$AUDITWHEEL" show "$WHEEL" | tr '\n' ' ' | grep -q "consistent with the following platform tag: \"$tag\""; then
    "$AUDITWHEEL" show "$WHEEL" >&2 || true
    echo "$WHEEL is not a $tag wheel" >&2
    exit 1
fi
echo "auditwheel: $tag"

# PATH without cargo, rustc and rustup.
NO_RUST_PATH=""
IFS=: read -r -a path_dirs <<< "$PATH"
for d in "${path_dirs[@]}"; do
    [ -n "$d" ] || continue
    if [ -e "$d/cargo" ] || [ -e "$d/rustc" ] || [ -e "$d/rustup" ]; then continue; fi
    NO_RUST_PATH="${NO_RUST_PATH:+$NO_RUST_PATH:}$d"
done

find_python() {  # prints a working CPython $1 (3.X), or nothing
    local v=$1 p
    local candidates=("$(command -v "python$v" 2>/dev/null || true)")
    candidates+=($(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$v".*/bin/"python$v" 2>/dev/null | sort -V -r))
    for p in "${candidates[@]}"; do
        [ -n "$p" ] && [ -x "$p" ] || continue
        # A pyenv shim exists for every version but runs only the selected ones.
        if "$p" -c "import sys; sys.exit(sys.implementation.name != 'cpython' or '%d.%d' % sys.version_info[:2] != '$v')" \
            >/dev/null 2>&1; then
            echo "$p"
            return
        fi
    done
}

# Each lower bound of pyproject.toml's dependencies and `plot` extra, pinned (`numpy>=1.21.6` ->
# `numpy==1.21.6`).
python3 - "$ROOT/pyproject.toml" > "$ROOT/target/floors.txt" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
for requirement in project["dependencies"] + project["optional-dependencies"]["plot"]:
    floor = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)(,<[0-9.]+)?", requirement)
    if floor is None:
        sys.exit(f"pyproject.toml: dependency {requirement!r} has no `>=X` lower bound to test")
    print(f"{floor[1]}=={floor[2]}")
PY

HOST_PYTHON=$(python3 -c "import sys; print(sys.executable)")  # its pip installs into each virtualenv
start_all=$(date +%s)
failed=()
for v in $VERSIONS; do
    py=$(find_python "$v")
    if [ -z "$py" ]; then
        if [ "${RINGENV_SMOKE_ALLOW_MISSING:-0}" = 1 ]; then
            echo "python$v not found: skipped"
            continue
        fi
        echo "python$v not found (set RINGENV_SMOKE_ALLOW_MISSING=1 to skip it)" >&2
        failed+=("$v")
        continue
    fi
    venv="$ROOT/target/smoke-venv-$v"
    wheelhouse="$ROOT/target/wheelhouse-$v"
    echo "-- python$v ($py): fresh virtualenv target/smoke-venv-$v"
    start=$(date +%s)
    rm -rf "$venv"
    "$py" -m venv --without-pip "$venv"
    install=("$WHEEL")
    if [ "$v" = "$FLOORS" ]; then
        install=("$WHEEL[plot]" --constraint "$ROOT/target/floors.txt" pytest pytest-xdist)
        echo "   the oldest dependencies pyproject.toml allows: $(tr '\n' ' ' < "$ROOT/target/floors.txt")"
    fi
    pip=(env PATH="$NO_RUST_PATH" "$HOST_PYTHON" -m pip --python "$venv/bin/python" --quiet --disable-pip-version-check)
    if ! "${pip[@]}" install --only-binary=:all: --no-index --find-links "$wheelhouse" "${install[@]}" 2>/dev/null; then
        echo "   filling target/wheelhouse-$v from the package registry"
        if ! "${pip[@]}" download --only-binary=:all: --dest "$wheelhouse" "${install[@]}" ||
            ! rm -f "$wheelhouse"/ringenv-*.whl ||
            ! "${pip[@]}" install --only-binary=:all: --no-index --find-links "$wheelhouse" "${install[@]}"; then
            echo "python$v: pip install of the wheel failed" >&2
            failed+=("$v")
            continue
        fi
    fi
    installed=$(date +%s)
    # From the virtualenv's directory, so that only the installed package can be imported.
    if (cd "$venv" && PATH="$NO_RUST_PATH" timeout 600 "$venv/bin/python" "$ROOT/scripts/smoke.py"); then
        echo "-- python$v: install $((installed - start)) s, smoke $(($(date +%s) - installed)) s"
    else
        failed+=("$v")
        continue
    fi
    if [ "$v" = "$FLOORS" ]; then
        tested=$(date +%s)
        if (cd "$venv" && PATH="$NO_RUST_PATH" timeout 900 "$venv/bin/python" -m pytest -q -n 2 -p no:cacheprovider \
                --rootdir "$ROOT" "${FLOOR_TESTS[@]/#/$ROOT/tests/python/}"); then
            echo "-- python$v with the oldest dependencies: tests $(($(date +%s) - tested)) s"
        else
            echo "python$v: tests with the oldest dependencies FAILED" >&2
            failed+=("$v (oldest dependencies)")
        fi
    fi
done
echo "wheel smoke step: $(($(date +%s) - start_all)) s in all"
if [ "${#failed[@]}" -ne 0 ]; then
    echo "wheel smoke step FAILED under python ${failed[*]}" >&2
    exit 1
fi
