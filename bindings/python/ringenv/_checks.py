"""Argument checks of :class:`ringenv.AsyncVectorEnv`, run before anything is built or sent: counts
and durations, the shared segment against the memory available, and actions (what fits the
action slot, and with ``check_actions=True`` what is in the action space). Each raises
``TypeError`` or ``ValueError`` naming the argument, the env or the value.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, List, Optional, Sequence, Union

import numpy as np
from gymnasium import spaces

__all__ = ["check_count", "check_seconds", "check_options", "available_memory", "check_segment_fits", "seeds_of",
           "reset_mask_of", "action_bounds", "check_action_values", "check_fits", "refuse_objects"]


#: The largest fixed spin bound, in µs (10 s): a wait spins at most this long before it sleeps;
#: beyond a time slice or two a bound changes nothing but the CPU burnt (docs/WAKEUP.md).
SPIN_US_MAX = 10_000_000


def check_count(name: str, value: Any, low: int = 1, high: Optional[int] = None, high_name: str = "") -> int:
    """``value`` as an ``int`` when it is an integer (not a ``bool``) in ``[low, high]``
    (``high_name``: what ``high`` is, for the message).

    Raises:
        TypeError: not an integer (a ``bool``, ``float``, ``str``, ...), naming ``name``.
        ValueError: outside the range, naming ``name`` and the range.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if high is None and value > sys.maxsize:  # no count of anything can be larger (len() cannot)
        high = sys.maxsize
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


def check_options(num_envs: Any, num_workers: Any, batch_size: Any, max_concurrency: Any, startup_timeout: Any,
                  max_restarts: Any, restart_window: Any, spin_us: Any, inline: Any = None) -> int:
    """Checks the type and range of every count and duration before anything is built or
    allocated; returns ``num_envs`` as an ``int``.

    Raises:
        TypeError, ValueError: naming the argument.
    """
    n = check_count("num_envs", num_envs)
    if num_workers is not None:
        check_count("num_workers", num_workers, 0, n, "num_envs")
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
    if spin_us is not None:
        try:
            us = float(spin_us)
        except OverflowError:
            us = float("inf")
        if not (math.isfinite(us) and 0 <= us <= SPIN_US_MAX):
            raise ValueError(f"spin_us must be None or a number of microseconds from 0 to {SPIN_US_MAX:,} "
                             f"({SPIN_US_MAX / 1e6:.0f} s), got {spin_us!r}")
    if inline is not None and not isinstance(inline, (bool, np.bool_)):
        raise TypeError(f"inline must be None, True or False, got {type(inline).__name__} {inline!r}")
    if num_workers == 0 and batch_size is not None and batch_size < n:
        raise ValueError(f"num_workers=0 means no worker process: this process steps every env in the call that "
                         f"collects them, so there are no asynchronous batches; batch_size={batch_size} < "
                         f"num_envs={n} needs worker processes (num_workers >= 1, or None for the default)")
    if num_workers == 0 and inline is not None and not inline:
        raise ValueError("num_workers=0 means no worker process: this process steps every env, which needs "
                         "inline=None or True, got inline=False")
    return n


def check_factories(env_fns: Sequence[Any]) -> None:
    """Raises ``TypeError`` naming the first entry of ``env_fns`` that is not callable (an env made
    with ``gym.make(...)`` where a factory, ``lambda: gym.make(...)``, was expected; an id string),
    before any env is made."""
    n = len(env_fns)
    for i in (*range(min(n, 64)), n - 1):
        fn = env_fns[i]
        if not callable(fn):
            hint = (" (an env already made: pass a factory that makes one, e.g. lambda: gym.make(...), so that each "
                    "worker process makes its own)" if hasattr(fn, "step") and hasattr(fn, "reset") else
                    " (an env id: pass lambda: gym.make(id), or use ringenv.make_vec(id, num_envs))"
                    if isinstance(fn, str) else "")
            raise TypeError(f"env_fns[{i}] is not a callable that makes an env: it is of type {type(fn).__name__}"
                            f"{hint}")


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


