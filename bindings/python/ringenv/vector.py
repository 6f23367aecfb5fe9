"""``ringenv.AsyncVectorEnv``: a drop-in for ``gymnasium.vector.AsyncVectorEnv`` whose sub-envs
run in worker processes that exchange actions and observations through shared memory.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
from collections.abc import Sequence as SequenceABC
from copy import deepcopy
from enum import Enum
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import logger, spaces
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import (
    batch_differing_spaces,
    batch_space,
    concatenate,
    create_empty_array,
    iterate,
    read_from_shared_memory,
)

from ringenv import _layout, _native
from ringenv._batches import BatchesMixin, check_batch_size
from ringenv._infos import add_infos
from ringenv._plan import plan_workers
from ringenv._staging import DeviceBatches, host_actions, parse_device
from ringenv._worker import pickle_main_by_value, worker_argv
from ringenv.errors import ForkedProcessError, WorkerDiedError, _remote_exception

__all__ = ["AsyncVectorEnv", "AsyncState"]


class AsyncState(Enum):
    """The protocol state: at most one call is pending (Gymnasium's states, same values)."""

    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


def check_count(name: str, value: Any, low: int = 1, high: Optional[int] = None, high_name: str = "") -> int:
    """``value`` as an ``int`` when it is an integer (not a ``bool``) in ``[low, high]``
    (``high_name``: what ``high`` is, for the message).

    Raises:
        TypeError: not an integer (a ``bool``, ``float``, ``str``, ...), naming ``name``.
        ValueError: outside the range, naming ``name`` and the range.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        upper = f"{high_name} ({high})" if high_name else str(high)
        limit = f"from {low} to {upper}" if high is not None else f"of at least {low}"
        raise ValueError(f"{name} must be an integer {limit}, got {value!r}")
    return int(value)


def check_seconds(name: str, value: Any, optional: bool = False) -> Optional[float]:
    """``value`` as a ``float`` when it is a finite number >= 0 (or ``None`` if ``optional``).

    Raises:
        TypeError: not a number; ValueError: negative, NaN or infinite; each naming ``name``.
    """
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not (np.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_options(num_envs: Any, num_workers: Any, batch_size: Any, max_concurrency: Any, startup_timeout: Any,
                   max_restarts: Any, restart_window: Any, spin_us: Any) -> int:
    """Checks the type and range of every count and duration before anything is built or
    allocated; returns ``num_envs`` as an ``int``.

    Raises:
        TypeError, ValueError: naming the argument.
    """
    n = check_count("num_envs", num_envs)
    if num_workers is not None:
        check_count("num_workers", num_workers, 1, n, "num_envs")
    if batch_size is not None:
        check_count("batch_size", batch_size, 1, n, "num_envs")
    if max_concurrency is not None:
        check_count("max_concurrency", max_concurrency)
    check_count("max_restarts", max_restarts, 0, 2**32 - 1)
    check_seconds("startup_timeout", startup_timeout)
    check_seconds("restart_window", restart_window)
    if spin_us is not None and (isinstance(spin_us, (bool, np.bool_)) or
                                not isinstance(spin_us, (int, float, np.integer, np.floating))):
        raise TypeError(f"spin_us must be None or a number of microseconds >= 0, got {type(spin_us).__name__} "
                        f"{spin_us!r}")
    if spin_us is not None and not (np.isfinite(spin_us) and spin_us >= 0):
        raise ValueError(f"spin_us must be None or a number of microseconds >= 0, got {spin_us!r}")
    return n


def available_memory() -> Optional[int]:
    """Bytes of memory this process may still use: ``MemAvailable`` of ``/proc/meminfo``, or
    less when a cgroup v2 limit (``memory.max`` minus ``memory.current``) is tighter; ``None``
    when neither can be read."""
    found: List[int] = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/proc/self/cgroup") as f:
            group = next((line.strip()[3:] for line in f if line.startswith("0::")), None)
        if group is not None:
            base = os.path.join("/sys/fs/cgroup", group.lstrip("/"))
            with open(os.path.join(base, "memory.max")) as f:
                limit = f.read().strip()
            if limit != "max":
                with open(os.path.join(base, "memory.current")) as f:
                    found.append(max(0, int(limit) - int(f.read().strip())))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def check_segment_fits(num_envs: int, size: int) -> None:
    """Raises ``ValueError`` naming ``num_envs`` and the bytes when a segment of ``size`` bytes is
    larger than the memory available (:func:`available_memory`)."""
    available = available_memory()
    if available is not None and size > available:
        raise ValueError(f"num_envs={num_envs} needs a shared memory segment of {size} bytes "
                         f"({size / 2**30:.1f} GiB), more than the {available} bytes "
                         f"({available / 2**30:.1f} GiB) of memory available: use fewer envs")


#: What workers get by default: one thread each (the workers are the parallelism) and no GPU.
DEFAULT_WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                      "CUDA_VISIBLE_DEVICES": ""}


def _worker_env(overrides: Optional[Mapping[str, Optional[str]]]) -> List[Tuple[str, str]]:
    env = dict(DEFAULT_WORKER_ENV)
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        elif not isinstance(value, str):
            raise TypeError(f"worker_env[{key!r}] must be a string or None, got {type(value).__name__}")
        else:
            env[key] = value
    return sorted(env.items())


def _action_bounds(space: spaces.Space):
    """Per-element ``(low, high)`` integer bounds of a Discrete, MultiDiscrete or MultiBinary
    space (inclusive), ``"nan"`` for a float Box (NaN is never in a Box), else ``None``."""
    if isinstance(space, spaces.Discrete):
        return int(space.start), int(space.start + space.n - 1)
    if isinstance(space, spaces.MultiDiscrete):
        return space.start, space.start + space.nvec - 1
    if isinstance(space, spaces.MultiBinary):
        return 0, 1
    if isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return "nan"
    return None


def _refuse_objects(actions: np.ndarray, space: spaces.Space) -> np.ndarray:
    """``actions`` with a numeric dtype, or ``ValueError`` naming the first env whose action is
    not a number: an ``object`` array holding ``None`` would otherwise reach the env as NaN (or
    0), unchecked. An object array of numbers becomes the array NumPy infers for them."""
    if actions.dtype.kind in "biuf":
        return actions
    if actions.dtype.kind == "O":
        for index, value in np.ndenumerate(actions):
            if value is None or not isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
                env = index[0] if index else 0
                raise ValueError(f"action of env {env} is {value!r}, not a number: actions for {space!r} must be "
                                 "numbers (the action array has dtype object)")
        return np.array(actions.tolist())
    raise ValueError(f"actions for {space!r} must be numbers, got an array of dtype {actions.dtype}")


def _check_action_values(actions: np.ndarray, bounds, space: spaces.Space) -> None:
    if bounds == "nan":
        if actions.dtype.kind == "f" and np.isnan(actions).any():
            env = int(np.argwhere(np.isnan(actions))[0][0])
            raise ValueError(f"action of env {env} contains NaN, which is not in {space!r}")
        return
    low, high = bounds
    bad = (actions < low) | (actions > high)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"action {actions[index].item()!r} of env {index[0]} is outside {space!r}")


def _check_fits(actions: np.ndarray, dtype: np.dtype) -> None:
    """Raises ``ValueError`` naming the env and the value when an integer action does not fit
    the integer ``dtype`` of the action slot (it would wrap around: 300 into ``uint8`` reaching
    the env as 44). Costs nothing when ``actions``' dtype casts safely to ``dtype``."""
    if dtype.kind not in "iu" or actions.dtype.kind not in "iu" or np.can_cast(actions.dtype, dtype):
        return
    info = np.iinfo(dtype)
    bad = (actions < info.min) | (actions > info.max)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"action {actions[index].item()!r} of env {index[0]} does not fit the action space's dtype "
                         f"{dtype} ([{info.min}, {info.max}])")


