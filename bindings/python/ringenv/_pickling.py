"""What crosses between the main process and its workers, and how it is pickled.

What the caller's main script defines travels to a worker by value (cloudpickle). Two costs of
that are kept away from users:

- cloudpickle *loading* in the main process a class it sent by value sets the loaded copies of
  its methods on the caller's own class (whose globals then are a snapshot). So nothing the main
  process sends is loaded back here by cloudpickle: the inline share gets its factories
  (:func:`local_init`) and requests (:func:`request`) as the objects themselves, and results go
  through plain pickle first (:func:`dumps`).
- In a worker, pickle by reference of the script's names fails ("attribute lookup State on
  __main__ failed"): :func:`publish_main_names` puts them in the worker's ``__main__``.
"""

from __future__ import annotations

import collections
import copy
import functools
import io
import itertools
import json
import linecache
import os
import pickle
import sys
import types
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import cloudpickle
import numpy as np


def dumps(obj: Any) -> bytes:
    """``obj`` pickled with plain ``pickle`` (protocol 5) where it can be (the script's classes by
    reference: loading them gives the caller's own), else with cloudpickle (lambdas, what a
    worker cannot name), still pickling by reference the script's classes that
    :func:`publish_main_names` made findable here. Read either with ``pickle.loads``."""
    try:
        return pickle.dumps(obj, protocol=5)
    except Exception:
        buffer = io.BytesIO()
        _ByNamePickler(buffer, protocol=5).dump(obj)
        return buffer.getvalue()


class _ByNamePickler(cloudpickle.Pickler):
    """cloudpickle, except that a class of the caller's main script found under its own name in this
    process's ``__main__`` (or ``__mp_main__``) is pickled by reference, as plain pickle does: the
    main process loads it as its own class."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) and _named_in_main(obj):
            return NotImplemented  # pickle's own reduction: by reference
        return super().reducer_override(obj)


def _named_in_main(cls: type) -> bool:
    """Whether ``cls`` is a top-level class of the main script's module (or of a module
    :func:`pickle_unimportable_by_value` registered), found under its name."""
    module = getattr(cls, "__module__", None)
    if not isinstance(module, str) or (module not in _MAIN_MODULES and module not in _BY_VALUE_MODULES):
        return False
    return getattr(sys.modules.get(module), cls.__qualname__, None) is cls


def for_worker(obj: Any) -> bytes:
    """``obj`` pickled with cloudpickle for a worker process, the code it sends by value (the main
    script's functions and classes) keeping its file name, so that a worker's traceback names the
    caller's file and line (``File "train.py", line 12, in step``, the source line read from that
    file) where cloudpickle alone writes ``File "<dynamic-code>"``."""
    buffer = io.BytesIO()
    _WorkerPickler(buffer, protocol=5).dump(obj)
    return buffer.getvalue()


def _reduce_code(code: types.CodeType) -> Any:
    """cloudpickle's reduction of ``code``, with its file name and (for a file not on disk) the
    source lines this process's ``linecache`` holds for it; :func:`code_with_file` undoes it."""
    constructor, args = cloudpickle.Pickler.dispatch_table[types.CodeType](code)
    filename = code.co_filename
    entry = linecache.cache.get(filename)  # (size, mtime, lines, name), or (function,) for a lazy one
    lines = entry[2] if entry is not None and len(entry) == 4 and not os.path.exists(filename) else None
    return code_with_file, (constructor, args, filename, lines)


def code_with_file(constructor: Any, args: tuple, filename: str, lines: Optional[List[str]]) -> types.CodeType:
    """The code object :func:`_reduce_code` reduced: cloudpickle's, with ``filename`` set back;
    ``lines`` (a cell's source) go into this process's ``linecache`` unless it has ``filename``."""
    if lines is not None and filename not in linecache.cache:
        linecache.cache[filename] = (sum(map(len, lines)), None, list(lines), filename)  # no mtime: never checked
    return constructor(*args).replace(co_filename=filename)


