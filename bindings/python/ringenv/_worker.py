"""Worker process entry point: ``python -c <boot> --python|--rust <pool arguments>``
(see :func:`worker_argv`).

Started by a pool, never by hand. ``--python`` hosts Python envs built from cloudpickled
factories (the step loop is Rust, in ``ringenv._native``); ``--rust`` hosts built-in Rust envs
without touching Python again after start-up. The helpers below are called from Rust.

Import path: a worker imports what the main process can import and nothing else. ``python -m``
and ``python -c`` would put the working directory first on ``sys.path`` (a ``cloudpickle.py``
left there would run inside every worker), so the boot code replaces ``sys.path`` with the main
process's, as multiprocessing's spawn does, before its first import.
"""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import traceback
import types
from typing import Any, Dict, List, Mapping, Optional, Tuple

import cloudpickle
import numpy as np
from gymnasium import spaces
from gymnasium.spaces.utils import is_space_dtype_shape_equiv

from ringenv import _layout, _obs_writer
from ringenv._pickling import BigSeeds, dumps, publish_main_names, request_copy, request_of, take_local_init
from ringenv._registry import CallerRegistry

#: The worker's first statements: ``sys`` is built in, so nothing is looked up on the path
#: (which still starts with the working directory) before it is replaced.
_BOOT = "import sys; sys.path[:] = {paths!r}; from ringenv._worker import main; sys.exit(main(sys.argv[1:]))"

#: A built-in Rust env's worker loads only the extension module, from this process's file of it:
#: its loop is Rust and imports nothing, and the ``ringenv`` package (with numpy, Gymnasium and
#: cloudpickle) took ~0.3 s of each such worker's start on a 2-core machine, ~90% of a Rust pool's
#: start-up (``benches/RESULTS.md``, section ``startup``).
_RUST_BOOT = ("import sys; sys.path[:] = {paths!r}; import importlib.util as u; "
              "s = u.spec_from_file_location('ringenv._native', {native!r}); m = u.module_from_spec(s); "
              "s.loader.exec_module(m); sys.exit(m.run_builtin_worker(sys.argv[2:]))")


def worker_argv(mode: str) -> List[str]:
    """The command line of a worker hosting Python (``mode="--python"``) or built-in Rust
    (``"--rust"``) envs; the pool appends its own arguments."""
    paths = [os.fspath(p) for p in sys.path if isinstance(p, (str, os.PathLike))]
    if "" in paths:
        start_dir = _start_dir()
        paths = [p for p in paths if p != ""] if start_dir is None else [start_dir if p == "" else p for p in paths]
    # The interpreter's options (-O, -W, -X, -E, ...), as multiprocessing's spawn passes them: an
    # env's module compiled without -O in a worker would still run its asserts.
    flags = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
    if mode == "--rust":
        from ringenv import _native

        return [sys.executable, *flags, "-c", _RUST_BOOT.format(paths=paths, native=_native.__file__), mode]
    return [sys.executable, *flags, "-c", _BOOT.format(paths=paths), mode]


def _start_dir() -> Optional[str]:
    """The directory this process started in (``multiprocessing``'s ``ORIGINAL_DIR``), else the
    working directory; ``None`` when neither is known because the working directory was removed."""
    import multiprocessing.process

    try:
        return getattr(multiprocessing.process, "ORIGINAL_DIR", None) or os.getcwd()
    except OSError:  # FileNotFoundError: the working directory was removed
        return None


#: What workers get by default: one thread each (the workers are the parallelism) and no GPU.
DEFAULT_WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                      "CUDA_VISIBLE_DEVICES": ""}


