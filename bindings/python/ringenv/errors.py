"""Exceptions raised by ringenv.

Protocol errors reuse Gymnasium's classes, so code written against
``gymnasium.vector.AsyncVectorEnv`` catches them unchanged:

- ``gymnasium.error.AlreadyPendingCallError``: ``step_async``/``reset_async`` while a call is pending;
- ``gymnasium.error.NoAsyncCallError``: ``step_wait``/``reset_wait`` with no call pending;
- ``gymnasium.error.ClosedEnvironmentError``: any call after ``close()``;
- ``multiprocessing.TimeoutError``: a ``*_wait(timeout)`` ran out of time (the call stays
  pending); its message and ``env_ids`` name the envs that had not finished;
  :class:`StartupTimeoutError` is the subclass for ``startup_timeout``.

An exception raised inside an env is re-raised in the caller with its own type and message, its
``env_id`` the env's index, and its ``__cause__`` a :class:`RemoteTraceback` holding the worker's
traceback; other envs' errors of the same call are notes on it (PEP 678). Failures of the runtime
itself are :class:`RingenvError` subclasses below.
"""

from __future__ import annotations

import multiprocessing
import pickle
import re
from typing import Optional, Sequence, Tuple

from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, Error, NoAsyncCallError

__all__ = [
    "RingenvError",
    "WorkerDiedError",
    "CrashLoopError",
    "SharedMemoryCorruptError",
    "InternalError",
    "WorkerStartupError",
    "StartupTimeoutError",
    "RemoteEnvError",
    "RemoteTraceback",
    "CudaUnavailableError",
    "CudaError",
    "ForkedProcessError",
    "ActorDiedError",
    "SeedError",
    "AlreadyPendingCallError",
    "NoAsyncCallError",
    "ClosedEnvironmentError",
]


def _env_ids_text(env_ids: Sequence[int]) -> str:
    """``[2, 3]``, or ``[0, 1, ..., 99] (100 envs)`` for a long block (as the runtime prints
    them)."""
    n = len(env_ids)  # a tuple or a range: never materialised (a range may be huge)
    if n <= 8:
        return "[" + ", ".join(map(str, env_ids)) + "]"
    return f"[{env_ids[0]}, {env_ids[1]}, ..., {env_ids[-1]}] ({n} envs)"


class RingenvError(RuntimeError):
    """A failure of the ringenv runtime (segment, processes, control protocol).

    Attributes:
        errno (int | None): the operating system's error number (``errno.EMFILE``, ...) where an
            OS call failed, as on ``OSError``; ``None`` for any other failure.
    """

    errno: Optional[int] = None


class WorkerDiedError(RingenvError):
    """A worker process died. The pool stopped its other workers and is closed.

    Attributes:
        worker (int): index of the worker.
        pid (int): its process id.
        env_ids (tuple[int, ...]): the env indices it stepped, e.g. ``(2, 3)``.
        exitcode (int | None): its exit code, when it exited.
        signal (int | None): the signal that killed it, when one did (9 for SIGKILL).
        last_error (dict | None): why it died, when it said so: a dict with ``kind``, ``message``,
            ``env_id`` (int or None), ``traceback`` and ``payload``; for a panic ``kind`` is
            ``"panic"`` and ``message`` the panic's text and location, cut in its middle to 248
            bytes. ``None`` for a death without last words (a signal, ``os._exit``).
    """

    def __init__(self, message: str, worker: int = -1, pid: int = 0, env_ids: Sequence[int] = (),
                 exitcode: Optional[int] = None, signal: Optional[int] = None,
                 last_error: Optional[dict] = None):
        super().__init__(message)
        self.worker, self.pid, self.env_ids = worker, pid, tuple(env_ids)
        self.exitcode, self.signal, self.last_error = exitcode, signal, last_error


class CrashLoopError(WorkerDiedError):
    """Workers died more often than ``on_worker_failure="restart"`` allows (``max_restarts``
    deaths within ``restart_window`` seconds); the pool stopped every worker and is closed.

    Attributes: those of :class:`WorkerDiedError` for the last death, plus
        failures (int): deaths within the window.
        window_s (float): the window, in seconds.
    """

    def __init__(self, message: str, failures: int = 0, window_s: float = 0.0, **last):
        super().__init__(message, **last)
        self.failures, self.window_s = failures, window_s


