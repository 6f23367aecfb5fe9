"""``ringenv.torchrl.ParallelEnv``: a drop-in for ``torchrl.envs.ParallelEnv`` whose sub-envs are
stepped by :class:`ringenv.AsyncVectorEnv` (worker processes, shared memory, futex wake-ups).

It is a TorchRL :class:`~torchrl.envs.EnvBase` of batch size ``[num_workers]``: TensorDicts in and
out, the specs TorchRL's own ``GymWrapper`` declares for one sub-env expanded to the batch, and
``reset`` / ``step`` / ``step_and_maybe_reset`` / ``rollout`` / ``set_seed`` returning what
TorchRL's ``ParallelEnv`` (or ``SerialEnv``) of ``GymEnv``s returns, bit for bit.

>>> import functools, gymnasium as gym, torch
>>> from ringenv.torchrl import ParallelEnv
>>> env = ParallelEnv(4, functools.partial(gym.make, "CartPole-v1"), num_processes=2)
>>> env.set_seed(0) > 0
True
>>> data = env.rollout(10, break_when_any_done=False)
>>> data.batch_size, data["next", "observation"].dtype
(torch.Size([4, 10]), torch.float32)
>>> env.close()

Words: a *worker* of TorchRL's API (``num_workers``) is one sub-env here; the sub-envs run in
``num_processes`` worker processes of ringenv (default: ringenv's, the cores less one, with the
main process stepping the last group itself), each stepping a contiguous group of them.

TorchRL's collectors take it as they take their own ``ParallelEnv``. To overlap the policy with the
envs, give each collector process of TorchRL's ``MultiAsyncCollector`` a ``ParallelEnv`` of its own
(docs/TORCHRL.md).

The module is named ``torchrl`` inside the package ``ringenv``; it imports the real ``torchrl``
package by absolute import and is imported as ``import ringenv.torchrl`` (``import ringenv``
alone does not import torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict, TensorDictBase
from torchrl._utils import seed_generator
from torchrl.data import Composite, MultiOneHot
from torchrl.envs import EnvBase
from torchrl.envs.libs.gym import GymWrapper

from ringenv import _layout
from ringenv.vector import AsyncVectorEnv

__all__ = ["ParallelEnv"]

#: Keyword arguments of ``torchrl.envs.ParallelEnv`` accepted for compatibility that change
#: nothing here: ringenv has its own transport (shared memory, no pipes or buffers to choose),
#: starts workers with fork+exec, and they always die with the main process.
_TORCHRL_NO_EFFECT = frozenset({
    "shared_memory", "mp_start_method", "daemon", "use_buffers", "consolidate", "serial_for_single",
    "metadata_from_workers", "non_blocking", "auto_wrap_envs",
})
#: Keyword arguments of ``torchrl.envs.ParallelEnv`` accepted only with their default value(s).
_TORCHRL_DEFAULT_ONLY: Dict[str, Tuple[Any, ...]] = {
    "pin_memory": (False,), "allow_step_when_done": (False,), "memmap": (False,), "policy_proof": (None,),
    "share_individual_td": (None, False),
}
#: Keyword arguments passed on to :class:`ringenv.AsyncVectorEnv`.
_RINGENV_KWARGS = frozenset({
    "startup_timeout", "on_worker_failure", "max_restarts", "restart_window", "worker_env", "check_actions",
})
#: Observation and action leaves that cross as arrays, batched along the first dimension.
_ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
_WHAT_TO_PASS = ("create_env_fn must return a gymnasium.Env (e.g. functools.partial(gymnasium.make, 'CartPole-v1')) "
                 "or a TorchRL GymEnv / GymWrapper of one")


def _make_unwrap() -> Callable[[Any, str], Tuple[gym.Env, Any]]:
    """The function that turns what ``create_env_fn`` returned into the gymnasium env to step:
    ``unwrap(obj, where) -> (gymnasium_env, torchrl_wrapper_or_None)``."""

    def unwrap(obj: Any, where: str) -> Tuple[gym.Env, Any]:
        import sys

        import gymnasium

        if isinstance(obj, gymnasium.vector.VectorEnv):
            raise TypeError(f"{where} returned a vector env ({type(obj).__name__}); {_WHAT_TO_PASS}, "
                            "one env per call: ParallelEnv batches them")
        if isinstance(obj, gymnasium.Env):
            return obj, None
        libs_gym = sys.modules.get("torchrl.envs.libs.gym")  # loaded if obj is a TorchRL GymWrapper
        if libs_gym is not None and isinstance(obj, libs_gym.GymWrapper):
            if tuple(obj.batch_size):
                raise TypeError(f"{where} returned a batched {type(obj).__name__} (batch_size "
                                f"{tuple(obj.batch_size)}); {_WHAT_TO_PASS}, one env per call")
            if obj.wrapper_frame_skip != 1:
                raise ValueError(f"{where} returned a {type(obj).__name__} with frame_skip={obj.wrapper_frame_skip}, "
                                 "which ringenv.torchrl.ParallelEnv does not reproduce; give frame_skip=1 and "
                                 "skip frames in a gymnasium wrapper")
            if obj.info_dict_reader:
                raise ValueError(f"{where} returned a {type(obj).__name__} with an info dict reader; "
                                 "ringenv.torchrl.ParallelEnv does not read infos (as GymEnv without one)")
            env = obj._env
            obj.is_closed = True  # the wrapper is dropped; its __del__ must not close the env it hands over
            return env, obj
        raise TypeError(f"{where} returned a {type(obj).__module__}.{type(obj).__qualname__}; {_WHAT_TO_PASS}. "
                        "Transforms go around the ParallelEnv: TransformedEnv(ParallelEnv(...), transform)")

    return unwrap


def _sub_env_factory(create_env_fn: Callable[..., Any], kwargs: dict, index: int,
                     unwrap: Callable[[Any, str], Tuple[gym.Env, Any]],
                     first: Optional[gym.Env] = None) -> Callable[[], gym.Env]:
    """A factory of sub-env ``index`` for :class:`ringenv.AsyncVectorEnv` (nested, so cloudpickle
    sends it by value)."""
    handoff = [] if first is None else [first]

    def make_sub_env() -> gym.Env:
        if handoff:
            return handoff.pop()
        env, _ = unwrap(create_env_fn(**kwargs), f"create_env_fn for worker {index}")
        return env

    return make_sub_env


def _check_space(space: spaces.Space, what: str) -> None:
    """Raises ``ValueError`` unless ``space`` is a Box, Discrete, MultiDiscrete or MultiBinary
    (for observations: or a Dict of those)."""
    if what == "observation" and isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            _check_space(sub, f"{what}[{key!r}]")
        return
    if not isinstance(space, _ARRAY_SPACES):
        kinds = "Box, Discrete, MultiDiscrete, MultiBinary" + (" or a Dict of those" if what != "action" else "")
        raise ValueError(f"the {what} space {space!r} is not supported by ringenv.torchrl.ParallelEnv (supported: "
                         f"{kinds}); use torchrl.envs.ParallelEnv for it")


def _seed_chain(seed: Optional[int], n: int, static_seed: bool) -> Tuple[List[Optional[int]], Optional[int]]:
    """The seeds TorchRL's batched envs give their ``n`` sub-envs from ``seed``, and the next seed:
    sub-env ``i`` gets ``seed`` advanced ``i`` times by ``torchrl._utils.seed_generator`` (not
    advanced with ``static_seed``), as ``SerialEnv.set_seed`` / ``ParallelEnv.set_seed`` do."""
    seeds: List[Optional[int]] = []
    for _ in range(n):
        seeds.append(seed)
        if seed is not None and not static_seed:
            seed = seed_generator(seed)
    return seeds, seed


class ParallelEnv(EnvBase):
    """``num_workers`` sub-envs as one TorchRL env of batch size ``[num_workers]``, stepped in
    ringenv worker processes: a drop-in for ``torchrl.envs.ParallelEnv(num_workers, create_env_fn)``
    for gymnasium envs.

    Each sub-env is ``create_env_fn(**create_env_kwargs)``: a gymnasium ``Env``, or a TorchRL
    ``GymEnv`` / ``GymWrapper`` of one, unwrapped inside the worker that builds it. The main
    process builds one sub-env to read its spaces and specs, as TorchRL's ``ParallelEnv`` does.

    Specs are those TorchRL's ``GymWrapper`` declares for that sub-env, expanded to
    ``[num_workers]``: ``"observation"`` (or the Dict space's keys), ``"action"``, ``"reward"``
    (``float32``, shape ``[num_workers, 1]``) and ``"done"``, ``"terminated"``, ``"truncated"``
    (``bool``, shape ``[num_workers, 1]``). Infos are not read.

    Sub-envs never reset themselves: ``reset`` resets the sub-envs its ``"_reset"`` entry marks
    (all without one), as TorchRL's batched envs do.

    Other keyword arguments: ``startup_timeout``, ``on_worker_failure``, ``max_restarts``,
    ``restart_window``, ``worker_env`` and ``check_actions`` are passed to
    :class:`ringenv.AsyncVectorEnv`. ``shared_memory``, ``mp_start_method``, ``daemon``,
    ``use_buffers``, ``consolidate``, ``serial_for_single``, ``metadata_from_workers``,
    ``non_blocking`` and ``auto_wrap_envs`` are accepted and change nothing; ``pin_memory``,
    ``allow_step_when_done``, ``memmap``, ``policy_proof`` and ``share_individual_td`` are
    accepted with their defaults only (``ValueError`` otherwise).

    Args:
        num_workers: number of sub-envs (TorchRL's word; each is one env, not one process).
        create_env_fn: a callable returning one env, or a sequence of ``num_workers`` such
            callables (sub-env ``i`` uses the ``i``-th); sent to the workers with cloudpickle. All
            sub-envs must have the same spaces.
        create_env_kwargs: keyword arguments for ``create_env_fn``: one dict for all, or a
            sequence of ``num_workers`` dicts.
        device: where the returned tensors live. ``None`` or ``"cpu"``: CPU tensors. A CUDA device:
            single-array observations are staged by the vector env (docs/GPU.md); Dict
            observations are moved with ``TensorDict.to(device, non_blocking=True)``.

    Keyword Args:
        num_processes: ringenv worker processes (default: ``AsyncVectorEnv``'s ``num_workers``
            default); sub-envs are split among them in contiguous groups.
        num_sub_threads: threads per worker process (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
            ``OPENBLAS_NUM_THREADS``; default 1), unless ``worker_env`` sets them.
        shutdown_timeout: seconds :meth:`close` gives the workers to exit before killing them
            (default 10).
        num_threads: torch threads of the main process while the env is open (default: as
            TorchRL's ``ParallelEnv``, ``torch.get_num_threads() - num_processes``, at least 1);
            the previous count is restored by :meth:`close`.

    Raises:
        TypeError: ``num_workers`` not an integer, ``create_env_fn`` not callable,
            ``create_env_kwargs`` not a dict, an unknown keyword argument, or ``create_env_fn``
            returning something other than a gymnasium ``Env`` or a TorchRL ``GymEnv`` /
            ``GymWrapper`` (a vector env, a ``TransformedEnv``, another library's env).
        ValueError: ``num_workers`` < 1, a sequence of factories or kwargs whose length is not
            ``num_workers``, a bad ``num_processes``, ``num_threads`` or ``device`` (a CUDA device
            that torch does not see, a device neither CPU nor CUDA), a TorchRL-only option set to
            a value ringenv cannot honour, an observation space other than Box / Discrete /
            MultiDiscrete / MultiBinary / Dict of those, an action space other than the first
            four, a ``GymEnv`` with ``frame_skip`` > 1 or an info dict reader.
        ringenv.errors.WorkerStartupError: a factory raised in a worker, or sub-env spaces differ.
    """

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Union[Callable[..., Any], Sequence[Callable[..., Any]]],
        create_env_kwargs: Union[Mapping, Sequence[Mapping], None] = None,
        device: Union[str, int, torch.device, None] = None,
        *,
        num_processes: Optional[int] = None,
        num_threads: Optional[int] = None,
        num_sub_threads: int = 1,
        shutdown_timeout: float = 10.0,
        **kwargs: Any,
    ):
        self._vec: Optional[AsyncVectorEnv] = None
        # -- every argument is checked before anything is built ----------------------------------
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)):
            raise TypeError(f"num_workers must be an int (the number of sub-envs), got {num_workers!r}")
        num_workers = int(num_workers)
        if num_workers < 1:
            raise ValueError(f"num_workers must be at least 1, got {num_workers}")
        fns = self._per_worker(create_env_fn, num_workers, "create_env_fn", callable, "a callable")
        if create_env_kwargs is None:
            create_env_kwargs = {}
        env_kwargs = [dict(kw) for kw in self._per_worker(create_env_kwargs, num_workers, "create_env_kwargs",
                                                          lambda x: isinstance(x, Mapping), "a dict")]
        if num_processes is not None and (isinstance(num_processes, bool) or not isinstance(
                num_processes, (int, np.integer)) or not 1 <= num_processes <= num_workers):
            raise ValueError(f"num_processes must be an integer from 1 to num_workers ({num_workers}), "
                             f"got {num_processes!r}")
        for name, value in (("num_threads", num_threads), ("num_sub_threads", num_sub_threads)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                      or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        try:
            torch_device = torch.device("cpu" if device is None else device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"device must be None, 'cpu' or a torch device, got {device!r} ({e})") from e
        if torch_device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={device!r}, but torch sees no CUDA device")
        if torch_device.type not in ("cpu", "cuda"):
            raise ValueError(f"device={device!r}: ringenv's batches go to the CPU or a CUDA device, not "
                             f"{torch_device.type!r}")
        vec_kwargs: Dict[str, Any] = {}
        for key, value in kwargs.items():
            if key in _RINGENV_KWARGS:
                vec_kwargs[key] = value
            elif key in _TORCHRL_DEFAULT_ONLY:
                if not any(value is d or value == d for d in _TORCHRL_DEFAULT_ONLY[key]):
                    raise ValueError(f"{key}={value!r} is not supported by ringenv.torchrl.ParallelEnv "
                                     f"(only {' or '.join(map(repr, _TORCHRL_DEFAULT_ONLY[key]))})")
            elif key not in _TORCHRL_NO_EFFECT:
                raise TypeError(f"ParallelEnv got an unexpected keyword argument {key!r}")
        worker_env = {name: str(int(num_sub_threads)) for name in
                      ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
        worker_env.update(vec_kwargs.pop("worker_env", None) or {})

        # -- one sub-env in the main process: its type, spaces and TorchRL specs ------------------
        unwrap = _make_unwrap()
        probe, wrapper = unwrap(fns[0](**env_kwargs[0]), "create_env_fn for worker 0")
        try:
            _check_space(probe.observation_space, "observation")
            _check_space(probe.action_space, "action")
            if wrapper is None:
                wrapper = GymWrapper(probe)  # TorchRL's own conversion of the spaces
                wrapper.is_closed = True  # only read for its specs; the env goes on to AsyncVectorEnv
            specs = wrapper.specs.expand(num_workers).to(torch_device)
        except BaseException:
            probe.close()
            raise

        super().__init__(device=torch_device, batch_size=torch.Size([num_workers]))
        self.is_closed = True
        self.num_workers = num_workers
        self.create_env_fn = fns
        self.create_env_kwargs = env_kwargs
        self.shutdown_timeout = float(shutdown_timeout)
        self.action_spec = specs["input_spec", "full_action_spec"]
        self.state_spec = specs["input_spec", "full_state_spec"]
        self.observation_spec = specs["output_spec", "full_observation_spec"]
        self.reward_spec = specs["output_spec", "full_reward_spec"]
        self.done_spec = specs["output_spec", "full_done_spec"]
        cpu_specs = specs.to("cpu")  # data is encoded on the CPU, then moved by _to_device
        self._obs_spec_cpu: Composite = cpu_specs["output_spec", "full_observation_spec"]
        self._action_spec_cpu = cpu_specs["input_spec", "full_action_spec", "action"]
        self._obs_key = next(iter(self._obs_spec_cpu.keys()))
        self._obs_is_dict = isinstance(probe.observation_space, spaces.Dict)
        reward_spec = specs["output_spec", "full_reward_spec", "reward"]
        self._reward_dtype, self._reward_shape = reward_spec.dtype, reward_spec.shape
        self._dummy_env_str = str(wrapper)

        env_fns = [_sub_env_factory(fns[i], env_kwargs[i], i, unwrap, probe if i == 0 else None)
                   for i in range(num_workers)]
        # On a CUDA device, a single-array observation space is staged by the vector env itself:
        # pinned shared memory -> GPU, asynchronously on the current stream (docs/GPU.md).
        self._staged = torch_device.type == "cuda" and _layout.is_flat(probe.observation_space)
        if self._staged:
            vec_kwargs = {**vec_kwargs, "device": torch_device, "copy": True}
        vec = AsyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.DISABLED, num_workers=num_processes,
                             worker_env=worker_env, **vec_kwargs)
        try:
            self._vec = vec
            self.num_processes: int = vec.num_workers
            # As torchrl.envs.ParallelEnv: the main process's torch threads leave a core to each worker
            # process while they run (torch's spinning OpenMP threads would otherwise compete with them).
            self._initial_num_threads = torch.get_num_threads()
            self.num_threads = int(num_threads) if num_threads is not None else max(
                1, self._initial_num_threads - self.num_processes)
            if self.num_threads != self._initial_num_threads:
                torch.set_num_threads(self.num_threads)
        except BaseException:  # a Ctrl-C here: the workers stop now, not when the traceback is freed
            vec.close(terminate=True)
            raise
        self._last_obs: Optional[Dict[str, Any]] = None
        self.is_closed = False

    @staticmethod
    def _per_worker(value: Any, n: int, name: str, check: Callable[[Any], bool], kind: str) -> list:
        """``[value] * n`` for one value, the list itself for a sequence of ``n``; ``TypeError`` /
        ``ValueError`` naming ``name`` and the element otherwise."""
        if check(value):
            return [value] * n
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(f"{name} must be {kind} or a sequence of num_workers ({n}) of them, "
                            f"got {type(value).__name__}")
        items = list(value)
        if len(items) != n:
            raise ValueError(f"{name} has {len(items)} elements, expected num_workers ({n})")
        for i, item in enumerate(items):
            if not check(item):
                raise TypeError(f"{name}[{i}] must be {kind}, got {type(item).__name__}")
        return items

    # -- host -> device ---------------------------------------------------------------------------

    def _to_device(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Moves a batch built on the CPU to ``self.device``, for what the vector env does not stage
        itself (Dict observations on a CUDA device): ``tensordict.to(device,
        non_blocking=True)``."""
        if self.device.type == "cpu" or tensordict.device == self.device:
            return tensordict
        return tensordict.to(self.device, non_blocking=True)

    # -- EnvBase ----------------------------------------------------------------------------------

    def _open_vec(self, what: str) -> AsyncVectorEnv:
        """The vector env, or ``RuntimeError`` naming ``what`` was called after :meth:`close`."""
        vec = self._vec
        if self.is_closed or vec is None:
            raise RuntimeError(f"{what} on a closed ringenv.torchrl.ParallelEnv: its worker processes are gone; "
                               "create a new one")
        return vec

    def _read_obs(self, obs: Any) -> Dict[str, Any]:
        """The observation entries of a batch: ``{key: tensor of shape [num_workers, *spec shape]}``
        encoded by the specs, as ``GymLikeEnv.read_obs`` encodes one env's."""
        spec = self._obs_spec_cpu
        if not self._obs_is_dict:
            leaf = spec[self._obs_key]
            if self._staged:  # already a tensor on the device, of the space's dtype
                return {self._obs_key: leaf.encode(obs, ignore_device=True).to(leaf.dtype)}
            return {self._obs_key: leaf.encode(obs, ignore_device=True)}
        obs = dict(obs)
        if "state" in obs and "observation" not in obs:
            obs["observation"] = obs.pop("state")  # GymWrapper's renaming
        return {key: spec[key].encode(value, ignore_device=True) for key, value in obs.items()}

    def _batch(self, entries: Dict[str, Any]) -> TensorDictBase:
        on = self.device if self._staged else torch.device("cpu")
        out = TensorDict(entries, batch_size=self.batch_size, device=on)
        self._last_obs = {key: out.get(key) for key in self._obs_spec_cpu.keys()}
        return self._to_device(out)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        vec = self._open_vec("step")
        partial = tensordict.get("_step", None)
        if partial is not None and not bool(partial.all()):
            raise NotImplementedError("ringenv.torchrl.ParallelEnv steps every sub-env at once; a partial '_step' "
                                      "mask is not supported")
        spec, action = self._action_spec_cpu, tensordict.get("action")
        if isinstance(spec, MultiOneHot):  # TorchRL before 0.12: its to_numpy takes one argmax of the whole row
            action = spec.to_categorical(action, safe=False).cpu().numpy()
        else:
            action = spec.to_numpy(action, safe=False)
        action_shape = vec.action_space.shape or ()
        if action.shape != action_shape and action.size == int(np.prod(action_shape)):
            action = action.reshape(action_shape)  # a scalar Box: TorchRL's spec shape is (1,)
        obs, reward, terminated, truncated, _ = vec.step(action)
        n = self.num_workers
        entries = self._read_obs(obs)
        as_tensor = (lambda x: x) if self._staged else torch.from_numpy
        entries["reward"] = as_tensor(reward).to(self._reward_dtype).view(self._reward_shape)
        terminated_t = as_tensor(terminated).view(n, 1)
        truncated_t = as_tensor(truncated).view(n, 1)
        entries["done"] = terminated_t | truncated_t
        entries["terminated"] = terminated_t
        entries["truncated"] = truncated_t
        return self._batch(entries)

    def _reset(self, tensordict: Optional[TensorDictBase] = None, **kwargs: Any) -> TensorDictBase:
        """Resets the sub-envs marked by ``tensordict["_reset"]`` (shape ``[num_workers]`` or
        ``[num_workers, 1]``, bool), or all of them."""
        vec = self._open_vec("reset")
        n = self.num_workers
        list_of_kwargs = kwargs.pop("list_of_kwargs", None)
        if list_of_kwargs is None:
            list_of_kwargs = [kwargs] * n
        elif len(list_of_kwargs) != n:
            raise ValueError(f"list_of_kwargs has {len(list_of_kwargs)} elements, expected num_workers ({n})")
        else:
            list_of_kwargs = [{**kw, **kwargs} for kw in list_of_kwargs]
        for i, kw in enumerate(list_of_kwargs):
            unknown = sorted(set(kw) - {"seed", "options"})
            if unknown:
                raise TypeError(f"reset got keyword argument(s) {unknown} for sub-env {i}; a gymnasium reset "
                                "takes only seed and options")
        options = list_of_kwargs[0].get("options")
        if any(kw.get("options") != options for kw in list_of_kwargs):
            raise ValueError("reset options must be the same for every sub-env")
        seeds = [kw.get("seed") for kw in list_of_kwargs]
        mask = None
        reset = None if tensordict is None else tensordict.get("_reset", None)
        if reset is not None:
            mask = reset.reshape(n, -1).any(-1).cpu().numpy()
            if not mask.any():  # nothing to reset: the observations stay as they are
                last = self._last_obs if self._last_obs is not None else {
                    key: value.to(self.device if self._staged else "cpu") for key, value in self._obs_spec_cpu.zero().items()}
                return self._batch(dict(last))
            if mask.all():
                mask = None
        options = {} if options is None else dict(options)
        if mask is not None:
            options["reset_mask"] = mask
        obs, _ = vec.reset(seed=None if all(s is None for s in seeds) else seeds, options=options or None)
        return self._batch(self._read_obs(obs))

    def set_seed(self, seed: Optional[int] = None, static_seed: bool = False) -> Optional[int]:
        """Seeds sub-env ``i`` with ``seed`` advanced ``i`` times by TorchRL's ``seed_generator``
        (all with ``seed`` itself when ``static_seed``) by resetting it with that seed, as
        ``GymEnv.set_seed`` does, and returns the next seed of the chain (``seed`` advanced
        ``num_workers`` times), as ``torchrl.envs.ParallelEnv.set_seed`` returns.

        Raises:
            RuntimeError: the env is closed.
            ValueError: a negative seed (``ringenv.errors.SeedError``).
        """
        vec = self._open_vec("set_seed")
        seeds, next_seed = _seed_chain(seed, self.num_workers, static_seed)
        vec.reset(seed=None if seed is None else seeds)
        return next_seed

    def _set_seed(self, seed: Optional[int]) -> None:
        self.set_seed(seed)

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Closes the sub-envs and stops the worker processes (killed if still running after
        ``shutdown_timeout`` seconds). Any later ``reset``, ``step`` or ``set_seed`` raises
        ``RuntimeError``.

        Raises:
            RuntimeError: already closed, when ``raise_if_closed`` (as TorchRL's batched envs).
        """
        if self.is_closed:
            if raise_if_closed:
                raise RuntimeError("trying to close a closed environment")
            return
        self.is_closed = True
        vec, self._vec = self._vec, None
        if vec is not None:
            vec.close(timeout=self.shutdown_timeout)
            if torch.get_num_threads() == self.num_threads:  # unless changed since: as it was before
                torch.set_num_threads(self._initial_num_threads)

    def __repr__(self) -> str:
        return (f"ringenv.torchrl.ParallelEnv(num_workers={self.num_workers}, env={self._dummy_env_str}, "
                f"device={self.device}, closed={self.is_closed})")
