"""``ringenv.AsyncVectorEnv``: a drop-in for ``gymnasium.vector.AsyncVectorEnv`` whose sub-envs
run in worker processes that exchange actions and observations through shared memory.

Its parts: Gymnasium's call protocol over a pool, the base class (``_protocol.py``); what the
workers run (``_program.py``); the argument checks (``_checks.py``); the views of the pool's slots
(``_slots.py``); the asynchronous batches (``_batches.py``); GPU staging (``_staging.py``).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import pickle
from collections.abc import Sequence as SequenceABC
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from ringenv import _layout, _native
from ringenv._batches import AsyncBatches, check_batch_size, worker_ranges
from ringenv._plan import plan_workers
from ringenv._checks import (check_count, check_factories, check_options, check_segment_fits, reset_mask_of,
                             seeds_of)
from ringenv._infos import add_batch_infos, add_infos
from ringenv._leases import LENDING_DEPTH, lends
from ringenv._program import RustEnvs, WorkerProgram, _short, python_program
from ringenv._protocol import AsyncState, PoolVectorEnv, busy_error, closed_meanwhile_error, pending_error
from ringenv._slots import Slots, array_tree, device_tree
from ringenv._staging import parse_device
from ringenv._pickling import discard_local_inits, reset_payload
from ringenv._worker import refuse_during_factory_loading, worker_environ
from ringenv.errors import StartupTimeoutError, WorkerDiedError, _timeout_message

__all__ = ["AsyncVectorEnv", "AsyncState"]


#: Unpickles a worker's message (``cloudpickle.loads`` is this function).
_loads = pickle.loads

#: The first bytes of a typed message (``runtime/src/infos.rs``'s ``MAGIC``).
_TYPED = b"\0RTI"


#: Seconds the interpreter's exit waits for daemon threads to finish the inline share's steps
#: under way, so that the exit never ends a thread inside them (which aborts the process:
#: ``bindings/src/exit_guard.rs``); threads that step afterwards are parked until the process ends.
EXIT_WAIT_S = 10.0

atexit.register(_native.hold_inline_calls_at_exit, EXIT_WAIT_S)
# a forked child waits at its exit only for its own thread's calls, not the parent's other threads'
os.register_at_fork(after_in_child=_native.exit_guard_after_fork)


class AsyncVectorEnv(PoolVectorEnv):
    """Vectorized env stepping its sub-envs in worker processes over shared memory.

    Accepts what ``gymnasium.vector.AsyncVectorEnv`` accepts and returns the same results
    (values and dtypes). Sub-envs are split into ``num_workers`` contiguous groups, each run by
    one worker process whose Rust step loop writes observations straight into a shared memory
    segment, one ``(num_envs, ...)`` array per leaf of the observation space.

    Only the process that created the env may use it: in a forked process every call raises
    :class:`ringenv.errors.ForkedProcessError`, and ``close()`` only lets go of the child's copy.

    Args:
        env_fns: callables that each create one sub-env (sent to the workers with cloudpickle).
        shared_memory: if ``True`` (default), observations of spaces with a fixed layout (Box,
            Discrete, MultiDiscrete, MultiBinary, Text, Dict and Tuple of those) cross through
            shared memory; others (Graph, Sequence, custom spaces), and all with ``False``,
            travel pickled. A Dict with values of both kinds is split. A value of another dtype
            is cast into shared memory unsafely, as Gymnasium's ``write_to_shared_memory`` does.
        copy: if ``True`` (default), ``reset``/``step`` return observations the caller owns. A
            batch of at least 64 KiB of array observations is lent rather than copied: views of a
            slot no worker writes while any array of it is alive (``ringenv/_leases.py``). If
            ``False`` they may be views of the shared slot, valid until the step after next.
        context: accepted for compatibility and ignored: workers always start with fork+exec.
        daemon: accepted for compatibility; workers always die with the main process.
        worker: must be ``None``: a custom worker function raises ``ValueError``.
        observation_mode: ``"same"``, ``"different"`` (sub-envs may differ in bounds, not in
            dtype or shape), or a ``(batched_space, single_space)`` tuple, as Gymnasium.
        autoreset_mode: ``AutoresetMode.NEXT_STEP`` (default), ``SAME_STEP`` or ``DISABLED``.
        max_concurrency: at most this many envs step at once: caps ``num_workers``.
        num_workers: worker processes (default: one per usable core, less one with ``inline``);
            ``0``: none, this process steps every env (no crash isolation; docs/INLINE.md).
        inline: whether this process steps the last block of envs itself while the worker
            processes step theirs. ``None`` (default): yes when ``num_workers`` is not given, the
            envs are Python or built-in Rust envs and there are at least as many as usable cores
            (with fewer, each block gets a worker process and this process keeps a core).
            ``False``: every env in a worker process.
            The share's envs see later changes to their code or globals, as ``SyncVectorEnv``'s
            do; see docs/INLINE.md.
        startup_timeout: seconds to wait for the worker processes to build their envs
            (``multiprocessing.TimeoutError`` after it). Envs this process builds itself have no
            time limit; Ctrl-C interrupts them.
        on_worker_failure: ``"raise"`` (default): a worker that dies raises
            :class:`ringenv.errors.WorkerDiedError` and closes the vector env. ``"restart"``: the
            worker is restarted and its envs reset; the step it died in reports those envs as
            truncated, with ``infos["worker_restarted"]`` set. More than ``max_restarts`` deaths
            within ``restart_window`` seconds raise :class:`ringenv.errors.CrashLoopError`.
        max_restarts: the crash-loop limit of ``"restart"``: deaths allowed (default 3) ...
        restart_window: ... within this many seconds (default 60).
        worker_env: environment variables for the workers, on top of the defaults
            ``OMP_NUM_THREADS=MKL_NUM_THREADS=OPENBLAS_NUM_THREADS=1`` and
            ``CUDA_VISIBLE_DEVICES=""``; a value of ``None`` keeps the parent's value.
        check_actions: if ``True``, ``step_async`` and ``send`` also raise ``ValueError`` for
            out-of-range Discrete, MultiDiscrete and MultiBinary actions and NaN in a float Box
            (a few µs per step). Shape and dtype are checked either way (``TypeError`` for a
            scalar where a batch is expected, ``ValueError`` for a wrong shape or dtype).
            Built-in Rust envs (``ringenv.make_vec``) check by default.
        batch_size: envs per :meth:`recv` (EnvPool's ``async_reset`` / ``send`` / ``recv``);
            default ``num_envs``. Below ``num_envs`` a batch is whole workers' blocks, so
            ``num_envs`` must split into equal blocks that make up ``batch_size``; ``DISABLED``
            autoreset is refused.
        device: ``None`` or ``"cpu"`` (default): results are NumPy arrays. ``"cuda"``,
            ``"cuda:N"`` or a ``torch.device``: observations, rewards (``float64``),
            terminations and truncations come back as torch tensors on that GPU, copied
            asynchronously on the caller's current torch stream; with ``copy=False`` the tensors
            are reused two batches later. Actions may be torch tensors. Needs observations of
            arrays in shared memory (a Box, Discrete, MultiDiscrete or MultiBinary space, or a
            Dict or Tuple of them); ``ValueError`` otherwise. See docs/GPU.md.
        spin_us: how long at most, in µs, a waiting process spins before it sleeps on a futex.
            ``None`` (default): up to 1 ms (400 µs when the processes outnumber the cores),
            adapted to its peers' recent ready times; ``0``: never spin; at most
            ``ringenv._checks.SPIN_US_MAX`` (10 s). See docs/WAKEUP.md.
        deterministic: if ``True``, :meth:`recv` returns batches in the order their actions were
            sent instead of the order they finished, so with seeded envs the whole run is a
            function of the seeds and actions alone.
        vector_infos: if ``True`` (default), ``reset``, ``step`` and ``recv`` return infos
            vectorised as Gymnasium does; if ``False``, an empty dict (:meth:`env_infos` reads
            each env's own).

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
        ringenv.errors.WorkerStartupError: a factory raised in a worker, or sub-env spaces
            differ (the message names the env; the original exception is its ``__cause__``).
        The exception ``env_fns[0]()`` raises, as it is: that factory runs once in this process
            first, to read the spaces (as with Gymnasium's ``AsyncVectorEnv``), before any
            worker starts.
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
        _rust_envs: Optional[RustEnvs] = None,
    ):
        # _rust_envs (private; ringenv.make_vec's): a Rust env's workers, in place of env_fns.
        self.closed = True  # until the pool exists, close() has nothing to do
        refuse_during_factory_loading()
        if _rust_envs is None:
            if callable(env_fns) and not isinstance(env_fns, SequenceABC):
                raise TypeError(f"env_fns must be a sequence of env factories, got one callable {env_fns!r}: pass "
                                "[fn] * num_envs (or a list of different ones)")
            if not isinstance(env_fns, SequenceABC):
                env_fns = list(env_fns)
            if len(env_fns) == 0:
                raise ValueError("env_fns is empty: give at least one env factory")
            check_factories(env_fns)
        if worker is not None:
            raise ValueError("ringenv runs its own worker loop; a custom `worker` function cannot be used")
        # Counts and durations first: nothing is built or allocated for arguments that cannot work.
        self.num_envs = check_options(len(env_fns if _rust_envs is None else _rust_envs), num_workers, batch_size,
                                      max_concurrency, startup_timeout, max_restarts, restart_window, spin_us, inline)
        self.env_fns = env_fns
        self.shared_memory = shared_memory
        self.autoreset_mode = (autoreset_mode if isinstance(autoreset_mode, AutoresetMode)
                               else AutoresetMode(autoreset_mode))
        program = (python_program(env_fns, observation_mode, self.autoreset_mode) if _rust_envs is None
                   else _rust_envs.program(on_worker_failure))
        self.metadata, self.render_mode = program.metadata, program.render_mode
        self.observation_mode = observation_mode  # as given, as Gymnasium's vector envs keep it
        self._rust_envs = _rust_envs
        self._reset_needed = _rust_envs is not None
        self.metadata["autoreset_mode"] = self.autoreset_mode
        try:
            self._start(program, num_workers=num_workers, max_concurrency=max_concurrency,
                        startup_timeout=startup_timeout, copy=copy, on_worker_failure=on_worker_failure,
                        max_restarts=max_restarts, restart_window=restart_window, worker_env=worker_env,
                        check_actions=check_actions, batch_size=batch_size, deterministic=deterministic,
                        device=device, spin_us=spin_us, vector_infos=vector_infos, inline=inline)
            self.env_fns = list(env_fns)  # after the size checks: env_fns may be a lazy sequence (make_vec's)
        except BaseException:
            # An error or a Ctrl-C once the pool started: its workers stop now, not when the
            # exception's traceback (which holds this half-made env) is freed, which in a REPL or
            # notebook (sys.last_traceback) is the next error.
            self.close(terminate=True)
            raise

    def _start(self, program: WorkerProgram, *, num_workers, max_concurrency, startup_timeout, copy,
               on_worker_failure, max_restarts, restart_window, worker_env, check_actions, batch_size, deterministic,
               device, spin_us, vector_infos, inline) -> None:
        """Checks what depends on the spaces, then starts the pool and makes the views of its
        slots: the one place a pool is built, for Python and Rust envs alike."""
        n, single_obs, single_act = self.num_envs, program.single_observation_space, program.single_action_space
        self._vector_infos = bool(vector_infos)
        self._env_infos: Union[Dict[int, Dict[str, Any]], List[Tuple[int, Any]]] = {}
        torch_device = parse_device(device)  # before any worker starts: a bad device touches nothing
        act_leaves = _layout.plan(single_act, n) if _layout.is_flat(single_act) else None
        obs_layout = _layout.observation_layout(single_obs, n, len(act_leaves or ())) if self.shared_memory else None
        if torch_device is not None and not (obs_layout is not None and device_tree(obs_layout.space)):
            raise ValueError(f"device={device!r} needs observations of arrays in shared memory (a Box, Discrete, "
                             f"MultiDiscrete or MultiBinary space, or a Dict or Tuple of them; a Dict's values of no "
                             f"fixed layout, as MiniGrid's mission, stay on the host), got {single_obs!r}"
                             + ("" if self.shared_memory else " with shared_memory=False"))
        batch_size = n if batch_size is None else check_count("batch_size", batch_size, 1, n, "num_envs")
        if batch_size < n and self.autoreset_mode == AutoresetMode.DISABLED:
            raise ValueError("batch_size < num_envs needs an autoreset mode (NEXT_STEP or SAME_STEP): with "
                             "DISABLED an env that ended could never be reset between batches")
        if num_workers is not None:
            num_workers = check_count("num_workers", num_workers, 0, n, "num_envs")
        processes, use_inline = plan_workers(n, num_workers, None if inline is None else bool(inline), program.host,
                                             batch_size, max_concurrency)
        num_workers = processes + int(use_inline)  # the pool's workers: the processes, then the inline share
        if batch_size < n:
            check_batch_size(n, num_workers, batch_size, use_inline)
        obs_leaves = obs_layout.leaves if obs_layout is not None else None
        # The segment's size, computed without allocating, is checked before Gymnasium's batch_space
        # allocates arrays of num_envs rows and before the segment is created.
        lend = obs_layout is not None and lends(copy, n * sum(_layout.leaf_bytes(leaf) for leaf in obs_layout.leaves),
                                                array_tree(obs_layout.space), torch_device,
                                                self.autoreset_mode == AutoresetMode.DISABLED)
        depth = LENDING_DEPTH if lend else 2
        try:
            size = _native.Pool.segment_size(n, num_workers, obs_leaves or [], act_leaves or [], depth)
        except ValueError as e:
            if "address space" not in str(e):
                raise
            raise ValueError(f"num_envs={n} needs a shared memory segment larger than the address space: use fewer "
                             "envs") from None
        check_segment_fits(n, size)
        self.batch_size, self.num_workers, self.deterministic = batch_size, processes, bool(deterministic)
        self.inline = use_inline
        self.copy = copy
        self.single_observation_space, self.single_action_space = single_obs, single_act
        self.observation_space = (batch_space(single_obs, n) if program.observation_space is None
                                  else program.observation_space)
        self.action_space = batch_space(single_act, n)
        inits = [program.make_init(a, b, use_inline and w == num_workers - 1)
                 for w, (a, b) in enumerate(worker_ranges(n, num_workers))]
        self._creator_pid = os.getpid()
        try:
            self._pool = _native.Pool(
                n, num_workers, obs_leaves or [], act_leaves or [], program.argv, inits,
                env=worker_environ(worker_env), depth=depth, startup_timeout=startup_timeout,
                on_worker_failure=on_worker_failure,
                max_restarts=max_restarts, restart_window=restart_window, spin_us=spin_us,
                inline=program.host if use_inline else None,
            )
        except StartupTimeoutError as e:  # say what the worker runs in the caller's terms
            raise e.with_program(self._program_text(e.env_ids)) from None
        finally:
            discard_local_inits(inits)  # the share's factories, if the pool never took them
        self._closer = self._pool.closer()
        self._call_guard = _native.CallGuard()
        self.closed = False
        self._state = AsyncState.DEFAULT
        self._slots = Slots(self._pool, n, single_obs, single_act, self.observation_space, self.action_space,
                            obs_layout, act_leaves, check_actions, lend)
        self._batches = AsyncBatches(self._pool, self._slots, n, num_workers, batch_size, self.deterministic,
                                     self._call_guard)
        self._reset_mask: Optional[Tuple[np.ndarray, List[Optional[int]]]] = None  # (mask, the slots before)
        if torch_device is not None:
            self._slots.to_device(torch_device, self._pool.segment())  # on an error __init__ closes the pool

    # -- EnvPool's asynchronous batches (ringenv/_batches.py) ----------------------------------

    def async_reset(self, seed: Optional[Union[int, Sequence[Optional[int]]]] = None,
                    options: Optional[dict] = None) -> None:
        """Sends a reset to every env and returns at once (EnvPool's ``async_reset``); the first
        observations then come back through :meth:`recv`, ``batch_size`` envs at a time, with
        reward 0 and terminated/truncated False. ``seed`` as in :meth:`reset`: env ``i`` gets
        ``seed + i`` (an int) or ``seed[i]``.

        Raises:
            AlreadyPendingCallError: a synchronous call is pending, batches are still in flight
                (``recv`` them first), or another thread is inside ``send``, ``recv`` or
                ``async_reset`` of this env.
            KeyboardInterrupt: Ctrl-C during the call: make the same ``async_reset`` again. One
                repeating the last reset (equal seeds and options) while every worker still
                runs it (no ``recv`` or ``send`` since) returns at once.
            ValueError: bad seeds; ClosedEnvironmentError.
        """
        seeds = seeds_of(seed, self.num_envs, self._rust_envs is not None)
        self._assert_open("async_reset")
        batches = self._batches
        if self._state == AsyncState.DEFAULT and batches.repeats_last_reset(seeds, options):
            self._reset_needed = False
            return  # the same async_reset again, after a Ctrl-C: it went out
        self._assert_default("async_reset")
        try:
            with batches.guard:
                batches.reset(seeds, options, self._rust_envs is not None)
        except _native.Busy:
            raise busy_error("async_reset") from None
        self._reset_needed = False

    def send(self, actions: Any, env_ids: Optional[Sequence[int]] = None) -> None:
        """Sends ``actions`` to the envs ``env_ids`` and returns at once (EnvPool's ``send``).

        Args:
            actions: the actions of those envs, in the order of ``env_ids``: an array of shape
                ``(len(env_ids), *single_action_space.shape)`` (integers for Discrete,
                MultiDiscrete and MultiBinary spaces), or for other action spaces a batch of that
                many elements.
            env_ids: the env ids, usually ``infos["env_id"]`` of the last :meth:`recv`; any order,
                but they must make up whole workers' blocks of envs (``None``: every env).

        Raises:
            TypeError: a scalar instead of a batch of actions.
            ValueError: an env id out of range or repeated, env ids that do not make up whole
                workers, envs whose last results were not received yet (except for a repeat of
                the last ``send``, below), actions of the wrong shape or dtype, or with
                ``check_actions=True`` out of range (nothing is sent).
            KeyboardInterrupt: Ctrl-C during the call: make the same ``send`` again; the envs step
                once either way (docs/RELIABILITY.md).
            gymnasium.error.ResetNeeded: Rust envs and no ``async_reset`` (or ``reset``) yet.
            AlreadyPendingCallError: a synchronous call is pending, or another thread is inside
                ``send``, ``recv`` or ``async_reset`` of this env; ClosedEnvironmentError.
        """
        self._assert_open("send")
        if self._state != AsyncState.DEFAULT:
            raise pending_error(self._state, "send")
        if self._reset_needed:
            raise ResetNeeded("Cannot call env.step() before calling env.reset()")
        batches = self._batches
        try:
            with batches.guard:
                batches.send(actions, env_ids)
        except _native.Busy:
            raise busy_error("send") from None

    def recv(self, timeout: Optional[float] = None) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
        """Waits for the next ``batch_size`` envs (EnvPool's ``recv``): the first workers to
        finish, or with ``deterministic=True`` the earliest sent.

        Returns:
            ``(observations, rewards, terminations, truncations, infos)`` of the batch, in the
            order of ``infos["env_id"]`` (an ``int32`` array of shape ``(batch_size,)``, ascending
            within each worker's block): observations batched as ``observation_space`` with
            ``batch_size`` rows; rewards ``float64``, terminations and truncations ``bool``, each
            of shape ``(batch_size,)``; infos vectorised over the batch. With ``copy=False``
            observations may be views of shared memory, valid until those envs step again.

        Raises:
            ValueError: fewer than ``batch_size`` envs are in flight (nothing to wait for).
            AlreadyPendingCallError: another thread is inside ``send``, ``recv`` or
                ``async_reset`` of this env, or in a synchronous call.
            multiprocessing.TimeoutError: ``timeout`` seconds passed (the batch stays in flight).
            KeyboardInterrupt: Ctrl-C while it waited or read the batch; the batch is kept, and
                the next ``recv`` returns it (docs/RELIABILITY.md).
            ringenv.errors.WorkerDiedError: a worker process died.
            Exception: whatever an env raised.
        """
        self._assert_open("recv")
        batches = self._batches
        try:
            with batches.guard:
                try:
                    batch = batches.wait(timeout)
                except WorkerDiedError:
                    self._release(0.0)  # closed: every descriptor goes now
                    raise
                except multiprocessing.TimeoutError as e:
                    self._name_late(e)
                    raise
                try:
                    result = batches.take(batch, self.copy, self._absorb)
                except Exception as e:
                    if not self.closed:
                        raise
                    raise closed_meanwhile_error("recv", e) from e
        except _native.Busy:
            raise busy_error("recv") from None
        # A plain store, then the return: a Ctrl-C raised before here (the guard's exit is a call,
        # where CPython runs signal handlers) leaves the batch to the next recv.
        batches.taken = True
        return result

    # -- Gymnasium's protocol ------------------------------------------------------------------

    def reset_async(self, seed: Optional[Union[int, Sequence[Optional[int]]]] = None,
                    options: Optional[dict] = None):
        """Sends a reset to every sub-env: env ``i`` gets ``seed + i`` (an int), ``seed[i]`` (a list
        of ``num_envs`` ints or ``None``), or no seed (``None``), and ``options``. A Rust env's
        seed is a ``u64``, below ``2**64``.
        ``options["reset_mask"]``, a bool array of shape ``(num_envs,)``, resets only the envs it
        marks; the others keep their state and last observation.

        Raises:
            AlreadyPendingCallError: a call is already pending.
            ClosedEnvironmentError: the vector env is closed.
            ValueError: a seed list of the wrong length, a negative seed, one of ``2**64`` or more
                for a Rust env (``ringenv.errors.SeedError``), a reset mask of the wrong shape or
                with no True value.
            TypeError: a reset mask that is not a bool NumPy array; options of a Rust env that are
                not JSON data.
        """
        self._assert_open("reset_async")
        seeds = seeds_of(seed, self.num_envs, self._rust_envs is not None)

        def send() -> None:
            mask = reset_mask_of(options, self.num_envs)
            shared_seeds, payload = reset_payload(seeds, options, self._rust_envs is not None)
            slot = self._slots.next_slot()
            self._pool.write_seeds(shared_seeds, None if mask is None else [bool(m) for m in mask])
            self._slots.before_reuse([slot])
            # The envs not reset keep their last observations, from the slots they are in now.
            self._reset_mask = None if mask is None else (mask, list(self._slots.latest))
            self._pool.submit("reset", payload)

        self._send("reset_async", AsyncState.WAITING_RESET, send)

    def reset_wait(self, timeout: Optional[float] = None) -> Tuple[Any, Dict[str, Any]]:
        """Waits for the pending reset.

        Returns:
            ``(observations, infos)``: observations batched as ``observation_space`` (an array of
            shape ``(num_envs, *single_observation_space.shape)`` and its dtype for a Box; a dict
            or tuple of such arrays for Dict and Tuple spaces); infos a dict vectorised as
            Gymnasium does.

        Raises:
            NoAsyncCallError: no reset is pending.
            multiprocessing.TimeoutError: ``timeout`` passed; the reset stays pending.
            ringenv.errors.WorkerDiedError: a worker process died.
            Exception: whatever an env raised.
        """
        slot, messages, restarted = self._wait("reset", AsyncState.WAITING_RESET, timeout)
        # The reset stays pending until its results are built: a Ctrl-C meanwhile leaves it to the
        # next reset_wait, which reads the same results again (the pool retains them).
        try:
            if self._reset_mask is not None:  # envs not reset keep their last observation
                mask, previous = self._reset_mask
                self._slots.keep_observations(slot, previous, ~mask, self._batches.ranges)
            infos = self._absorb(messages, restarted)
            result = self._slots.observations(slot, self.copy), infos
        except Exception as e:
            self._state, self._reset_mask = AsyncState.DEFAULT, None
            if not self.closed:
                raise
            raise closed_meanwhile_error("reset_wait", e) from e
        self._state, self._reset_mask, self._reset_needed = AsyncState.DEFAULT, None, False
        return result

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
            AlreadyPendingCallError: a call is already pending.
            ClosedEnvironmentError: the vector env is closed.
            TypeError: a scalar instead of a batch of actions (``step(0)``), as Gymnasium.
            ValueError: actions of the wrong shape or count, not numbers, non-integer for a
                Discrete, MultiDiscrete or MultiBinary space, integers that do not fit the space's
                dtype, and with ``check_actions=True`` out-of-range or NaN values (naming the env).
            gymnasium.error.ResetNeeded: Rust envs not reset yet (a Python env made by
                ``gym.make`` raises it from the worker, as in Gymnasium).
            ringenv.errors.ForkedProcessError: called in a process forked from the creator.
        """
        # What PoolVectorEnv._send does, written out: this is the hot path, where its closure and
        # call cost 0.3-0.8 us a step (a 64-env Rust CartPole step is ~9 us).
        guard = self._call_guard
        if guard is None:  # no pool was made
            raise self._sending_elsewhere("step_async")
        try:
            with guard:
                self._assert_default("step_async")
                if self._reset_needed:
                    raise ResetNeeded("Cannot call env.step() before calling env.reset()")
                try:
                    slot = self._slots.next_slot()
                    payload = self._slots.write_actions(actions, None, slot)
                    self._slots.before_reuse([slot])
                    self._pool.submit("step", payload)
                    self._state = AsyncState.WAITING_STEP
                except BaseException:
                    self._state = AsyncState.WAITING_STEP if self._pool_pending() else AsyncState.DEFAULT
                    raise
        except _native.Busy:
            raise self._sending_elsewhere("step_async") from None

    def step_wait(self, timeout: Optional[float] = None) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[str, Any]]:
        """Waits for the pending step.

        Returns:
            ``(observations, rewards, terminations, truncations, infos)``: observations batched
            as ``observation_space``; rewards ``float64`` of shape ``(num_envs,)``; terminations
            and truncations ``bool`` of shape ``(num_envs,)``; infos a dict vectorised as
            Gymnasium does (with ``final_obs``/``final_info`` in same-step autoreset mode).

        Raises:
            NoAsyncCallError: no step is pending.
            multiprocessing.TimeoutError: ``timeout`` passed; the step stays pending.
            KeyboardInterrupt: Ctrl-C while it waited or read the results: the step stays
                pending, and the next ``step_wait`` returns it; one inside the own code of an env
                of this process's inline share loses that step, which the next ``step_wait`` says
                with ``RemoteEnvError``.
            ringenv.errors.WorkerDiedError: a worker process died.
            Exception: whatever an env raised (its remote traceback is the ``__cause__``).
        """
        slot, messages, restarted = self._wait("step", AsyncState.WAITING_STEP, timeout)
        # The step stays pending until its results are built: a Ctrl-C meanwhile leaves it to the
        # next step_wait, which reads the same results again (the pool retains them), instead
        # of losing them (a step_wait called again said NoAsyncCallError, and a program that then
        # stepped again applied two steps for one).
        try:
            infos = self._absorb(messages, restarted)
            result = (*self._slots.results(slot, self.copy), infos)
        except Exception as e:
            self._state = AsyncState.DEFAULT
            if not self.closed:
                raise
            raise closed_meanwhile_error("step_wait", e) from e
        self._state = AsyncState.DEFAULT
        return result

    def step(self, actions):
        """Steps every sub-env; see :meth:`step_async` and :meth:`step_wait`."""
        self.step_async(actions)
        return self.step_wait()

    def _wait(self, call: str, state: AsyncState, timeout: Optional[float]) -> Tuple[int, list, List[dict]]:
        """``PoolVectorEnv._wait``, its timeout error naming the late envs (:meth:`_name_late`)."""
        try:
            return super()._wait(call, state, timeout)
        except multiprocessing.TimeoutError as e:
            self._name_late(e)
            raise

    def _name_late(self, error: multiprocessing.TimeoutError) -> None:
        """Rewrites the pool's timeout ``error`` (which names the late workers, ``waiting_for``)
        to name their envs (``env_ids``, and in its message) and whether this process steps them
        (the inline share, which a timeout cannot interrupt)."""
        waiting = getattr(error, "waiting_for", None)
        if waiting:
            late = [(w, self._pool.env_ids(w)) for w in waiting]
            error.args = (_timeout_message(getattr(error, "seconds", 0.0), late, self._pool.inline_worker),)
            error.env_ids = tuple(i for _, ids in late for i in ids)  # type: ignore[attr-defined]

    def _program_text(self, env_ids: Sequence[int]) -> str:
        """What builds the envs ``env_ids`` (indices), for an error naming a worker: their env
        factories, or the Rust env's id and worker program."""
        rust = self._rust_envs
        if rust is None:
            shown = [f"env_fns[{i}] = {_short(self.env_fns[i])}" for i in list(env_ids)[:2]]
            more = f" and {len(env_ids) - 2} more" if len(env_ids) > 2 else ""
            return f"the env factories {', '.join(shown)}{more} in a Python worker process"
        kwargs = f" with kwargs {_short(rust.kwargs)}" if rust.kwargs else ""
        if rust.builtin:
            return f"ringenv's built-in Rust env {rust.id!r}{kwargs} (constructed in a worker process)"
        return f"Rust env {rust.id!r}{kwargs} of the worker binary {rust.argv[0]}"

    def _absorb(self, messages: List[Tuple[int, Any]], restarted: List[dict],
                env_ids: Optional[np.ndarray] = None) -> Dict[str, Any]:
        """Keeps each env's info of a reset, step or recv for :meth:`env_infos` (``messages``:
        ``(worker, payload)`` pairs in worker order; ``restarted``: the workers restarted
        meanwhile), vectorises them (in env order, as Gymnasium adds them; over the batch
        ``env_ids`` of a ``recv``, else over every env) unless ``vector_infos=False``, and, on the
        pickled path, takes in the observations."""
        if not messages and not restarted:  # no env returned an info: nothing to vectorise
            self._env_infos = {}
            return {}
        if not restarted:  # typed messages: each env's dict is made on demand by env_infos()
            if self._vector_infos:  # (None where a message is not typed)
                columns = _native.typed_columns(messages, env_ids, self.num_envs)
                if columns is not None:
                    self._env_infos = messages
                    return columns
            elif all(p[:4] == _TYPED if type(p) is bytes else len(p) == 3 for _, p in messages):
                self._env_infos = messages  # (the inline share's typed payload: (None, infos, message))
                return {}
        pairs: List[Tuple[int, Dict[str, Any]]] = []
        for worker, payload in messages:
            if type(payload) is bytes and payload.startswith(_TYPED):
                pairs += _native.typed_dicts(payload, self.num_envs)
                continue
            # A worker process's message is pickled; the inline share's is the tuple itself.
            observations, env_infos = payload[:2] if type(payload) is tuple else _loads(payload)
            if observations is not None:
                self._slots.take_pickled(self._pool.env_ids(worker)[0], observations)
            pairs += env_infos
        raw = dict(pairs)
        for r in restarted:
            for env_id in r["env_ids"]:
                raw[env_id] = {**raw.get(env_id, {}), "worker_restarted": True}
        self._env_infos = raw
        if not raw or not self._vector_infos:  # (messages of pickled observations alone: no info)
            return {}
        # Column by column, exactly as Gymnasium's env-by-env `_add_info` would (ringenv/_infos.py).
        if env_ids is not None:
            return add_batch_infos(raw, env_ids, self.num_envs, self._add_info)
        # Each worker's pairs ascend over its block of envs, and the blocks ascend with the
        # workers: in worker order the pairs are in env order (restarts add to `raw` alone).
        return add_infos({}, pairs if not restarted else sorted(raw.items()), self.num_envs, self._add_info)

    def env_infos(self) -> List[Dict[str, Any]]:
        """Each env's own info dict from the last ``reset``, ``step`` or ``recv``, as the env
        returned it (its own Python types, not vectorised; ``"worker_restarted": True`` added for
        the envs of a restarted worker; in same-step autoreset mode, ``"final_obs"`` and
        ``"final_info"`` for the envs that ended): a list of ``num_envs`` dicts in env order,
        empty for envs that returned no info or were not part of that call. For adapters that
        want one dict per env (Stable-Baselines3's); with ``vector_infos=False`` the vectorised
        infos are skipped altogether. Each call returns new lists; the dicts are the same objects
        until the next call that steps or resets."""
        raw = self._env_infos
        if isinstance(raw, list):  # typed messages: the dicts are made on the first call
            raw = self._env_infos = {i: info for _, m in raw
                                     for i, info in (m[1] if type(m) is tuple else _native.typed_dicts(m, self.num_envs))}
        return [raw.get(i, {}) for i in range(self.num_envs)]

    def __repr__(self) -> str:
        """``ringenv.AsyncVectorEnv(ID, num_envs=N)``, without ``ID`` when there is no spec (as
        Gymnasium's ``VectorEnv.__repr__``)."""
        spec = getattr(self, "spec", None)
        named = f"{spec.id}, " if spec is not None else ""
        return f"ringenv.AsyncVectorEnv({named}num_envs={getattr(self, 'num_envs', '?')})"
