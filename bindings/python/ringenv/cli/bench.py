"""``ringenv bench ENV``: the same env through ringenv and through the vector-env runtimes that
are installed (Gymnasium's AsyncVectorEnv and SyncVectorEnv always, and Gymnasium's own vectorised
env where the id has one; TorchRL's ParallelEnv and EnvPool when importable), side by side in one
run, measured by the one measurement loop (``ringenv.cli._measure``)."""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any, Callable, Dict, List, Optional

from ringenv._plan import plan_workers
from ringenv.cli import _common
from ringenv.cli._common import EnvTarget, UsageError
from ringenv.cli._measure import ACTION_BATCHES, WARMUP_TEXT

DESCRIPTION = """\
Step ENV through ringenv.AsyncVectorEnv (its default workers) and through the other vector-env
runtimes installed here - gymnasium AsyncVectorEnv and SyncVectorEnv always, Gymnasium's own
vectorised env where the id has one (gymnasium.make_vec(..., vectorization_mode="vector_entry_point"),
e.g. CartPole-v1), TorchRL ParallelEnv and EnvPool when importable - with the same random actions,
for --seconds each, and show steps/s and the ratio to ringenv. For a built-in ringenv id (CartPole-v1) ringenv steps its Rust env and
the peers step the Gymnasium env of the same id; a second ringenv row steps that Gymnasium env
too, for a like-for-like comparison."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("env", metavar="ENV", help="built-in ringenv id, Gymnasium id, module:callable, or BINARY:ID")
    p.add_argument("--num-envs", type=_common.positive_int, default=16, metavar="N",
                   help="envs in each vector env (default 16)")
    p.add_argument("--workers", type=_common.positive_int, default=None, metavar="W",
                   help="ringenv worker processes, stepping every env (default: ringenv's default, the usable cores "
                        "less one and the main process stepping the last block: the inline share)")
    p.add_argument("--seconds", type=_common.positive_seconds, default=3.0, metavar="S",
                   help="seconds of stepping per runtime, after the warm-up (default 3)")
    p.add_argument("--seed", type=_common.non_negative_int, default=0,
                   help="seed of the resets and of the random actions (default 0)")
    p.add_argument("--env-kwargs", type=_common.json_object, default=None, metavar="JSON",
                   help="keyword arguments of the env as a JSON object")
    _common.add_step_timeout(p)
    p.add_argument("--json", metavar="PATH", help="write every raw figure to this JSON file")



def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class _TorchRLAdapter:
    """TorchRL's ParallelEnv behind reset(seed=)/step(actions)/close() (autoreset included)."""

    def __init__(self, factory: Callable[[], Any], num_envs: int):
        from torchrl.envs import ParallelEnv

        self.env = ParallelEnv(num_envs, _TorchRLMake(factory))
        self.td = None

    def reset(self, seed=None):
        if seed is not None:
            self.env.set_seed(seed)
        self.td = self.env.reset()
        return self.td

    def step(self, actions):
        import torch

        self.td.set("action", torch.as_tensor(actions))
        _, self.td = self.env.step_and_maybe_reset(self.td)

    def close(self):
        self.env.close()


class _TorchRLMake:
    """A picklable TorchRL env factory: a GymWrapper (integer actions) around ``factory()``."""

    def __init__(self, factory):
        self.factory = factory

    def __call__(self):
        from torchrl.envs.libs.gym import GymWrapper

        return GymWrapper(self.factory(), categorical_action_encoding=True)


class EnvPoolVector:
    """An EnvPool env behind the calls the measurement loop makes (``reset``, ``step``,
    ``async_reset``, ``recv``, ``send``, ``close``, ``single_action_space``); int32 actions for
    Discrete spaces; seeded at ``make`` (``reset``'s seed is ignored)."""

    def __init__(self, env_id: str, num_envs: int, threads: int, seed: int, batch_size: Optional[int] = None):
        import envpool

        self.env = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, batch_size=batch_size or num_envs,
                                num_threads=threads, seed=seed)
        self.single_action_space = self.env.action_space

    def reset(self, seed=None):
        return self.env.reset()

    def async_reset(self, seed=None):
        self.env.async_reset()

    def step(self, actions):
        return self.env.step(actions)

    def recv(self):
        return self.env.recv()

    def send(self, actions, env_ids):
        self.env.send(actions, env_ids)

    def close(self):
        close = getattr(self.env, "close", None)
        if close is not None:
            close()


def vector_entry_point_id(env: EnvTarget) -> Optional[str]:
    """The Gymnasium id of ``env`` when Gymnasium has its own vectorised implementation of it, else ``None``."""
    import gymnasium as gym

    if env.gym_id is None:
        return None
    try:
        spec = gym.spec(env.gym_id)
    except gym.error.Error:
        return None
    return env.gym_id if getattr(spec, "vector_entry_point", None) is not None else None