def worker_environ(overrides: Optional[Mapping[str, Optional[str]]]) -> List[Tuple[str, str]]:
    """The environment variables a worker gets on top of the parent's, sorted:
    :data:`DEFAULT_WORKER_ENV` updated with ``overrides`` (``None``: keep the parent's value).

    Raises:
        TypeError: a value that is neither a string nor ``None``, naming the variable.
    """
    env = dict(DEFAULT_WORKER_ENV)
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        elif not isinstance(value, str):
            raise TypeError(f"worker_env[{key!r}] must be a string or None, got {type(value).__name__}")
        else:
            env[key] = value
    return sorted(env.items())


#: Names ``call`` refuses, as Gymnasium's ``AsyncVectorEnv`` does.
RESERVED_CALLS = ("reset", "step", "close", "_setattr", "_check_spaces")


def _check_spaces(env_id: int, env, obs_space, act_space, observation_mode: str) -> None:
    """Raises ``ValueError`` with Gymnasium's text (what its ``AsyncVectorEnv`` raises, as a
    ``RuntimeError``, for the same spaces) and the env's id and spaces, when env ``env_id``'s
    spaces cannot be batched with env 0's."""
    if observation_mode == "same" and env.observation_space != obs_space:
        raise ValueError(
            "AsyncVectorEnv(..., observation_mode='same') however some of the sub-environments observation spaces "
            f"are not equivalent. env {env_id} has observation space {env.observation_space!r}, env 0 has "
            f"{obs_space!r}. If this is intentional, use `observation_mode='different'` instead.")
    if observation_mode != "same" and not is_space_dtype_shape_equiv(obs_space, env.observation_space):
        raise ValueError(
            "AsyncVectorEnv(..., observation_mode='different' or custom space) however the sub-environment's "
            f"observation spaces do not share a common shape and dtype: env {env_id} has observation space "
            f"{env.observation_space!r}, the vector env's single observation space is {obs_space!r}.")
    if env.action_space != act_space:
        raise ValueError(
            f"Some environments have an action space different from `{act_space}`. In order to batch actions, the "
            f"action spaces from all environments must be equal: env {env_id} has action space "
            f"{env.action_space!r}, env 0 has {act_space!r}.")


class _Float64Scalars:
    """The actions of a float Box of shape ``()`` as ``numpy.float64`` scalars (exactly the slot's
    value), indexed like the slot's view (``actions[k]``)."""

    __slots__ = ("view",)

    def __init__(self, view: np.ndarray):
        self.view = view

    def __getitem__(self, k: int) -> np.float64:
        return np.float64(self.view[k])


#: Whether this worker process is loading its env factories (and so importing the modules that
#: define them): see :func:`refuse_during_factory_loading`.
_loading_factories = False


def refuse_during_factory_loading() -> None:
    """Raises ``RuntimeError`` where a vector env is being made while this worker loads its env
    factories: a module that defines them makes a vector env at its top level, which every worker
    importing it would do again, without end (each waiting for its own workers). ``multiprocessing``'s
    spawn refuses the same with its "bootstrapping phase" error. Made elsewhere in a worker (in an
    env's ``__init__`` or ``step``), a nested vector env is fine.

    Raises:
        RuntimeError: naming the module being imported and the fix.
    """
    if not _loading_factories:
        return
    frame: Optional[types.FrameType] = sys._getframe(1)
    module = None
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            module = frame.f_globals.get("__name__")
            break
        frame = frame.f_back
    where = f"module {module!r}" if module else "a module"
    raise RuntimeError(
        f"a vector env was created while a ringenv worker process was importing {where}, which defines its env "
        f"factories: that module creates a vector env when it is imported, so every worker would create one "
        f"again. Create vector envs inside a function or under `if __name__ == \"__main__\":`, not at a "
        f"module's top level (multiprocessing's spawn asks the same).")


