"""The caller's Gymnasium registrations, carried to its worker processes.

A worker is a fresh interpreter that never runs the caller's script, so what the script
registered does not exist there: ids registered by ``import minigrid`` or
``gym.register_envs(ale_py)``, or by ``gym.register(...)`` in the script itself. A factory that
calls ``gym.make(id)`` then failed in the worker with ``NameNotFound``, where Gymnasium's
``AsyncVectorEnv`` (whose forked processes inherit the registry) and SB3's ``SubprocVecEnv``
(whose forkserver runs the script again) work. It only worked where something else made the
worker import the registering package (a class of it in the pickled spaces).

So the main process sends the specs of its registry that a fresh ``import gymnasium`` does not
make (:func:`carried`), and the worker, before it calls the factories, adds the ones its own
registry lacks (:func:`install`). It imports nothing for them: ``gym.make`` of such an id
imports the entry point's module when it loads it, as in the caller, and a worker does not
import every package its caller happened to register (importing ``minigrid`` imports
``pygame``, whose handlers turn a worker's segmentation fault into an abort). When that import
registers the package's ids again, over the added specs (identical copies), Gymnasium warns
"Overriding environment ... already in registry"; the worker ignores that warning for the ids
it added, and for no other. A spec that cannot be pickled or loaded is left out.
"""

from __future__ import annotations

import re
import warnings
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


def install(specs: Dict[str, bytes]) -> None:
    """Adds to this process's registry the specs of ``specs`` (:func:`carried` in the main
    process) that it lacks, as they are, importing nothing, and ignores Gymnasium's "Overriding
    environment" warning for exactly those ids (see the module's docstring). A spec that fails
    to load is skipped: ``gym.make`` of its id then fails as it would have without this."""
    added = []
    for env_id, data in specs.items():
        if env_id in registry:
            continue
        try:
            spec = cloudpickle.loads(data)
        except Exception:
            continue
        if isinstance(spec, EnvSpec) and spec.id == env_id:
            registry[env_id] = spec
            added.append(env_id)
    if added:
        ids = "|".join(re.escape(env_id) for env_id in sorted(added))
        warnings.filterwarnings("ignore", message=rf".*Overriding environment ({ids}) already in registry")