def _split(n: int, k: int):
    """The contiguous env-id ranges of ``k`` workers (``numpy.array_split``'s rule, as the
    runtime's layout computes them)."""
    base, extra = divmod(n, k)
    start = 0
    for w in range(k):
        stop = start + base + (1 if w < extra else 0)
        yield start, stop
        start = stop


class AsyncVectorEnv(BatchesMixin, VectorEnv):
    """Vectorized env stepping its sub-envs in worker processes over shared memory.

    Accepts what ``gymnasium.vector.AsyncVectorEnv`` accepts and returns the same results
    (values and dtypes) as Gymnasium's vector envs, so switching is a one-line import change.
    Sub-envs are split into ``num_workers`` contiguous groups; each group runs in one worker
    process (``ringenv._worker``, importing from the main process's ``sys.path``, never from
    its working directory) whose step loop is Rust, calling the envs through PyO3 and writing
    observations straight into a shared memory segment, one contiguous ``(num_envs, ...)`` array
    per leaf of the observation space (Gymnasium's own ``write_to_shared_memory`` encoding).

    Only the process that created the env may use it. In a process forked from it
    (``os.fork``, multiprocessing's ``"fork"`` start method, a DataLoader worker) every call
    raises :class:`ringenv.errors.ForkedProcessError`, and ``close()``, garbage collection or
    the child's exit only let go of the child's inherited copy: the creator's workers go on.

    :meth:`close` releases every OS resource of the env at once (descriptors now; the shared
    mapping with the last array a caller still holds from it), even while the env object is
    still referenced.

    Args:
        env_fns: callables that each create one sub-env (sent to the workers with cloudpickle).
        shared_memory: if ``True`` (default), observations of spaces with a fixed layout (Box,
            Discrete, MultiDiscrete, MultiBinary, Text, Dict and Tuple of those) cross through
            shared memory; others (Graph, Sequence, custom spaces), and all with ``False``,
            travel pickled through the worker's info arena in the segment (the control socket when
            they do not fit). Results are identical either way.
        copy: if ``True`` (default), ``reset``/``step`` return observations the caller owns;
            if ``False`` they may be views of the shared slot, valid until the step after next.
        context: accepted for compatibility and ignored: workers always start with fork+exec.
        daemon: accepted for compatibility; workers always die with the main process (each
            watches it through a pidfd) whatever its value.
        worker: must be ``None``: ringenv's worker loop replaces Gymnasium's; a custom worker
            function raises ``ValueError``.
        observation_mode: ``"same"``, ``"different"`` (sub-envs may differ in bounds, not in
            dtype or shape), or a ``(batched_space, single_space)`` tuple, as Gymnasium.
        autoreset_mode: ``AutoresetMode.NEXT_STEP`` (default), ``SAME_STEP`` or ``DISABLED``.
        max_concurrency: at most this many envs step at once: caps ``num_workers``.
        num_workers: worker processes (default: one per usable core, less the one this process
            takes when it steps a share inline; at most ``num_envs``).
        inline: whether this process steps one share of the envs itself (the last block of
            ``num_envs / (num_workers + 1)`` envs), as an in-process ``SyncVectorEnv`` steps all of
            them, while the worker processes step theirs: its core works on envs instead of
            waiting, and a step never waits for a process to wake up for that share. ``None``
            (default): yes when ``num_workers`` is not given (the processes are then the usable
            cores less one, at least one) and the envs are Python or built-in Rust envs; an
            explicit ``num_workers`` means that many processes stepping every env. ``False``: every
            env runs in a worker process (full crash isolation: an env that segfaults or calls
            ``os._exit`` then cannot take this process down). Inline envs are
            built by the same factories, stepped by the same host code and write the same shared
            rows, so results are identical either way; they run with this process's environment
            (not ``worker_env``), their exceptions are raised as a worker's are, and a ``timeout``
            of ``step_wait``/``recv`` is checked after their share, which cannot be interrupted.
        startup_timeout: seconds to wait for workers to build their envs.
        on_worker_failure: ``"raise"`` (default): a worker that dies raises
            :class:`ringenv.errors.WorkerDiedError` and closes the vector env. ``"restart"``: the
            worker is restarted and its envs reset; the step it died in reports those envs as
            truncated, with ``infos["worker_restarted"]`` set, and the run goes on. More than
            ``max_restarts`` deaths within ``restart_window`` seconds raise
            :class:`ringenv.errors.CrashLoopError`.
        max_restarts, restart_window: the crash-loop limit of ``"restart"`` (default 3 per 60 s).
        worker_env: environment variables for the workers, on top of the defaults
            ``OMP_NUM_THREADS=MKL_NUM_THREADS=OPENBLAS_NUM_THREADS=1`` (one thread per worker: the
            workers are the parallelism) and ``CUDA_VISIBLE_DEVICES=""`` (CPU envs must not
            grab a GPU); a value of ``None`` keeps the parent's value instead of the default.
        check_actions: if ``True``, ``step_async`` and ``send`` also check action values and
            raise ``ValueError`` naming the env and the value, before anything is sent, for
            out-of-range Discrete, MultiDiscrete and MultiBinary actions and NaN in a float Box
            (a few µs per step). ``False`` (default) passes values to the envs unchecked, as
            Gymnasium does (an env may take an action outside its space on purpose). Shape and
            dtype are checked either way, since they decide what fits the shared slot: a scalar
            where a batch is expected is a ``TypeError``, a wrong shape, non-numbers, floats for
            an integer space or integers that do not fit the space's dtype a ``ValueError``.
            Built-in Rust envs (``ringenv.make_vec``) check by default: they panic on an
            out-of-range action.
        batch_size: envs per :meth:`recv` (EnvPool's asynchronous batches: ``async_reset`` /
            ``send`` / ``recv``); default ``num_envs``. Below ``num_envs`` a batch is whole
            workers' blocks, so ``num_envs`` must split into equal blocks that make up
            ``batch_size`` (the default ``num_workers`` is chosen so); autoreset is then
            ``NEXT_STEP`` or ``SAME_STEP`` per env exactly as in :meth:`step` (an env that ended
            is reset by its next ``send``), and ``DISABLED`` is refused.
        device: ``None`` or ``"cpu"`` (default): results are NumPy arrays. ``"cuda"``,
            ``"cuda:N"`` or a ``torch.device``: observations, rewards (``float64``),
            terminations and truncations come back as torch tensors on that GPU, copied
            asynchronously from the page-locked shared segment on the caller's current torch
            stream (no synchronisation on the step path; work enqueued on that stream afterwards
            sees them); with ``copy=False`` the tensors are reused two batches later. Actions may
            be torch tensors (CUDA or CPU). Needs a single-array observation space (Box,
            Discrete, MultiDiscrete, MultiBinary). See docs/GPU.md.
        spin_us: the wake-up policy's bound, in µs: how long at most a waiting process (the main
            process waiting for results, a worker waiting for its next command) spins before it
            sleeps on a futex. ``None`` (default): a bound of 8 wake-up latencies measured by each
            waiter (200 µs..1 ms), within which it spins only as long as its peers' recent ready
            times suggest, and not at all once they outgrow the bound;
            ``0``: never spin (every wait sleeps at once; a wake-up costs ~30-40 µs on a VM).
            Spinners yield the core between looks when the processes outnumber the cores. See
            docs/WAKEUP.md.
        deterministic: if ``True``, :meth:`recv` returns batches in the order their actions were
            sent (first in, first out) instead of the order they finished, so the sequence of
            batches, and with seeded envs the whole run, is a function of the seeds and actions
            alone; the price is waiting for the earliest batch even when a later one is done.
        vector_infos: if ``True`` (default), ``reset``, ``step`` and ``recv`` return infos
            vectorised as Gymnasium does; if ``False``, they return an empty dict and skip that
            work, and each env's own info dict is read with :meth:`env_infos` (which works either
            way).

    Attributes:
        num_workers: the number of worker processes; inline: whether this process steps a share
            (the last block of envs); batch_size, deterministic: as given.

    Raises:
        TypeError: a count (``num_workers``, ``batch_size``, ``max_concurrency``,
            ``max_restarts``) that is not an integer (a ``bool`` is not one), a duration
            (``startup_timeout``, ``restart_window``, ``spin_us``) that is not a number; checked
            before any env is built.
        ValueError: empty ``env_fns``, an invalid mode, a custom ``worker``, a count or duration
            out of range (named), a shared segment larger than the memory available (naming
            ``num_envs`` and the bytes; checked before anything is allocated).
        ringenv.errors.WorkerStartupError: a factory raised, or sub-env spaces differ (the
            message names the env; the original exception is its ``__cause__``).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        shared_memory: bool = True,
        copy: bool = True,
        context: Optional[str] = None,
        daemon: bool = True,
        worker: Optional[Callable] = None,
        observation_mode: Union[str, Tuple[spaces.Space, spaces.Space]] = "same",
        autoreset_mode: Union[str, AutoresetMode] = AutoresetMode.NEXT_STEP,
        max_concurrency: Optional[int] = None,
        *,
        num_workers: Optional[int] = None,
        startup_timeout: float = 60.0,
        on_worker_failure: str = "raise",
        max_restarts: int = 3,
        restart_window: float = 60.0,
        worker_env: Optional[Mapping[str, Optional[str]]] = None,
        check_actions: bool = False,
        batch_size: Optional[int] = None,
        deterministic: bool = False,
        device: Any = None,
        spin_us: Optional[float] = None,
        vector_infos: bool = True,
        inline: Optional[bool] = None,
    ):
        self.closed = True  # until the pool exists, close() has nothing to do
        if not isinstance(env_fns, SequenceABC):
            env_fns = list(env_fns)
        if len(env_fns) == 0:
            raise ValueError("env_fns is empty: give at least one env factory")
        if worker is not None:
            raise ValueError("ringenv runs its own worker loop; a custom `worker` function cannot be used")
        # Counts and durations first: nothing is built or allocated for arguments that cannot work.
        self.num_envs = _check_options(len(env_fns), num_workers, batch_size, max_concurrency, startup_timeout,
                                       max_restarts, restart_window, spin_us)
        self.env_fns = env_fns
        self.shared_memory = shared_memory
        self.autoreset_mode = (autoreset_mode if isinstance(autoreset_mode, AutoresetMode)
                               else AutoresetMode(autoreset_mode))
        dummy = env_fns[0]()
        try:
            self.metadata = dict(dummy.metadata)
            self.render_mode = dummy.render_mode
            single_action_space = dummy.action_space
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
        self.metadata["autoreset_mode"] = self.autoreset_mode
        cfg = {
            "observation_space": single_observation_space,
            "action_space": single_action_space,
            "observation_mode": worker_obs_mode,
            "autoreset_mode": self.autoreset_mode.name.lower(),  # "next_step", "same_step", "disabled"
        }

        def make_init(start: int, stop: int, inline: bool = False) -> bytes:
            pickle_main_by_value()  # factories defined in a spawned child's main script (__mp_main__)
            for i in range(start, stop):
                try:
                    cloudpickle.dumps(env_fns[i])
                except Exception as e:
                    raise ValueError(f"env_fns[{i}] cannot be pickled to send it to a worker process "
                                     f"({type(e).__name__}: {e})") from e
            return pickle.dumps({"payload": cloudpickle.dumps({**cfg, "env_fns": env_fns[start:stop]})})

        self._start(
            single_observation_space, single_action_space, observation_space,
            argv=worker_argv("--python"), make_init=make_init,
            reward_dtype="float64", num_workers=num_workers, max_concurrency=max_concurrency,
            startup_timeout=startup_timeout, copy=copy, on_worker_failure=on_worker_failure,
            max_restarts=max_restarts, restart_window=restart_window, worker_env=worker_env,
            check_actions=check_actions, batch_size=batch_size, deterministic=deterministic, device=device,
            spin_us=spin_us, vector_infos=vector_infos, inline=inline, host="python",
        )
        self.env_fns = list(env_fns)  # after the size checks: env_fns may be a lazy sequence (make_vec's)

    @classmethod
    def _from_rust(cls, argv: List[str], id: str, num_envs: int, kwargs: Dict[str, Any],
                   spaces_json: Tuple[dict, dict], *, num_workers: Optional[int] = None, copy: bool = True,
                   startup_timeout: float = 60.0, **start_options: Any) -> "AsyncVectorEnv":
        """A vector env of Rust env ``id`` served by the worker program ``argv`` (the pool
        appends its four arguments): ``ringenv._worker.worker_argv("--rust")`` for
        the built-ins, ``[path]`` for a worker binary made with the ``ringenv-worker`` SDK (see
        ``ringenv.make_vec``). ``spaces_json`` is the ``(observation, action)`` space description
        (``_layout.from_dict``); ``kwargs`` reach the env's constructor as JSON; ``start_options``
        (``on_worker_failure``, ``max_restarts``, ``restart_window``, ``worker_env``, ...) go to
        the pool. Under ``on_worker_failure="restart"`` a panicking env makes its worker exit, so
        that it is restarted like a crashed one; otherwise the panic is raised.
        """
        obs_d, act_d = spaces_json
        self = cls.__new__(cls)
        self.closed = True
        self.num_envs = _check_options(
            num_envs, num_workers, start_options.get("batch_size"), None, startup_timeout,
            start_options.get("max_restarts", 3), start_options.get("restart_window", 60.0),
            start_options.get("spin_us"))
        self.env_fns, self.shared_memory = [], True
        self.autoreset_mode = AutoresetMode.NEXT_STEP
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}
        self.render_mode = None
        on_panic = "exit" if start_options.get("on_worker_failure") == "restart" else "report"
        init = json.dumps({"id": id, "kwargs": kwargs, "on_panic": on_panic}).encode()
        # A panic of an env stepped inline is always reported: exiting would end this process.
        inline_init = json.dumps({"id": id, "kwargs": kwargs, "on_panic": "report"}).encode()
        builtin = list(argv) == worker_argv("--rust")
        single_obs, single_act = _layout.from_dict(obs_d), _layout.from_dict(act_d)
        if not _layout.is_flat(single_act):
            raise ValueError(f"{id}: the action space {single_act!r} of a Rust env must be flat "
                             "(Box, Discrete, MultiDiscrete or MultiBinary)")
        self._start(
            single_obs, single_act, None,
            argv=list(argv), make_init=lambda start, stop, inline=False: inline_init if inline else init,
            reward_dtype="float32", num_workers=num_workers, max_concurrency=None,
            startup_timeout=startup_timeout, copy=copy, host="rust" if builtin else None, **start_options,
        )
        return self

    def _start(self, single_obs, single_act, observation_space, *, argv, make_init, reward_dtype,
               num_workers, max_concurrency, startup_timeout, copy, on_worker_failure="raise", max_restarts=3,
               restart_window=60.0, worker_env=None, check_actions=True, batch_size=None, deterministic=False,
               device=None, spin_us=None, vector_infos=True, inline=None, host=None):
        n = self.num_envs
        self._vector_infos, self._env_infos = bool(vector_infos), {}
        self._device: Optional[DeviceBatches] = None
        torch_device = parse_device(device)  # before any worker starts: a bad device touches nothing
        if torch_device is not None and not (self.shared_memory and _layout.is_flat(single_obs)):
            raise ValueError(f"device={device!r} needs a single-array observation space in shared memory (Box, "
                             f"Discrete, MultiDiscrete, MultiBinary), got {single_obs!r}"
                             + ("" if self.shared_memory else " with shared_memory=False"))
        batch_size = n if batch_size is None else check_count("batch_size", batch_size, 1, n, "num_envs")
        if batch_size < n and self.autoreset_mode == AutoresetMode.DISABLED:
            raise ValueError("batch_size < num_envs needs an autoreset mode (NEXT_STEP or SAME_STEP): with "
                             "DISABLED an env that ended could never be reset between batches")
        if inline is not None and not isinstance(inline, (bool, np.bool_)):
            raise TypeError(f"inline must be None, True or False, got {type(inline).__name__} {inline!r}")
        if num_workers is not None:
            num_workers = check_count("num_workers", num_workers, 1, n, "num_envs")
        num_processes, use_inline = plan_workers(n, num_workers, inline, host, int(batch_size), max_concurrency)
        # The pool's workers: the processes, then the inline share (the last block), if any.
        num_workers = num_processes + int(use_inline)
        if batch_size < n:
            check_batch_size(n, int(num_workers), int(batch_size))
        obs_leaves = _layout.plan(single_obs, n) if self.shared_memory else None
        act_leaves = _layout.plan(single_act, n) if _layout.is_flat(single_act) else None
        # The segment's size, computed without allocating, is checked before Gymnasium's
        # batch_space allocates arrays of num_envs rows and before the segment is created.
        check_segment_fits(n, _native.Pool.segment_size(n, num_workers, obs_leaves or [], act_leaves or [],
                                                        reward_dtype))
        if observation_space is None:
            observation_space = batch_space(single_obs, n)
        self.batch_size = int(batch_size)
        self.num_workers = int(num_processes)
        self.inline = bool(use_inline)
        self.deterministic = bool(deterministic)
        self._ranges = list(_split(n, int(num_workers)))
        self._worker_of = np.repeat(np.arange(int(num_workers)), [b - a for a, b in self._ranges])
        # Workers per recv: all of them for batch_size == num_envs (blocks may differ in size then).
        self._per_recv = int(num_workers) if batch_size == n else batch_size // (n // int(num_workers))
        self.copy = copy
        self.single_observation_space = single_obs
        self.single_action_space = single_act
        self.observation_space = observation_space
        self.action_space = batch_space(single_act, n)
        inits = [make_init(a, b, use_inline and w == num_workers - 1)
                 for w, (a, b) in enumerate(_split(n, int(num_workers)))]
        self._creator_pid = os.getpid()
        self._pool = _native.Pool(
            n, int(num_workers), obs_leaves or [], act_leaves or [], reward_dtype, argv, inits,
            env=_worker_env(worker_env), startup_timeout=startup_timeout, on_worker_failure=on_worker_failure,
            max_restarts=max_restarts, restart_window=restart_window, spin_us=spin_us,
            inline=host if use_inline else None,
        )
        self.closed = False
        self._state = AsyncState.DEFAULT
        pool, seg, slots = self._pool, self._pool.segment(), range(self._pool.depth)
        if obs_leaves:
            self._obs_mem = [
                _layout.bind(single_obs, n, seg, [pool.offset(s, "obs", k) for k in range(len(obs_leaves))], obs_leaves)
                for s in slots]
            self._obs_rows = [
                [np.frombuffer(seg, np.uint8, n * _layout.leaf_bytes(leaf), pool.offset(s, "obs", k)).reshape(n, -1)
                 for k, leaf in enumerate(obs_leaves)]
                for s in slots]
            self._env_obs = None
        else:
            self._obs_mem = None
            self._env_obs: Optional[List[Any]] = [None] * n
            self._obs_batch = create_empty_array(single_obs, n=n, fn=np.zeros)
        # Flat observation spaces skip Gymnasium's generic read (the same arrays, fewer calls).
        self._obs_flat = ([_layout.flat_view(single_obs, n, seg, pool.offset(s, "obs")) for s in slots]
                          if obs_leaves and _layout.is_flat(single_obs) else None)
        self._action = ([_layout.flat_view(single_act, n, seg, pool.offset(s, "action")) for s in slots]
                        if act_leaves else None)
        self._action_shape = (n, *(single_act.shape or ()))
        self._integer_actions = not isinstance(single_act, spaces.Box)
        self._action_bounds = _action_bounds(single_act) if check_actions else None
        self._reward = [np.frombuffer(seg, reward_dtype, n, pool.offset(s, "reward")) for s in slots]
        self._terminated = [np.frombuffer(seg, np.bool_, n, pool.offset(s, "terminated")) for s in slots]
        self._truncated = [np.frombuffer(seg, np.bool_, n, pool.offset(s, "truncated")) for s in slots]
        if torch_device is not None:
            assert self._obs_flat is not None
            try:
                self._device = DeviceBatches(torch_device, self._obs_flat, self._reward, self._terminated,
                                             self._truncated, seg)
            except BaseException:
                self.close(terminate=True)
                raise
        self._last_slots: List[Optional[int]] = [None] * int(num_workers)
        self._sent: List[Optional[str]] = [None] * int(num_workers)  # what each worker runs for send/recv
        self._restarted: List[dict] = []
        self._reset_mask: Optional[np.ndarray] = None

    # -- protocol -----------------------------------------------------------------------------

    #: The process that created the pool (``None`` until it exists): only it may use the workers.
    _creator_pid: Optional[int] = None

    def _assert_open(self, name: str):
        creator = self._creator_pid
        if creator is not None and creator != _native.current_pid():  # cached: no system call
            raise ForkedProcessError(
                f"`{name}` was called in process {os.getpid()}, but this ringenv vector env belongs to process "
                f"{creator}, which created it; this process is a fork of it (os.fork, multiprocessing's 'fork' "
                "start method, a DataLoader worker). Create a new env in this process; closing or dropping the "
                "inherited one here leaves the creator's workers running.",
                creator_pid=creator, pid=os.getpid())
        if self.closed:
            raise ClosedEnvironmentError(f"Trying to call `{name}` after the vector env was closed.")

    def _assert_default(self, name: str):
        self._assert_open(name)
        if self._state != AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{name}` while waiting for a pending call to `{self._state.value}` to complete",
                str(self._state.value))
        if self._pool.in_flight:
            raise AlreadyPendingCallError(
                f"Calling `{name}` while {self._pool.in_flight} workers' batches sent with `send`/`async_reset` "
                "are in flight: `recv` them first", "step")

    def _seed_list(self, seed: Optional[Union[int, Sequence[Optional[int]]]]) -> List[Optional[int]]:
        """One seed per env: ``seed + i`` (an int), ``seed[i]`` (a list), or ``None`` for all.

        Raises:
            ValueError: a list of the wrong length, a negative or too large seed (naming the env).
        """
        if seed is None:
            seeds: List[Optional[int]] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"If seeds are passed as a list the length must match num_envs={self.num_envs} "
                             f"but got length={len(seeds)}.")
        for i, s in enumerate(seeds):
            if s is not None and not (isinstance(s, (int, np.integer)) and 0 <= int(s) < 2**64):
                raise ValueError(f"seed of env {i} must be None or an integer in [0, 2**64), got {s!r}")
        return [None if s is None else int(s) for s in seeds]

    def _write_actions(self, actions: Any, ids: Optional[np.ndarray], slots: Any) -> Optional[bytes]:
        """Checks ``actions`` (for the envs ``ids``, ``None``: all) and writes them into the
        action slot of each env (``slots``: one slot for all, or an array with one per env of
        ``ids``); returns the pickled payload of a non-flat action space instead (a list of
        ``num_envs`` entries, ``None`` where not sent).

        Raises:
            TypeError: a scalar instead of a batch.
            ValueError: wrong shape, count or dtype, or (``check_actions=True``) value, naming
                the env; nothing is written.
        """
        count = self.num_envs if ids is None else len(ids)
        actions = host_actions(actions, self._device)
        if self._action is None:
            space = self.action_space if ids is None else batch_space(self.single_action_space, count)
            batch = list(iterate(space, actions))
            if len(batch) != count:
                raise ValueError(f"got {len(batch)} actions for {count} envs")
            if ids is None:
                return cloudpickle.dumps(batch)
            full: List[Any] = [None] * self.num_envs
            for i, a in zip(ids, batch):
                full[int(i)] = a
            return cloudpickle.dumps(full)
        actions = np.asarray(actions)
        shape = (count, *self._action_shape[1:])
        if actions.ndim == 0:  # Gymnasium's iterate raises TypeError for a scalar too
            raise TypeError(f"actions must be a batch of {count} actions (an array of shape {shape}), "
                            f"got the scalar {actions!r}")
        if actions.shape != shape:
            raise ValueError(f"actions have shape {actions.shape}, expected {shape} "
                             f"({count} envs, action shape {self.single_action_space.shape})")
        actions = _refuse_objects(actions, self.single_action_space)
        if self._integer_actions and actions.dtype.kind not in "iub":
            raise ValueError(f"actions for a {type(self.single_action_space).__name__} space must be integers, "
                             f"got dtype {actions.dtype}")
        _check_fits(actions, self._action[0].dtype)
        if self._action_bounds is not None:
            _check_action_values(actions, self._action_bounds, self.single_action_space)
        if ids is None:
            np.copyto(self._action[slots], actions, casting="unsafe")
        elif np.ndim(slots) == 0:
            self._action[slots][ids] = actions
        else:
            for slot in np.unique(slots):
                mine = slots == slot
                self._action[slot][ids[mine]] = actions[mine]
        return None

    def reset_async(self, seed: Optional[Union[int, Sequence[Optional[int]]]] = None,
                    options: Optional[dict] = None):
        """Sends a reset to every sub-env: env ``i`` gets ``seed + i`` (an int), ``seed[i]`` (a list
        of ``num_envs`` ints or ``None``), or no seed (``None``), and ``options``.
        ``options["reset_mask"]``, a bool array of shape ``(num_envs,)``, resets only the envs it
        marks; the others keep their state and last observation.

        Raises:
            AlreadyPendingCallError, ClosedEnvironmentError,
            ValueError: a seed list of the wrong length, a negative / too large seed, a reset mask
                of the wrong shape or with no True value.
            TypeError: a reset mask that is not a bool NumPy array.
        """
        self._assert_open("reset_async")
        seeds = self._seed_list(seed)
        self._assert_default("reset_async")
        mask = None
        if options is not None and "reset_mask" in options:
            mask = options.pop("reset_mask")  # popped from the caller's dict, as Gymnasium does
            if not isinstance(mask, np.ndarray):
                raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
            if mask.shape != (self.num_envs,):
                raise ValueError(f"`options['reset_mask']` must have shape `({self.num_envs},)`, got {mask.shape}")
            if mask.dtype != np.bool_:
                raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
            if not np.any(mask):
                raise ValueError("`options['reset_mask']` must contain a boolean array with at least one True "
                                 f"value, got reset_mask={mask}")
        self._pool.write_seeds(seeds, None if mask is None else [bool(m) for m in mask])
        if self._device is not None:
            self._device.before_reuse([self._pool.next_slot])
        self._pool.submit("reset", None if options is None else cloudpickle.dumps(options))
        self._reset_mask = mask
        self._state = AsyncState.WAITING_RESET

    def reset_wait(self, timeout: Optional[float] = None) -> Tuple[Any, Dict[str, Any]]:
        """Waits for the pending reset.

        Returns:
            ``(observations, infos)``: observations batched as ``observation_space`` (an array of
            shape ``(num_envs, *single_observation_space.shape)`` and its dtype for a Box; a dict
            or tuple of such arrays for Dict and Tuple spaces); infos a dict vectorised as
            Gymnasium does.

        Raises:
            NoAsyncCallError, multiprocessing.TimeoutError (the reset stays pending),
            ringenv.errors.WorkerDiedError, or the exception an env raised.
        """
        previous = list(self._last_slots)
        slot, messages = self._wait("reset", AsyncState.WAITING_RESET, timeout)
        mask, self._reset_mask = self._reset_mask, None
        if mask is not None and self._obs_mem is not None:
            keep = ~mask  # envs not reset keep their last observation
            for (start, stop), before in zip(self._ranges, previous):
                if before is None:
                    continue
                rows = np.zeros_like(keep)
                rows[start:stop] = keep[start:stop]
                for new, old in zip(self._obs_rows[slot], self._obs_rows[before]):
                    new[rows] = old[rows]
        infos = self._absorb(messages)
        return self._observations(slot), infos

    def reset(self, *, seed=None, options=None):
        """Resets every sub-env; see :meth:`reset_async` and :meth:`reset_wait`."""
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def step_async(self, actions):
        """Sends a step to every worker with ``actions``, an element of ``action_space`` (for a
        Box, an array of shape ``(num_envs, *single_action_space.shape)``; for a Discrete,
        integers of shape ``(num_envs,)``). Actions of flat spaces are written into shared memory;
        others travel pickled.

        Values are passed to the envs unchecked, as Gymnasium passes them, unless the env was
        made with ``check_actions=True``.

        Raises:
            AlreadyPendingCallError, ClosedEnvironmentError,
            TypeError: a scalar instead of a batch of actions (``step(0)``), as Gymnasium.
            ValueError: actions of the wrong shape or count, actions that are not numbers (an
                object array holding ``None``, strings; naming the env), non-integer actions for
                a Discrete, MultiDiscrete or MultiBinary space, integers that do not fit the
                space's dtype, and with ``check_actions=True`` out-of-range or NaN values
                (naming the env; checked before anything is sent).
            ringenv.errors.ForkedProcessError: called in a process forked from the creator.
        """
        self._assert_default("step_async")
        payload = self._write_actions(actions, None, self._pool.next_slot)
        if self._device is not None:
            self._device.before_reuse([self._pool.next_slot])
        self._pool.submit("step", payload)
        self._state = AsyncState.WAITING_STEP

    def step_wait(self, timeout: Optional[float] = None):
        """Waits for the pending step.

        Returns:
            ``(observations, rewards, terminations, truncations, infos)``: observations batched
            as ``observation_space``; rewards ``float64`` of shape ``(num_envs,)``; terminations
            and truncations ``bool`` of shape ``(num_envs,)``; infos a dict vectorised as
            Gymnasium does (with ``final_obs``/``final_info`` in same-step autoreset mode).

        Raises:
            NoAsyncCallError, multiprocessing.TimeoutError (the step stays pending),
            ringenv.errors.WorkerDiedError, or the exception an env raised (its remote traceback
            is the ``__cause__``).
        """
        slot, messages = self._wait("step", AsyncState.WAITING_STEP, timeout)
        infos = self._absorb(messages)
        if self._device is not None:
            return (*self._device.batch([(slot, 0, self.num_envs)], self.copy), infos)
        return (
            self._observations(slot),
            self._reward[slot].astype(np.float64),
            self._terminated[slot].copy(),
            self._truncated[slot].copy(),
            infos,
        )

    def step(self, actions):
        """Steps every sub-env; see :meth:`step_async` and :meth:`step_wait`."""
        self.step_async(actions)
        return self.step_wait()

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Calls method ``name`` of every sub-env with ``args`` and ``kwargs`` (or reads the
        attribute, if it is not callable), through ``env.get_wrapper_attr``.

        Raises:
            AlreadyPendingCallError, ClosedEnvironmentError.
        """
        self._assert_default("call_async")
        self._pool.submit("call", cloudpickle.dumps(("call", name, args, kwargs)))
        self._state = AsyncState.WAITING_CALL

    def call_wait(self, timeout: Optional[float] = None) -> Tuple[Any, ...]:
        """Waits for the pending call; returns a tuple of ``num_envs`` results, in env order.

        Raises:
            NoAsyncCallError, multiprocessing.TimeoutError, the exception a sub-env raised (for
            example ``ValueError`` for ``reset``, ``step`` or ``close``, which have their own
            methods).
        """
        _, messages = self._wait("call", AsyncState.WAITING_CALL, timeout)
        return tuple(r for _, payload in sorted(messages, key=lambda m: m[0]) for r in cloudpickle.loads(payload))

    def call(self, name: str, *args: Any, **kwargs: Any) -> Tuple[Any, ...]:
        """``call_async`` then ``call_wait``: a tuple of one result per sub-env."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def get_attr(self, name: str) -> Tuple[Any, ...]:
        """The attribute ``name`` of every sub-env (a method is called with no arguments, as
        Gymnasium's ``AsyncVectorEnv.get_attr`` does)."""
        return self.call(name)

    def set_attr(self, name: str, values: Union[List[Any], Tuple[Any, ...], Any]) -> None:
        """Sets attribute ``name`` of every sub-env (``env.set_wrapper_attr``): to ``values[i]``
        for env ``i`` when ``values`` is a list or tuple, else to ``values`` for all.

        Raises:
            ValueError: a list or tuple whose length is not ``num_envs``.
            AlreadyPendingCallError, ClosedEnvironmentError.
        """
        self._assert_open("set_attr")
        if not isinstance(values, (list, tuple)):
            values = [values for _ in range(self.num_envs)]
        if len(values) != self.num_envs:
            raise ValueError("Values must be a list or tuple with length equal to the number of environments. "
                             f"Got `{len(values)}` values for {self.num_envs} environments.")
        self._assert_default("set_attr")
        self._pool.submit("call", cloudpickle.dumps(("set_attr", name, list(values), {})))
        self._state = AsyncState.WAITING_CALL
        self.call_wait()

    def _apply(self, fn: Callable[[gym.Env], Any], env_ids: Optional[Sequence[int]] = None) -> List[Any]:
        """Runs ``fn(env)`` in the workers on the sub-envs ``env_ids`` (``None``: all), in the
        order of ``env_ids``; ``fn`` travels with cloudpickle. For adapters (SB3's
        ``env_method`` with ``indices``, ``env_is_wrapped``).

        Raises:
            ValueError: an env id outside ``[0, num_envs)``.
            AlreadyPendingCallError, ClosedEnvironmentError, the exception ``fn`` raised.
        """
        ids = list(range(self.num_envs)) if env_ids is None else [int(i) for i in env_ids]
        bad = [i for i in ids if not 0 <= i < self.num_envs]
        if bad:
            raise ValueError(f"env id {bad[0]} is outside [0, {self.num_envs})")
        self._assert_default("_apply")
        wanted = sorted(set(ids))
        self._pool.submit("call", cloudpickle.dumps(("apply", fn, wanted, {})))
        self._state = AsyncState.WAITING_CALL
        by_id = dict(zip(wanted, self.call_wait()))
        return [by_id[i] for i in ids]

    @property
    def np_random_seed(self) -> Tuple[Any, ...]:  # type: ignore[override]  # a tuple, as Gymnasium's Async
        """The ``np_random_seed`` of every sub-env (a tuple, as Gymnasium's AsyncVectorEnv)."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]  # read-only, as Gymnasium's AsyncVectorEnv
    def np_random(self) -> Tuple[np.random.Generator, ...]:  # type: ignore[override]
        """The ``np_random`` generator of every sub-env (copies, pickled from the workers)."""
        return self.get_attr("np_random")

    def render(self) -> Optional[Tuple[Any, ...]]:
        """The frames of every sub-env (``call("render")``), a tuple of ``num_envs`` frames."""
        return self.call("render")

    def _wait(self, call: str, state: AsyncState, timeout):
        self._assert_open(f"{call}_wait")
        if self._state != state:
            raise NoAsyncCallError(f"Calling `{call}_wait` without any prior call to `{call}_async`.", state.value)
        try:
            slot, messages, errors, restarted = self._pool.wait(timeout)
        except WorkerDiedError:
            self._state = AsyncState.DEFAULT
            self._release(0.0)
            raise
        self._state = AsyncState.DEFAULT
        self._restarted = restarted
        for r in restarted:
            logger.warn(f"ringenv worker {r['worker']} (pid {r['pid']}, envs {r['env_ids'][0]}..{r['env_ids'][1]}) "
                        f"{r['status']} and was restarted; its envs were reset")
        if errors:
            raise _remote_exception(errors[0][1])
        if state != AsyncState.WAITING_CALL:
            self._last_slots = [slot] * len(self._last_slots)
        return slot, messages

    def _absorb(self, messages) -> Dict[str, Any]:
        """Keeps each env's info of a reset, step or recv for :meth:`env_infos`, vectorises them
        (in env order, as Gymnasium adds them) unless ``vector_infos=False``, and, on the pickled
        path, takes in the observations."""
        raw: Dict[int, Dict[str, Any]] = {}
        for worker, payload in sorted(messages, key=lambda m: m[0]):
            observations, env_infos = cloudpickle.loads(payload)
            if observations is not None:
                start = self._pool.env_ids(worker)[0]
                for k, obs in enumerate(observations):
                    if obs is not None:  # None: not reset (reset mask)
                        self._env_obs[start + k] = obs
            raw.update(env_infos)
        for r in self._restarted:
            for env_id in range(*r["env_ids"]):
                raw[env_id] = {**raw.get(env_id, {}), "worker_restarted": True}
        self._env_infos = raw
        if not self._vector_infos:
            return {}
        # Column by column, exactly as Gymnasium's env-by-env `_add_info` would (ringenv/_infos.py).
        return add_infos({}, sorted(raw.items()), self.num_envs, self._add_info)

    def env_infos(self) -> List[Dict[str, Any]]:
        """Each env's own info dict from the last ``reset``, ``step`` or ``recv``, as the env
        returned it (its own Python types, not vectorised; ``"worker_restarted": True`` added for
        the envs of a restarted worker; in same-step autoreset mode, ``"final_obs"`` and
        ``"final_info"`` for the envs that ended): a list of ``num_envs`` dicts in env order,
        empty for envs that returned no info or were not part of that call. For adapters that
        want one dict per env (Stable-Baselines3's); with ``vector_infos=False`` the vectorised
        infos are skipped altogether."""
        raw = self._env_infos
        return [raw.get(i, {}) for i in range(self.num_envs)]

    def _observations(self, slot: int):
        if self._device is not None:
            return self._device.observations(slot, self.copy)
        if self._obs_flat is not None:
            flat = self._obs_flat[slot]
            return flat.copy() if self.copy else flat
        if self._obs_mem is not None:
            obs = read_from_shared_memory(self.single_observation_space, self._obs_mem[slot], n=self.num_envs)
        else:
            obs = self._obs_batch = concatenate(self.single_observation_space, self._env_obs, self._obs_batch)
        return deepcopy(obs) if self.copy else obs

    def close_extras(self, timeout: Optional[float] = None, terminate: bool = False):
        """Stops the workers and releases every OS resource of the env at once: the segment's
        descriptor, the control sockets, the workers' pidfds. The env's own arrays over the
        shared segment are dropped too; the mapping goes when the last array a caller still
        holds (an observation returned with ``copy=False``) dies, so such arrays stay valid.

        A pending call is first awaited for up to ``timeout`` seconds (``None``: as long as it
        takes) unless ``terminate``; either way Gymnasium's warning ("Calling `close` while
        waiting for a pending call to `step` to complete.") names it. Then the workers are asked
        to close their envs and given ``timeout`` seconds (default 1) to exit, or with
        ``terminate=True`` killed at once.

        In a process other than the one that created the env (a fork), it only lets go of this
        process's inherited copy: the creator's workers are neither messaged nor stopped.
        """
        pool = getattr(self, "_pool", None)
        if pool is None:
            return
        if self._creator_pid != _native.current_pid():
            self._device = None  # CUDA state does not survive a fork: nothing to wait for here
            self._release(0.0)
            return
        if self._state != AsyncState.DEFAULT:
            # Gymnasium warns with terminate=True too (then waits 0 s; here: not at all).
            logger.warn(f"Calling `close` while waiting for a pending call to `{self._state.value}` to complete.")
            if not terminate:
                try:
                    self._wait(self._state.value, self._state, timeout)
                except multiprocessing.TimeoutError:
                    terminate = True
                except Exception:  # the pending call failed; the envs close all the same
                    pass
        self._release(0.0 if terminate else (1.0 if timeout is None else timeout))

    def _release(self, timeout: float) -> None:
        """Marks the env closed, stops the workers (waiting up to ``timeout`` seconds for them to
        exit; in a forked child: only lets go of the inherited handle) and drops the env's
        arrays over the segment, so that every descriptor is closed now and the mapping goes
        with the last array a caller still holds."""
        self.closed = True
        self._state = AsyncState.DEFAULT
        device, self._device = getattr(self, "_device", None), None
        if device is not None:
            device.close()  # waits for the copies in flight, then unpins the segment
        self._pool.close(timeout)
        self._obs_mem = self._obs_rows = self._obs_flat = self._action = None
        self._reward = self._terminated = self._truncated = None  # type: ignore[assignment]

    def __del__(self):
        if not getattr(self, "closed", True):
            self.close(terminate=True)

    def __repr__(self) -> str:
        return f"ringenv.AsyncVectorEnv(num_envs={getattr(self, 'num_envs', '?')})"