class SharedMemoryCorruptError(WorkerDiedError):
    """A worker left the shared memory segment in an impossible state (ring indices or stamps
    overwritten, ...). The worker is killed and handled as a death (restarted under
    ``on_worker_failure="restart"``); otherwise the pool stopped its other workers and is closed.

    Attributes: those of :class:`WorkerDiedError` (``signal`` is 9: it was killed), plus
        what (str): what was found, with the values read.
    """

    def __init__(self, message: str, what: str = "", **failure):
        super().__init__(message, **failure)
        self.what = what


class InternalError(RingenvError):
    """A bug in ringenv's native code (a Rust panic); the message holds the panic's text and
    location. The env object may be unusable afterwards: close it."""


class WorkerStartupError(RingenvError):
    """A worker could not build its envs (a factory raised, spaces differ, ...). The message
    names the env that failed and the remote exception's type and message.

    Attributes:
        worker (int): index of the worker.
        env_ids (tuple[int, ...]): the env indices it was to build, e.g. ``(2, 3)``.
        env_id (int | None): the env whose factory or space check raised, e.g. ``3``.
        remote_type (str): the type name of the remote exception.
        remote_traceback (str): the worker's formatted traceback.

    ``__cause__`` is the original exception when it could be unpickled (a
    :class:`RemoteEnvError` otherwise), its own ``__cause__`` the :class:`RemoteTraceback`.
    """

    def __init__(self, message: str, worker: int = -1, env_ids: Sequence[int] = (),
                 remote_type: str = "", remote_traceback: str = "", env_id: Optional[int] = None):
        super().__init__(message)
        self.worker, self.env_ids, self.env_id = worker, tuple(env_ids), env_id
        self.remote_type, self.remote_traceback = remote_type, remote_traceback


class StartupTimeoutError(multiprocessing.TimeoutError):
    """A worker did not finish starting within ``startup_timeout`` seconds; every worker was
    stopped. The message names the worker, its pid and env ids, how far it got, and the fix.

    Attributes:
        worker (int): index of the worker (the first one found not ready).
        pid (int): its process id.
        env_ids (tuple[int, ...]): the env indices it was building, e.g. ``(2, 3)``.
        seconds (float): the ``startup_timeout``, in seconds.
        building (bool): ``True`` when it was building its envs; ``False`` when its program was
            still starting (interpreter start-up, imports).
        program (str): what it runs: the env factories, or the Rust env's id and worker binary.
    """

    def __init__(self, message: str, worker: int = -1, pid: int = 0, env_ids: Sequence[int] = (),
                 seconds: float = 0.0, building: bool = False, program: str = ""):
        super().__init__(message)
        self.worker, self.pid, self.env_ids = worker, pid, tuple(env_ids)
        self.seconds, self.building, self.program = seconds, building, program

    def with_program(self, program: str) -> "StartupTimeoutError":
        """This error with ``program`` (and the message) in the caller's terms."""
        return StartupTimeoutError(_startup_timeout_message(self.worker, self.pid, self.env_ids, self.seconds,
                                                            self.building, program),
                                   self.worker, self.pid, self.env_ids, self.seconds, self.building, program)


def _startup_timeout_message(worker: int, pid: int, env_ids: Sequence[int], seconds: float, building: bool,
                             program: str) -> str:
    doing = ("it was building its envs: their factories or constructors had not returned" if building else
             "its program had not joined the pool yet: it was still starting (interpreter start-up, imports)")
    return (f"worker {worker} (pid {pid}, envs {_env_ids_text(env_ids)}) did not start within {seconds:g} s "
            f"(startup_timeout): {doing}; it runs {program}. If building them is only slow, pass a larger "
            f"startup_timeout= (seconds); otherwise something in it hangs (a constructor waiting for a lock, a pipe "
            f"or a server that never answers)")


