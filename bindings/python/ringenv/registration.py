"""``ringenv.make_vec``: the counterpart of ``gymnasium.make_vec``, for Python envs, ringenv's
built-in Rust env, and Rust envs served by a worker binary made with the ``ringenv-worker`` SDK;
and ``ringenv.register``, which registers ids in Gymnasium's registry with a
``vector_entry_point`` that builds a ringenv vector env, so that ``gymnasium.make_vec`` (and
RLlib, through it) gives one:

>>> import gymnasium as gym
>>> import ringenv  # registers ringenv/CartPole-v1
>>> envs = gym.make_vec("ringenv/CartPole-v1", 4, vectorization_mode="vector_entry_point", num_workers=2)
>>> type(envs).__name__, envs.num_workers, envs.single_observation_space.shape
('AsyncVectorEnv', 2, (4,))
>>> envs.close()

Keyword arguments of ``gymnasium.make_vec`` are split by name: :data:`VECTOR_OPTIONS` configure
the vector env, the others reach the env's constructor.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import os
import shutil
import signal
import subprocess
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple, Union, overload

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, VectorizeMode
# gymnasium.make's own lookup: imports "module" of "module:Id", then the spec of Id
from gymnasium.envs.registration import _find_spec as _spec

from ringenv import _native
from ringenv._checks import check_count
from ringenv._pickling import rust_json
from ringenv._program import PYTHON_ONLY_OPTIONS, RustEnvs
from ringenv._worker import worker_argv
from ringenv.vector import AsyncVectorEnv

__all__ = ["make_vec", "resolve_id", "ResolvedId", "register", "register_builtins", "VectorEntryPoint",
           "builtin_env_ids", "describe_worker", "split_worker_id", "worker_env_ids", "WorkerNameNotFound",
           "WorkerVersionNotFound", "WorkerIdMissing", "NAMESPACE", "VECTOR_OPTIONS"]

#: The Gymnasium namespace of ringenv's built-in envs: ``"ringenv/CartPole-v1"``.
NAMESPACE = "ringenv"

#: The keyword arguments of :class:`ringenv.AsyncVectorEnv` (other than ``env_fns``): given to
#: ``gymnasium.make_vec`` for an id registered by ringenv, they configure the vector env.
VECTOR_OPTIONS: FrozenSet[str] = frozenset(
    name for name in inspect.signature(AsyncVectorEnv.__init__).parameters
    if name not in ("self", "env_fns") and not name.startswith("_"))

#: The options of :data:`VECTOR_OPTIONS` that only ringenv's vector env has: ``ringenv.make_vec``
#: refuses them among the env's keyword arguments, naming ``vector_kwargs``.
RUNTIME_OPTIONS: FrozenSet[str] = frozenset({
    "num_workers", "startup_timeout", "on_worker_failure", "max_restarts", "restart_window", "worker_env",
    "check_actions", "spin_us", "vector_infos", "inline", "max_concurrency"}) & VECTOR_OPTIONS

#: Seconds a worker binary may take to answer ``describe`` (it builds one env) or ``list``.
DESCRIBE_TIMEOUT_S = 60.0


class WorkerNameNotFound(gym.error.NameNotFound, ValueError):
    """A worker binary serves no env of this id (nor of its name, in another version): the
    message names the binary and lists the ids it serves."""


class WorkerVersionNotFound(gym.error.VersionNotFound, ValueError):
    """A worker binary serves the id's name, but not in this ``-vN`` version: the message names
    the binary and lists the ids it serves."""


class WorkerIdMissing(gym.error.Error, ValueError):
    """The path of a worker binary given as an env id, without the ``:ID`` of the env: the message
    names the spelling ``PATH:ID`` and lists the ids the binary serves."""


def builtin_env_ids() -> list:
    """The ids of ringenv's built-in Rust envs (``["CartPole-v1"]``)."""
    return list(_native.builtin_env_ids())


