"""Worker process entry point: ``python -m ringenv._worker --python|--rust <pool arguments>``.

Started by a pool, never by hand. ``--python`` hosts Python envs built from cloudpickled
factories (the step loop is Rust, in ``ringenv._native``); ``--rust`` hosts built-in Rust envs
without touching Python again after start-up. The helpers below are called from Rust.
"""

from __future__ import annotations

import pickle
import sys
import traceback
from typing import Any, List, Tuple

import cloudpickle
import numpy as np

from ringenv import _spaces


def _build(init: bytes, info: dict):
    """Builds this worker's envs and the NumPy views of its rows of every slot.

    Returns ``(envs, obs_views, action_views, copy_action)``: ``obs_views[slot][k]`` is env k's
    observation row, ``action_views[slot]`` this worker's action rows.
    """
    outer = pickle.loads(init)
    # Like multiprocessing's spawn: the parent's import path, so factories pickled by reference
    # (functions in the caller's modules) resolve here too.
    for p in reversed(outer["sys_path"]):
        if p not in sys.path:
            sys.path.insert(0, p)
    payload = cloudpickle.loads(outer["payload"])
    env_fns, obs_space, act_space = payload["env_fns"], payload["observation_space"], payload["action_space"]
    start, stop = info["env_ids"]
    envs = []
    for k, fn in enumerate(env_fns):
        env = fn()
        env_id = start + k
        if env.observation_space != obs_space:
            raise ValueError(
                f"env {env_id} has observation space {env.observation_space!r}, but env 0 has "
                f"{obs_space!r}; every sub-env of a vector env must have the same spaces")
        if env.action_space != act_space:
            raise ValueError(
                f"env {env_id} has action space {env.action_space!r}, but env 0 has "
                f"{act_space!r}; every sub-env of a vector env must have the same spaces")
        envs.append(env)
    (obs_dtype, obs_shape), (act_dtype, act_shape) = info["obs"], info["action"]
    n = stop - start
    seg = info["segment"]
    obs_row = np.dtype(obs_dtype).itemsize * int(np.prod(obs_shape, dtype=np.int64))
    act_row = np.dtype(act_dtype).itemsize * int(np.prod(act_shape, dtype=np.int64))
    obs_views, action_views = [], []
    for obs_off, act_off in info["offsets"]:
        rows = _spaces.view(seg, obs_off + start * obs_row, obs_dtype, [n, *obs_shape])
        obs_views.append([rows[k] for k in range(n)])
        action_views.append(_spaces.view(seg, act_off + start * act_row, act_dtype, [n, *act_shape]))
    return envs, obs_views, action_views, len(act_shape) > 0


def _pack_infos(infos: List[Tuple[int, dict]]) -> bytes:
    return cloudpickle.dumps(infos)


def _unpack(payload: bytes) -> Any:
    return cloudpickle.loads(payload)


def _describe_exception(exc: BaseException) -> Tuple[str, str, str, bytes]:
    """``(type name, message, formatted traceback, pickled exception or b"")``."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        payload = cloudpickle.dumps(exc)
        pickle.loads(payload)  # refuse exceptions that cannot be re-created
    except Exception:
        payload = b""
    return type(exc).__qualname__, str(exc), tb, payload


def main(argv: List[str]) -> int:
    from ringenv import _native

    if not argv or argv[0] not in ("--python", "--rust"):
        print("usage: python -m ringenv._worker --python|--rust <arguments added by the pool>", file=sys.stderr)
        return 2
    run = _native.run_python_worker if argv[0] == "--python" else _native.run_builtin_worker
    return run(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
