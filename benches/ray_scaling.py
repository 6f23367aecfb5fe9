"""``ringenv.ray`` against one local pool, a hand-written Ray actor per node and one Ray actor per
env, on a simulated Ray cluster of two one-CPU nodes (``ray.cluster_utils.Cluster``), for a cheap
env and a ~1 ms busy-wait env (``--cost-us``); then a projection to 8 and 64 nodes of 16 cores
from the measured costs (a model, not a measurement: the batch time is a node's compute plus the
local pool's overhead, a Ray call's latency and the driver's CPU per call times the nodes).

Designs are measured in ``--rounds`` interleaved rounds and the median round reported; the
targets' verdicts come from this run. The output replaces the ``ray`` section of
``benches/RESULTS.md``.

Usage::

    python benches/ray_scaling.py                 # ~4 min on 2 cores
    python benches/ray_scaling.py --quick --output -   # a check that it runs, printed
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import results_sections
from python_envs import make_env

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = results_sections.markers("ray")
HAND_WRITTEN = "hand-written Ray actor per node (no ringenv)"


class _OneEnv:
    """The naive design's actor: one env, one call per step."""

    def __init__(self, cost_us: float):
        self.env = make_env(cost_us)

    def reset(self, seed):
        return self.env.reset(seed=seed)[0]

    def step(self, action):
        obs, reward, terminated, truncated, _ = self.env.step(action)
        if terminated or truncated:
            obs, _ = self.env.reset()
        return obs, reward, terminated, truncated


class _NodeEnvs:
    """The hand-written design's actor: a share of the envs (each as the naive design's actor
    steps it), stepped in a loop in one call per batch."""

    def __init__(self, num_envs: int, cost_us: float):
        self.envs = [_OneEnv(cost_us) for _ in range(num_envs)]

    def node_id(self):
        import ray

        return ray.get_runtime_context().get_node_id()

    def reset(self, seed):
        return np.stack([e.reset(seed + i) for i, e in enumerate(self.envs)])

    def step(self, actions):
        out = [e.step(a) for e, a in zip(self.envs, actions)]  # (obs, reward, terminated, truncated) each
        return tuple(np.array([o[i] for o in out]) for i in range(4))


class ActorPerNode:
    """Ray's own floor for this data flow, without ringenv: ``num_actors`` plain Ray actors (one
    per simulated node, as ringenv.ray's), each stepping its share of the envs in a loop in one
    call per batch, the results concatenated in the driver."""

    def __init__(self, num_envs: int, cost_us: float, num_actors: int, options: Dict[str, Any]):
        import ray

        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]][:num_actors]
        self.share = num_envs // num_actors
        self.actors = [ray.remote(_NodeEnvs).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False), **options).remote(self.share, cost_us)
            for node in nodes]
        placed = ray.get([a.node_id.remote() for a in self.actors], timeout=120)
        if len(set(placed)) != num_actors:
            raise RuntimeError(f"the {num_actors} hand-written actors are not on {num_actors} nodes: {placed}")

    def reset(self, seed: int):
        import ray

        return np.concatenate(ray.get([a.reset.remote(seed + k * self.share) for k, a in enumerate(self.actors)]))

    def step(self, actions):
        import ray

        out = ray.get([a.step.remote(actions[k * self.share:(k + 1) * self.share]) for k, a in enumerate(self.actors)])
        return tuple(np.concatenate(parts) for parts in zip(*out))

    def close(self):
        import ray

        for a in self.actors:
            ray.kill(a)


class ActorPerEnv:
    """``num_envs`` Ray actors of one env each, stepped by one call per env per step."""

    def __init__(self, num_envs: int, cost_us: float):
        import ray

        remote = ray.remote(num_cpus=0)(_OneEnv)
        self.num_envs = num_envs
        self.actors = [remote.remote(cost_us) for _ in range(num_envs)]

    def reset(self, seed: int):
        import ray

        return np.stack(ray.get([a.reset.remote(seed + i) for i, a in enumerate(self.actors)]))

    def step(self, actions):
        import ray

        out = ray.get([a.step.remote(int(x)) for a, x in zip(self.actors, actions)])
        return np.stack([o[0] for o in out]), np.array([o[1] for o in out])

    def close(self):
        import ray

        for a in self.actors:
            ray.kill(a)