def _worker_path(worker: Union[str, "os.PathLike[str]"]) -> str:
    """The absolute path of worker binary ``worker`` (a path, or a program name on ``PATH``).

    Raises:
        FileNotFoundError: no such file (with a hint to build it).
        IsADirectoryError: ``worker`` is a directory.
        PermissionError: the file is not executable.
    """
    worker = os.fspath(worker)
    path = worker if os.sep in worker else (shutil.which(worker) or worker)
    if os.path.isdir(path):
        raise IsADirectoryError(f"worker binary {worker!r} is a directory, not a program (pass the path of the "
                                "binary built from the env crate, e.g. target/debug/my_envs)")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"worker binary {worker!r} not found (build the env crate with `cargo build`, "
                                "then pass the path of its binary, e.g. target/debug/my_envs)")
    if not os.access(path, os.X_OK):
        raise PermissionError(f"worker binary {worker!r} is not executable")
    return os.path.abspath(path)


def split_worker_id(text: str) -> Optional[Tuple[str, str]]:
    """``(worker_path, id)`` when ``text`` is spelled ``PATH:ID`` with ``PATH`` an existing
    executable file (``target/release/my_envs:Sokoban-v0``), else ``None``.

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: ``text`` has no such split but the
            text before its first ``:`` is a path (with a ``/``) that is missing, a directory or
            not executable.
        WorkerIdMissing: ``text`` is the path (with a ``/``) of an executable file and no ``:ID``;
            the message lists the ids a worker binary serves.
    """
    for i, ch in enumerate(text):
        head = text[:i]
        if ch == ":" and head and text[i + 1:] and os.path.isfile(head) and os.access(head, os.X_OK):
            return head, text[i + 1:]
    head, sep, _ = text.partition(":")
    if sep and os.sep in head:
        _worker_path(head)  # raises, naming what is wrong with the path
    if not sep and os.sep in text and os.path.isfile(text) and os.access(text, os.X_OK):
        raise _id_missing(text)
    return None


#: Text every worker binary made with the SDK holds (``workers/src/entry.rs``): a program given
#: without ``:ID`` is run (``PATH list``) only when it holds it.
_WORKER_MARK = b"A ringenv worker binary: serves Rust envs"


def _holds_worker_mark(path: str, chunk: int = 1 << 20) -> bool:
    """Whether the file ``path`` holds :data:`_WORKER_MARK` (``False`` when unreadable)."""
    overlap = len(_WORKER_MARK) - 1
    try:
        with open(path, "rb") as f:
            tail = b""
            while True:
                block = f.read(chunk)
                if not block:
                    return False
                if _WORKER_MARK in tail + block:
                    return True
                tail = block[-overlap:]
    except OSError:
        return False


def _id_missing(path: str) -> WorkerIdMissing:
    """The error of the program ``path`` given where an env id was expected."""
    if not _holds_worker_mark(path):
        return WorkerIdMissing(f"{path} is a program, not an env id (and not a ringenv worker binary, whose env "
                               "would be named PATH:ID)")
    try:
        ids = worker_env_ids(path)
    except ValueError as e:
        return WorkerIdMissing(f"{path} is a program, not an env id: an env of a worker binary is named PATH:ID "
                               f"(and {e})")
    served = ", ".join(ids) if ids else "no env"
    return WorkerIdMissing(f"{path} is a worker binary: name an env as {path}:ID; it serves {served}")


def _printable(text: str) -> str:
    """``text`` with every non-printable character but newlines escaped (``\\x1b``)."""
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)


