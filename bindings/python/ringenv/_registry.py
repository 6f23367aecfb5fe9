"""The caller's Gymnasium registry, carried to its worker processes.

A worker never runs the caller's script, so ids the script registered (``import minigrid``,
``gym.register(...)``) do not exist there. The main process sends its whole registry
(:func:`carried`: each spec pickled once), and before each factory runs a worker sets every
carried id whose spec differs to the caller's (:class:`CallerRegistry`). Nothing is imported for
that: ``gym.make`` imports an entry point's module when it loads it, as in the caller. A class a
string entry point names in the caller's ``__main__`` travels by value; a spec that cannot be
pickled or loaded is left out.
"""

from __future__ import annotations

import pickle
import re
import sys
import types
import warnings
from typing import Any, Dict, List, Tuple

import cloudpickle
from gymnasium.envs.registration import EnvSpec, registry

from ringenv._pickling import _MAIN_MODULES, for_worker

__all__ = ["carried", "CallerRegistry"]

#: Each spec pickled by :func:`carried`, by id, with the spec it was pickled from.
_PICKLED: Dict[str, Tuple[EnvSpec, bytes]] = {}


def _main_names(spec: EnvSpec) -> List[Tuple[str, str]]:
    """``(module, name)`` of each entry point of ``spec`` that a string names in the main script."""
    out = []
    for point in (spec.entry_point, spec.vector_entry_point):
        if isinstance(point, str) and ":" in point:
            module, name = point.split(":", 1)
            if module in _MAIN_MODULES:
                out.append((module, name))
    return out


def carried() -> bytes:
    """This process's registry for a worker, pickled: ``{"specs": {id: bytes}, "main":
    {(module, name): bytes}}``, each spec pickled with cloudpickle once per spec object (an entry
    point defined in the main script travels by value), and ``"main"`` the main script's objects
    that entry points name by string. One that cannot be pickled is left out."""
    specs: Dict[str, bytes] = {}
    main: Dict[Tuple[str, str], bytes] = {}
    for env_id, spec in list(registry.items()):
        kept = _PICKLED.get(env_id)
        if kept is None or kept[0] is not spec:
            try:
                kept = _PICKLED[env_id] = (spec, for_worker(spec))
            except Exception:
                continue
        specs[env_id] = kept[1]
        for module, name in _main_names(spec):
            obj = getattr(sys.modules.get(module), name, None)
            try:
                if obj is not None:
                    main[(module, name)] = for_worker(obj)
            except Exception:
                pass
    return pickle.dumps({"specs": specs, "main": main})


class CallerRegistry:
    """The caller's registry in a worker, from :func:`carried`'s bytes: :meth:`apply` sets it
    before each factory runs. Specs and objects that fail to load are skipped."""

    def __init__(self, data: bytes):
        self.specs: Dict[str, EnvSpec] = {}
        outer = pickle.loads(data) if data else {}
        for (module, name), obj_bytes in outer.get("main", {}).items():
            target = sys.modules.setdefault(module, types.ModuleType(module))
            if not hasattr(target, name):
                obj = _load(obj_bytes)
                if obj is not None:
                    setattr(target, name, obj)
        for env_id, spec_bytes in outer.get("specs", {}).items():
            spec = _load(spec_bytes)
            if isinstance(spec, EnvSpec) and spec.id == env_id:
                self.specs[env_id] = spec
        if self.specs:
            ids = "|".join(re.escape(env_id) for env_id in sorted(self.specs))
            warnings.filterwarnings("ignore", message=rf".*Overriding environment ({ids}) already in registry")

    def apply(self) -> None:
        """Sets each carried id whose spec in this process's registry differs from the
        caller's (or is missing) to the caller's spec."""
        for env_id, spec in self.specs.items():
            mine = registry.get(env_id)
            if mine is not spec and not _equal(mine, spec):
                registry[env_id] = spec


def _load(data: bytes) -> Any:
    """``data`` loaded with cloudpickle; ``None`` where that fails."""
    try:
        return cloudpickle.loads(data)
    except Exception:
        return None


def _equal(mine: Any, spec: EnvSpec) -> bool:
    """``mine == spec``, False where the comparison itself fails (kwargs holding arrays)."""
    try:
        return bool(mine == spec)
    except Exception:
        return False
