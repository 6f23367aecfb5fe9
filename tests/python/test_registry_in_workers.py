"""Ids the caller registered reach its worker processes (``ringenv/_registry.py``).

A worker never runs the caller's script, so an id registered there (``gym.register`` in the
script, or a package that registers its ids when imported, as ``minigrid`` and ``ale_py`` do)
was unknown in the worker: ``gym.make(id)`` in a factory failed with ``NameNotFound``, where
Gymnasium's ``AsyncVectorEnv`` and SB3's ``SubprocVecEnv`` work. Each scenario runs as a script
(``__main__``, as users run them), in every layout with a worker process, and compares the
steps with ``SyncVectorEnv``'s.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

#: A package that registers its id when imported, as minigrid does, and whose spaces hold none
#: of its classes (nothing else would make a worker import it).
_PACKAGE = {
    "__init__.py": """
        import gymnasium as gym
        gym.register("RegPkg/Counter-v0", entry_point="regpkg.envs:CounterEnv", max_episode_steps=3)
        """,
    "envs.py": """
        import gymnasium as gym, numpy as np

        class CounterEnv(gym.Env):
            observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
            action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.t = int(self.np_random.integers(0, 10))
                return np.array([self.t], np.float32), {}

            def step(self, action):
                self.t += 1 + int(action)
                return np.array([self.t], np.float32), 1.0, False, False, {}
        """,
}

_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[2])
import gymnasium as gym, numpy as np, ringenv
import regpkg  # registers RegPkg/Counter-v0 here, and nowhere else

class ScriptEnv(gym.Env):
    observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float(self.np_random.uniform())
        return np.array([self.x, 0], np.float32), {}

    def step(self, action):
        self.x += 0.5 + int(action)
        return np.array([self.x, 1], np.float32), self.x, False, False, {}

gym.register("Script-v0", entry_point=ScriptEnv, max_episode_steps=4)  # an entry point of the script

layout = {"default": {}, "workers-only": {"inline": False}, "two-workers": {"num_workers": 2}}[sys.argv[1]]
for env_id in ("RegPkg/Counter-v0", "Script-v0"):
    fns = [lambda: gym.make(env_id)] * 4
    runs = []
    for envs in (ringenv.AsyncVectorEnv(fns, **layout), gym.vector.SyncVectorEnv(fns),
                 ringenv.make_vec(env_id, 4, vector_kwargs=layout)):
        run = [envs.reset(seed=5)[0].tolist()]
        for t in range(6):
            obs, reward, terminated, truncated, _ = envs.step(np.array([t % 2, 1, 0, 1]))
            run.append([obs.tolist(), reward.tolist(), truncated.tolist()])
        envs.close()
        runs.append(run)
    assert runs[0] == runs[1] == runs[2], (env_id, runs)
    assert any(any(step[2]) for step in runs[1][1:]), "the runs cover a truncation"
print("equal")
"""


@pytest.mark.parametrize("layout", ["default", "workers-only", "two-workers"])
def test_ids_registered_by_the_script_and_by_an_imported_package_work_in_the_workers(tmp_path, layout):
    package = tmp_path / "regpkg"
    package.mkdir()
    for name, text in _PACKAGE.items():
        (package / name).write_text(textwrap.dedent(text))
    done = subprocess.run([sys.executable, "-c", _SCRIPT, layout, str(tmp_path)], capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == "equal", done.stderr[-4000:]
    # The worker registered the package's id by importing the package, as the caller did, so
    # nothing registered it twice.
    assert "Overriding environment" not in done.stderr, done.stderr[-4000:]


def test_only_the_callers_own_registrations_are_carried():
    import gymnasium as gym

    from ringenv._registry import carried, install

    specs = carried()
    assert "CartPole-v1" not in specs  # Gymnasium registers its own in every process
    gym.register("CarriedOnly-v0", entry_point="helper_envs:CounterEnv")
    try:
        specs = carried()
        assert "CarriedOnly-v0" in specs
        del gym.registry["CarriedOnly-v0"]
        install({"CarriedOnly-v0": specs["CarriedOnly-v0"], "Broken-v0": b"not a pickle"})
        assert gym.registry["CarriedOnly-v0"].entry_point == "helper_envs:CounterEnv"
        assert "Broken-v0" not in gym.registry  # a spec that cannot be loaded is skipped
    finally:
        gym.registry.pop("CarriedOnly-v0", None)
