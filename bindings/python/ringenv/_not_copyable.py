"""Vector envs that own worker processes refuse to be copied or pickled: a copy would share the
original's pool and close it when collected, and a pickle cannot carry processes.
"""

from __future__ import annotations

from typing import NoReturn


class NotCopyable:
    """Mixin: ``copy.copy``, ``copy.deepcopy`` and ``pickle`` of an instance raise ``TypeError``
    (all three go through ``__reduce_ex__``; the instance is left as it was)."""

    __slots__ = ()

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        name = type(self).__qualname__
        raise TypeError(
            f"{name} cannot be copied or pickled (copy.copy, copy.deepcopy, pickle): it owns worker "
            "processes and shared memory, which a copy would share and close when garbage-collected. "
            f"Pass the {name} itself, or make another from the same env factories.")
