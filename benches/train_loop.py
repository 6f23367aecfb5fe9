"""The actor loop of a training run, policy and envs together: steps/s, where the time goes and
how close each loop comes to its two ceilings, for ringenv's loops and the peers' in one run.

The envs (:class:`LoopEnv`) busy-wait ``--env-us`` µs per step and return 1,280 float32s (5 KiB)
with three scalar infos. The policy is a torch MLP (1280 -> width -> width -> 4 logits, argmax)
whose width is calibrated so that its forward pass costs ``--policy-us`` µs per observation at the
smallest batch size (default: as much as one env step), with ``torch.set_num_threads(1)``.
Every table runs with the policy on the CPU; then on ``sleep``, a stand-in for a policy on an
accelerator whose forward pass sleeps ``--policy-us`` µs per observation (:class:`SleepNet`: the
main process idle meanwhile, as while it waits for a GPU, so the policy takes no core from the
envs); then on ``cuda`` (skipped, with the reason, where torch sees no GPU; ``--devices``).

Loops (``N`` envs; every runtime with its default layout, which the table names):

* ringenv ``step``: ``obs = envs.step(policy(obs))``, every env each time;
* ringenv ``G groups``: ``batch_size = N / G``; ``recv`` one group, compute its actions, ``send``
  them, while the other groups step (EnvPool's send/recv, Sample Factory's double buffering;
  docs/ASYNC.md); with the default wait policy, and with ``spin_us=0`` (*no spin*);
* ringenv TorchRL: TorchRL's ``Collector`` on ``ringenv.torchrl.ParallelEnv``, and TorchRL's
  ``MultiAsyncCollector`` of ``G`` collector processes, each a ``Collector`` on its own
  ``ringenv.torchrl.ParallelEnv`` of ``N / G`` envs (one collector's policy runs while the others'
  envs step; its policy time is not seen from this process, so the time split is ``-``);
* peers: TorchRL's ``Collector`` and ``MultiAsyncCollector`` on ``torchrl.envs.ParallelEnv`` of
  ``GymWrapper`` s and TorchRL's ``AsyncBatchedCollector`` (its ``AsyncEnvPool``, multiprocessing
  backend), where ``import torchrl`` works (as the ringenv TorchRL rows); Gymnasium's
  ``SyncVectorEnv`` and ``AsyncVectorEnv`` in the ``step`` loop; and
  PufferLib's ``Multiprocessing`` backend (its ``recv``/``send``, batches of ``N / 2``) where
  ``import pufferlib`` works. PufferLib 3.0.0 is
  an sdist whose ``setup.py`` uses ``c_extension_paths`` undefined with ``NO_OCEAN=1``; with that
  name defined as ``[]`` (above ``if not NO_OCEAN:``), ``NO_OCEAN=1 NO_TRAIN=1 pip install
  --no-deps --no-build-isolation --target DIR .`` in its unpacked source and ``pip install
  --no-deps --target DIR gym==0.23.0`` give a ``DIR`` to put on ``PYTHONPATH``.

Ceilings: *policy only* (observations per second through the policy alone, at each batch size)
and *envs only* (ringenv's fastest loop with a free policy). Each loop's ratio is its steps/s over
the slower of the two (a ``MultiAsyncCollector`` of ``G`` collectors runs ``G`` policies at once,
in ``G`` processes: no one-process ceiling applies to it). With the policy on the CPU, policy and
envs share the cores, so no loop can reach that ceiling; each CPU table also gives the bound the
cores allow, ``1 / (1 / (cores x policy only) + 1 / envs only)`` steps/s (every core busy with
the policy's and the envs' CPU per step, perfectly packed). Time split: the policy's forward pass
(with the tensor conversions), the env calls (``step``, or ``recv`` + ``send``: waiting for the
envs and staging their results), and the main process's CPU inside those calls (staging and
spinning; the rest of a call is asleep).

Usage::

    python benches/train_loop.py              # 16 and 32 envs; writes the train_loop section of RESULTS.md
    python benches/train_loop.py --quick      # 8 envs, short rows; prints only
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import gymnasium as gym
import numpy as np
import torch

import results_sections
import ringenv
from ringenv._plan import plan_workers
from ringenv.cli._measure import busy_wait

OBS_FLOATS = 1280  # 5,120 bytes
ACTIONS = 4
TRUNCATE_AFTER = 500
#: Memory of one of TorchRL's env processes (spawned: torch, torchrl and this module imported
#: again), unique set size: 418 MiB measured, rounded up.
TORCHRL_PROCESS_BYTES = 450 << 20


class LoopEnv(gym.Env):
    """``step`` busy-waits ``cost_us`` µs, changes one element of its observation, returns three
    scalar infos and truncates every :data:`TRUNCATE_AFTER` steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (OBS_FLOATS,), np.float32)
    action_space = gym.spaces.Discrete(ACTIONS)

    def __init__(self, cost_us: float):
        self.cost_s = cost_us * 1e-6
        self.obs = np.zeros(OBS_FLOATS, np.float32)
        self.t = 0

    def _info(self) -> Dict[str, Any]:
        return {"score": 0.5 * self.t, "lives": 3 - self.t % 3, "has_key": self.t % 2 == 0}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.obs.copy(), self._info()

    def step(self, action):
        busy_wait(self.cost_s)
        self.t += 1
        self.obs[self.t % OBS_FLOATS] = (self.t % 100) / 100
        return self.obs.copy(), 1.0, False, self.t >= TRUNCATE_AFTER, self._info()


