#!/usr/bin/env bash
# RLlib with ringenv: one tiny PPO iteration of examples/ray_rllib_ppo.py --smoke, whose env runner
# builds its vector env with gym_env_vectorize_mode="vector_entry_point" (checked to be
# ringenv.vector.AsyncVectorEnv, with its own worker processes). Run by scripts/test.sh.
#
# RLlib pins an older Gymnasium, so this runs in its own venv (target/rllib-venv: ray[rllib] at the
# test venv's Ray version and the wheel scripts/setup.sh built, remade when Ray or Python change);
# torch comes from the test venv's site-packages through a .pth file, after the venv's own.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RINGENV_VENV:-.venv}"
RVENV=target/rllib-venv

shopt -s nullglob
wheels=(target/wheels/ringenv-*.whl)
shopt -u nullglob
if [ "${#wheels[@]}" -ne 1 ]; then
    echo "expected one wheel in target/wheels (built by scripts/setup.sh), found ${#wheels[@]}" >&2
    exit 1
fi
RAY_VERSION=$("$VENV/bin/python" -c "import ray; print(ray.__version__)")
TORCH_SITE=$("$VENV/bin/python" -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
START=$SECONDS
PIP=("$RVENV/bin/python" -m pip --disable-pip-version-check --quiet)
MADE_FOR="ray $RAY_VERSION, $("$VENV/bin/python" -V)"
if [ "$(cat "$RVENV/made-for" 2>/dev/null)" != "$MADE_FOR" ]; then
    rm -rf "$RVENV"
    "$VENV/bin/python" -m venv "$RVENV"
    "${PIP[@]}" install "${wheels[0]}" "ray[rllib]==$RAY_VERSION"
    echo "$MADE_FOR" > "$RVENV/made-for"
fi
"${PIP[@]}" install --force-reinstall --no-deps "${wheels[0]}"
RSITE=$("$RVENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$TORCH_SITE" > "$RSITE/zz_ringenv_test_venv.pth"
"$RVENV/bin/python" - "$RSITE" <<'EOF'
import os, sys
import gymnasium, ray, ringenv, torch
site = os.path.realpath(sys.argv[1])
for module in (gymnasium, ray, ringenv):
    assert os.path.realpath(module.__file__).startswith(site), f"{module.__name__} imported from {module.__file__}"
print(f"rllib venv: gymnasium {gymnasium.__version__}, ray {ray.__version__}, torch {torch.__version__} (test venv's)")
EOF
INSTALLED=$SECONDS
timeout 600 "$RVENV/bin/python" examples/ray_rllib_ppo.py --smoke
echo "rllib smoke: venv and install $((INSTALLED - START)) s, PPO iteration $((SECONDS - INSTALLED)) s"