def run(step: Callable[[], int], seconds: float, warmup: float) -> Dict[str, float]:
    """Calls ``step`` (returning the env steps it made) for ``warmup`` then ``seconds`` s."""
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        step()
    steps = batches = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    while True:
        steps += step()
        batches += 1
        now = time.perf_counter()
        if now - t0 >= seconds:
            break
    wall, cpu = now - t0, time.process_time() - cpu0
    return {"steps_per_s": steps / wall, "us_per_batch": wall / batches * 1e6, "driver_cpu_us_per_batch":
            cpu / batches * 1e6, "batches": batches}


def measure_rows(cost_us: float, num_envs: int, seconds: float, warmup: float, naive: bool,
                 rounds: int) -> List[Dict[str, Any]]:
    """Builds every design for ``num_envs`` envs of ``cost_us``, then measures them in
    ``rounds`` interleaved rounds (design 1, 2, 3, then again), keeping each design's median round
    by steps/s: the machine's load drifts, and interleaving spreads the drift over all designs."""
    import ringenv
    import ringenv.ray

    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, (64, num_envs))
    fns = [functools.partial(make_env, cost_us)] * num_envs
    designs: List[Dict[str, Any]] = []

    def sync_loop(envs) -> Callable[[], int]:
        i = [0]

        def step() -> int:
            envs.step(actions[i[0] % 64])
            i[0] += 1
            return num_envs
        return step

    local = ringenv.AsyncVectorEnv(fns, num_workers=2)
    local.reset(seed=0)
    designs.append({"design": "local pool (2 workers)", "calls": 0, "step": sync_loop(local), "close": local.close})

    # Both ringenv.ray designs stay up across the rounds: half a CPU each lets 4 actors fit the 2
    # nodes (SPREAD still puts one of each design's actors on each node; 1 worker per block).
    half_cpu = {"num_cpus": 0.5}
    envs = ringenv.ray.make_vec(fns, num_actors=2, actor_options=half_cpu)
    envs.reset(seed=0)
    designs.append({"design": "ringenv.ray, 2 nodes", "calls": 2, "step": sync_loop(envs), "close": envs.close})

    half = num_envs // 2
    batches = ringenv.ray.make_vec(fns, num_actors=2, batch_size=half, actor_options=half_cpu)
    batches.async_reset(seed=0)

    def async_step() -> int:
        infos = batches.recv()[4]
        ids = infos["env_id"]
        batches.send(actions[0][: ids.size], ids)
        return int(ids.size)

    designs.append({"design": "ringenv.ray, 2 nodes, async (batch = half)", "calls": 2, "step": async_step,
                    "close": batches.close})
    if naive:
        per_env = ActorPerEnv(num_envs, cost_us)
        per_env.reset(0)
        i = [0]

        def naive_step() -> int:
            per_env.step(actions[i[0] % 64])
            i[0] += 1
            return num_envs

        designs.append({"design": f"actor per env ({num_envs} actors)", "calls": num_envs, "step": naive_step,
                        "close": per_env.close})
    by_hand = ActorPerNode(num_envs, cost_us, 2, {"num_cpus": 0})  # ringenv.ray's designs hold the CPUs
    by_hand.reset(0)
    designs.append({"design": HAND_WRITTEN, "calls": 2, "step": sync_loop(by_hand), "close": by_hand.close})
    default = ringenv.AsyncVectorEnv(fns)  # what a user gets: the default plan of this machine
    default.reset(seed=0)
    plan = f"{default.num_workers} worker{'s' if default.num_workers != 1 else ''}" + (" + inline" if default.inline else "")
    designs.append({"design": f"local pool (default: {plan})", "calls": 0, "step": sync_loop(default),
                    "close": default.close})
    measured: Dict[str, List[Dict[str, float]]] = {d["design"]: [] for d in designs}
    try:
        for _ in range(rounds):
            for d in designs:
                measured[d["design"]].append(run(d["step"], seconds, warmup))
    finally:
        for d in designs:
            d["close"]()
    rows = []
    for d in designs:
        runs = sorted(measured[d["design"]], key=lambda m: m["steps_per_s"])
        r = {"design": d["design"], "calls": d["calls"], **runs[len(runs) // 2],
             "spread": (runs[0]["steps_per_s"], runs[-1]["steps_per_s"])}
        r["cost_us"], r["num_envs"] = cost_us, num_envs
        r["driver_cpu_us_per_call"] = r["driver_cpu_us_per_batch"] / r["calls"] if r["calls"] else None
        rows.append(r)
    return rows


def projection(cheap: List[Dict[str, Any]], cost_us: float,
               envs_per_node: int) -> List[Dict[str, Any]]:
    """Steps/s for 8 and 64 nodes of 16 cores from this run's costs: T(N) = E·env/16 + local + latency + N·driver."""
    local_cheap, ray_cheap = cheap[0], cheap[1]
    driver_s = ray_cheap["driver_cpu_us_per_call"] * 1e-6
    local_s = local_cheap["us_per_batch"] * 1e-6
    latency_s = max(0.0, (ray_cheap["us_per_batch"] - local_cheap["us_per_batch"]) * 1e-6 - 2 * driver_s)
    out = []
    # a local worker's own cost per env step, added to the env's nominal cost
    per_env_s = local_s * 2 / local_cheap["num_envs"]
    for label, cost in (("cheap", 0.0), (f"{cost_us:g} µs", cost_us)):
        env_s = cost * 1e-6 + per_env_s
        for nodes in (8, 64):
            t = envs_per_node * env_s / 16 + local_s + latency_s + nodes * driver_s
            out.append({"env": label, "nodes": nodes, "envs": nodes * envs_per_node, "batch_ms": t * 1e3,
                        "steps_per_s": nodes * envs_per_node / t,
                        "ideal": nodes * envs_per_node / (envs_per_node * env_s / 16 + local_s),
                        "driver_share": nodes * driver_s / t})
    return out + [{"driver_s": driver_s, "latency_s": latency_s, "local_s": local_s}]


def section(report: Dict[str, Any]) -> List[str]:
    lines = [BEGIN, "## ringenv.ray: pools on a simulated 2-node Ray cluster (`benches/ray_scaling.py`)", "",
             "Written by `benches/ray_scaling.py`; edit the script, not this section.", "",
             f"Run {report['when']} on {report['machine']}, Ray {report['ray']}, {report['num_envs']} Python envs, "
             f"{report['rounds']} interleaved rounds of {report['seconds']:g} s per row (after {report['warmup']:g} s of "
             "warm-up each), the median round reported with the range of the rounds' steps/s. Two simulated nodes of 1 CPU "
             "each on this one 2-core VM (every process of every row shares the same 2 cores, and the machine "
             "is shared with other jobs: figures are noisy). Steps/s counts env steps; µs per batch is the wall "
             "time of one `step` (or `recv`+`send`) of the whole vector env; driver CPU is this process's CPU "
             "per actor call.", "",
             "| env | design | steps/s (range) | µs per batch | driver CPU µs per call | ratio to local | "
             "ratio to actor per env |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for rows in report["rows"]:
        local = best_local(rows)["steps_per_s"]
        naive = next((r["steps_per_s"] for r in rows if r["design"].startswith("actor per env")), None)
        for r in rows:
            env = "cheap (0 µs)" if r["cost_us"] == 0 else f"{r['cost_us']:g} µs busy-wait"
            per_call = "" if r["driver_cpu_us_per_call"] is None else f"{r['driver_cpu_us_per_call']:.0f}"
            to_naive = f"{r['steps_per_s'] / naive:.1f}x" if naive else ""
            lo, hi = r["spread"]
            lines.append(f"| {env} | {r['design']} | {r['steps_per_s']:,.0f} ({lo:,.0f}-{hi:,.0f}) | "
                         f"{r['us_per_batch']:,.0f} | {per_call} | "
                         f"{r['steps_per_s'] / local:.2f} | {to_naive} |")
    busy = report["rows"][1]
    ideal = (os.cpu_count() or 1) * 1e6 / busy[0]["cost_us"]
    lines += ["", f"The 2-core ceiling at {busy[0]['cost_us']:g} µs per step is {ideal:,.0f} steps/s: the faster local "
              f"pool reached {best_local(busy)['steps_per_s'] / ideal:.0%} of it in this run, the rest went to the machine's other "
              "jobs, so the rows' ratios at that cost are within the load's noise."]
    lines += ["", "### Targets, from this run", ""]
    for t in report["targets"]:
        lines.append(f"- {t}")
    proj, costs = report["projection"][:-1], report["projection"][-1]
    lines += ["", "### Projection to 8 and 64 nodes of 16 cores (a model from this run's costs)", "",
              f"Per batch T(N) = E·env/16 + local + latency + N·driver, with E = {report['envs_per_node']} envs per "
              "node, env = the env's nominal cost plus a local worker's own cost per env step (measured at the cheap "
              f"env), driver = {costs['driver_s'] * 1e6:.0f} µs of driver CPU per call, latency = "
              f"{costs['latency_s'] * 1e6:.0f} µs added per batch by the Ray round trip, local = "
              f"{costs['local_s'] * 1e6:.0f} µs of local pool overhead per batch (all measured above at the cheap "
              "env); steps/s = N·E / T(N). *ideal* is N nodes with no Ray cost; *driver share* is the part of "
              "T(N) spent issuing and collecting calls in the driver, which is what limits scaling (with async "
              "batches the latency overlaps the learner, the driver share does not).", "",
              "| env | nodes | envs | ms per batch | steps/s | ideal steps/s | driver share |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for p in proj:
        lines.append(f"| {p['env']} | {p['nodes']} | {p['envs']:,} | {p['batch_ms']:.1f} | {p['steps_per_s']:,.0f} | "
                     f"{p['ideal']:,.0f} | {p['driver_share']:.0%} |")
    lines.append(END)
    return lines


def best_local(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The faster of the local pool rows (2 workers; the default plan) of one env."""
    return max((r for r in rows if r["design"].startswith("local pool")), key=lambda r: r["steps_per_s"])


def targets(cheap: List[Dict[str, Any]], busy: List[Dict[str, Any]], cost_us: float) -> List[str]:
    out = []
    local = best_local(busy)
    ratio = busy[1]["steps_per_s"] / local["steps_per_s"]
    best = max(busy[1]["steps_per_s"], busy[2]["steps_per_s"]) / local["steps_per_s"]
    out.append(f"At {cost_us:g} µs per step, ringenv.ray on 2 simulated nodes within 15% of the faster local pool "
               f"({local['design']}): {ratio:.3f}x (sync), {busy[2]['steps_per_s'] / local['steps_per_s']:.3f}x "
               "(async) -> "
               f"**{'met' if best >= 0.85 else 'not met'}**")
    floor = next(r for r in busy if r["design"] == HAND_WRITTEN)
    out.append(f"What Ray itself allows here: a hand-written Ray actor per node doing the same work in one call per "
               f"batch (no ringenv) reached {floor['steps_per_s'] / local['steps_per_s']:.2f}x of the faster local "
               f"pool at {cost_us:g} µs per step ({floor['us_per_batch']:,.0f} µs per batch); ringenv.ray's step is "
               f"{busy[1]['steps_per_s'] / floor['steps_per_s']:.2f}x of it, its async batches "
               f"{busy[2]['steps_per_s'] / floor['steps_per_s']:.2f}x")
    naive = next((r for r in cheap if r["design"].startswith("actor per env")), None)
    if naive is not None:
        r10 = cheap[1]["steps_per_s"] / naive["steps_per_s"]
        out.append(f"Cheap env, ringenv.ray at least 10x the actor-per-env design: {r10:.1f}x -> "
                   f"**{'met' if r10 >= 10 else 'not met'}**")
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--naive-envs", type=int, default=32, help="envs of the actor-per-env rows (one actor each)")
    parser.add_argument("--cost-us", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per row per round")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    parser.add_argument("--proj-envs-per-node", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="short rows; prints the section")
    parser.add_argument("--output", default=str(ROOT / "benches" / "RESULTS.md"), help="'-' prints the section")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup, args.rounds = 1.0, 0.5, 1

    import ray
    from ray.cluster_utils import Cluster

    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "benches")] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 100 * 2**20,
                                                            "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, object_store_memory=100 * 2**20)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        print(f"cluster up: {len(ray.nodes())} nodes", file=sys.stderr)
        # The cheap env: the naive design at --naive-envs (one actor per env), ringenv at the same count.
        cheap = measure_rows(0.0, args.naive_envs, args.seconds, args.warmup, naive=True, rounds=args.rounds)
        for r in cheap:
            print(r, file=sys.stderr)
        busy = measure_rows(args.cost_us, args.num_envs, args.seconds, args.warmup, naive=False, rounds=args.rounds)
        for r in busy:
            print(r, file=sys.stderr)
    finally:
        ray.shutdown()
        cluster.shutdown()
    report = {
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "ray": ray.__version__, "num_envs": f"{args.naive_envs} (cheap) / {args.num_envs} ({args.cost_us:g} µs)",
        "seconds": args.seconds, "warmup": args.warmup, "rounds": args.rounds, "rows": [cheap, busy],
        "targets": targets(cheap, busy, args.cost_us), "envs_per_node": args.proj_envs_per_node,
        "projection": projection(cheap, args.cost_us, args.proj_envs_per_node),
    }
    quick_default = args.quick and args.output == str(ROOT / "benches" / "RESULTS.md")
    results_sections.publish("ray", section(report), "-" if quick_default else args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