def torchrl_env(cost_us: float):
    """One TorchRL sub-env: ``GymWrapper(LoopEnv(cost_us))``."""
    from torchrl.envs import GymWrapper

    return GymWrapper(LoopEnv(cost_us))


class SleepNet(torch.nn.Module):
    """A stand-in for a policy on an accelerator: its forward pass sleeps ``cost_us`` µs per
    observation, leaving the CPU to the envs, and returns zero logits ``(B, 4)``."""

    def __init__(self, cost_us: float):
        super().__init__()
        self.cost_s = cost_us * 1e-6
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # says the device (the CPU), as a net's weights do

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        time.sleep(self.cost_s * len(obs))
        return torch.zeros((len(obs), ACTIONS))


def host(device: str) -> str:
    """The torch device of the policy's tensors: the CPU for the ``sleep`` stand-in."""
    return "cpu" if device == "sleep" else device


def make_net(width: int, device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(OBS_FLOATS, width), torch.nn.Tanh(), torch.nn.Linear(width, width),
                               torch.nn.Tanh(), torch.nn.Linear(width, ACTIONS)).to(device).eval()


class Policy:
    """NumPy observations ``(B, 1280)`` in, ``int64`` actions ``(B,)`` out; ``seconds`` adds up
    the time spent in calls. ``net=None``: a free policy (zeros)."""

    def __init__(self, net: Optional[torch.nn.Module], device: str):
        self.net, self.device, self.seconds = net, torch.device(host(device)), 0.0

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        if self.net is None:
            actions = np.zeros(len(obs), np.int64)
        else:
            with torch.inference_mode():
                x = torch.from_numpy(np.asarray(obs)).to(self.device, non_blocking=True)
                actions = self.net(x).argmax(1).cpu().numpy()
        self.seconds += time.perf_counter() - t0
        return actions


class OneHotPolicy(torch.nn.Module):
    """The same MLP for TorchRL: a one-hot action (TorchRL's spec of a Discrete space), timed."""

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net, self.seconds = net, 0.0

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        device = next(self.net.parameters()).device
        out = torch.nn.functional.one_hot(self.net(obs.to(device)).argmax(-1), ACTIONS).to(obs.device)
        self.seconds += time.perf_counter() - t0
        return out


def per_row_us(net: torch.nn.Module, device: str, batch: int, seconds: float = 0.3) -> float:
    """The policy's µs per observation at batch size ``batch`` (median of short runs)."""
    policy = Policy(net, device)
    obs = np.zeros((batch, OBS_FLOATS), np.float32)
    for _ in range(3):
        policy(obs)
    samples, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(samples) < 5:
        t0 = time.perf_counter()
        policy(obs)
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples)) / batch * 1e6