def _run_worker(path: str, worker: str, args: Sequence[str], what: str) -> Tuple[int, str, str]:
    """``(status, stdout, stderr)`` of ``path ARGS...``, run in a process group of its own, so that the
    whole group is killed when it outlasts :data:`DESCRIBE_TIMEOUT_S` (or on Ctrl-C).

    Raises:
        ValueError: the program did not answer within :data:`DESCRIBE_TIMEOUT_S` seconds (the
            message says that it did not ``what``).
    """
    proc = subprocess.Popen([path, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=DESCRIBE_TIMEOUT_S)
    except BaseException as e:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        if isinstance(e, subprocess.TimeoutExpired):
            raise ValueError(f"worker binary {worker!r} did not {what} within {DESCRIBE_TIMEOUT_S:g} s "
                             "(it and every process it started were killed)") from None
        raise
    return proc.returncode, stdout, stderr


def worker_env_ids(worker: Union[str, "os.PathLike[str]"]) -> List[str]:
    """The env ids worker binary ``worker`` serves, in its registration order (it runs
    ``worker list``).

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: ``worker`` is not an executable file.
        ValueError: a program that is not a ringenv worker binary (its ``list`` printed no
            ``{"envs": [{"id": ...}, ...]}``), or one that did not answer within
            :data:`DESCRIBE_TIMEOUT_S` seconds.
    """
    path = _worker_path(worker)
    status, stdout, stderr = _run_worker(path, os.fspath(worker), ["list"], "list its env ids")
    try:
        ids = [str(env["id"]) for env in json.loads(stdout)["envs"]]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        tail = _printable((stderr or stdout).strip()[-400:])
        raise ValueError(f"{os.fspath(worker)!r} is not a ringenv worker binary: `list` exited with status {status} "
                         f"and printed no env ids ({type(e).__name__}; {tail})") from None
    return [_printable(i) for i in ids]


def describe_worker(worker: Union[str, "os.PathLike[str]"], id: str,
                    kwargs: Optional[Dict[str, Any]] = None) -> Tuple[dict, dict]:
    """The ``(observation, action)`` space descriptions of env ``id`` with ``kwargs``, as worker
    binary ``worker`` reports them (it runs ``worker describe ID --kwargs JSON``, which builds one
    env). ``ringenv._layout.from_dict`` turns each into a Gymnasium space.

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: ``worker`` is not an executable file.
        TypeError: ``kwargs`` that are not JSON data.
        WorkerNameNotFound, WorkerVersionNotFound: an id the binary does not serve (Gymnasium's
            ``NameNotFound`` / ``VersionNotFound``, and ``ValueError``s), naming the binary and
            listing its ids.
        ValueError: arguments that do not fit (the binary's message, naming the argument), a
            panicking constructor (with the panic's location), invalid spaces, or a program that
            is not a ringenv worker binary.
    """
    from ringenv._layout import from_dict

    path = _worker_path(worker)
    kwargs_json = json.dumps(json_kwargs(kwargs))
    # ``--kwargs``: the older spelling of ``--env-kwargs``, which binaries of every SDK version accept.
    status, stdout, stderr = _run_worker(path, os.fspath(worker), ["describe", id, "--kwargs", kwargs_json],
                                         f"describe {id!r}")
    try:
        answer = json.loads(stdout)
    except json.JSONDecodeError:
        answer = None
    not_worker = f"{os.fspath(worker)!r} is not a ringenv worker binary: `describe {id}` exited with status {status}"
    if not isinstance(answer, dict):
        tail = _printable((stderr or stdout).strip()[-400:])
        raise ValueError(f"{not_worker} and printed no JSON description ({tail})")
    if "error" in answer:
        error = answer["error"]
        if isinstance(error, dict):
            kind = error.get("kind", "Error")
            not_found = {"NameNotFound": WorkerNameNotFound, "VersionNotFound": WorkerVersionNotFound}.get(kind)
            if not_found is not None:
                raise not_found(_printable(f"worker binary {os.fspath(worker)!r}: {error.get('message', '')}"))
            # (no "ValueError: ValueError: ..." for the binary's own ValueError)
            raise ValueError(_printable(("" if kind == "ValueError" else f"{kind}: ") + str(error.get("message", ""))))
        raise ValueError(_printable(f"{not_worker} and printed an error that is not a worker binary's "
                                    f"({{'kind': ..., 'message': ...}}): {str(error)[:400]}"))
    for name in ("observation_space", "action_space"):
        try:
            from_dict(answer[name])
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            got = "none" if name not in answer else _printable(repr(answer[name])[:200])
            raise ValueError(f"{not_worker} and printed no valid {name} ({type(e).__name__}: "
                             f"{_printable(str(e))[:200]}; got {got})") from None
    return answer["observation_space"], answer["action_space"]


def json_kwargs(kwargs: Optional[dict]) -> dict:
    """A Rust env's ``kwargs`` as plain JSON data, as its constructor receives them
    (:func:`ringenv._pickling.rust_json`).

    Raises:
        TypeError: a value that is not JSON data, naming it.
    """
    return json.loads(rust_json(kwargs or {}, "env_kwargs of a Rust env"))


def make_vec(id: Union[str, EnvSpec], num_envs: int = 1, vectorization_mode: Union[str, VectorizeMode, None] = None,
             vector_kwargs: Optional[dict] = None, wrappers=None, *, prefer_builtin: bool = True,
             worker: Optional[Union[str, "os.PathLike[str]"]] = None, **kwargs: Any) -> AsyncVectorEnv:
    """Creates a vector env of ``num_envs`` copies of env ``id``.

    - ``worker`` given (the path of a worker binary built with the ``ringenv-worker`` SDK), or
      ``id`` spelled ``PATH:ENV_ID`` with ``PATH`` an existing file: the binary's Rust env runs in
      the workers. ``id`` may carry the binary's crate name as a namespace
      (``"my_envs:Sokoban-v0"``); ``kwargs`` are JSON-encoded and reach the env's typed
      constructor (a ``ValueError`` names an argument that does not fit). The spaces come from
      the binary's ``describe`` command before any worker starts.
    - ``id`` a built-in Rust env (see :func:`builtin_env_ids`) and ``prefer_builtin`` true, the
      built-in's registered id (``"ringenv/CartPole-v1"``), or an id registered with
      :func:`register` for a worker binary: the Rust env runs in the workers (``kwargs`` go to
      its constructor), and the vector env's ``spec`` is that registered id's.
    - Otherwise each sub-env is ``gymnasium.make`` of the id's spec with ``kwargs`` and
      ``wrappers``, as ``gymnasium.make_vec`` does, Gymnasium's ``"module:Id"`` form included
      (``"minigrid:MiniGrid-DoorKey-8x8-v0"`` imports ``minigrid``, which registers the id).
      The vector options among the registered kwargs of an id registered with :func:`register`
      configure the vector env.

    ``id`` may also be a ``gymnasium.envs.registration.EnvSpec``, as ``gymnasium.make_vec``
    takes one: its ``num_envs``, ``vectorization_mode``, ``vector_kwargs`` and ``wrappers``
    kwargs replace the arguments, the rest are the env's. The vector env's ``spec`` records the
    call as ``gymnasium.make_vec`` records its own, so ``ringenv.make_vec(envs.spec)`` makes the
    same vector env again.

    A panic in a Rust env raises ``ringenv.errors.RemoteEnvError`` (``remote_type == "panic"``)
    with the panic message and its ``file:line:column``, or, with ``on_worker_failure="restart"``,
    restarts its worker.

    Args:
        id: the env id, or its ``EnvSpec``.
        num_envs: number of sub-envs.
        vectorization_mode: ``None`` or ``"async"`` (or ``gymnasium.VectorizeMode.ASYNC``;
            ringenv always uses its worker processes).
        vector_kwargs: keyword arguments of :class:`ringenv.AsyncVectorEnv` (``num_workers``,
            ``copy``, ...).
        wrappers (Sequence[type]): a sequence of ``gymnasium.Wrapper`` classes applied to each Python sub-env
            (not allowed with a Rust env).
        worker: path of a worker binary serving ``id`` (a ``str`` or ``os.PathLike``).

    Raises:
        TypeError: ``id`` is neither a str nor an ``EnvSpec``; ``num_envs`` is not an integer (a
            ``bool`` is not one);
            a Rust env's ``kwargs`` that are not JSON data (NumPy numbers are converted).
        TypeError: an option of the vector env (``num_workers``, ``inline``, ... see
            :data:`RUNTIME_OPTIONS`) among ``kwargs``, naming ``vector_kwargs``.
        ValueError: ``num_envs`` below 1, or so large that the shared segment would not fit in
            the memory available (the message names ``num_envs`` and the bytes; checked before
            anything is allocated), an unsupported ``vectorization_mode``, wrappers with a Rust
            env, bad Rust env arguments (named).
        WorkerNameNotFound, WorkerVersionNotFound: an id that the worker binary does not serve:
            Gymnasium's ``NameNotFound`` / ``VersionNotFound`` (as ``gymnasium.make`` raises for
            an unknown id), also ``ValueError``s; the message names the binary and its ids.
        WorkerIdMissing: ``id`` is the path of a worker binary without ``:ID`` (a
            ``gymnasium.error.Error`` and a ``ValueError``), listing the binary's ids.
        FileNotFoundError, IsADirectoryError, PermissionError: ``worker`` is not an executable file
            (nor the ``PATH`` of an ``id`` spelled ``PATH:ID``, a path with a ``/``).
        gymnasium.error.Error: what ``gymnasium.make`` raises for an unknown id.
        ModuleNotFoundError: the module of a ``"module:Id"`` that cannot be imported (as
            ``gymnasium.make`` raises it).
    """
    if isinstance(id, EnvSpec):
        id, num_envs, vectorization_mode, vector_kwargs, wrappers, kwargs = _unpack_spec(
            id, num_envs, vectorization_mode, vector_kwargs, wrappers, kwargs)
    elif not isinstance(id, str):
        raise TypeError(f"id must be a str (a registered env id, or PATH:ENV_ID for a worker binary) or an EnvSpec, "
                        f"got {type(id).__name__} {id!r}")
    num_envs = check_count("num_envs", num_envs)
    if isinstance(vectorization_mode, VectorizeMode):
        vectorization_mode = vectorization_mode.value
    stray = sorted(RUNTIME_OPTIONS & kwargs.keys())
    if stray:
        raise TypeError(f"make_vec() got {', '.join(map(repr, stray))}, an option of the vector env, among the env's "
                        f"keyword arguments: pass vector_kwargs={{{stray[0]!r}: ...}} (make_vec's other keyword "
                        "arguments go to the env; gymnasium.make_vec's vector_entry_point mode takes both)")
    if vectorization_mode not in (None, "async"):
        raise ValueError(f"vectorization_mode must be None or 'async', got {vectorization_mode!r}")
    env = resolve_id(id, kwargs, wrappers, prefer_builtin=prefer_builtin, worker=worker)
    return env.make(num_envs, vector_kwargs)


class ResolvedId:
    """The env an id names, resolved where the id is registered (:func:`resolve_id`), before any
    process starts; picklable, so that another process (a ``ringenv.ray`` actor) builds its
    vector env with :meth:`make`. Either a Rust env ``rust_id`` (a built-in when ``worker`` is
    ``None``, else served by the worker binary at path ``worker``) or a Python env, made in each
    worker as ``gymnasium.make(spec, **kwargs)`` with ``wrappers``.

    Attributes:
        spec: the spec the id is registered with, without its kwargs; the vector env's ``spec``
            records the call on it. ``None`` for a worker binary's ``PATH:ID``.
        kwargs: the env's arguments: the registered ones, then the caller's.
        vector_kwargs: the vector options (:data:`VECTOR_OPTIONS`) among the registered arguments
            of an id registered by ringenv.
    """

    def __init__(self, spec: Optional[EnvSpec], kwargs: Dict[str, Any], vector_kwargs: Dict[str, Any],
                 wrappers: Tuple[Any, ...], rust_id: Optional[str] = None, worker: Optional[str] = None):
        self.spec, self.kwargs, self.vector_kwargs, self.wrappers = spec, kwargs, vector_kwargs, wrappers
        self.rust_id, self.worker = rust_id, worker

    def make(self, num_envs: int, vector_kwargs: Optional[Dict[str, Any]] = None) -> AsyncVectorEnv:
        """A vector env of ``num_envs`` copies with the registered vector options, then
        ``vector_kwargs``. Its ``spec`` (where the id has one) records the call as
        ``gymnasium.make_vec`` records its own: in ``"async"`` mode for a Python env, in
        ``"vector_entry_point"`` mode for a Rust env, whose actions are checked by default (a Rust
        env panics on an out-of-range action).

        Raises:
            TypeError: for a Rust env, an option in :data:`ringenv._program.PYTHON_ONLY_OPTIONS`,
                naming it; as :func:`make_vec` otherwise.
        """
        vector_kwargs = {**self.vector_kwargs, **(vector_kwargs or {})}
        python = self.rust_id is None
        kwargs = self.kwargs if python else json_kwargs(self.kwargs)
        spec = copy.deepcopy(self.spec)  # made first: nothing runs between the env's start and its return
        if spec is not None:
            mode = VectorizeMode.ASYNC if python else VectorizeMode.VECTOR_ENTRY_POINT
            spec.kwargs = {**kwargs, **({} if python else vector_kwargs),
                           **({"num_envs": num_envs} if num_envs != 1 else {}), "vectorization_mode": mode.value}
            if python and vector_kwargs:
                spec.kwargs["vector_kwargs"] = dict(vector_kwargs)
            if self.wrappers:
                spec.kwargs["wrappers"] = list(self.wrappers)
        if self.rust_id is None:
            assert self.spec is not None, "a Python env has a spec"
            env_fn = functools.partial(_make_one, self.spec, self.wrappers, kwargs)
            envs = AsyncVectorEnv(_Repeated(env_fn, num_envs), **vector_kwargs)
        else:
            for name in PYTHON_ONLY_OPTIONS:
                if name in vector_kwargs:
                    raise TypeError(f"make_vec() got an unexpected keyword argument {name!r}: {self.rust_id} is a Rust "
                                    "env, and that option applies to Python envs only")
            if self.worker is None:
                argv, spaces_json = worker_argv("--rust"), _native.builtin_spaces(self.rust_id, json.dumps(kwargs))
            else:
                argv, spaces_json = [self.worker], describe_worker(self.worker, self.rust_id, kwargs)
            envs = AsyncVectorEnv((), _rust_envs=RustEnvs(argv, self.rust_id, num_envs, kwargs, spaces_json),
                                  **{"check_actions": True, **vector_kwargs})
        if spec is not None:
            envs.spec = spec
        return envs


def resolve_id(id: Union[str, EnvSpec], kwargs: Optional[Dict[str, Any]] = None, wrappers: Any = None, *,
               prefer_builtin: bool = True, worker: Optional[Union[str, "os.PathLike[str]"]] = None) -> ResolvedId:
    """The env ``id`` names, with arguments ``kwargs`` and ``wrappers``, as :func:`make_vec`
    describes: ``worker`` or ``PATH:ID``, a built-in (``prefer_builtin``), then the spec of a
    Gymnasium id (``"module:Id"`` imports ``module`` here) or ``id`` itself when an ``EnvSpec``.
    The spec of an id registered by ringenv gives its Rust env (``ringenv/CartPole-v1``, or one
    registered with ``register(worker=...)``) and its registered vector options.

    Raises:
        ValueError: wrappers with a Rust env.
        gymnasium.error.Error: an unknown id (Gymnasium's error), or a spec with no entry point.
        WorkerIdMissing, FileNotFoundError, IsADirectoryError, PermissionError: as
            :func:`split_worker_id`, and for ``worker``.
    """
    kwargs, wrappers = dict(kwargs or {}), tuple(wrappers or ())
    if isinstance(id, str) and worker is None:
        worker, id = split_worker_id(id) or (None, id)
    spec, rust_id, path = None, None, None
    vector_kwargs: Dict[str, Any] = {}
    if worker is not None:
        rust_id, path = (id if isinstance(id, str) else id.id), _worker_path(worker)
    else:
        if isinstance(id, str) and prefer_builtin and id in builtin_env_ids():
            id = f"{NAMESPACE}/{id}"  # the id it is registered under (register_builtins)
        # Gymnasium's error for an unknown id, before any process starts
        spec = copy.deepcopy(id if isinstance(id, EnvSpec) else _spec(id))
        kwargs, spec.kwargs = {**spec.kwargs, **kwargs}, {}
        entry = spec.vector_entry_point
        if isinstance(entry, VectorEntryPoint):  # registered by ringenv: its kwargs may hold vector options
            vector_kwargs = {k: kwargs.pop(k) for k in sorted(VECTOR_OPTIONS & kwargs.keys())}
            rust_id, path = entry.rust_id, entry.worker
        elif spec.entry_point is None:
            raise gym.error.Error(f"{spec.id} has no entry_point: ringenv makes each sub-env with gymnasium.make")
    if rust_id is not None and wrappers:
        raise ValueError(f"{rust_id} is a Rust env; wrappers apply to Python envs only")
    return ResolvedId(spec, kwargs, vector_kwargs, wrappers, rust_id, path)


def _unpack_spec(spec: EnvSpec, num_envs: int, vectorization_mode: Any, vector_kwargs: Optional[dict],
                 wrappers: Any, kwargs: Dict[str, Any]) -> Tuple[EnvSpec, int, Any, Optional[dict], Any, Dict[str, Any]]:
    """A copy of ``spec`` without kwargs, and the arguments with the spec's ``num_envs``,
    ``vectorization_mode``, ``vector_kwargs`` and ``wrappers`` in place of the caller's (a
    ``"vector_entry_point"`` spec's vector options move to ``vector_kwargs``), as
    ``gymnasium.make_vec`` reads an ``EnvSpec``."""
    spec = copy.deepcopy(spec)
    spec_kwargs, spec.kwargs = dict(spec.kwargs), {}
    num_envs = spec_kwargs.pop("num_envs", num_envs)
    vectorization_mode = spec_kwargs.pop("vectorization_mode", vectorization_mode)
    vector_kwargs = spec_kwargs.pop("vector_kwargs", vector_kwargs)
    wrappers = spec_kwargs.pop("wrappers", wrappers)
    if getattr(vectorization_mode, "value", vectorization_mode) == VectorizeMode.VECTOR_ENTRY_POINT.value:
        vector_kwargs = {**{k: spec_kwargs.pop(k) for k in sorted(VECTOR_OPTIONS & spec_kwargs.keys())},
                         **(vector_kwargs or {})}
        vectorization_mode = None
    return spec, num_envs, vectorization_mode, vector_kwargs, wrappers, {**spec_kwargs, **kwargs}


class _Repeated(Sequence):
    """``[item] * count`` without the list: AsyncVectorEnv checks that ``count`` envs fit before it
    makes one."""

    def __init__(self, item: Callable, count: int):
        self._item, self._count = item, count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Callable: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Callable]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._item] * len(range(*index.indices(self._count)))
        if not -self._count <= index < self._count:
            raise IndexError(index)
        return self._item