def _build(init: bytes, info: dict):
    """Builds this worker's envs and the targets of their observations and sources of actions.

    Returns ``(envs, obs_targets, obs_fast, pickled_keys, action_views, copy_action,
    autoreset_mode, obs_space)``:
    ``obs_targets[slot][k]`` is env k's NumPy row (``obs_fast``) or ``(write, tree, leaves)``: a
    callable writing its observation and the walk of :func:`ringenv._obs_writer.plan`; or
    ``obs_targets`` is ``None`` when observations travel pickled; ``pickled_keys`` is ``None``, or
    for a split ``Dict`` (``ringenv._layout.observation_layout``) the keys whose values travel
    pickled (a ``dict`` of them per env) while ``obs_targets`` writes the others;
    ``action_views[slot]`` holds this worker's action rows (read as ``numpy.float64`` for a
    float Box of shape ``()``: :class:`_Float64Scalars`), or is ``None`` when actions travel
    pickled; ``obs_space`` is the space laid out in the segment (named in errors).

    Raises:
        What a factory or the space check raised, marked with the env's index (:func:`_name_env`).
    """
    outer = pickle.loads(init)
    caller_registry: Optional[CallerRegistry] = None  # the inline share's factories run against the caller's own
    # The import path is the main process's already (worker_argv), so factories pickled by
    # reference (functions in the caller's modules) resolve here too.
    if "local" in outer:  # the inline share: the caller's own factories (local_init)
        cfg = take_local_init(outer["local"])
    else:
        global _loading_factories
        _loading_factories = True  # importing the factories' modules must not make a vector env
        try:
            cfg = cloudpickle.loads(outer["payload"])
            caller_registry = CallerRegistry(cfg.get("registry") or b"")  # ringenv/_registry.py
        finally:
            _loading_factories = False
        publish_main_names(cfg["env_fns"])
    obs_space, act_space = cfg["observation_space"], cfg["action_space"]
    start, stop = info["env_ids"].start, info["env_ids"].stop  # a range of env indices
    n, seg = info["num_envs"], info["segment"]
    envs = []
    for k, fn in enumerate(cfg["env_fns"]):
        try:
            if caller_registry is not None:
                caller_registry.apply()  # gym.make(id) in the factory finds the caller's spec of id
            env = fn()
            envs.append(env)
            _check_spaces(start + k, env, obs_space, act_space, cfg["observation_mode"])
        except BaseException as e:
            _name_env(e, start + k)  # the host names it in the start-up error
            raise
    obs_leaves, act_leaves, offsets = info["obs_leaves"], info["action_leaves"], info["offsets"]
    count = stop - start
    obs_targets: Optional[List[List[Any]]]
    layout = _layout.observation_layout(obs_space, n, len(act_leaves or ())) if obs_leaves else None
    pickled_keys = None
    if layout is not None and layout.pickled is not None:
        obs_space, pickled_keys = layout.space, list(layout.pickled.spaces)
    if not obs_leaves:
        obs_targets, obs_fast = None, False
    elif _layout.is_flat(obs_space):
        views = [_layout.flat_view(obs_space, n, seg, obs_offs[0]) for obs_offs, _ in offsets]
        shape = tuple(obs_space.shape or ())
        # A one-row slice reshaped is a view even for scalar spaces (indexing would give a copy).
        obs_targets = [[v[start + k:start + k + 1].reshape(shape) for k in range(count)] for v in views]
        obs_fast = True
    else:
        mems = [_layout.bind(obs_space, n, seg, obs_offs, obs_leaves) for obs_offs, _ in offsets]
        obs_targets = [[(_obs_writer.writer(obs_space, start + k, mem), *_obs_writer.plan(obs_space, start + k, mem))
                        for k in range(count)] for mem in mems]
        obs_fast = False
    action_views: Optional[List[Any]]
    if act_leaves:
        action_views = [_layout.flat_view(act_space, n, seg, act_offs[0])[start:stop] for _, act_offs in offsets]
        if _float_scalar(act_space):
            action_views = [_Float64Scalars(v) for v in action_views]
    else:
        action_views = None
    copy_action = action_views is not None and len(act_space.shape or ()) > 0
    return envs, obs_targets, obs_fast, pickled_keys, action_views, copy_action, cfg["autoreset_mode"], obs_space


