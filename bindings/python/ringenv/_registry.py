"""The caller's Gymnasium registrations, carried to its worker processes.

A worker is a fresh interpreter that never runs the caller's script, so what the script
registered does not exist there: ids registered by ``import minigrid`` or
``gym.register_envs(ale_py)``, or by ``gym.register(...)`` in the script itself. A factory that
calls ``gym.make(id)`` then failed in the worker with ``NameNotFound``, where Gymnasium's
``AsyncVectorEnv`` (whose forked processes inherit the registry) and SB3's ``SubprocVecEnv``
(whose forkserver runs the script again) work. It only worked where something else made the
worker import the registering package (a class of it in the pickled spaces).

So the main process sends the specs of its registry that a fresh ``import gymnasium`` does not
make (:func:`carried`), and the worker, before it calls the factories, recreates them as the
caller did (:func:`install`): it first imports the modules their entry points name, which
registers them as in the caller (``minigrid.envs`` imports ``minigrid``, which registers its
ids; no "Overriding environment" warning follows later), then adds the specs still missing
(those the script registered itself, or whose module registers nothing) to the registry as they
are. A spec that cannot be pickled or loaded is left out, as before.
"""

from __future__ import annotations

import importlib
from typing import Dict, Tuple

import cloudpickle
from gymnasium.envs.registration import EnvSpec, registry

__all__ = ["carried", "install"]

#: Each spec pickled by :func:`carried`, by id, with the spec it was pickled from.
_PICKLED: Dict[str, Tuple[EnvSpec, bytes]] = {}


def _built_in(spec: EnvSpec) -> bool:
    """Whether ``import gymnasium`` registers ``spec`` itself (its entry points are Gymnasium's)."""
    points = [p for p in (spec.entry_point, spec.vector_entry_point) if p is not None]
    return bool(points) and all(isinstance(p, str) and p.startswith("gymnasium.") for p in points)


def carried() -> Dict[str, bytes]:
    """The specs of this process's registry that are not Gymnasium's own, each pickled with
    cloudpickle (an entry point defined in the main script travels by value), by id. A spec
    that cannot be pickled is left out. Pickled once per spec object (a cache by id)."""
    out: Dict[str, bytes] = {}
    for env_id, spec in list(registry.items()):
        if _built_in(spec):
            continue
        kept = _PICKLED.get(env_id)
        if kept is None or kept[0] is not spec:
            try:
                kept = _PICKLED[env_id] = (spec, cloudpickle.dumps(spec))
            except Exception:
                continue
        out[env_id] = kept[1]
    return out


def _entry_module(point: object) -> str:
    """The module of an entry point ``"package.module:Name"``; ``""`` for a callable."""
    return point.split(":", 1)[0] if isinstance(point, str) and ":" in point else ""


def install(specs: Dict[str, bytes]) -> None:
    """Registers here the specs of ``specs`` (:func:`carried` in the main process) that this
    process's registry lacks: imports the modules their entry points name (each registers what
    it registered in the caller), then adds the ones still missing as they are. A module that
    fails to import, or a spec that fails to load, is skipped: ``gym.make`` of its id then fails
    as it would have without this."""
    missing = {env_id: data for env_id, data in specs.items() if env_id not in registry}
    if not missing:
        return
    loaded: Dict[str, EnvSpec] = {}
    for env_id, data in missing.items():
        try:
            spec = cloudpickle.loads(data)
        except Exception:
            continue
        if isinstance(spec, EnvSpec):
            loaded[env_id] = spec
    modules = sorted({m for spec in loaded.values()
                      for m in (_entry_module(spec.entry_point), _entry_module(spec.vector_entry_point)) if m})
    for module in modules:
        if any(env_id not in registry for env_id in loaded):
            try:
                importlib.import_module(module)
            except Exception:
                pass
    for env_id, spec in loaded.items():
        if env_id not in registry:
            registry[env_id] = spec
