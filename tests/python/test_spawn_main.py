"""Env factories defined in the main script of a process started by multiprocessing's ``spawn``
start method. There the script runs again as module ``__mp_main__``, and cloudpickle would send
its functions and classes by reference to ``__mp_main__``, which no worker can import; ringenv
sends them by value, as it does ``__main__``'s."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD_SCRIPT = textwrap.dedent('''
    import multiprocessing

    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces


    class Walk(gym.Env):
        """An env class defined in the main script (in the spawned child: in __mp_main__)."""

        def __init__(self, step_size):
            self.observation_space = spaces.Box(-100, 100, (1,), np.float32)
            self.action_space = spaces.Discrete(2)
            self.step_size = step_size
            self.x = 0.0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.x = float(self.np_random.integers(10))
            return np.array([self.x], np.float32), {}

        def step(self, action):
            self.x += self.step_size if action else -self.step_size
            return np.array([self.x], np.float32), 1.0, False, False, {"module": __name__}


    def make_walk():  # a factory defined in the main script too
        return Walk(step_size=2.0)


    def child(queue):
        import ringenv

        try:
            envs = ringenv.AsyncVectorEnv([make_walk, make_walk, make_walk], num_workers=2)
            try:
                obs, _ = envs.reset(seed=0)
                obs2, _, _, _, infos = envs.step(np.array([1, 0, 1]))
                queue.put(("ok", make_walk.__module__, (obs2 - obs).ravel().tolist(), list(infos["module"])))
            finally:
                envs.close()
        except BaseException as e:
            queue.put(("error", make_walk.__module__, f"{type(e).__name__}: {e}", None))


    if __name__ == "__main__":
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        process = ctx.Process(target=child, args=(queue,))
        process.start()
        print(queue.get(timeout=50))
        process.join(10)
''')


def test_factories_of_a_spawned_childs_main_script_reach_the_workers(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CHILD_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=55,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = eval(done.stdout.strip().splitlines()[-1])  # the tuple the child put in the queue
    assert result[:2] == ("ok", "__mp_main__"), result
    assert result[2] == [2.0, -2.0, 2.0]
    assert result[3] == ["__mp_main__"] * 3  # the class ran in the workers with its own module name