def _float_scalar(space) -> bool:
    """Whether ``space`` is a Box of shape ``()`` with a float dtype narrower than ``float64``."""
    return (isinstance(space, spaces.Box) and tuple(space.shape) == () and space.dtype.kind == "f"
            and space.dtype.itemsize < 8)


def _checked_obs(obs: Any, space: spaces.Space, env_id: int):
    """``obs`` as an array of ``space``'s shape, or a ``ValueError`` naming the env, the space
    and both shapes (NumPy assignment would broadcast a wrong shape into the row silently;
    Gymnasium's SyncVectorEnv raises); an ``obs`` NumPy cannot make an array of raises
    :func:`_obs_writer.misfit`'s error."""
    try:
        array = np.asarray(obs)
    except (ValueError, TypeError) as e:  # a ragged sequence
        raise _obs_writer.misfit(env_id, "", space, obs, e) from None
    shape = tuple(space.shape or ())
    if array.shape != shape:
        raise ValueError(f"env {env_id} returned an observation of shape {array.shape}, but its observation "
                         f"space {space} has shape {shape}")
    return array


def _obs_misfit(error: BaseException, obs: Any, space: spaces.Space, env_id: int) -> BaseException:
    """The error to raise for env ``env_id``'s observation ``obs`` of the right shape that NumPy
    could not write into its row of ``space`` (raising ``error``): :func:`_obs_writer.misfit`'s."""
    return _obs_writer.misfit(env_id, "", space, obs, error) if isinstance(error, Exception) else error


def _pack(observations: Optional[List[Any]], infos: List[Tuple[int, dict]], first_env_id: int) -> bytes:
    """A step's or reset's message: observations (pickled path only) of the envs from
    ``first_env_id`` on, and non-empty infos.

    Plain ``pickle`` (protocol 5, what cloudpickle writes for importable objects) first: about 3x
    faster than cloudpickle's pure-Python pickler on the small dicts of per-step infos. Anything
    plain pickle refuses (lambdas, classes defined in the caller's ``__main__``) goes through
    cloudpickle, as before; the main process reads both with ``pickle.loads``.

    Raises:
        TypeError: something in them cannot be pickled (a lock, an open file, a generator),
            naming the env and the info key (or the observation) that holds it.
    """
    try:
        return dumps((observations, infos))
    except Exception as e:
        raise _unpicklable(observations, infos, first_env_id, e) from e


def _unpicklable(observations: Optional[List[Any]], infos: List[Tuple[int, dict]], first_env_id: int,
                 error: Exception) -> TypeError:
    """The error for a message that ``dumps`` refused with ``error``: the first info value (by env,
    then key) or observation that does not pickle, named with its env."""
    def refuses(value: Any) -> bool:
        try:
            dumps(value)
            return False
        except Exception:
            return True

    where = "a value of its infos or observations"
    for env_id, info in infos:
        key = next((k for k, v in info.items() if refuses(v)), None)
        if key is not None:
            where = f"env {env_id}: the value of its info key {key!r} ({type(info[key]).__name__})"
            break
    else:
        bad = next(((i, o) for i, o in enumerate(observations or ()) if refuses(o)), None)
        if bad is not None:
            where = f"env {first_env_id + bad[0]}: its observation ({type(bad[1]).__name__})"
    return TypeError(f"{where} cannot be pickled to leave its worker process ({type(error).__name__}: {error}); "
                     "keep such objects out of what the env returns, or step it in the main process (num_workers=0)")


def _unpack(payload: bytes) -> Any:
    """A step's pickled actions (:meth:`ringenv._slots.Slots.write_actions`)."""
    return request_copy(payload)


