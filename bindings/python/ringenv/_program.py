"""What the workers of a :class:`ringenv.AsyncVectorEnv` run: Python envs from cloudpickled
factories (:func:`python_program`) or a Rust env served by a worker binary (:class:`RustEnvs`).
Either way the vector env learns the spaces and metadata, the worker command line and each
worker's init message from a :class:`WorkerProgram`, and builds its pool the same way.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import gymnasium as gym
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces

from ringenv import _layout
from ringenv._pickling import for_worker, local_init, pickle_unimportable_by_value
from ringenv._registry import carried
from ringenv._worker import worker_argv

__all__ = ["WorkerProgram", "RustEnvs", "python_program", "PYTHON_ONLY_OPTIONS"]

#: Options of :class:`ringenv.AsyncVectorEnv` that apply to Python envs only: a Rust env's vector
#: env (``ringenv.make_vec``) refuses them.
PYTHON_ONLY_OPTIONS = ("shared_memory", "context", "daemon", "worker", "observation_mode", "autoreset_mode",
                       "max_concurrency")


@dataclass
class WorkerProgram:
    """What the workers run, and the spaces and metadata of the envs they host.

    Attributes:
        single_observation_space, single_action_space: a sub-env's spaces.
        observation_space: the batched observation space, or ``None``: ``batch_space`` of the
            single one (made once the segment is known to fit).
        metadata, render_mode: the sub-envs' (``metadata`` without ``autoreset_mode``).
        argv: the worker command line (the pool appends its own arguments).
        make_init: ``(start, stop, inline) -> bytes``, the init message of the worker hosting
            envs ``start..stop`` (``inline``: the main process's share, ``AsyncVectorEnv``'s
            ``inline``).
        host: what can host these envs in the main process (the inline share): ``"python"``,
            ``"rust"`` (built-in Rust envs), or ``None`` (a worker binary's envs: only its
            processes can).
    """

    single_observation_space: spaces.Space
    single_action_space: spaces.Space
    observation_space: Optional[spaces.Space]
    metadata: Dict[str, Any]
    render_mode: Optional[str]
    argv: List[str]
    make_init: Callable[[int, int, bool], bytes]
    host: Optional[str]


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def python_program(env_fns: Sequence[Callable[[], gym.Env]],
                   observation_mode: Union[str, Tuple[spaces.Space, spaces.Space]],
                   autoreset_mode: AutoresetMode) -> WorkerProgram:
    """The program of Python envs made by ``env_fns``: one env is made (and closed) here to read
    the spaces and metadata (every env with ``observation_mode="different"``).

    Raises:
        TypeError: ``env_fns[0]()`` returned something that is not an env (naming its type and
            what it lacks); an ``observation_mode`` tuple whose elements are not spaces.
        ValueError: an invalid ``observation_mode``; at ``make_init``, a factory that cannot be
            pickled (naming it).
    """
    dummy = env_fns[0]()
    missing = [a for a in ("reset", "step", "action_space", "observation_space", "close") if not hasattr(dummy, a)]
    if missing:
        raise TypeError(f"env_fns[0] returned {type(dummy).__name__} {_short(dummy)}, not an env: a gymnasium.Env "
                        f"(or an object with reset, step, close, action_space and observation_space) was expected; "
                        f"it has no {', '.join(missing)}")
    try:
        metadata, render_mode, single_action_space = dict(dummy.metadata), dummy.render_mode, dummy.action_space
        observation_space: Optional[spaces.Space]
        if isinstance(observation_mode, tuple) and len(observation_mode) == 2:
            if not all(isinstance(s, spaces.Space) for s in observation_mode):
                raise TypeError(f"Expected both elements of observation_mode to be Spaces, got "
                                f"{type(observation_mode[0])} and {type(observation_mode[1])}")
            observation_space, single_observation_space = observation_mode
            worker_obs_mode = "different"
        elif observation_mode == "same":
            single_observation_space = dummy.observation_space
            observation_space = None  # batched once the segment is known to fit
            worker_obs_mode = "same"
        elif observation_mode == "different":
            env_spaces = [fn().observation_space for fn in env_fns]
            single_observation_space = env_spaces[0]
            observation_space = batch_differing_spaces(env_spaces)
            worker_obs_mode = "different"
        else:
            raise ValueError("Invalid `observation_mode`, expected: 'same' or 'different' or tuple of "
                             f"single and batch observation space, actual got {observation_mode}")
    finally:
        dummy.close()
    cfg = {
        "observation_space": single_observation_space,
        "action_space": single_action_space,
        "observation_mode": worker_obs_mode,
        "autoreset_mode": autoreset_mode.name.lower(),  # "next_step", "same_step", "disabled"
    }

    registrations: Optional[bytes] = None

    def make_init(start: int, stop: int, inline: bool = False) -> bytes:
        nonlocal registrations
        if inline:  # made in this process by the factories themselves, as SyncVectorEnv makes them
            return local_init({**cfg, "env_fns": list(env_fns[start:stop])})
        if registrations is None:  # the caller's registry, which a worker's lacks (ringenv/_registry.py)
            registrations = carried()
        pickle_unimportable_by_value(env_fns)  # factories of modules a worker cannot import (__mp_main__, run_path)
        for i in range(start, stop):
            try:
                for_worker(env_fns[i])
            except Exception as e:
                raise ValueError(f"env_fns[{i}] cannot be pickled to send it to a worker process "
                                 f"({type(e).__name__}: {e})") from e
        return pickle.dumps({"payload": for_worker({**cfg, "env_fns": env_fns[start:stop],
                                                    "registry": registrations})})

    return WorkerProgram(single_observation_space, single_action_space, observation_space, metadata, render_mode,
                         worker_argv("--python"), make_init, "python")


@dataclass
class RustEnvs:
    """``num_envs`` copies of Rust env ``id`` served by the worker program ``argv`` (the pool
    appends its four arguments): ``ringenv._worker.worker_argv("--rust")`` for the built-ins,
    ``[path]`` for a worker binary made with the ``ringenv-worker`` SDK (see
    ``ringenv.make_vec``)."""

    argv: List[str]
    id: str
    num_envs: int
    kwargs: Dict[str, Any]
    spaces_json: Tuple[dict, dict]

    def __len__(self) -> int:
        return self.num_envs

    @property
    def builtin(self) -> bool:
        """Whether these are one of ringenv's built-in Rust envs (not a worker binary's)."""
        return list(self.argv) == worker_argv("--rust")

    def program(self, on_worker_failure: str) -> WorkerProgram:
        """The program of these envs. Under ``on_worker_failure="restart"`` a panicking env makes
        its worker process exit, so that it is restarted like a crashed one; otherwise (and always
        in the main process's inline share) the panic is raised.

        Raises:
            ValueError: an action space that is not flat (naming the id).
        """
        on_panic = "exit" if on_worker_failure == "restart" else "report"
        init = json.dumps({"id": self.id, "kwargs": self.kwargs, "on_panic": on_panic}).encode()
        # A panic of an env stepped inline is always reported: exiting would end the main process.
        inline_init = json.dumps({"id": self.id, "kwargs": self.kwargs, "on_panic": "report"}).encode()
        builtin = self.builtin
        obs_d, act_d = self.spaces_json
        single_obs, single_act = _layout.from_dict(obs_d), _layout.from_dict(act_d)
        if not _layout.is_flat(single_act):
            raise ValueError(f"{self.id}: the action space {single_act!r} of a Rust env must be flat "
                             "(Box, Discrete, MultiDiscrete or MultiBinary)")

        def make_init(start: int, stop: int, inline: bool = False) -> bytes:
            return inline_init if inline else init

        return WorkerProgram(single_obs, single_act, None, {"autoreset_mode": AutoresetMode.NEXT_STEP,
                                                            "render_modes": []},
                             None, list(self.argv), make_init, "rust" if builtin else None)
