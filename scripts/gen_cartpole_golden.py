#!/usr/bin/env python3
"""Generates the golden CartPole-v1 trajectories pasted into workers/src/envs/cartpole.rs.

Each trajectory starts from a fixed float64 state written into Gymnasium's CartPoleEnv and
applies a fixed action sequence (one chosen by a simple balancing rule, the others patterns that
make the pole fall or the cart leave the track) for up to 60 steps, stopping at the first
terminated step. The output is the Rust constant `GOLDEN`: per trajectory a line
`T <4 initial-state float64 bit patterns>`, a line `A <actions>`, then per step the float32
observation as 4 bit patterns and the terminated flag (`t`/`f`), two steps a line, and last a
line `S <4 final-state float64 bit patterns>` (which checks the float64 arithmetic more finely
than the float32 observations can).

Usage (regenerate and paste over the `GOLDEN` constant):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install gymnasium==1.4.0 numpy
    /tmp/venv/bin/python scripts/gen_cartpole_golden.py
"""

import struct

import gymnasium as gym
import numpy as np

assert gym.__version__ == "1.4.0", gym.__version__

STEPS = 60


def f64_hex(x: float) -> str:
    return struct.unpack("<Q", struct.pack("<d", float(x)))[0].to_bytes(8, "big").hex()


def f32_hex(x: np.float32) -> str:
    return struct.unpack("<I", struct.pack("<f", x))[0].to_bytes(4, "big").hex()


def balance(obs: np.ndarray) -> int:
    """Pushes towards the side the pole leans to, a rule that keeps it up for a long time."""
    return 1 if obs[2] + 0.5 * obs[3] > 0 else 0


# (initial state, fixed action pattern repeated to STEPS, or None for the balancing rule)
CASES = [
    ([0.01, -0.02, 0.03, 0.04], None),
    ([-0.04, 0.03, -0.02, 0.01], [0, 1]),
    ([0.0, 0.0, 0.0, 0.0], [1]),
    ([2.3, 0.5, 0.01, 0.0], [1, 1, 0]),
    ([-0.03, -0.2, -0.15, -0.6], [0, 0, 1]),
]


def main() -> None:
    env = gym.make("CartPole-v1")
    lines = []
    for init, pattern in CASES:
        env.reset(seed=0)
        env.unwrapped.state = np.array(init, dtype=np.float64)
        obs = np.array(init, dtype=np.float32)
        actions, steps = [], []
        for t in range(STEPS):
            action = balance(obs) if pattern is None else pattern[t % len(pattern)]
            obs, reward, terminated, truncated, _ = env.step(action)
            assert reward == 1.0 and not truncated
            actions.append(str(action))
            steps.append(" ".join(f32_hex(v) for v in obs) + (" t" if terminated else " f"))
            if terminated:
                break
        lines.append("T " + " ".join(f64_hex(v) for v in init))
        lines.append("A " + "".join(actions))
        for i in range(0, len(steps), 2):
            lines.append("  ".join(steps[i : i + 2]))
        lines.append("S " + " ".join(f64_hex(v) for v in env.unwrapped.state))
    print('const GOLDEN: &str = "\\')
    for line in lines:
        print(line + "\\n\\")
    print('";')


if __name__ == "__main__":
    main()