def _unpack_reset(payload: bytes) -> Tuple[Any, Optional[Dict[int, int]]]:
    """``(options, seeds)`` of the reset payload the main process sent
    (:func:`ringenv._pickling.reset_payload`): the ``options``, a copy for each env (in its inline
    share deep-copied from the object itself, in a worker process loaded with cloudpickle), and
    the seeds of ``2**64`` or more by env id, which do not fit shared memory (``None``: none)."""
    request = request_copy(payload)
    if isinstance(request, BigSeeds):
        return request.options, request.seeds
    return request, None


def _same_step_info(info: Mapping, final_obs: Any, reset_info: dict) -> dict:
    """The info of a same-step autoreset as Gymnasium's ``SyncVectorEnv`` makes it: ``final_obs``,
    then ``final_info`` (the step's ``info``), then the reset's ``reset_info`` added over them, a
    dict value merged into a dict already there key by key (its ``_add_info`` does so), any other
    value replacing it."""
    return _merged({"final_obs": final_obs, "final_info": info}, reset_info)


def _merged(into: dict, more: dict) -> dict:
    """``into`` with ``more``'s items added: a dict value merged into a dict value of the same key
    (recursively, into a copy), any other value replacing the old one; new keys go last."""
    for key, value in more.items():
        old = into.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            value = _merged(dict(old), value)
        into[key] = value
    return into


def _call(envs: list, start: int, request: bytes) -> bytes:
    """Runs a request on this worker's envs; returns the pickled results, one per env it ran on.

    Requests: ``("call", name, args, kwargs)`` calls method ``name`` (or reads the attribute) of
    every env; ``("set_attr", name, values, {})`` sets it to ``values[env_id]``;
    ``("apply", fn, env_ids, {})`` returns ``fn(env)`` for the envs whose global id is in
    ``env_ids`` (``None``: all), the others giving nothing.
    """
    kind, name, args, kwargs = request_of(request)  # this process's share: the request itself
    if kind == "call" and name in RESERVED_CALLS:
        raise ValueError(f"Trying to call function `{name}` with `call`, use `{name}` directly instead.")
    results: List[Any] = []
    for k, env in enumerate(envs):
        try:
            if kind == "set_attr":
                env.set_wrapper_attr(name, args[start + k])
                results.append(None)
            elif kind == "apply":
                if args is None or start + k in args:
                    results.append(name(env))
            else:
                attr = env.get_wrapper_attr(name)
                results.append(attr(*args, **kwargs) if callable(attr) else attr)
        except BaseException as e:
            _name_env(e, start + k)
            raise
    return dumps(results)


CALL_ENV_ID = "_ringenv_env_id"
"""The attribute :func:`_call` and :func:`_build` set on an exception raised while env ``env_id``
ran the call or was built: the host (``python_envs.rs``) reads it to name the env in the error the
caller gets."""


def _name_env(exc: BaseException, env_id: int) -> None:
    """Marks ``exc`` as raised while env ``env_id`` ran a call or was built (:data:`CALL_ENV_ID`);
    an exception that takes no attributes stays unnamed."""
    try:
        setattr(exc, CALL_ENV_ID, env_id)
    except Exception:
        pass


def _describe_exception(exc: BaseException) -> Tuple[str, str, str, bytes]:
    """``(type name, message, formatted traceback, pickled exception or b"")``."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        payload = dumps(exc)
        pickle.loads(payload)  # refuse exceptions that cannot be re-created
    except Exception:
        payload = b""
    return type(exc).__qualname__, str(exc), tb, payload


def main(argv: List[str]) -> int:
    from ringenv import _native

    # Everything imported so far (NumPy, Gymnasium, cloudpickle, ringenv: ~26,000 objects the
    # collector tracks) lives as long as the process: frozen, the collections the envs trigger and
    # those of Python's exit skip it (~80 ms less per close: benches/startup.py).
    gc.freeze()

    if not argv or argv[0] not in ("--python", "--rust"):
        print("usage: python -m ringenv._worker --python|--rust <arguments added by the pool>", file=sys.stderr)
        return 2
    run = _native.run_python_worker if argv[0] == "--python" else _native.run_builtin_worker
    return run(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