def _make_one(id: Union[str, EnvSpec], wrappers, kwargs):
    env = gym.make(id, **kwargs)
    for w in wrappers:
        env = w(env)
    return env


# -- registration in Gymnasium's registry ---------------------------------------------------------


class VectorEntryPoint:
    """The ``vector_entry_point`` of an id registered by ringenv: called by ``gymnasium.make_vec``
    as ``entry_point(num_envs=N, **kwargs)``, it returns a :class:`ringenv.AsyncVectorEnv` of
    ``N`` copies of the env, splitting ``kwargs`` into vector options (:data:`VECTOR_OPTIONS`)
    and env arguments. Picklable and comparable.

    Args:
        id: the Gymnasium id it is registered under.
        rust_id: the id of a Rust env (a built-in, or one ``worker`` serves); ``None`` for a
            Python env, made with ``gymnasium.make`` of the registered spec.
        worker: the path of the worker binary serving ``rust_id`` (``None``: a built-in).
    """

    def __init__(self, id: str, rust_id: Optional[str] = None, worker: Optional[str] = None):
        self.id, self.rust_id, self.worker = id, rust_id, worker

    def __call__(self, num_envs: int = 1, **kwargs: Any) -> AsyncVectorEnv:
        # kwargs: the registered ones and the caller's, as Gymnasium passes them
        spec = gym.registry.get(self.id) or EnvSpec(self.id, vector_entry_point=self)
        return resolve_id(spec, kwargs).make(check_count("num_envs", num_envs))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, VectorEntryPoint)
                and (self.id, self.rust_id, self.worker) == (other.id, other.rust_id, other.worker))

    def __hash__(self) -> int:
        return hash((self.id, self.rust_id, self.worker))

    def __repr__(self) -> str:
        where = "python" if self.rust_id is None else (f"worker={self.worker!r}" if self.worker else "builtin")
        return f"ringenv.VectorEntryPoint({self.id!r}, {where})"