def _runtimes(env: EnvTarget, n: int, workers: int, seed: int, inline: bool = False) -> List[Dict[str, Any]]:
    """Every row of the comparison: runtime, env, workers (``None``: in the main process), and either
    ``make`` or the reason it cannot run (``status``). EnvPool gets as many threads as ringenv
    steps envs in."""
    import gymnasium as gym

    rows: List[Dict[str, Any]] = []
    if env.kind == "builtin":
        rows.append({"runtime": "ringenv AsyncVectorEnv", "env": f"{env.name} (Rust)", "workers": workers,
                     "inline": inline and env.steps_inline,
                     "make": lambda: env.make_ringenv(n, workers, inline=inline and env.steps_inline),
                     "reference": True})
    py = env.python_factory
    py_label = {"builtin": f"{env.gym_id} (Gymnasium)" if env.gym_id else "-",
                "gymnasium": f"{env.name} (Gymnasium)", "factory": env.name}[env.kind]
    if py is not None:
        python_env = EnvTarget(env.name, "factory", env.kwargs, py, env.gym_id)
        rows.append({"runtime": "ringenv AsyncVectorEnv", "env": py_label, "workers": workers, "inline": inline,
                     "make": lambda: python_env.make_ringenv(n, workers, inline=inline),
                     "reference": env.kind != "builtin"})
    missing = None if py is not None else f"no Gymnasium env {env.name!r}"
    rows.append({"runtime": "gymnasium AsyncVectorEnv", "env": py_label, "workers": n,
                 "make": (lambda: gym.vector.AsyncVectorEnv([py] * n)) if py else None, "status": missing})
    rows.append({"runtime": "gymnasium SyncVectorEnv", "env": py_label, "workers": None,
                 "make": (lambda: gym.vector.SyncVectorEnv([py] * n)) if py else None, "status": missing})
    vector_id = vector_entry_point_id(env)
    if vector_id is not None:
        rows.append({"runtime": "gymnasium make_vec", "env": f"{vector_id} (Gymnasium, vectorised)", "workers": None,
                     "make": lambda: gym.make_vec(vector_id, n, vectorization_mode="vector_entry_point",
                                                  **env.kwargs)})
    if not _installed("torchrl"):
        rows.append({"runtime": "TorchRL ParallelEnv", "env": py_label, "workers": n, "status": "not installed"})
    else:
        rows.append({"runtime": "TorchRL ParallelEnv", "env": py_label, "workers": n,
                     "make": (lambda: _TorchRLAdapter(py, n)) if py else None, "status": missing})
    if not _installed("envpool"):
        rows.append({"runtime": "EnvPool", "env": "-", "workers": workers + int(inline), "status": "not installed"})
    else:
        status, make = None, None
        try:
            import envpool

            if env.gym_id is None or env.gym_id not in envpool.list_all_envs() or env.kwargs:
                status = f"EnvPool has no C++ env {env.name!r}" + (" with these kwargs" if env.kwargs else "")
            else:
                make = lambda: EnvPoolVector(env.gym_id, n, workers + int(inline), seed)  # noqa: E731
        except Exception as e:
            status = f"error: {type(e).__name__}: {e}"
        rows.append({"runtime": "EnvPool", "env": f"{env.name} (C++)" if make else "-", "workers": workers + int(inline),
                     "make": make, "status": status})
    return rows


def _table(rows: List[Dict[str, Any]]):
    from rich import box
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, justify in [("runtime", "left"), ("env", "left"), ("workers", "right"), ("steps/s", "right"),
                          ("µs/step", "right"), ("tree CPU", "right"), ("vs ringenv", "right"), ("note", "left")]:
        t.add_column(name, justify="left" if justify == "left" else "right", no_wrap=True)
    for r in rows:
        w = "in-proc" if r["workers"] is None else str(r["workers"]) + ("+inline" if r.get("inline") else "")
        if r["status"] == "ok":
            t.add_row(r["runtime"], r["env"], w, f"{r['steps_per_s']:,.0f}", f"{r['us_per_env_step']:.3f}",
                      f"{r['cpu']['tree_cores']:.2f}",
                      f"{r['ratio_to_ringenv']:.2f}x" if r.get("ratio_to_ringenv") else "-",
                      "reference" if r["reference"] else "")
        else:
            t.add_row(r["runtime"], r["env"], w, "-", "-", "-", "-", r["status"])
    return t