def seeds_of(seed: Optional[Union[int, Sequence[Optional[int]]]], num_envs: int,
             rust_envs: bool = False) -> List[Optional[int]]:
    """One seed per env: ``seed + i`` (an int), ``seed[i]`` (a list), or ``None`` for all; each a
    Python ``int`` of any size (NumPy integers converted), as Gymnasium's vector envs pass them to
    ``env.reset(seed=...)``; below ``2**64`` for ``rust_envs`` (a Rust env's seed is a ``u64``).

    Raises:
        ringenv.errors.SeedError: (a ``ValueError`` and a ``gymnasium.error.Error``) a list of the
            wrong length, a seed that is not an integer, negative (Gymnasium's message), or with
            ``rust_envs`` ``2**64`` or more (naming the env).
    """
    from ringenv.errors import SeedError

    if seed is None:
        seeds: List[Optional[int]] = [None] * num_envs
    elif isinstance(seed, (int, np.integer)):
        seeds = [int(seed) + i for i in range(num_envs)]
    elif isinstance(seed, (str, bytes)) or not hasattr(seed, "__iter__"):
        # (a float, a str: not a list of seeds, whose items or length would be blamed instead)
        raise SeedError(f"seed must be None, an integer or a list of num_envs={num_envs} seeds, got {seed!r}")
    else:
        seeds = list(seed)
    if len(seeds) != num_envs:
        raise SeedError(f"If seeds are passed as a list the length must match num_envs={num_envs} "
                        f"but got length={len(seeds)}.")
    for i, s in enumerate(seeds):
        if s is None:
            continue
        if not isinstance(s, (int, np.integer)):
            raise SeedError(f"seed of env {i} must be None or a non-negative integer, got {s!r}", i)
        if int(s) < 0:
            raise SeedError(f"Seed must be greater or equal to zero, actual value: {int(s)} (the seed of env {i})", i)
        if rust_envs and int(s) >= 2**64:
            raise SeedError(f"seed of env {i} must be below 2**64 for a Rust env (its seed is a u64), got "
                            f"{int(s)}", i)
    return [None if s is None else int(s) for s in seeds]


def reset_mask_of(options: Optional[dict], num_envs: int) -> Optional[np.ndarray]:
    """``options["reset_mask"]``, popped from the caller's dict as Gymnasium does, when it is a
    bool array of shape ``(num_envs,)`` with a True value; ``None`` without one.

    Raises:
        TypeError: not a NumPy array, or not of dtype bool.
        ValueError: the wrong shape, or no True value.
    """
    if options is None or "reset_mask" not in options:
        return None
    mask = options.pop("reset_mask")
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (num_envs,):
        raise ValueError(f"`options['reset_mask']` must have shape `({num_envs},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not np.any(mask):
        raise ValueError("`options['reset_mask']` must contain a boolean array with at least one True "
                         f"value, got reset_mask={mask}")
    return mask


def action_bounds(space: spaces.Space):
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


def refuse_objects(actions: np.ndarray, space: spaces.Space) -> np.ndarray:
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


#: The unsigned integer dtype of each integer width (bytes), for :func:`check_action_values`.
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def check_action_values(actions: np.ndarray, bounds, space: spaces.Space) -> None:
    """Raises ``ValueError`` naming the env and the value when an action is outside ``bounds``
    (from :func:`action_bounds`), or holds NaN for a float Box."""
    if not actions.size:
        return
    if bounds == "nan":
        # One reduction on the common path: a sum is NaN when an element is (or +inf meets -inf).
        if actions.dtype.kind == "f" and np.isnan(np.add.reduce(actions, axis=None)) and np.isnan(actions).any():
            env = int(np.argwhere(np.isnan(actions))[0][0])
            raise ValueError(f"action of env {env} contains NaN, which is not in {space!r}")
        return
    low, high = bounds
    if isinstance(low, int) and low == 0 and actions.dtype.kind in "iub":
        # One reduction on the common path (Discrete from 0, MultiBinary): read as unsigned
        # integers of the same width, a negative action is larger than any bound.
        if np.maximum.reduce(actions.view(_UNSIGNED[actions.dtype.itemsize]), axis=None) <= high:
            return
    bad = (actions < low) | (actions > high)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"action {actions[index].item()!r} of env {index[0]} is outside {space!r}")


def check_fits(actions: np.ndarray, dtype: np.dtype) -> None:
    """Raises ``ValueError`` naming the env and the value when an integer action does not fit
    the integer ``dtype`` of the action slot (it would wrap around: 300 into ``uint8`` reaching
    the env as 44). Costs nothing when ``actions``' dtype casts safely to ``dtype``."""
    if actions.dtype == dtype or dtype.kind not in "iu" or actions.dtype.kind not in "iu" \
            or np.can_cast(actions.dtype, dtype):
        return
    info = np.iinfo(dtype)
    bad = (actions < info.min) | (actions > info.max)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"action {actions[index].item()!r} of env {index[0]} does not fit the action space's dtype "
                         f"{dtype} ([{info.min}, {info.max}])")
