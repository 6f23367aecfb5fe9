"""``ringenv.make_vec``: the counterpart of ``gymnasium.make_vec``, for Python envs, ringenv's
built-in Rust envs, and Rust envs served by a worker binary made with the ``ringenv-worker`` SDK.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import subprocess
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union, overload

import gymnasium as gym

from ringenv import _native
from ringenv._worker import worker_argv
from ringenv.vector import AsyncVectorEnv, check_count

__all__ = ["make_vec", "builtin_env_ids", "describe_worker", "split_worker_id"]

#: Seconds a worker binary may take to answer ``describe`` (it builds one env).
DESCRIBE_TIMEOUT_S = 60.0


def builtin_env_ids() -> list:
    """The ids of ringenv's built-in Rust envs (``["CartPole-v1", "BlocksWorld-v0"]``)."""
    return list(_native.builtin_env_ids())


def _worker_path(worker: Union[str, "os.PathLike[str]"]) -> str:
    """The absolute path of worker binary ``worker`` (a path, or a program name on ``PATH``).

    Raises:
        FileNotFoundError: no such file (with a hint to build it).
        PermissionError: the file is not executable.
    """
    worker = os.fspath(worker)
    path = worker if os.sep in worker else (shutil.which(worker) or worker)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"worker binary {worker!r} not found (build the env crate with `cargo build`, "
                                "then pass the path of its binary, e.g. target/debug/my_envs)")
    if not os.access(path, os.X_OK):
        raise PermissionError(f"worker binary {worker!r} is not executable")
    return os.path.abspath(path)


def split_worker_id(text: str) -> Optional[Tuple[str, str]]:
    """``(worker_path, env_id)`` when ``text`` is spelled ``PATH:ENV_ID`` with ``PATH`` an existing
    executable file (``target/release/my_envs:Sokoban-v0``, the spelling ``ringenv tune``
    accepts), else ``None``. The first ``:`` before which the text is such a file splits the two."""
    for i, ch in enumerate(text):
        head = text[:i]
        if ch == ":" and head and text[i + 1:] and os.path.isfile(head) and os.access(head, os.X_OK):
            return head, text[i + 1:]
    return None


