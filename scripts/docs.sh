#!/usr/bin/env bash
# Builds the documentation site (docs/, mkdocs.yml) into target/site in strict mode: a broken link,
# a page missing from the nav or a docstring griffe cannot parse fails the build. Installs the
# pinned toolchain of docs/requirements.txt into the virtualenv (RINGENV_VENV, default .venv) first.
# The API reference is read from the source (bindings/python, and ringenv/_native.pyi for the
# compiled module), so nothing needs to be built or imported.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RINGENV_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r docs/requirements.txt
NO_MKDOCS_2_WARNING=1 "$VENV/bin/python" -m mkdocs build --strict --clean --config-file mkdocs.yml --site-dir target/site
echo "docs: target/site/index.html"