def calibrate(target_us: float, batch: int, device: str) -> int:
    """The MLP width whose forward pass costs about ``target_us`` µs per observation at ``batch``:
    a bisection on the width (the cost grows with it, in steps where the weights leave a cache);
    0 for the ``sleep`` stand-in."""
    if device == "sleep":
        return 0
    low, high = 8, 4096
    while high - low > max(8, low // 16):
        mid = (low + high) // 2
        if per_row_us(make_net(mid, device), device, batch) < target_us:
            low = mid
        else:
            high = mid
    return low


class Window:
    """Counts env steps, policy and env-call seconds after ``warmup`` s, for ``seconds`` s."""

    def __init__(self, seconds: float, warmup: float):
        self.seconds, self.warmup = seconds, warmup
        self.start: Optional[float] = None  # the first call: the loop's envs are up
        self.t0: Optional[float] = None
        self.steps = 0
        self.env_s = self.env_cpu_s = self.policy_s0 = 0.0

    def running(self, policy_s: float) -> bool:
        now = time.perf_counter()
        self.start = now if self.start is None else self.start
        if self.t0 is None and now - self.start >= self.warmup:
            self.t0, self.steps, self.env_s, self.env_cpu_s, self.policy_s0 = now, 0, 0.0, 0.0, policy_s
        if self.t0 is not None and now - self.t0 >= self.seconds:
            self.wall = now - self.t0
            self.policy_s = policy_s - self.policy_s0
            return False
        return True

    def env_call(self, call: Callable[[], Any]) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        out = call()
        self.env_cpu_s += time.thread_time() - c0
        self.env_s += time.perf_counter() - t0
        return out

    def figures(self, cpu: bool = True, split: bool = True) -> Dict[str, Any]:
        """steps/s and the time split; ``cpu=False``: no env-call CPU (``None``), the env calls being
        everything but the policy; ``split=False``: no split at all (the policy ran elsewhere)."""
        env_s = self.env_s if cpu else self.wall - self.policy_s
        return {"steps_per_s": self.steps / self.wall,
                "policy": self.policy_s / self.wall if split else None,
                "env": env_s / self.wall if split else None,
                "env_cpu": self.env_cpu_s / self.wall if cpu and split else None}


def step_loop(envs, policy: Policy, window: Window) -> Dict[str, Any]:
    """``obs = envs.step(policy(obs))``."""
    obs, _ = envs.reset(seed=0)
    while window.running(policy.seconds):
        actions = policy(obs)
        obs = window.env_call(lambda: envs.step(actions))[0]
        window.steps += len(actions)
    return window.figures()


def batches_loop(envs, policy: Policy, window: Window) -> Dict[str, Any]:
    """``recv`` a batch, compute its actions while the other batches step, ``send`` them."""
    window.env_call(lambda: envs.async_reset(seed=0))
    while window.running(policy.seconds):
        obs, _, _, _, infos = window.env_call(envs.recv)
        actions = policy(obs)
        window.env_call(lambda: envs.send(actions, infos["env_id"]))
        window.steps += len(actions)
    return window.figures()


def puffer_loop(envs, policy: Policy, window: Window) -> Dict[str, Any]:
    """PufferLib's ``recv`` / ``send`` (``send`` acts on the batch just received)."""
    window.env_call(lambda: envs.async_reset(0))
    while window.running(policy.seconds):
        obs = window.env_call(envs.recv)[0]
        actions = policy(obs)
        window.env_call(lambda: envs.send(actions))
        window.steps += len(actions)
    return window.figures()


def collector_loop(make_collector: Callable[[OneHotPolicy], Any], net, window: Window,
                   split: bool = True) -> Dict[str, Any]:
    """Iterates a TorchRL collector; steps are its frames, policy time its forward passes
    (``split=False``: the collector runs the policy in other processes, and there is no split)."""
    module = OneHotPolicy(net)
    collector = make_collector(module)
    try:
        for batch in collector:
            if window.t0 is not None:  # collected inside the window
                window.steps += batch.numel()
            if not window.running(module.seconds):
                break
    finally:
        collector.shutdown()
    return window.figures(cpu=False, split=split)


def td_policy(module: torch.nn.Module):
    """``module`` on TensorDicts: ``"observation"`` in, ``"action"`` out."""
    from tensordict.nn import TensorDictModule

    return TensorDictModule(module, ["observation"], ["action"])


def torchrl_collector(env, frames: int):
    from torchrl.collectors import Collector

    return lambda module: Collector(env, td_policy(module), frames_per_batch=frames, total_frames=-1)


def torchrl_missing() -> Optional[str]:
    """Why TorchRL (the collector rows) cannot run here, or ``None``."""
    try:
        import torchrl  # noqa: F401
    except Exception as e:  # ImportError, or a dependency of it missing
        return f"not run: import torchrl: {type(e).__name__}: {e}"[:160]
    return None


def puffer_missing() -> Optional[str]:
    """Why PufferLib cannot run here, or ``None``. Its import links ``resources`` into the current
    folder, so it runs in a temporary one."""
    try:
        with warnings.catch_warnings(), tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
            warnings.simplefilter("ignore")
            import pufferlib.emulation  # noqa: F401
            import pufferlib.vector  # noqa: F401
    except Exception as e:  # ImportError, or a dependency of it missing
        return f"not run: import pufferlib: {type(e).__name__}: {e}"[:160]
    return None


def too_many_torch_processes(n: int) -> Optional[str]:
    """Why ``n`` of TorchRL's env processes cannot start here (more than 80% of the memory
    available, ``MemAvailable`` of ``/proc/meminfo``), or ``None``."""
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) << 10 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None
    need = n * TORCHRL_PROCESS_BYTES
    if need <= 0.8 * available:
        return None
    return (f"not run: {n} processes of ~{TORCHRL_PROCESS_BYTES >> 20} MiB each need {need / 2**30:.0f} GiB, "
            f"{available / 2**30:.0f} GiB available")