class _WorkerPickler(cloudpickle.Pickler):
    """cloudpickle with :func:`_reduce_code` for code objects (:func:`for_worker`)."""

    dispatch_table = collections.ChainMap({types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table)


#: The requests :func:`request` made lately, by their bytes, for this process's inline share.
_REQUESTS: "collections.OrderedDict[bytes, Any]" = collections.OrderedDict()
#: How many it keeps (a pool without a share never takes its requests back).
_REQUESTS_KEPT = 4


def request(obj: Any) -> bytes:
    """``obj`` (a ``call``, ``set_attr`` or ``apply`` request) pickled for the workers with
    cloudpickle, and kept so that this process's inline share gets ``obj`` itself
    (:func:`request_of`), not a copy loaded by cloudpickle."""
    data = for_worker(obj)
    _REQUESTS[data] = obj
    _REQUESTS.move_to_end(data)
    while len(_REQUESTS) > _REQUESTS_KEPT:
        _REQUESTS.popitem(last=False)
    return data


def request_of(data: bytes) -> Any:
    """The request ``data`` holds: the object itself where :func:`request` made it in this
    process, else loaded (a worker process)."""
    obj = _REQUESTS.get(data, _REQUESTS)
    return cloudpickle.loads(data) if obj is _REQUESTS else obj


def request_copy(data: bytes) -> Any:
    """A fresh copy of the request ``data`` holds, one per env that receives it (reset
    ``options``: an env may change its own, as each of Gymnasium's ``AsyncVectorEnv`` processes
    unpickles its own): where :func:`request` made it in this process, ``copy.deepcopy`` of the
    object (the caller's own classes, not copies of them), else, or where it cannot be deep-copied,
    loaded with cloudpickle."""
    obj = _REQUESTS.get(data, _REQUESTS)
    if obj is not _REQUESTS:
        try:
            return copy.deepcopy(obj)
        except Exception:
            pass
    return cloudpickle.loads(data)


#: Reset seeds below this travel in shared memory, 8 bytes per env (the pool's seed rows, which a
#: Rust env reads as its ``u64`` seed); larger ones, which only Python envs take, travel pickled
#: with the reset's options (:func:`reset_payload`).
SHARED_SEED_LIMIT = 2**64


class BigSeeds(NamedTuple):
    """A reset's payload when an env's seed is ``2**64`` or more (:func:`reset_payload`)."""

    #: the reset's options (``None``: none)
    options: Any
    #: env id -> seed, for each seed of ``2**64`` or more
    seeds: Dict[int, int]


def reset_payload(seeds: List[Optional[int]], options: Any,
                  rust_envs: bool = False) -> Tuple[List[Optional[int]], Optional[bytes]]:
    """What a reset with ``seeds`` (one per env: a non-negative ``int`` or ``None``) and
    ``options`` sends: the seeds for shared memory (``None`` in place of each of ``2**64`` or
    more) and the reset command's payload (``None`` without options). For Python envs the payload
    is ``options`` (:func:`request`), or with a seed of ``2**64`` or more a :class:`BigSeeds` of
    the options and those seeds, which a worker reads with ``ringenv._worker._unpack_reset``; for
    ``rust_envs`` (whose seeds are below ``2**64``) it is ``options`` as JSON.

    Raises:
        TypeError: options of a Rust env that are not JSON data (:func:`rust_json`).
    """
    if rust_envs:
        return seeds, None if options is None else rust_json(options, "the reset options of a Rust env").encode()
    big = {i: s for i, s in enumerate(seeds) if s is not None and s >= SHARED_SEED_LIMIT}
    if not big:
        return seeds, None if options is None else request(options)
    return [None if i in big else s for i, s in enumerate(seeds)], request(BigSeeds(options, big))


def rust_json(value: Any, what: str) -> str:
    """``value`` as the JSON text a Rust env receives (its constructor's kwargs, a reset's
    ``ctx.options()``): dicts with ``str`` keys, lists, tuples, ``str``, ``int``, finite ``float``,
    ``bool`` and ``None``, NumPy scalars and arrays as the Python numbers and lists they hold.

    Raises:
        TypeError: anything else, naming ``what`` and the value.
    """
    def check(item: Any) -> None:
        if isinstance(item, dict):
            for key, sub in item.items():
                if type(key) is not str:
                    raise TypeError(f"{what} must have str keys, got {key!r}")
                check(sub)
        elif isinstance(item, (list, tuple)):
            for sub in item:
                check(sub)

    def numpy_value(item: Any) -> Any:
        if isinstance(item, (np.generic, np.ndarray)):
            return item.tolist()
        raise TypeError(f"{type(item).__name__} {item!r} is not JSON data")

    check(value)
    try:
        return json.dumps(value, allow_nan=False, default=numpy_value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what} must be JSON data (dict, list, tuple, str, int, finite float, bool, None, or "
                        f"NumPy numbers): {e}") from None


def pickle_unimportable_by_value(env_fns: Sequence[Any]) -> None:
    """Makes cloudpickle send by value the code of modules a worker cannot import, before the
    factories ``env_fns`` are pickled for it."""
    main = sys.modules.get("__mp_main__")
    if main is not None and getattr(main, "__name__", None) == "__mp_main__":
        cloudpickle.register_pickle_by_value(main)
    for name in _factory_modules(env_fns):
        module = sys.modules.get(name)
        if name not in _MAIN_MODULES and module is not None and getattr(module, "__spec__", None) is None:
            cloudpickle.register_pickle_by_value(module)
            _BY_VALUE_MODULES.add(name)


#: The modules without an import spec that :func:`pickle_unimportable_by_value` registered.
_BY_VALUE_MODULES: Set[str] = set()


def _factory_modules(env_fns: Sequence[Any]) -> Set[str]:
    """The names of the modules that define the factories (through ``functools.partial``, and
    the class of a callable instance)."""
    names: Set[str] = set()
    stack = list(env_fns)
    while stack:
        fn = stack.pop()
        if isinstance(fn, functools.partial):
            stack.append(fn.func)
            continue
        owner = fn if isinstance(fn, (types.FunctionType, type)) else type(fn)
        name = getattr(owner, "__module__", None)
        if isinstance(name, str):
            names.add(name)
    return names


#: The inline share's configurations, kept in this process by key (:func:`local_init`) until
#: ``ringenv._worker._build`` takes them (:func:`take_local_init`).
_LOCAL_INITS: Dict[int, dict] = {}
_LOCAL_KEYS = itertools.count()


def local_init(cfg: dict) -> bytes:
    """The init message of the main process's inline share: ``cfg`` (the env factories among it)
    kept here under a key, not pickled."""
    key = next(_LOCAL_KEYS)
    _LOCAL_INITS[key] = cfg
    return pickle.dumps({"local": key})


def take_local_init(key: int) -> dict:
    """The configuration :func:`local_init` kept under ``key``, handed over once."""
    return _LOCAL_INITS.pop(key)


def discard_local_inits(inits: List[bytes]) -> None:
    """Drops what :func:`local_init` kept for ``inits`` and no share took (a pool that failed to
    start); other init messages are left alone."""
    for init in inits:
        try:
            outer = pickle.loads(init)
        except Exception:  # not a pickle (a Rust program's init)
            continue
        if isinstance(outer, dict) and "local" in outer:
            _LOCAL_INITS.pop(outer["local"], None)


#: The modules of the caller's main script, whose code travels by value.
_MAIN_MODULES = ("__main__", "__mp_main__")


def publish_main_names(roots: List[Any]) -> None:
    """Makes the functions and classes of the caller's main script that cloudpickle re-created here
    (by value: ``roots`` are the env factories) findable by name in this worker's own ``__main__``
    (or ``__mp_main__``), so that pickle by reference works on them in the worker as in the caller:
    an env that pickles its own state (``pickle.dumps(self.state)`` of a class the script defines)
    or hands a script's function to ``multiprocessing``."""
    published, seen, stack = set(_MAIN_MODULES), set(), list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, functools.partial):
            stack += [obj.func, *obj.args, *obj.keywords.values()]
            continue
        if isinstance(obj, (staticmethod, classmethod)):
            stack.append(obj.__func__)
            continue
        module = getattr(obj, "__module__", None) if isinstance(obj, (types.FunctionType, type)) else None
        if module not in published:
            if not isinstance(module, str) or module in sys.modules:  # importable: found by name already
                continue
            published.add(module)
        if isinstance(obj, types.FunctionType):
            stack += list(obj.__globals__.values())
            stack += [_cell_contents(c) for c in obj.__closure__ or ()]
        else:
            stack += list(vars(obj).values())
        name = obj.__qualname__
        if "." in name or "<" in name:  # a method, a nested or local definition, a lambda: no top-level name
            continue
        target = sys.modules.get(module)
        if target is None:
            target = sys.modules[module] = types.ModuleType(module)
        if not hasattr(target, name):
            setattr(target, name, obj)


def _cell_contents(cell: Any) -> Any:
    """What a closure's cell holds; ``None`` for an empty one (a variable of the enclosing
    function not assigned yet), whose ``cell_contents`` raises ``ValueError``."""
    try:
        return cell.cell_contents
    except ValueError:
        return None