def register(id: str, entry_point: Union[str, Callable[..., gym.Env], None] = None, *,
             worker: Optional[Union[str, "os.PathLike[str]"]] = None, rust_id: Optional[str] = None,
             kwargs: Optional[Dict[str, Any]] = None, **spec_kwargs: Any) -> None:
    """Registers env ``id`` in Gymnasium's registry with a ``vector_entry_point`` that builds a
    :class:`ringenv.AsyncVectorEnv`, so that ``gymnasium.make_vec(id, num_envs)`` (whose default
    mode is then ``"vector_entry_point"``) and RLlib's ``gym_env_vectorize_mode=
    "vector_entry_point"`` step it in ringenv's workers.

    - A Python env: ``entry_point`` (``"package.module:EnvClass"`` or a callable), registered as
      its Gymnasium ``entry_point`` too, so ``gymnasium.make(id)`` and the ``"sync"`` and
      ``"async"`` modes work as well. Each sub-env is ``gymnasium.make`` of the spec, which the
      workers receive (they need not import the module that registered it).
    - A Rust env: ``worker``, the path of a worker binary built with the ``ringenv-worker`` SDK,
      serving ``rust_id`` (default: ``id`` without its namespace, ``"my_envs/Sokoban-v0"`` ->
      ``"Sokoban-v0"``). Only the vector modes exist for it.

    Keyword arguments are split by name: :data:`VECTOR_OPTIONS` configure the vector env, the
    rest reach the env's constructor. Registering an id again replaces it.

    >>> import gymnasium as gym, ringenv
    >>> ringenv.register("demo/Pendulum-v1", "gymnasium.envs.classic_control:PendulumEnv",
    ...                  max_episode_steps=200)
    >>> envs = gym.make_vec("demo/Pendulum-v1", 2, num_workers=1, g=9.81)
    >>> envs.reset(seed=0)[0].shape
    (2, 3)
    >>> envs.close()

    Args:
        id: the Gymnasium id (``"[namespace/]Name-vN"``).
        entry_point: a Python env's entry point (exactly one of it and ``worker``).
        worker: the path of a worker binary (checked now: it must be an executable file).
        rust_id: the id ``worker`` serves.
        kwargs: default keyword arguments (vector options and env arguments alike).
        **spec_kwargs: other ``gymnasium.register`` arguments of a Python env
            (``max_episode_steps``, ``reward_threshold``, ...).

    Raises:
        TypeError: ``id`` not a string, or neither or both of ``entry_point`` and ``worker``.
        ValueError: ``rust_id`` without ``worker``, or ``spec_kwargs`` with ``worker`` (a Rust
            env takes only its own arguments).
        FileNotFoundError, IsADirectoryError, PermissionError: ``worker`` is not an executable file.
    """
    if not isinstance(id, str):
        raise TypeError(f"id must be a string such as 'my_envs/MyEnv-v0', got {type(id).__name__} {id!r}")
    if (entry_point is None) == (worker is None):
        raise TypeError(f"register({id!r}) needs exactly one of entry_point (a Python env) and worker (the path "
                        "of a worker binary serving a Rust env)")
    if worker is None:
        if rust_id is not None:
            raise ValueError(f"register({id!r}): rust_id names the env a worker binary serves; give worker too")
        gym.register(id, entry_point=entry_point, vector_entry_point=VectorEntryPoint(id), kwargs=kwargs or {},
                     **spec_kwargs)
        return
    if spec_kwargs:
        raise ValueError(f"register({id!r}) of a Rust env takes no {sorted(spec_kwargs)}: a Rust env ends its own "
                         "episodes and takes only its own arguments (pass them in kwargs)")
    path = _worker_path(worker)
    served = rust_id if rust_id is not None else id.rsplit("/", 1)[-1]
    gym.register(id, vector_entry_point=VectorEntryPoint(id, served, path), kwargs=kwargs or {})


def register_builtins() -> None:
    """Registers each built-in Rust env as ``"ringenv/<id>"`` (``"ringenv/CartPole-v1"``), with no
    single-env entry point: only ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")``
    (the default for them) makes them. Run by ``import ringenv``; starts no process; registering again does nothing."""
    for rust_id in builtin_env_ids():
        id = f"{NAMESPACE}/{rust_id}"
        entry = VectorEntryPoint(id, rust_id)
        existing = gym.registry.get(id)
        if existing is None or existing.vector_entry_point != entry:
            gym.register(id, vector_entry_point=entry)
