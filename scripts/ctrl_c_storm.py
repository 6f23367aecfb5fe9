"""A storm of real Ctrl-Cs (``KeyboardInterrupt`` from a SIGALRM handler, every 1-200 µs) around
a loop of ``step`` (or ``recv``/``send``) calls, recovering as docs/RELIABILITY.md says after each
one; exits 1 at the first call refused for ever ("another thread is sending a call") or failed
recovery. A stress check of the interrupt handling, not a test: it depends on timing (the test
that does not is tests/python/test_ctrl_c_anywhere.py).

Usage: python scripts/ctrl_c_storm.py {sync,async} SECONDS [SEED]
"""

from __future__ import annotations

import random
import signal
import sys
import time
import traceback

import gymnasium as gym
import numpy as np
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

import ringenv


def main() -> int:
    mode, seconds = sys.argv[1], float(sys.argv[2])
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    armed = False

    def handler(*_):
        if armed:
            raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, handler)
    if mode == "sync":
        env = ringenv.make_vec("CartPole-v1", 4, vector_kwargs={"num_workers": 1})
        env.reset(seed=0)
    else:
        env = ringenv.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4, batch_size=2, num_workers=2)
        env.async_reset(seed=0)
    ok = interrupts = 0
    last = ""
    actions = np.zeros(2, np.int64)
    to_send = None  # the env ids of the batch received and not yet sent for sure
    seen_at = [0] * 4  # the call count when each env last came back (one left out: it starves)
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            try:
                armed = True
                signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 200e-6))
                for _ in range(50):
                    if mode == "sync":
                        env.step(np.zeros(4, np.int64))
                    else:
                        # Plain stores between the calls: no signal handler runs there, so after
                        # an interrupt `to_send` says what to do: recv again (None), or make the
                        # same send again (a no-op if it had gone out).
                        if to_send is None:
                            batch = env.recv()
                            to_send = batch[4]["env_id"]
                            for i in to_send.tolist():
                                seen_at[i] = ok
                        env.send(actions, to_send)
                        to_send = None
                    ok += 1
            except KeyboardInterrupt:
                armed = False
                interrupts += 1
                last = traceback.format_exc()
                if mode == "sync":
                    try:
                        env.step_wait()
                    except NoAsyncCallError:
                        pass
            except AlreadyPendingCallError as e:
                armed = False
                print(f"refused for ever: {e}\nafter:\n{last}")
                return 1
            finally:
                armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        env.close(terminate=True)
    starved = [i for i, at in enumerate(seen_at) if mode == "async" and ok - at > 1000]
    if starved:
        print(f"envs {starved} did not come back in the last 1000 calls: dropped from the rotation")
        return 1
    print(f"{mode}: {ok} calls, {interrupts} interrupts, no failure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