def run(args, argv: Optional[List[str]] = None) -> int:
    env = _common.resolve_env(args.env, args.env_kwargs)
    n, seconds = args.num_envs, args.seconds
    if args.workers is not None and args.workers > n:
        raise UsageError(f"argument --workers: {args.workers} workers for --num-envs {n}: each worker needs at "
                         f"least one env (use at most {n})")
    if args.workers is None:  # what a user gets: ringenv's default
        workers, inline = plan_workers(n, None, None, "python", n, None)
    else:
        workers, inline = args.workers, False
    _common.check_output_path(args.json, "--json")
    out, err = _common.consoles()
    info = _common.machine_info()
    out.print(_common.machine_line(info))
    out.print(f"bench {env.label}: {n} envs, {seconds:g} s per runtime after a warm-up, the same random actions "
              f"(seed {args.seed})")
    if env.kind == "builtin":
        if env.gym_id:
            out.print(f"note: ringenv's first row steps the built-in Rust {env.name}; the other rows step Gymnasium's "
                      f"Python {env.gym_id} (gymnasium.make) - the second ringenv row is the like-for-like comparison",
                      soft_wrap=True)
        elif getattr(env, "worker", None):
            out.print(f"note: {env.name} is a Rust env served by worker binary {env.worker}; the peers cannot run it",
                      soft_wrap=True)
        else:
            out.print(f"note: {env.name} is a ringenv built-in Rust env with no Gymnasium implementation; "
                      "the peers cannot run it", soft_wrap=True)

    from ringenv.cli._measure import measure, pregenerate_actions
    from ringenv.cli.tune import _progress

    try:
        actions = pregenerate_actions(_action_space(env), n, args.seed)  # the same for every runtime
    except Exception as e:
        raise _common.RunError(f"cannot read the action space of {env.name}: {type(e).__name__}: {e}") from e
    rows = _runtimes(env, n, workers, args.seed, inline)
    with _progress(err) as progress:
        for r in rows:
            make = r.pop("make", None)
            if make is None:
                r["status"] = r.get("status") or "unavailable"
                continue
            task = progress.add_task(r["runtime"], total=seconds, rate="")
            progress.refresh()

            def on_progress(elapsed, steps, task=task):
                progress.update(task, completed=min(elapsed, seconds),
                                rate=f"{steps * n / max(elapsed, 1e-9):,.0f} steps/s")
                progress.refresh()

            try:
                m = measure(make, num_envs=n, seconds=seconds, seed=args.seed, actions=actions,
                            on_progress=on_progress, step_timeout_s=args.step_timeout)
            except KeyboardInterrupt:
                raise
            except Exception as e:
                r["status"] = f"error: {type(e).__name__}: {e}"[:160]
                progress.update(task, rate="failed")
                progress.refresh()
                continue
            r.update(status="ok", **m.figures())
            progress.update(task, completed=seconds, rate=f"{r['steps_per_s']:,.0f} steps/s")
            progress.refresh()

    ref = next((r for r in rows if r.get("reference") and r["status"] == "ok"), None)
    for r in rows:
        if r["status"] == "ok" and ref is not None:
            r["ratio_to_ringenv"] = r["steps_per_s"] / ref["steps_per_s"]
        is_ref = r is ref
        r.pop("reference", None)
        r["reference"] = is_ref
    out.print()
    _common.print_table(out, _table(rows))
    out.print()
    if ref is not None:
        share = " + the main process's inline share" if ref.get("inline") else ""
        ref_workers = f"{ref['workers']} worker{'' if ref['workers'] == 1 else 's'}"
        out.print(f"vs ringenv: steps/s divided by ringenv's ({ref['env']}, {ref_workers}{share}); "
                  "tree CPU: CPU seconds per wall second of the main process + workers (cores busy)",
                  soft_wrap=True, style="dim")
    report = {
        "schema": "ringenv.bench/1",
        "command": ["ringenv", *(argv or [])],
        "machine": info,
        "env": {"id": env.name, "kind": env.kind, "label": env.label, "kwargs": env.kwargs},
        "settings": {"num_envs": n, "ringenv_workers": workers, "ringenv_inline": inline, "seconds": seconds,
                     "seed": args.seed, "step_timeout_s": args.step_timeout,
                     "warmup": WARMUP_TEXT, "action_batches": ACTION_BATCHES},
        "rows": rows,
    }
    if args.json:
        _common.write_json(args.json, report)
        out.print(f"wrote {args.json}")
    return 0 if ref is not None else 1


def _action_space(env: EnvTarget):
    """The single action space every runtime steps with (from one env)."""
    if env.kind == "builtin":  # the Rust env's own space, from a one-env vector env
        probe = env.make_ringenv(1, 1)
        try:
            return probe.single_action_space
        finally:
            probe.close()
    factory = env.python_factory
    assert factory is not None, "a non-built-in target has a Python factory"
    probe = factory()
    try:
        return probe.action_space
    finally:
        probe.close()