def ringenv_layout(n: int, batch_size: int) -> str:
    """ringenv's default layout of ``n`` envs in batches of ``batch_size``, in words."""
    procs, inline = plan_workers(n, None, None, "python", batch_size, None)
    return f"{procs} proc{'s' if procs != 1 else ''}" + (" + main" if inline else "")


def rows_for(args, n: int, device: str) -> List[Dict[str, Any]]:
    """The loops of ``n`` envs, the policy on ``device``: ``{"name", "layout", "batch", "run":
    (net, window) -> figures}``."""
    fns = [functools.partial(LoopEnv, args.env_us)] * n
    rows: List[Dict[str, Any]] = []

    def ringenv_row(name: str, groups: int, spin_us: Optional[float] = None) -> None:
        batch = n // groups
        kwargs: Dict[str, Any] = {} if groups == 1 else {"batch_size": batch}
        if spin_us is not None:
            kwargs["spin_us"] = spin_us
        layout = ringenv_layout(n, batch) + ("" if groups == 1 else f", batch_size={batch}")
        layout += "".join(f", {k}={v:g}" for k, v in kwargs.items() if k == "spin_us")

        def run(net, window):
            envs = ringenv.AsyncVectorEnv(fns, **kwargs)
            try:
                return (step_loop if groups == 1 else batches_loop)(envs, Policy(net, device), window)
            finally:
                envs.close()
        rows.append({"name": name, "layout": layout, "batch": batch, "run": run, "ringenv": True})

    ringenv_row("ringenv step", 1)
    for g in args.groups:
        if n % g == 0:
            ringenv_row(f"ringenv {g} groups", g)
            ringenv_row(f"ringenv {g} groups, no spin", g, spin_us=0)
    frames = n * args.frames_per_env

    def parallel_env_collector(parallel_env: Callable[[], Any]):
        """A row's ``run``: TorchRL's ``Collector`` on the ``ParallelEnv`` that ``parallel_env`` builds."""
        def run(net, window):
            env = parallel_env()
            try:
                return collector_loop(torchrl_collector(env, frames), net, window)
            finally:
                env.close(raise_if_closed=False)
        return run

    def ringenv_parallel_env(count: int = n):
        from ringenv.torchrl import ParallelEnv

        return ParallelEnv(count, functools.partial(LoopEnv, args.env_us), device=host(device))

    def torchrl_parallel_env(count: int = n):
        from torchrl.envs import ParallelEnv

        return ParallelEnv(count, functools.partial(torchrl_env, args.env_us), device=host(device))

    def multi_collector(parallel_env: Callable[[int], Any], collectors: int):
        """A row's ``run``: TorchRL's ``MultiAsyncCollector`` of ``collectors`` processes, each a
        ``Collector`` on its own ``ParallelEnv`` of ``n / collectors`` envs."""
        def run(net, window):
            from torchrl.collectors import MultiAsyncCollector

            return collector_loop(lambda module: MultiAsyncCollector(
                [functools.partial(parallel_env, n // collectors)] * collectors, td_policy(module),
                frames_per_batch=frames, total_frames=-1), net, window, split=False)
        return run

    no_torchrl = torchrl_missing()
    rows.append({"name": "ringenv.torchrl ParallelEnv + Collector", "ringenv": True, "batch": n,
                 "run": parallel_env_collector(ringenv_parallel_env),
                 "layout": f"{ringenv_layout(n, n)}, frames_per_batch={frames}", "missing": no_torchrl})
    rows.append({"name": "TorchRL ParallelEnv + Collector", "batch": n, "run": parallel_env_collector(torchrl_parallel_env),
                 "layout": f"{n} procs, frames_per_batch={frames}",
                 "missing": no_torchrl or too_many_torch_processes(n)})
    for g in args.groups:
        if n % g == 0:
            rows.append({"name": f"ringenv.torchrl ParallelEnv + MultiAsyncCollector, {g} collectors",
                         "ringenv": True, "batch": n // g, "policies": g, "run": multi_collector(ringenv_parallel_env, g),
                         "layout": f"{g} x ({ringenv_layout(n // g, n // g)}), frames_per_batch={frames}",
                         "missing": no_torchrl})
            rows.append({"name": f"TorchRL ParallelEnv + MultiAsyncCollector, {g} collectors", "batch": n // g,
                         "policies": g,
                         "run": multi_collector(torchrl_parallel_env, g),
                         "layout": f"{g} x ({n // g} procs), frames_per_batch={frames}",
                         "missing": no_torchrl or too_many_torch_processes(n + g)})

    def torchrl_async(net, window):
        from torchrl.collectors import AsyncBatchedCollector

        return collector_loop(lambda module: AsyncBatchedCollector(
            [functools.partial(torchrl_env, args.env_us)] * n, policy=td_policy(module),
            frames_per_batch=frames, env_backend="multiprocessing", device=host(device)), net, window)
    rows.append({"name": "TorchRL AsyncBatchedCollector (AsyncEnvPool)", "batch": n, "run": torchrl_async,
                 "layout": f"{n} procs, multiprocessing, frames_per_batch={frames}",
                 "missing": no_torchrl or too_many_torch_processes(n)})

    def gym_loop(vector_env: Callable[..., Any]):
        """A row's ``run``: the ``step`` loop on one of Gymnasium's vector envs."""
        def run(net, window):
            envs = vector_env(fns)
            try:
                return step_loop(envs, Policy(net, device), window)
            finally:
                envs.close()
        return run
    rows.append({"name": "Gymnasium SyncVectorEnv, step", "batch": n, "run": gym_loop(gym.vector.SyncVectorEnv),
                 "layout": "in-process"})
    rows.append({"name": "Gymnasium AsyncVectorEnv, step", "batch": n, "run": gym_loop(gym.vector.AsyncVectorEnv),
                 "layout": f"{n} procs"})

    half, workers = n // 2, min(n, args.cores)

    def puffer_mp(net, window):
        import pufferlib.emulation
        import pufferlib.vector

        make = functools.partial(pufferlib.emulation.GymnasiumPufferEnv, env_creator=LoopEnv,
                                 env_args=[args.env_us])
        with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):  # its workers link resources too
            envs = pufferlib.vector.make(make, backend=pufferlib.vector.Multiprocessing, num_envs=n,
                                         num_workers=workers, batch_size=half)
            try:
                return puffer_loop(envs, Policy(net, device), window)
            finally:
                envs.close()
    rows.append({"name": "PufferLib Multiprocessing, recv/send", "batch": half, "run": puffer_mp,
                 "layout": f"{workers} procs, batch_size={half}",
                 "missing": puffer_missing()})
    return rows


def measure(row: Dict[str, Any], net, args) -> Dict[str, Any]:
    """Runs one row (its figures, or ``status`` with the error); torch's thread count is restored."""
    threads = torch.get_num_threads()
    t0 = time.perf_counter()
    try:
        if row.get("missing"):
            return {"status": row["missing"]}
        figures = row["run"](net, Window(args.seconds, args.warmup))
        return {"status": "ok", "wall_s": time.perf_counter() - t0, **figures}
    except Exception as e:  # a row that fails is reported; the others still run
        return {"status": f"error: {type(e).__name__}: {e}"[:200]}
    finally:
        torch.set_num_threads(threads)


def run_config(args, n: int, policy_us: float, device: str) -> Dict[str, Any]:
    """Every row of ``n`` envs with a policy of ``policy_us`` µs per observation on ``device``."""
    batches = sorted({n} | {n // g for g in args.groups if n % g == 0} | {n // 2})
    width = calibrate(policy_us, n // max(args.groups), device)
    net = SleepNet(policy_us) if device == "sleep" else make_net(width, device)
    policy_only = {b: 1e6 / per_row_us(net, device, b, seconds=max(0.3, args.seconds / 2)) for b in batches}
    rows = [r for r in rows_for(args, n, device) if not args.only or any(w in r["name"] for w in args.only)]
    envs_only = []
    for row in rows:
        if row.get("ringenv") and "torchrl" not in row["name"]:
            m = measure(row, None, args)
            if m["status"] == "ok":
                envs_only.append((m["steps_per_s"], row["name"], row["layout"]))
            progress(n, device, f"{row['name']}, free policy", m)
    ceiling_envs = max(envs_only, default=(float("nan"), "-", "-"))
    out = []
    for row in rows:
        m = measure(row, net, args)
        progress(n, device, row["name"], m)
        if m["status"] == "ok":
            ceiling = policy_only[row["batch"]]
            # G collectors run G policies at once: no one-process ceiling applies (None).
            m["vs_ceiling"] = (None if row.get("policies", 1) > 1 else
                               m["steps_per_s"] / (min(ceiling, ceiling_envs[0]) if envs_only else ceiling))
            m["vs_cores"] = m["steps_per_s"] * (1 / (args.cores * ceiling) + 1 / ceiling_envs[0])
        out.append({"name": row["name"], "layout": row["layout"], "batch": row["batch"], **m})
    return {"num_envs": n, "policy_us": policy_us, "env_us": args.env_us, "device": device, "width": width,
            "cores": args.cores, "policy_only": policy_only,
            "envs_only": ceiling_envs, "rows": out}


def progress(n: int, device: str, name: str, m: Dict[str, Any]) -> None:
    figure = f"{m['steps_per_s']:,.0f} steps/s ({m['wall_s']:.1f} s)" if m["status"] == "ok" else m["status"]
    print(f"  [{n} envs, policy on {device}] {name}: {figure}", file=sys.stderr, flush=True)


def section(report: Dict[str, Any], args) -> List[str]:
    lines = results_sections.section_head(
        "train_loop", "The actor loop: policy and envs together", report,
        f"; torch {torch.__version__}, torchrl {report['torchrl']}, PufferLib {report['puffer']}"
        + (" (`--quick`)" if args.quick else ""))
    lines += [
        "",
        f"Envs: {OBS_FLOATS} float32 observations (5 KiB), 3 scalar infos, {args.env_us:g} µs of busy work per "
        f"step. Policy: an MLP (1280 -> width -> width -> 4) on the device each table names, "
        f"{args.torch_threads} torch thread(s), its width calibrated to the policy cost per observation at the smallest batch; "
        "on `sleep`, a stand-in for an accelerator: the forward pass sleeps that cost, leaving the CPU to the envs. "
        f"{args.warmup:g} s warm-up, then {args.seconds:g} s measured per row. Layout: what each runtime does "
        "by default (`procs`: env worker processes; `+ main`: the main process steps a share too). Time split, "
        "as shares of the wall time: the policy's forward pass; the env calls (`step`, or `recv` + `send`; for "
        "collectors everything but the policy); the main process's CPU inside those calls. *vs ceiling*: steps/s "
        "over the slower of *policy only* (at the row's batch size) and *envs only* (ringenv's fastest loop with "
        "a free policy); a `MultiAsyncCollector` of G collectors runs G policies at once, in G processes, so no "
        "one-process ceiling applies to it (`-`; on `sleep` the G sleeps overlap fully, as G processes sharing "
        "one GPU would only in part). With the policy on the CPU, policy and envs share the cores, and *vs cores* is "
        "steps/s over the bound that sharing allows: 1 / (1 / (cores x policy only) + 1 / envs only).",
        "",
    ]
    for c in report["configs"]:
        pol = ", ".join(f"{v:,.0f} at batch {b}" for b, v in sorted(c["policy_only"].items()))
        env_fig, env_name, env_layout = c["envs_only"]
        shared = c["device"] == "cpu"
        width = "a sleep" if c["device"] == "sleep" else f"width {c['width']}"
        lines += [f"### {c['num_envs']} envs, policy on `{c['device']}`, {c['policy_us']:g} µs per observation "
                  f"({width})", "",
                  f"Policy only: {pol} observations/s. Envs only: {env_fig:,.0f} steps/s ({env_name}, "
                  f"{env_layout}).", "",
                  "| loop | layout | steps/s | vs ceiling |" + (" vs cores |" if shared else "")
                  + " policy | env calls | env-call CPU |",
                  "|---|---|---|---|---|---|---|" + ("---|" if shared else "")]
        for r in c["rows"]:
            if r["status"] != "ok":
                lines.append(f"| {r['name']} | {r['layout']} | {r['status']} | |" + (" |" if shared else "")
                             + " | | |")
                continue
            policy, env, cpu = ("-" if r[k] is None else f"{r[k]:.0%}" for k in ("policy", "env", "env_cpu"))
            cores = f" {r['vs_cores']:.2f} |" if shared else ""
            ceiling = "-" if r["vs_ceiling"] is None else f"{r['vs_ceiling']:.2f}"
            lines.append(f"| {r['name']} | {r['layout']} | {r['steps_per_s']:,.0f} | {ceiling} |{cores} "
                         f"{policy} | {env} | {cpu} |")
        lines.append("")
        lines += verdict(c)
    lines += [f"Policy on `{device}`: not run: torch sees no CUDA device." for device in report["skipped"]]
    lines.append(results_sections.markers("train_loop")[1])
    return lines


def verdict(c: Dict[str, Any]) -> List[str]:
    """The target's verdict for one configuration: the best overlapped ringenv loop within 10% of
    the slower ceiling, and ahead of every peer's loop."""
    ok = [r for r in c["rows"] if r["status"] == "ok"]
    ours = [r for r in ok if r["name"].startswith("ringenv ") and "groups" in r["name"]]
    peers = [r for r in ok if not r["name"].startswith("ringenv")]
    if not ours:
        return ["Target: not measured (no overlapped ringenv loop ran).", ""]
    best = max(ours, key=lambda r: r["steps_per_s"])
    top = max(peers, key=lambda r: r["steps_per_s"], default=None)
    within = best["vs_ceiling"] >= 0.9
    ahead = top is None or best["steps_per_s"] > top["steps_per_s"]
    batch = min(c["policy_only"])
    text = (f"Target (a policy as costly as an env step, here {1e6 / c['policy_only'][batch]:.0f} µs per observation "
            f"at batch {batch} against {c['env_us']:g} µs per env step: the overlapped loop within 10% of the slower "
            f"ceiling and ahead of every peer): {'met' if within and ahead else '**NOT met**'}: {best['name']} at "
            f"{best['vs_ceiling']:.2f} of the ceiling")
    if c["device"] == "cpu":
        text += f" ({best['vs_cores']:.2f} of what the {c['cores']} shared cores allow)"
    if top is not None:
        text += f", {best['steps_per_s'] / top['steps_per_s']:.2f}x the best peer ({top['name']})"
    return [text + ".", ""]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="8 envs, 0.5 s rows; prints the section only unless --output is given")
    parser.add_argument("--num-envs", type=results_sections.numbers(int, 2), default=None,
                        help="env counts (default 16,32; quick 8)")
    parser.add_argument("--env-us", type=float, default=200.0, help="µs of work per env step (default 200)")
    parser.add_argument("--policy-us", type=results_sections.numbers(), default=None,
                        help="policy µs per observation at the smallest batch (default: --env-us)")
    parser.add_argument("--groups", type=results_sections.numbers(int, 2), default=None,
                        help="group counts of the asynchronous loops (default 2,4; quick 2)")
    parser.add_argument("--frames-per-env", type=int, default=16, help="collector frames per batch per env")
    parser.add_argument("--only", type=lambda text: text.split(","), default=None,
                        help="run only the loops whose name contains one of these comma-separated words")
    parser.add_argument("--devices", type=lambda text: text.split(","), default=["cpu", "sleep", "cuda"],
                        help="the policy's devices, one table each: cpu, sleep (a stand-in for an accelerator: the "
                             "forward pass sleeps), cuda (only where torch sees it); default cpu,sleep,cuda")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch threads of the main process (default 1)")
    parser.add_argument("--seconds", type=float, default=None, help="measured seconds per row (default 3; quick 0.5)")
    parser.add_argument("--warmup", type=float, default=None, help="warm-up seconds per row (default 1; quick 0.3)")
    parser.add_argument("--output", default=None,
                        help="the RESULTS.md whose train_loop section is replaced (default benches/RESULTS.md; with "
                             "--quick, or '-', none: the section is only printed)")
    args = parser.parse_args(argv)
    q = args.quick
    args.output = args.output or ("-" if q else str(Path(__file__).resolve().parent / "RESULTS.md"))
    args.num_envs = args.num_envs or ([8] if q else [16, 32])
    args.policy_us = args.policy_us or [args.env_us]
    args.groups = sorted(set(args.groups or ([2] if q else [2, 4])))
    args.seconds = args.seconds if args.seconds is not None else (0.5 if q else 3.0)
    args.warmup = args.warmup if args.warmup is not None else (0.3 if q else 1.0)
    args.cores = ringenv._plan.usable_cores()
    torch.set_num_threads(args.torch_threads)
    report = results_sections.report_head(args)
    missing = puffer_missing()
    report.update(torchrl="not installed" if torchrl_missing() else sys.modules["torchrl"].__version__,
                  configs=[], skipped=[],
                  puffer="not installed" if missing else getattr(sys.modules["pufferlib"], "__version__", "?"))
    if missing:
        print(f"train_loop: no PufferLib row: {missing}", file=sys.stderr)
    for device in args.devices:
        if device.startswith("cuda") and not torch.cuda.is_available():
            print(f"train_loop: no table with the policy on {device}: torch sees no CUDA device", file=sys.stderr)
            report["skipped"].append(device)
            continue
        for n in args.num_envs:
            for policy_us in args.policy_us:
                report["configs"].append(run_config(args, n, policy_us, device))
    results_sections.publish("train_loop", section(report, args), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