def _timeout_message(seconds: float, late: Sequence[Tuple[int, Sequence[int]]], inline: Optional[int]) -> str:
    """The message of a ``*_wait(timeout)`` that ran out of ``seconds``: the envs of the workers
    ``late`` (``(worker, env ids)`` pairs) that had not finished."""
    processes = [(w, ids) for w, ids in late if w != inline]
    parts = []
    if processes:
        workers = ", ".join(str(w) for w, _ in processes)
        ids = [i for _, block in processes for i in block]
        parts.append(f"envs {_env_ids_text(ids)} (worker{'s' if len(processes) > 1 else ''} {workers})")
    own = [i for w, block in late if w == inline for i in block]
    if own:
        parts.append(f"envs {_env_ids_text(own)}, which this process steps itself (the inline share): it cannot "
                     f"interrupt them while they step, so this error came only once they returned; pass "
                     f"inline=False for envs that may hang, so that every env steps in a worker process and a "
                     f"timeout is raised on time")
    return f"timed out after {seconds:g} s waiting for " + "; and for ".join(parts or ["the workers"])


class RemoteEnvError(RingenvError):
    """An env raised an exception that could not be re-created in the caller (it did not
    pickle). Carries the remote type name, message and traceback as text.

    Attributes:
        env_id (int | None): the env that raised, where known.
        remote_type (str): the exception's type name.
        remote_message (str): its message.
        remote_traceback (str): the worker's traceback.
    """

    def __init__(self, message: str, env_id: Optional[int] = None, remote_type: str = "",
                 remote_message: str = "", remote_traceback: str = ""):
        super().__init__(message)
        self.env_id, self.remote_type = env_id, remote_type
        self.remote_message, self.remote_traceback = remote_message, remote_traceback


class CudaUnavailableError(RingenvError):
    """``device="cuda"`` (or ``"cuda:N"``) was asked for where CUDA cannot be used; the message
    says why and what to do (install the NVIDIA driver, a CUDA build of PyTorch, or use
    ``device="cpu"``). Raised before any pool state is touched.

    Attributes:
        reason (str): ``"no_driver"`` (``libcuda.so.1`` not found), ``"no_torch"`` (PyTorch not
            installed), ``"torch_without_cuda"`` (a CPU-only PyTorch build, or PyTorch sees no
            device) or ``"no_device"`` (no device with that index).
        ordinal (int | None): the device index asked for, for ``"no_device"``.
        count (int | None): how many devices are visible, for ``"no_device"``.
    """

    def __init__(self, message: str, reason: str = "", ordinal: Optional[int] = None,
                 count: Optional[int] = None):
        super().__init__(message)
        self.reason, self.ordinal, self.count = reason, ordinal, count


class CudaError(RingenvError):
    """A CUDA driver call made by ringenv's GPU staging failed.

    Attributes:
        call (str): the driver function, e.g. ``"cuMemcpyHtoDAsync"``.
        code (int): its ``CUresult`` code.
        name (str): the code's name, e.g. ``"CUDA_ERROR_ILLEGAL_ADDRESS"``.
    """

    def __init__(self, message: str, call: str = "", code: int = 0, name: str = ""):
        super().__init__(message)
        self.call, self.code, self.name = call, code, name


class RemoteTraceback(Exception):
    """The formatted traceback of an exception raised in a worker process, attached as the
    ``__cause__`` of the re-raised exception (the pattern of ``concurrent.futures``)."""

    def __init__(self, tb: str):
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


def _remote_exception(remote: dict, named: bool = True) -> BaseException:
    """Rebuilds the exception described by a worker's error dict."""
    exc: Optional[BaseException] = None
    if remote.get("payload"):
        try:
            exc = pickle.loads(remote["payload"])
        except Exception:  # the exception type cannot be re-created here
            exc = None
    env_id = remote.get("env_id")
    where = f" in env {env_id}" if env_id is not None else ""
    if not isinstance(exc, BaseException):
        exc = RemoteEnvError(
            f"{remote['kind']}: {remote['message']} (raised{where})",
            env_id=env_id, remote_type=remote["kind"], remote_message=remote["message"],
            remote_traceback=remote.get("traceback", ""),
        )
    elif named and env_id is not None and not _names_env(str(exc), env_id):
        _add_note(exc, _RAISED_IN.format(env_id))
    exc.__cause__ = RemoteTraceback(remote.get("traceback") or f"{remote['kind']}: {remote['message']}")
    exc.remote_traceback = remote.get("traceback", "")  # type: ignore[attr-defined]
    exc.env_id = env_id  # type: ignore[attr-defined]
    return exc


