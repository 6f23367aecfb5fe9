"""A Ray vector env closed by another thread (or a signal handler) while one of its calls runs.

``close()`` kills the actors and clears the driver's bookkeeping of calls in flight. A call that
was waiting meanwhile (``ray.get`` in ``step_wait``, ``ray.wait`` in ``recv``) then fails in
whatever way the half-cleared state or the dead actor makes it fail (a ``KeyError`` of a block, an
``IndexError`` from the actor's closed pools, ``ActorDiedError``). :func:`closed_meanwhile` turns
any such failure of a call that started while the env was open into Gymnasium's
``ClosedEnvironmentError``, as a local ``ringenv.AsyncVectorEnv`` raises in that case, with the
original failure as its ``__cause__``. (A close in the same thread, a signal handler's, keeps the
call's own error.)
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, TypeVar

from gymnasium.error import ClosedEnvironmentError

from ringenv._protocol import closed_meanwhile_error

__all__ = ["closed_meanwhile"]

F = TypeVar("F", bound=Callable[..., Any])


def closed_meanwhile(method: F) -> F:
    """Wraps a public method of a vector env with a ``closed`` attribute (and a ``_closing_thread``,
    the ``threading.get_ident()`` of the thread that closed it): an ``Exception`` it raises after
    another thread closed the env during the call becomes ``ClosedEnvironmentError`` (naming the
    method), chained to the original."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        was_open = not getattr(self, "closed", True)
        try:
            return method(self, *args, **kwargs)
        except Exception as e:
            elsewhere = getattr(self, "_closing_thread", None) != threading.get_ident()
            if was_open and getattr(self, "closed", False) and elsewhere and not isinstance(e, ClosedEnvironmentError):
                raise closed_meanwhile_error(method.__name__, e) from e
            raise

    return call  # type: ignore[return-value]
