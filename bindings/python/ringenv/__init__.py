"""ringenv: a multi-process parallel environment runtime for reinforcement learning.

Sub-envs run in worker processes; actions and observations cross through lock-free rings in
shared memory, and a waiting side spins briefly, then sleeps on a futex.

>>> import ringenv
>>> envs = ringenv.make_vec("CartPole-v1", num_envs=4, vector_kwargs={"num_workers": 2})
>>> obs, infos = envs.reset(seed=0)
>>> obs.shape, obs.dtype.name
((4, 4), 'float32')
>>> envs.close()
"""

from ringenv import errors
from ringenv.registration import builtin_env_ids, make_vec
from ringenv.vector import AsyncVectorEnv

__all__ = ["AsyncVectorEnv", "make_vec", "builtin_env_ids", "errors"]
__version__ = "0.1.0"