def _names_env(text: str, env_id: int) -> bool:
    """Whether ``text`` names env ``env_id`` (``"env 3"``, not ``"env 31"``)."""
    return re.search(rf"\benv {env_id}\b", text) is not None


def _remote_errors(remotes: Sequence[dict]) -> BaseException:
    """The exception to raise for a call in which envs raised (at most one error per worker
    process and one for the main process's inline share): :func:`_merged` of the exceptions
    :func:`_remote_exception` rebuilds from them."""
    return _merged([_remote_exception(r) for r in remotes])


_NOTE_HEAD = "env {} raised in the same call too:"
#: The note naming the env on an exception of the env's own type (its message is the env's).
_RAISED_IN = "(raised in env {})"


def _merged(errors: Sequence[BaseException]) -> BaseException:
    """The one exception to raise for a call in which several things failed: a failure of the
    runtime itself (a :class:`RingenvError` that is not an env's, e.g. a worker's death) before any
    env's error, else the error of the lowest env id (``env_id``), as Gymnasium's ``SyncVectorEnv``
    raises its first env's."""
    def order(e: BaseException) -> tuple:
        env_id = getattr(e, "env_id", None)
        own = isinstance(e, RingenvError) and not isinstance(e, RemoteEnvError)
        return (0 if own else 1 if isinstance(env_id, int) else 2, env_id if isinstance(env_id, int) else 0)

    first, *others = sorted(errors, key=order)
    for other in others:
        env_id = getattr(other, "env_id", None)
        head = _NOTE_HEAD.format(env_id) if isinstance(env_id, int) else "another env raised in the same call too:"
        text = getattr(other, "remote_traceback", "") or (
            f"{other.remote_type}: {other.remote_message}" if isinstance(other, RemoteEnvError)
            else f"{type(other).__name__}: {other}")
        _add_note(first, f"{head}\n{text.rstrip()}")
        notes = getattr(other, "__notes__", None)
        for note in notes if isinstance(notes, list) else ():
            if note != _RAISED_IN.format(env_id):  # (the head names it)
                _add_note(first, note)
    return first


def _shift_notes(error: BaseException, start: int) -> None:
    """Makes the env ids of ``error``'s :func:`_merged` and :data:`_RAISED_IN` notes global:
    ``start`` added to each (a pool of one block of a larger vector env counts its envs from 0)."""
    notes = getattr(error, "__notes__", None)
    if not start or not isinstance(notes, list):
        return
    for i, note in enumerate(notes):
        raised_in = re.fullmatch(r"\(raised in env (\d+)\)", note) if isinstance(note, str) else None
        if raised_in:
            notes[i] = _RAISED_IN.format(int(raised_in[1]) + start)
            continue
        head, sep, rest = note.partition(":") if isinstance(note, str) else ("", "", "")
        words = head.split()
        if sep and len(words) > 1 and words[1].isdigit() and head == _NOTE_HEAD.format(words[1])[:-1]:
            notes[i] = _NOTE_HEAD.format(int(words[1]) + start) + rest