def describe_worker(worker: Union[str, "os.PathLike[str]"], id: str,
                    kwargs: Optional[Dict[str, Any]] = None) -> Tuple[dict, dict]:
    """The ``(observation, action)`` space descriptions of env ``id`` with ``kwargs``, as worker
    binary ``worker`` reports them (it runs ``worker describe ID --kwargs JSON``, which builds one
    env). ``ringenv._layout.from_dict`` turns each into a Gymnasium space.

    Raises:
        FileNotFoundError, PermissionError: ``worker`` is not an executable file.
        TypeError: ``kwargs`` that are not JSON data.
        ValueError: an unknown id or arguments that do not fit (the binary's message, naming the
            id or the argument), a panicking constructor (with the panic's location), invalid
            spaces, or a program that is not a ringenv worker binary.
    """
    path = _worker_path(worker)
    try:
        kwargs_json = json.dumps(kwargs or {})
    except TypeError as e:
        raise TypeError(f"env_kwargs of a Rust env must be JSON data (dict, list, str, int, float, bool, None): "
                        f"{e}") from None
    try:
        done = subprocess.run([path, "describe", id, "--kwargs", kwargs_json], capture_output=True, text=True,
                              timeout=DESCRIBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise ValueError(f"worker binary {worker!r} did not describe {id!r} within {DESCRIBE_TIMEOUT_S:g} s") from None
    try:
        answer = json.loads(done.stdout)
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        tail = (done.stderr or done.stdout).strip()[-400:]
        raise ValueError(f"{worker!r} is not a ringenv worker binary: `describe {id}` exited with status "
                         f"{done.returncode} and printed no JSON description ({tail})")
    if "error" in answer:
        error = answer["error"]
        raise ValueError(f"{error.get('kind', 'Error')}: {error.get('message', '')}")
    return answer["observation_space"], answer["action_space"]


def make_vec(id: str, num_envs: int = 1, vectorization_mode: Optional[str] = None,
             vector_kwargs: Optional[dict] = None, wrappers=None, *, prefer_builtin: bool = True,
             worker: Optional[Union[str, "os.PathLike[str]"]] = None, **kwargs: Any) -> AsyncVectorEnv:
    """Creates a vector env of ``num_envs`` copies of env ``id``.

    - ``worker`` given (the path of a worker binary built with the ``ringenv-worker`` SDK), or
      ``id`` spelled ``PATH:ENV_ID`` with ``PATH`` an existing file: the binary's Rust env runs in
      the workers. ``id`` may carry the binary's crate name as a namespace
      (``"my_envs:Sokoban-v0"``); ``kwargs`` are JSON-encoded and reach the env's typed
      constructor (a ``ValueError`` names an argument that does not fit). The spaces come from
      the binary's ``describe`` command before any worker starts.
    - ``id`` a built-in Rust env (see :func:`builtin_env_ids`) and ``prefer_builtin`` true: its
      Rust implementation runs in the workers (``kwargs`` go to its constructor; for
      ``BlocksWorld-v0``: ``num_blocks``).
    - Otherwise each sub-env is ``gymnasium.make(id, **kwargs)`` with ``wrappers`` applied, as
      ``gymnasium.make_vec`` does.

    A Rust env's vector env is the same Gymnasium-compatible :class:`ringenv.AsyncVectorEnv`
    (next-step autoreset, ``float64`` rewards, infos vectorised); a panic in the env raises
    ``ringenv.errors.RemoteEnvError`` (``remote_type == "panic"``) with the panic message and its
    ``file:line:column``, or, under ``vector_kwargs={"on_worker_failure": "restart"}``, restarts
    its worker like any worker failure.

    Args:
        id: the env id.
        num_envs: number of sub-envs.
        vectorization_mode: ``None`` or ``"async"`` (ringenv always uses worker processes).
        vector_kwargs: keyword arguments of :class:`ringenv.AsyncVectorEnv` (``num_workers``,
            ``copy``, ...).
        wrappers: a sequence of ``gymnasium.Wrapper`` classes applied to each Python sub-env
            (not allowed with a Rust env).
        worker: path of a worker binary serving ``id`` (a ``str`` or ``os.PathLike``).

    Raises:
        TypeError: ``num_envs`` is not an integer (a ``bool`` is not one).
        ValueError: ``num_envs`` below 1, or so large that the shared segment would not fit in
            the memory available (the message names ``num_envs`` and the bytes; checked before
            anything is allocated), an unsupported ``vectorization_mode``, wrappers with a Rust
            env, bad Rust env arguments or an unknown Rust env id (named).
        FileNotFoundError, PermissionError: ``worker`` is not an executable file.
        gymnasium.error.Error: what ``gymnasium.make`` raises for an unknown id.
    """
    num_envs = check_count("num_envs", num_envs)
    if vectorization_mode not in (None, "async"):
        raise ValueError(f"vectorization_mode must be None or 'async', got {vectorization_mode!r}")
    vector_kwargs = dict(vector_kwargs or {})
    if worker is None:
        split = split_worker_id(id)
        if split is not None:
            worker, id = split
    if worker is not None:
        if wrappers:
            raise ValueError(f"{id} is a Rust env served by {worker!r}; wrappers apply to Python envs only")
        spaces_json = describe_worker(worker, id, kwargs)
        return AsyncVectorEnv._from_rust([_worker_path(worker)], id, num_envs, kwargs, spaces_json, **vector_kwargs)
    if prefer_builtin and id in builtin_env_ids():
        if wrappers:
            raise ValueError(f"{id} is a built-in Rust env; wrappers apply to Python envs only "
                             "(pass prefer_builtin=False to use the Gymnasium env)")
        spaces_json = _native.builtin_spaces(id, json.dumps(kwargs))
        argv = worker_argv("--rust")
        return AsyncVectorEnv._from_rust(argv, id, num_envs, kwargs, spaces_json, **vector_kwargs)
    env_spec = copy.deepcopy(gym.spec(id))  # gymnasium's own error for an unknown id, before any process starts
    env_spec.kwargs = {**env_spec.kwargs, **kwargs}
    env_fn = functools.partial(_make_one, id, tuple(wrappers or ()), kwargs)
    envs = AsyncVectorEnv(_Repeated(env_fn, num_envs), **vector_kwargs)
    envs.spec = env_spec  # as gymnasium.make_vec records the spec of its sub-envs
    return envs


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


def _make_one(id: str, wrappers, kwargs):
    env = gym.make(id, **kwargs)
    for w in wrappers:
        env = w(env)
    return env
