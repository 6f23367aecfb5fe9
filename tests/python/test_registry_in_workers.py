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
import warnings

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

    def regpkg_imported(self):
        return "regpkg" in sys.modules

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
# A worker imports no package for the ids it was sent: only what its own envs load.
envs = ringenv.AsyncVectorEnv([lambda: gym.make("Script-v0")] * 2, inline=False)
assert envs.call("regpkg_imported") == (False, False)
envs.close()
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
    # Importing the package in the worker registered its id again, over the added spec, silently.
    assert "Overriding environment" not in done.stderr, done.stderr[-4000:]


def test_only_the_callers_own_registrations_are_carried():
    import gymnasium as gym

    from ringenv._registry import carried, install

    specs = carried()
    assert "CartPole-v1" not in specs  # Gymnasium registers its own in every process
    cartpole = gym.spec("CartPole-v1")
    gym.register("CarriedOnly-v0", entry_point="helper_envs:CounterEnv")
    try:
        specs = carried()
        assert "CarriedOnly-v0" in specs
        del gym.registry["CarriedOnly-v0"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # then install's own filter, which comes first
            install({"CarriedOnly-v0": specs["CarriedOnly-v0"], "Broken-v0": b"not a pickle"})
            assert gym.registry["CarriedOnly-v0"].entry_point == "helper_envs:CounterEnv"
            assert "Broken-v0" not in gym.registry  # a spec that cannot be loaded is skipped
            gym.register("CarriedOnly-v0", entry_point="helper_envs:CounterEnv")  # as its package would
            gym.register("CartPole-v1", entry_point=cartpole.entry_point, max_episode_steps=500,
                         vector_entry_point=cartpole.vector_entry_point, reward_threshold=475.0)  # not added
        assert [str(w.message) for w in caught if "CarriedOnly-v0" in str(w.message)] == []
        assert any("Overriding environment CartPole-v1" in str(w.message) for w in caught)
    finally:
        gym.registry.pop("CarriedOnly-v0", None)
        gym.registry["CartPole-v1"] = cartpole