def _add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``; on Python 3.10, which has no ``add_note``, the same list."""
    try:
        add = getattr(exc, "add_note", None)
        if add is not None:
            add(note)
            return
        notes = getattr(exc, "__notes__", None)
        if notes is None:
            exc.__notes__ = [note]  # type: ignore[attr-defined]
        elif isinstance(notes, list):
            notes.append(note)
    except Exception:
        pass


def _from_native(kind: str, message: str, fields: dict) -> BaseException:
    """Builds the exception for a native pool error (called by ``ringenv._native``)."""
    if kind == "worker_died":
        return WorkerDiedError(message, **fields)
    if kind == "crash_loop":
        return CrashLoopError(message, **fields)
    if kind == "corrupt":
        return SharedMemoryCorruptError(message, **fields)
    if kind == "internal":
        return InternalError(message)
    if kind == "startup":  # fields: worker, env_ids, remote
        remote, worker, env_ids = fields["remote"], fields["worker"], fields["env_ids"]
        env_id = remote.get("env_id")
        who = f"env {env_id} (worker {worker})" if env_id is not None else \
            f"worker {worker} (envs {_env_ids_text(env_ids)})"
        err = WorkerStartupError(f"{who} failed to start: {remote['kind']}: {remote['message']}", worker=worker,
                                 env_ids=env_ids, remote_type=remote["kind"], remote_traceback=remote["traceback"],
                                 env_id=env_id)
        err.__cause__ = _remote_exception(remote, named=False)
        return err
    if kind == "timeout":  # fields: seconds, waiting_for (the worker indices late)
        error = multiprocessing.TimeoutError(message)
        error.seconds = fields.get("seconds", 0.0)  # type: ignore[attr-defined]
        error.waiting_for = tuple(fields.get("waiting_for", ()))  # type: ignore[attr-defined]
        return error
    if kind == "startup_timeout":  # fields: worker, pid, env_ids, seconds, building, program
        return StartupTimeoutError(_startup_timeout_message(**fields), **fields)
    if kind == "no_pending":
        return NoAsyncCallError(message, "wait")
    if kind == "already_pending":
        return AlreadyPendingCallError(message, "submit")
    if kind == "closed":
        return ClosedEnvironmentError(message)
    if kind == "value":
        return ValueError(message)
    if kind == "memory":  # a control message's buffer could not be allocated
        return MemoryError(message)
    if kind == "cuda_unavailable":
        return CudaUnavailableError(message, **fields)
    if kind == "cuda":
        return CudaError(message, **fields)
    if kind == "forked":  # fields: creator_pid, pid
        return ForkedProcessError(message, **fields)
    failure = RingenvError(message)
    failure.errno = fields.get("errno")
    return failure




class ForkedProcessError(RingenvError):
    """A vector env (its pool of workers) was used in a process other than the one that created
    it: a child made by ``os.fork()``, ``multiprocessing``'s ``"fork"`` start method or a
    DataLoader worker. The workers belong to the creator; create a new env in the child.

    In such a process every call raises this error before anything is sent or written, and
    ``close()``, garbage collection or the child's exit only let go of the child's inherited
    copy: the creator's workers are neither messaged nor stopped, and the creator goes on.

    Attributes:
        creator_pid (int): the process that created the env.
        pid (int): the process that tried to use it.
    """

    def __init__(self, message: str, creator_pid: int = 0, pid: int = 0):
        super().__init__(message)
        self.creator_pid, self.pid = creator_pid, pid


class ActorDiedError(WorkerDiedError):
    """A Ray actor hosting envs of a ``ringenv.ray`` vector env died (its process or its node), or
    could not be restarted under ``on_actor_failure="restart"``. The vector env stopped its other
    actors and is closed.

    Attributes: those of :class:`WorkerDiedError` (``worker``: the actor's index; ``pid``: its
    process id; ``env_ids``: the tuple of its env indices), plus
        actor_id (str): Ray's actor id (hex).
        node_id (str): the Ray node it ran on (hex).
        node_ip (str): that node's IP address.
    """

    def __init__(self, message: str, actor_id: str = "", node_id: str = "", node_ip: str = "", **failure):
        super().__init__(message, **failure)
        self.actor_id, self.node_id, self.node_ip = actor_id, node_id, node_ip


class SeedError(ValueError, Error):
    """A reset seed that cannot be used, raised before anything is sent to a worker: a negative
    one (Gymnasium's own ``gymnasium.error.Error``, "Seed must be greater or equal to zero", which
    this class also is, so code catching either catches it), a seed that is not an integer, a list
    of seeds whose length is not ``num_envs``, or for a Rust env (``ringenv.make_vec``'s built-in
    envs, worker binaries) one of ``2**64`` or more: a Rust env's seed is a ``u64``. (A Python
    env takes any non-negative ``int``, as with Gymnasium's vector envs.)

    Attributes:
        env_id (int | None): the env whose seed it is (``None`` for a list of the wrong length).
    """

    def __init__(self, message: str, env_id: Optional[int] = None):
        super().__init__(message)
        self.env_id = env_id
