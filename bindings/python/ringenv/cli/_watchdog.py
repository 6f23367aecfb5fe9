"""A deadline on every call of a measured env, so that a hung env ends a measurement with an error
instead of hanging for ever.

:func:`ringenv.cli._measure.measure` calls :meth:`Watchdog.beat` after every reset and vector
step. A helper thread wakes at most once a second; when no beat came for ``seconds``, it sends
the main thread :data:`SIGNAL`, whose handler raises ``KeyboardInterrupt``, as a Ctrl-C would,
wherever the env is stepped. A signal of its own rather than ``SIGINT``: a background process
ignores ``SIGINT`` and a program may handle it. Only the main thread can install a handler: from
another thread, or where something else handles :data:`SIGNAL`, the watchdog does not start."""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
from typing import Any, List, Optional

#: A reset or vector step that takes longer than this (seconds) is taken for a hang: 60 s is
#: far beyond any env this measures (a 64-env vector step of a 1 ms env takes 64 ms in one process).
DEFAULT_STEP_TIMEOUT_S = 60.0

#: The watchdog thread checks at most this often (seconds), so it costs nothing measurable.
POLL_S = 1.0

#: The signal the watchdog interrupts the main thread with (its handler raises
#: ``KeyboardInterrupt``), installed only while nothing else handles it.
SIGNAL = signal.SIGUSR2


class StepTimeoutError(multiprocessing.TimeoutError):
    """A reset, vector step or ``recv`` of the measured env did not return within ``seconds``.

    Attributes:
        call: what was waited for (``"reset"``, ``"warm-up step"``, ``"step"``).
        seconds: the deadline, in seconds.
    """

    def __init__(self, call: str, seconds: float):
        self.call = call
        self.seconds = seconds
        super().__init__(f"a {call} of the env did not return within {seconds:g} s: an env hangs, or is slower than "
                         "that; the env was closed (any worker process killed)")


def _check_signals() -> None:
    """A Python call: the interpreter runs pending signal handlers on entering it."""


def _interrupt(signum: int, frame: Any) -> None:
    """:data:`SIGNAL`'s handler while a watchdog runs: what Python's ``SIGINT`` handler does."""
    raise KeyboardInterrupt


class Watchdog:
    """Interrupts the main thread when no :meth:`beat` came for ``seconds`` (``None`` or 0: never).

    Use: :meth:`start`, then :meth:`beat` after each call of the env (``call`` names the next
    one), then :meth:`stop` before leaving the ``try`` whose ``except`` checks :attr:`fired`.
    """

    def __init__(self, seconds: Optional[float]):
        if seconds is not None and not seconds >= 0:
            raise ValueError(f"step_timeout must be None or a number of seconds >= 0, got {seconds!r}")
        self.seconds = seconds or None
        self.call = "reset"
        self.fired = False
        self._last: List[float] = [time.perf_counter()]
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._main = 0
        self._previous: Any = None  # SIGNAL's handler before start()

    def start(self) -> None:
        """Starts the deadline of the first call (if the watchdog can interrupt this thread)."""
        if (self.seconds is None or threading.current_thread() is not threading.main_thread()
                or signal.getsignal(SIGNAL) is not signal.SIG_DFL):
            return
        self._previous = signal.signal(SIGNAL, _interrupt)
        self._main = threading.get_ident()
        self._last[0] = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="ringenv-measure-watchdog", daemon=True)
        self._thread.start()

    def beat(self, call: str, now: Optional[float] = None) -> None:
        """A call returned (at ``now``, ``time.perf_counter()`` seconds); the next is ``call``."""
        self.call = call
        self._last[0] = time.perf_counter() if now is None else now

    @property
    def last(self) -> List[float]:
        """The one-element list holding the last beat's time: a hot loop stores into it directly."""
        return self._last

    def _run(self) -> None:
        assert self.seconds is not None
        while not self._stop.wait(min(POLL_S, self.seconds)):
            if time.perf_counter() - self._last[0] > self.seconds:
                self.fired = True
                signal.pthread_kill(self._main, SIGNAL)
                return

    def stop(self) -> None:
        """Stops the thread and puts :data:`SIGNAL`'s handler back. A ``KeyboardInterrupt`` of its
        own (it fired just now) is taken here (:attr:`fired` says so); a real Ctrl-C propagates."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return
        ctrl_c: Optional[BaseException] = None
        while True:  # joined before the handler goes: a signal sent with none would kill the process
            try:
                thread.join()
                _check_signals()  # an interrupt it sent is raised here, not in the caller
                break
            except KeyboardInterrupt as e:
                if not self.fired:
                    ctrl_c = e  # a real Ctrl-C: raised once the thread is gone
        self._thread = None
        signal.signal(SIGNAL, self._previous)
        if ctrl_c is not None:
            raise ctrl_c

    def error(self) -> StepTimeoutError:
        assert self.seconds is not None
        return StepTimeoutError(self.call, self.seconds)
