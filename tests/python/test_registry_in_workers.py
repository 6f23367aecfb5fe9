"""Ids the caller registered reach its worker processes (``ringenv/_registry.py``).

A worker never runs the caller's script, so an id registered there (``gym.register`` in the
script, or a package that registers its ids when imported, as ``minigrid`` and ``ale_py`` do)
was unknown in the worker: ``gym.make(id)`` in a factory failed with ``NameNotFound``, where
Gymnasium's ``AsyncVectorEnv`` and SB3's ``SubprocVecEnv`` work; an id the script registered
again (a built-in's, or a package's) made the stock env there. Each scenario runs as a script
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
gym.register("ScriptByName-v0", entry_point="__main__:ScriptEnv", max_episode_steps=3)  # named by a string
gym.register("RegPkg/Counter-v0", entry_point="regpkg.envs:CounterEnv", max_episode_steps=2)  # the package's id, again
gym.register("CartPole-v1", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
             max_episode_steps=5)  # a built-in id, again, with another limit
gym.register("FrozenLake-NoSlip-v0", entry_point="gymnasium.envs.toy_text.frozen_lake:FrozenLakeEnv",
             kwargs={"is_slippery": False}, max_episode_steps=4)  # a new id of a built-in entry point

layout = {"default": {}, "workers-only": {"inline": False}, "two-workers": {"num_workers": 2}}[sys.argv[1]]
for env_id in ("RegPkg/Counter-v0", "Script-v0", "ScriptByName-v0", "CartPole-v1", "FrozenLake-NoSlip-v0"):
    fns = [lambda: gym.make(env_id)] * 4
    runs = []
    for envs in (ringenv.AsyncVectorEnv(fns, **layout), gym.vector.SyncVectorEnv(fns),
                 ringenv.make_vec(env_id, 4, vector_kwargs=layout, prefer_builtin=False)):
        run = [envs.reset(seed=5)[0].tolist()]
        for t in range(6):
            obs, reward, terminated, truncated, _ = envs.step(np.array([t % 2, 1, 0, 1]))
            run.append([obs.tolist(), reward.tolist(), terminated.tolist(), truncated.tolist()])
        envs.close()
        runs.append(run)
    assert runs[0] == runs[1] == runs[2], (env_id, runs)
    assert any(any(step[3]) for step in runs[1][1:]), f"the runs of {env_id} cover a truncation"
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
    # The script's own two registrations again warn in the caller, as under Gymnasium; a worker's
    # import of the package, registering its id over the caller's spec, warns nowhere.
    assert done.stderr.count("WARN: Overriding environment") == 2, done.stderr[-4000:]


def test_a_worker_makes_each_env_against_the_callers_registry():
    """In-process: what a worker's ``CallerRegistry`` does with the caller's registry. Each
    ``apply`` sets the caller's spec of every id, including after an import registered its
    package's own spec again (silently, for the carried ids only); a spec that fails to load is
    skipped."""
    import pickle

    import gymnasium as gym

    from ringenv._registry import CallerRegistry, carried

    cartpole = gym.spec("CartPole-v1")
    gym.register("CarriedOnly-v0", entry_point="helper_envs:CounterEnv", max_episode_steps=7)
    try:
        data = carried()
        caller = pickle.loads(data)
        assert {"CartPole-v1", "CarriedOnly-v0"} <= caller["specs"].keys()
        caller["specs"]["Broken-v0"] = b"not a pickle"
        del gym.registry["CarriedOnly-v0"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # then the worker's own filter, which comes first
            registry = CallerRegistry(pickle.dumps(caller))
            registry.apply()
            assert gym.spec("CarriedOnly-v0").max_episode_steps == 7
            assert "Broken-v0" not in gym.registry
            gym.register("CarriedOnly-v0", entry_point="helper_envs:CounterEnv", max_episode_steps=99)  # its package
            assert gym.spec("CarriedOnly-v0").max_episode_steps == 99
            registry.apply()
            assert gym.spec("CarriedOnly-v0").max_episode_steps == 7  # the next factory gets the caller's again
            gym.register("Other-v0", entry_point="helper_envs:CounterEnv")
            gym.register("Other-v0", entry_point="helper_envs:CounterEnv")  # not carried: warned
        assert [str(w.message) for w in caught if "CarriedOnly-v0" in str(w.message)] == []
        assert any("Overriding environment Other-v0" in str(w.message) for w in caught)
    finally:
        for env_id in ("CarriedOnly-v0", "Other-v0"):
            gym.registry.pop(env_id, None)
        gym.registry["CartPole-v1"] = cartpole
