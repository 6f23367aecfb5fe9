"""Gymnasium's asynchronous protocol over a ringenv pool, the base of :class:`ringenv.AsyncVectorEnv`:
the state machine (at most one call pending; a call out of turn raises Gymnasium's named errors),
the creator-process check (a fork may not use the workers), waiting for results, ``call`` /
``get_attr`` / ``set_attr`` / ``render`` over the workers' control sockets, and closing.

What a pool runs, and how its results are read, is the subclass's; this module only needs its
pool (``_pool``), the views of its slots (``_slots``) and its number of workers.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from enum import Enum
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import logger
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import VectorEnv

from ringenv import _native
from ringenv._not_copyable import NotCopyable
from ringenv._pickling import request
from ringenv._program import RustEnvs
from ringenv._slots import Slots
from ringenv.errors import ForkedProcessError, RingenvError, WorkerDiedError, _env_ids_text, _remote_errors

__all__ = ["AsyncState", "PoolVectorEnv", "busy_error", "closed_error", "closed_meanwhile_error", "no_call_error",
           "pending_error", "restart_message", "warn_restarted"]

#: How long (seconds, beyond the close's own ``timeout``) a ``close()`` waits for another
#: thread's call to let go of the pool: a wait lets go within 100 ms of the request, a share of
#: envs this process is stepping only when its ``step`` calls return.
CLOSE_HANDOFF_S = 10.0
#: How often (seconds) that ``close()`` looks whether the call let go.
CLOSE_POLL_S = 0.002


def busy_error(name: str) -> AlreadyPendingCallError:
    """The error for ``name`` called while another thread is inside a call to the same vector
    env (the pool or the call guard raised ``ringenv._native.Busy``): Gymnasium's
    ``AlreadyPendingCallError``, saying so."""
    return AlreadyPendingCallError(
        f"`{name}` was called while another thread is inside a call to this vector env; a vector env serves one "
        "call at a time: step it from one thread, or guard it with a lock", "step")


def closed_meanwhile_error(call: str, error: BaseException) -> ClosedEnvironmentError:
    """Gymnasium's ``ClosedEnvironmentError`` for ``call`` when the env was closed by another
    thread (or a signal handler) while the call ran, in place of ``error``, what the closing made
    the call fail with (chain it: ``raise ... from error``)."""
    return ClosedEnvironmentError(f"the vector env was closed (by another thread, or by a signal handler) while "
                                  f"`{call}` ran; its results are lost ({type(error).__name__}: {error})")


class AsyncState(Enum):
    """The protocol state: at most one call is pending (Gymnasium's states, same values)."""

    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"


# The protocol's errors, one set for every vector env of ringenv (this module's and ringenv.ray's),
# built only when raised: the checks stay inline on the step path.

def closed_error(name: str) -> ClosedEnvironmentError:
    """Gymnasium's ``ClosedEnvironmentError`` for call ``name`` made once the env is closed."""
    return ClosedEnvironmentError(f"Trying to call `{name}` after the vector env was closed.")


def pending_error(state: AsyncState, name: str, in_flight: int = 0,
                  unit: str = "workers' batches") -> AlreadyPendingCallError:
    """Gymnasium's ``AlreadyPendingCallError`` for call ``name`` made while a call is pending
    (``state`` is not ``DEFAULT``), or else while ``in_flight`` asynchronous batches (``unit``) sent
    with ``send`` / ``async_reset`` have not been received."""
    if state != AsyncState.DEFAULT:
        return AlreadyPendingCallError(
            f"Calling `{name}` while waiting for a pending call to `{state.value}` to complete", str(state.value))
    return AlreadyPendingCallError(f"Calling `{name}` while {in_flight} {unit} sent with `send`/`async_reset` are "
                                   "in flight: `recv` them first", "step")


def no_call_error(call: str, expected: AsyncState) -> NoAsyncCallError:
    """Gymnasium's ``NoAsyncCallError`` for ``{call}_wait`` with no ``{call}_async`` pending."""
    return NoAsyncCallError(f"Calling `{call}_wait` without any prior call to `{call}_async`.", expected.value)


def restart_message(restart: dict) -> str:
    """What :func:`warn_restarted` says of a restart (``restart``: the pool's dict for it, naming the
    worker, its pid, its env indices, how it ended and, when it said, why: ``last_error``)."""
    last = restart.get("last_error")
    why = ""
    if last:
        where = f" (env {last['env_id']})" if last.get("env_id") is not None else ""
        why = f"; its last error: {last['kind']}: {last['message']}{where}"
    envs = _env_ids_text(restart["env_ids"])
    return (f"ringenv worker {restart['worker']} (pid {restart['pid']}, envs {envs}) {restart['status']}{why}; it "
            f"was restarted and its envs were reset")


def warn_restarted(restart: dict) -> None:
    """Warns through Gymnasium's logger that a worker was restarted (:func:`restart_message`)."""
    logger.warn(restart_message(restart))


class PoolVectorEnv(NotCopyable, VectorEnv):
    """A vector env whose sub-envs run in the workers of a ringenv pool: Gymnasium's protocol
    state, calls and closing. :class:`ringenv.AsyncVectorEnv` builds the pool and steps it."""

    _pool: _native.Pool  #: the pool, once started
    _slots: Slots  #: the views of its slots
    num_workers: int
    _state: AsyncState = AsyncState.DEFAULT

    #: The process that created the pool (``None`` until it exists): only it may use the workers.
    _creator_pid: Optional[int] = None

    #: Held while a call is sent (:meth:`_send`), and by the asynchronous batches' ``send``,
    #: ``recv`` and ``async_reset``; made with the pool. Entered only with ``with``: see
    #: ``bindings/src/call_guard.rs`` for why not a ``threading.Lock``.
    _call_guard: Optional[_native.CallGuard] = None

    #: The Rust envs the workers host (a built-in, or one a worker binary serves); ``None`` for
    #: Python envs. A Rust env has no Python attributes or methods to call.
    _rust_envs: Optional[RustEnvs] = None

    #: Whether ``step``/``send`` must be refused with Gymnasium's ``ResetNeeded`` (no reset was
    #: sent yet). Only for Rust envs: a Python env made by ``gym.make`` refuses by itself (its
    #: ``OrderEnforcing`` wrapper), a Rust env of the SDK would step from its constructor's state.
    _reset_needed: bool = False

    def _refuse_calls_of_rust_envs(self, name: str) -> None:
        """Raises ``NotImplementedError`` for call ``name`` when the sub-envs are Rust envs, before
        anything is sent (their workers answer no call, get_attr or set_attr request)."""
        rust = self._rust_envs
        if rust is None:
            return
        hint = (f" (ringenv.make_vec({rust.id!r}, ..., prefer_builtin=False) makes Gymnasium's Python env "
                "of that id, which has them)" if rust.builtin else "")
        raise NotImplementedError(
            f"`{name}` needs the sub-envs' Python attributes or methods, but {rust.id} is a Rust env, which "
            f"has none: call, get_attr, set_attr, render, np_random and np_random_seed apply to Python envs{hint}")

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
            raise closed_error(name)

    def _assert_default(self, name: str):
        self._assert_open(name)
        if self._state != AsyncState.DEFAULT:
            raise pending_error(self._state, name)
        try:
            in_flight = self._pool.in_flight
        except _native.Busy:
            raise busy_error(name) from None
        if in_flight:
            raise pending_error(self._state, name, in_flight)

    def _send(self, name: str, state: AsyncState, send: Callable[[], Any]) -> None:
        """Sends call ``name``: checks that no call is pending (:meth:`_assert_default`), runs
        ``send`` (it writes the call's inputs into the segment and submits the command to the
        pool) and records ``state``, as one step for other threads and for an exception that a
        signal handler raises meanwhile (Ctrl-C):

        - a thread that calls while another is inside gets ``AlreadyPendingCallError`` (and it
          never writes actions into the slot the other is filling);
        - an exception raised anywhere inside leaves the state the pool's: ``state`` (the
          call's ``*_wait`` collects it) when the pool took the command, else no call pending.

        Raises:
            AlreadyPendingCallError, ClosedEnvironmentError, ForkedProcessError, and what
            ``send`` raises (nothing sent then).
        """
        guard = self._call_guard
        if guard is None:  # no pool was made
            raise self._sending_elsewhere(name)
        try:
            with guard:  # no gap for a Ctrl-C between taking it and the block (call_guard.rs)
                self._assert_default(name)
                try:
                    send()
                    self._state = state
                except BaseException:
                    self._state = state if self._pool_pending() else AsyncState.DEFAULT
                    raise
        except _native.Busy:
            raise self._sending_elsewhere(name) from None

    def _sending_elsewhere(self, name: str) -> Exception:
        """The error for call ``name`` made while another thread is inside :meth:`_send` (or the
        asynchronous batches' ``send``, ``recv`` or ``async_reset``, which hold the same lock)
        (``ClosedEnvironmentError`` or ``ForkedProcessError`` first, where they apply)."""
        self._assert_open(name)
        return AlreadyPendingCallError(f"Calling `{name}` while another thread is sending a call to this env "
                                       "(or is inside `send`, `recv` or `async_reset`)", str(self._state.value))

    def _pool_pending(self) -> bool:
        """Whether the pool holds a submitted command (``False`` when it cannot say: closed)."""
        try:
            return bool(self._pool.pending)
        except Exception:
            return False

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Calls method ``name`` of every sub-env with ``args`` and ``kwargs`` (or reads the
        attribute, if it is not callable), through ``env.get_wrapper_attr``.

        Raises:
            NotImplementedError: the sub-envs are Rust envs (no Python attributes or methods).
            AlreadyPendingCallError: a call is already pending.
            ClosedEnvironmentError: the vector env is closed.
        """
        self._assert_default("call_async")  # (again in _send) before anything is pickled
        self._refuse_calls_of_rust_envs(f"call({name!r})")
        payload = request(("call", name, args, kwargs))
        self._send("call_async", AsyncState.WAITING_CALL, lambda: self._pool.submit("call", payload))

    def call_wait(self, timeout: Optional[float] = None) -> Tuple[Any, ...]:
        """Waits for the pending call; returns a tuple of ``num_envs`` results, in env order.

        Raises:
            NoAsyncCallError: no call is pending.
            multiprocessing.TimeoutError: ``timeout`` passed.
            Exception: whatever a sub-env raised (for example ``ValueError`` for ``reset``,
                ``step`` or ``close``, which have their own methods).
        """
        _, messages, _ = self._wait("call", AsyncState.WAITING_CALL, timeout)
        try:  # pending until the results are read (a Ctrl-C meanwhile: the next call_wait reads them)
            results = tuple(r for _, payload in sorted(messages, key=lambda m: m[0]) for r in cloudpickle.loads(payload))
        except Exception:
            self._state = AsyncState.DEFAULT
            raise
        self._state = AsyncState.DEFAULT
        return results

    def call(self, name: str, *args: Any, **kwargs: Any) -> Tuple[Any, ...]:
        """``call_async`` then ``call_wait``: a tuple of one result per sub-env."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def get_attr(self, name: str) -> Tuple[Any, ...]:
        """The attribute ``name`` of every sub-env (a method is called with no arguments, as
        Gymnasium's ``AsyncVectorEnv.get_attr`` does).

        Raises:
            NotImplementedError: the sub-envs are Rust envs (no Python attributes).
            AlreadyPendingCallError: a call is already pending.
            ClosedEnvironmentError: the vector env is closed.
            AttributeError: a sub-env has no such attribute.
        """
        self._assert_open("get_attr")
        self._refuse_calls_of_rust_envs(f"get_attr({name!r})")
        return self.call(name)

    def set_attr(self, name: str, values: Union[List[Any], Tuple[Any, ...], Any]) -> None:
        """Sets attribute ``name`` of every sub-env (``env.set_wrapper_attr``): to ``values[i]``
        for env ``i`` when ``values`` is a list or tuple, else to ``values`` for all.

        Raises:
            ValueError: a list or tuple whose length is not ``num_envs``.
            NotImplementedError: the sub-envs are Rust envs (no Python attributes).
            AlreadyPendingCallError: a call is already pending.
            ClosedEnvironmentError: the vector env is closed.
        """
        self._assert_open("set_attr")
        self._refuse_calls_of_rust_envs("set_attr")
        if not isinstance(values, (list, tuple)):
            values = [values for _ in range(self.num_envs)]
        if len(values) != self.num_envs:
            raise ValueError("Values must be a list or tuple with length equal to the number of environments. "
                             f"Got `{len(values)}` values for {self.num_envs} environments.")
        payload = request(("set_attr", name, list(values), {}))
        self._send("set_attr", AsyncState.WAITING_CALL, lambda: self._pool.submit("call", payload))
        self.call_wait()

    def _apply(self, fn: Callable[[gym.Env], Any], env_ids: Optional[Sequence[int]] = None) -> List[Any]:
        """Runs ``fn(env)`` in the workers on the sub-envs ``env_ids`` (``None``: all), in the
        order of ``env_ids``; ``fn`` travels with cloudpickle. For adapters (SB3's
        ``env_method`` with ``indices``, ``env_is_wrapped``).

        Raises:
            ValueError: an env id outside ``[0, num_envs)``.
            NotImplementedError: the sub-envs are Rust envs.
            AlreadyPendingCallError, ClosedEnvironmentError, the exception ``fn`` raised.
        """
        ids = list(range(self.num_envs)) if env_ids is None else [int(i) for i in env_ids]
        bad = [i for i in ids if not 0 <= i < self.num_envs]
        if bad:
            raise ValueError(f"env id {bad[0]} is outside [0, {self.num_envs})")
        self._assert_default("_apply")  # (again in _send) before anything is pickled
        self._refuse_calls_of_rust_envs("a function on the sub-envs")
        wanted = sorted(set(ids))
        payload = request(("apply", fn, wanted, {}))
        self._send("_apply", AsyncState.WAITING_CALL, lambda: self._pool.submit("call", payload))
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
        """The frames of every sub-env (``call("render")``), a tuple of ``num_envs`` frames.

        Raises:
            NotImplementedError: the sub-envs are Rust envs (they do not render).
        """
        self._assert_open("render")
        self._refuse_calls_of_rust_envs("render")
        return self.call("render")

    def _wait(self, call: str, state: AsyncState, timeout: Optional[float]) -> Tuple[int, list, List[dict]]:
        """Waits for the pending ``state`` call: ``(slot, messages, restarted)``, the slot of
        its results (a reset or step's), the workers' messages and the workers restarted
        meanwhile (each warned about). The call stays pending: the caller marks it done
        (``self._state = AsyncState.DEFAULT``) once it has built its results, so that an
        exception a signal handler raises before then (Ctrl-C) leaves them to the next
        ``*_wait``, which gets them again from the pool (``retained`` in ``py_pool.rs``). An
        env's error ends the call here.

        Raises:
            NoAsyncCallError: no ``state`` call is pending.
            multiprocessing.TimeoutError (the call stays pending), ringenv.errors.WorkerDiedError
            (the env is closed), or the exception an env raised.
        """
        self._assert_open(f"{call}_wait")
        if self._state != state:
            raise no_call_error(call, state)
        try:
            slot, messages, errors, restarted = self._pool.wait(timeout)
        except WorkerDiedError:
            self._state = AsyncState.DEFAULT
            self._release(0.0)
            raise
        except _native.Busy:
            raise busy_error(f"{call}_wait") from None
        for r in restarted:
            warn_restarted(r)
        if errors:
            error = _remote_errors([remote for _, remote in errors])
            self._state = AsyncState.DEFAULT
            raise error
        if state != AsyncState.WAITING_CALL:
            self._slots.latest = [slot] * len(self._slots.latest)  # every worker, the inline share too
        return slot, messages, restarted

    def close_extras(self, timeout: Optional[float] = None, terminate: bool = False):
        """Stops the workers and releases every OS resource of the env at once; the mapping goes
        when the last array a caller still holds dies, so such arrays stay valid.

        A pending call is first awaited for up to ``timeout`` seconds (``None``: as long as it
        takes) unless ``terminate``, with Gymnasium's warning. Then the workers are given
        ``timeout`` seconds to close their envs and exit (``None``: as long as their ``close``
        takes), the rest killed; ``terminate=True`` kills them at once. In a forked process it
        only lets go of this process's inherited copy.

        Raises:
            KeyboardInterrupt: Ctrl-C while an env of this process's inline share closed, raised
                once the close is complete (the other envs closed, the workers stopped, everything
                released); ``SystemExit`` likewise. Another env's ``close`` raising is a
                ``RuntimeWarning`` naming it.
        """
        pool = getattr(self, "_pool", None)
        if pool is None:
            return
        if self._creator_pid != _native.current_pid():
            if getattr(self, "_slots", None) is not None:
                self._slots.device = None  # CUDA state does not survive a fork: nothing to wait for here
            self._release(0.0)
            return
        if self._state != AsyncState.DEFAULT:
            # Gymnasium warns with terminate=True too (then waits 0 s; here: not at all).
            logger.warn(f"Calling `close` while waiting for a pending call to `{self._state.value}` to complete.")
            if not terminate:
                try:
                    self._wait(self._state.value, self._state, timeout)
                    self._state = AsyncState.DEFAULT
                except multiprocessing.TimeoutError:
                    terminate = True
                except Exception:  # the pending call failed; the envs close all the same
                    pass
        self._release(0.0 if terminate else timeout)

    def _release(self, timeout: Optional[float]) -> None:
        """Marks the env closed, stops the workers (up to ``timeout`` seconds) and drops the env's
        arrays over the segment. A call waiting on the pool in another frame closes it instead
        (:class:`ringenv._native.PoolCloser`); from another thread this waits for that, at most
        ``timeout`` + :data:`CLOSE_HANDOFF_S` seconds.

        Raises:
            ringenv.errors.RingenvError: the other thread's call did not let go of the pool in
                that time (its share of envs is still stepping); the close stays requested and
                that call closes the pool when it returns.
            KeyboardInterrupt: Ctrl-C while an env of this process's share closed, raised once
                everything is closed all the same (or ``SystemExit``, likewise).
        """
        self.closed = True
        self._state = AsyncState.DEFAULT
        slots = getattr(self, "_slots", None)
        # Under a signal handler in this thread's wait the pool closes when the handler returns;
        # the slots go now all the same (that wait reads none of them).
        try:
            self._close_pool(timeout)
        except BaseException as e:
            # A Ctrl-C in an env of this process's share, raised by the pool once it is closed:
            # the slots go too. (A Ctrl-C before the pool closed leaves them to close() again.)
            closer = getattr(self, "_closer", None)
            if not isinstance(e, Exception) and slots is not None and closer is not None and closer.closed:
                slots.close()
            raise
        if slots is not None:
            slots.close()  # waits for the device's copies in flight, unpins the segment, drops the views

    def _close_pool(self, timeout: Optional[float]) -> None:
        """Closes the pool now, or has the call holding it close it: another thread's call, waited
        for; or the call this thread is in (a signal handler's close), which closes it when the
        handler returns."""
        deadline = None
        while True:
            try:
                self._pool.close(timeout)
                return
            except _native.Busy:  # a call holds the pool
                if self._creator_pid != _native.current_pid():
                    # A fork child: the call was another thread's in the creator when it forked;
                    # that thread does not exist here, so the pool stays borrowed. Its copy in
                    # this process is let go when the pool object is freed (its Drop sends
                    # nothing to the creator's workers), which nothing here can wait for.
                    return
            closer = getattr(self, "_closer", None)
            if closer is None:
                raise RingenvError("close: another call holds this env's pool, which has no closer")
            if closer.request(timeout) or closer.closed:
                return
            now = time.monotonic()
            if timeout is None:
                pass  # the other call closes the pool as long as the envs' close takes: wait for it
            elif deadline is None:
                deadline = now + timeout + CLOSE_HANDOFF_S
            elif now > deadline:
                raise RingenvError(
                    f"close: another thread's call to this env has held its pool for {timeout + CLOSE_HANDOFF_S:.0f} s "
                    "(stepping this process's own share of envs, which cannot be interrupted); the env is marked "
                    "closed and that call closes the pool when it returns")
            time.sleep(CLOSE_POLL_S)

    def _pool_open(self) -> bool:
        """Whether this env's pool exists and is not closed yet (``False`` when it cannot say:
        another thread's call holds it, which closes it when it returns)."""
        pool = getattr(self, "_pool", None)
        try:
            return pool is not None and not pool.closed
        except Exception:
            return False

    def close(self, **kwargs: Any) -> None:
        """Gymnasium's ``close`` (see :meth:`close_extras`), which also finishes a close that an
        exception (a Ctrl-C) interrupted after the env was marked closed and before its pool
        was: Gymnasium's returns at once once ``closed`` is set, which left the workers running
        until the env was freed."""
        if self.closed and not self._pool_open():
            return
        self.close_extras(**kwargs)
        self.closed = True

    def __del__(self):
        if not getattr(self, "closed", True) or self._pool_open():
            self.close(terminate=True)
