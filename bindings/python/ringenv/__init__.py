"""ringenv: a multi-process parallel environment runtime for reinforcement learning.

Sub-envs run in worker processes; actions and observations cross through lock-free rings in
shared memory, and a waiting side spins briefly, then sleeps on a futex.

>>> import ringenv
>>> envs = ringenv.make_vec("CartPole-v1", num_envs=4, vector_kwargs={"num_workers": 2})
>>> obs, infos = envs.reset(seed=0)
>>> obs.shape, obs.dtype.name
((4, 4), 'float32')
>>> envs.close()

The built-in envs are registered in Gymnasium's registry too, so ``gymnasium.make_vec`` (and
RLlib, with ``gym_env_vectorize_mode="vector_entry_point"``) builds the same vector env:

>>> import gymnasium as gym
>>> envs = gym.make_vec("ringenv/CartPole-v1", 4, vectorization_mode="vector_entry_point", num_workers=2)
>>> type(envs).__name__, envs.num_envs
('AsyncVectorEnv', 4)
>>> envs.close()
"""

try:
    from ringenv import _native  # noqa: F401 - the compiled extension, first, for a clear error
except ImportError as e:
    raise ImportError(
        f"ringenv's compiled extension (ringenv._native, _native.abi3.so) cannot be imported from "
        f"{__path__[0]}: a source tree without its build, or a broken install. Install the wheel, or build "
        f"it into the tree with `pip install -e .` at the repository's root") from e

from ringenv import errors
from ringenv._allocator import settle_allocator
from ringenv.registration import VectorEntryPoint, builtin_env_ids, make_vec, register, register_builtins
from ringenv.vector import AsyncVectorEnv

__all__ = ["AsyncVectorEnv", "make_vec", "register", "VectorEntryPoint", "builtin_env_ids", "errors", "settle_allocator"]

# Gymnasium ids "ringenv/CartPole-v1", "ringenv/BlocksWorld-v0" for gymnasium.make_vec (no process starts).
register_builtins()
__version__ = "0.1.0"
