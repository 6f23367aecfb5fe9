"""``ringenv tune ENV``: step ENV through ringenv with each configuration in turn (a worker
count, with or without the main process stepping a share of the envs inline), measure
throughput, batch latency and CPU, and recommend a configuration."""

from __future__ import annotations

import argparse
import functools
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

import ringenv.cli._common as _common
from ringenv.cli._common import RunError, UsageError
from ringenv.cli._measure import ACTION_BATCHES, WARMUP_TEXT, measure

DESCRIPTION = """\
Step ENV through ringenv.AsyncVectorEnv with each configuration in turn, with random actions
(pre-generated from the action space, seeded), for --seconds each after a short warm-up; show
steps/s, batch latency and the CPU used by the main process and by the whole process tree, then
recommend a configuration and print the AsyncVectorEnv arguments that make it. A configuration is
a worker count of --workers, alone ("2 workers": num_workers=2, inline=False) or with the main
process stepping the last block of envs itself beside the worker processes ("1 worker + inline":
num_workers=1, inline=True); --inline picks which are measured. With --batch-size below
--num-envs, each configuration is measured with async batches (async_reset, then recv/send of
--batch-size envs at a time); configurations for which a batch is not whole blocks of envs are
skipped, with the reason in their row.

ENV is a built-in ringenv env (CartPole-v1; preferred, as ringenv.make_vec
does), a Gymnasium id (CartPole-v1 with --no-builtin, Acrobot-v1, ...), a module:callable
that builds one env (e.g. my_envs:make_env; the current directory is searched), or a worker
binary's env (e.g. target/release/my_envs:Sokoban-v0; see docs/SDK.md). --spin-us sets the wake-up
policy's spin bound (docs/WAKEUP.md); by default ringenv's own policy runs, as in a user's program.

Configurations whose steps/s differ by less than the measurement's noise (the spread of steps/s
over the 5 equal parts of each one's timed window) are not told apart: then AsyncVectorEnv's
default is kept.

example: ringenv tune CartPole-v1 --workers 1,2 --inline on   (measures 1 worker + inline, 2 workers + inline)"""

# The recommendation rule (also written into the JSON report).
NEAR_FRACTION = 0.05  # "within 5% of the highest throughput"
CPU_SAVING = 0.25  # "at >= 25% less tree CPU"
#: Equal consecutive parts of a timed window whose steps/s give a configuration's noise.
PARTS = 5
RULE = ("the configuration (worker processes, with or without the inline share) with the highest steps/s, unless "
        "another is within 5% of its steps/s while using at least 25% less tree CPU (cores busy); then, of those, "
        "the one using the least tree CPU. Without such a one, AsyncVectorEnv's default configuration when it was "
        "measured and the fastest is ahead of it by no more than the noise: the larger relative spread (max - min "
        f"over the mean) of the two configurations' steps/s over the {PARTS} equal parts of their timed windows")
#: The values of ``--inline``.
INLINE_MODES = ("auto", "on", "off")
#: The columns of the table without ``--wide``: what fits 80 columns.
NARROW_COLUMNS = ("workers", "steps/s", "noise", "p50 ms", "p99 ms", "tree CPU")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("env", metavar="ENV", help="built-in ringenv id, Gymnasium id, module:callable, or BINARY:ID")
    p.add_argument("--num-envs", type=_common.positive_int, default=16, metavar="N",
                   help="envs in the vector env (default 16)")
    p.add_argument("--workers", type=_common.workers_list, default="auto", metavar="LIST",
                   help="worker counts to try: comma-separated (0,1,2,4; 0: no worker process, the main process "
                        "steps every env, num_workers=0) or 'auto' (default): 0 where the env can be stepped in "
                        "this process (not with async batches or --inline off), then 1, 2, 4, ... up to the core "
                        "count, plus the core count, none above --num-envs")
    p.add_argument("--inline", choices=INLINE_MODES, default="auto",
                   help="whether the main process also steps a share of the envs (AsyncVectorEnv(inline=...)): "
                        "'off' measures each worker count w with inline=False (w worker processes step every env); "
                        "'on' with inline=True (w worker processes + the main process stepping the last block), "
                        "skipping, with the reason, counts where it cannot be (w + 1 > --num-envs, a worker "
                        "binary's envs, async batches that are not whole blocks); 'auto' (default) measures both "
                        "for each w with w + 1 <= the core count when the env can be stepped inline, else "
                        "inline=False only")
    p.add_argument("--batch-size", type=_common.positive_int, default=None, metavar="B",
                   help="envs per batch (default --num-envs); below --num-envs, async batches (recv/send) are "
                        "measured, and configurations for which a batch is not whole blocks are skipped")
    p.add_argument("--seconds", type=_common.positive_seconds, default=3.0, metavar="S",
                   help="seconds of stepping per configuration, after the warm-up (default 3)")
    p.add_argument("--device", default="cpu",
                   help="where batches are staged: 'cpu' (default, NumPy arrays), 'cuda' or 'cuda:N' (torch tensors)")
    p.add_argument("--seed", type=_common.non_negative_int, default=0,
                   help="seed of the resets and of the random actions (default 0)")
    p.add_argument("--env-kwargs", type=_common.json_object, default=None, metavar="JSON",
                   help="keyword arguments of the env as a JSON object, e.g. '{\"num_blocks\": 5}'")
    p.add_argument("--spin-us", type=_common.spin_microseconds, default=None, metavar="US",
                   help="bound of every wait's spin phase in µs, 0 to never spin (default: ringenv's own wake-up "
                        "policy, as AsyncVectorEnv(spin_us=None); docs/WAKEUP.md)")
    p.add_argument("--no-builtin", action="store_true",
                   help="use the Gymnasium env even when ringenv has a built-in Rust env of that id")
    p.add_argument("--json", metavar="PATH", help="write every raw figure to this JSON file")
    p.add_argument("--plot", metavar="PATH",
                   help="write a PNG of steps/s and CPU against worker processes, with and without inline "
                        "(needs matplotlib: pip install \"ringenv[plot]\")")
    p.add_argument("--wide", action="store_true",
                   help="show every column (µs per step, main CPU, CPU µs per step); wider than 80 columns")


def validate(args) -> List[int]:
    """Checks what argparse cannot; returns the worker counts. Raises UsageError."""
    if args.batch_size is not None and args.batch_size > args.num_envs:
        raise UsageError(f"argument --batch-size: {args.batch_size} is more than --num-envs ({args.num_envs}); "
                         "a batch is at most every env")
    cores = _common.usable_cores()
    if args.workers == "auto":
        workers = _common.auto_workers(cores, args.num_envs)
    else:
        workers = list(args.workers)
        too_many = [w for w in workers if w > args.num_envs]
        if too_many:
            raise UsageError(f"argument --workers: {too_many[0]} workers for --num-envs {args.num_envs}: each worker "
                             f"needs at least one env (use at most {args.num_envs})")
    _common.check_device(args.device)  # last: it may load the CUDA driver
    _common.check_output_path(args.json, "--json")
    _common.check_output_path(args.plot, "--plot")
    if args.plot is not None:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise UsageError('argument --plot: needs matplotlib, which is not installed: pip install "ringenv[plot]"')
    return workers


#: How the configuration of no worker process (``num_workers=0``) is named.
IN_PROCESS = "0 workers (in-process)"


def config_text(workers: int, inline: bool) -> str:
    """How a configuration is named in output: ``"2 workers"``, ``"1 worker + inline"``,
    :data:`IN_PROCESS`."""
    if workers == 0:
        return IN_PROCESS
    return f"{workers} worker{'' if workers == 1 else 's'}" + (" + inline" if inline else "")


def plan_configurations(env: _common.EnvTarget, num_envs: int, batch_size: int, workers: List[int], inline: str,
                        cores: int) -> Tuple[List[Tuple[int, bool]], List[Dict[str, Any]]]:
    """The configurations ``(workers, inline)`` that ``ringenv tune`` measures, in order, and the
    ones it skips (dicts with ``workers``, ``inline`` and ``reason``). ``"off"``: each ``w`` without
    inline; ``"on"``: each with; ``"auto"``: each without, and with where ``w + 1 <= cores`` and the
    env can be stepped inline. ``w = 0`` is ``(0, True)`` (no worker process), skipped by ``"off"``.
    A configuration whose batch is not whole blocks, or an inline one with no env left for the main
    process, is skipped with the reason."""
    if inline not in INLINE_MODES:
        raise ValueError(f"inline must be one of {INLINE_MODES}, got {inline!r}")
    measured: List[Tuple[int, bool]] = []
    skipped: List[Dict[str, Any]] = []

    def consider(w: int, use_inline: bool) -> None:
        why = None
        if use_inline and not env.steps_inline:
            why = "a worker binary's envs run only in its worker processes, never inline"
        elif use_inline and w + 1 > num_envs:
            why = f"{num_envs} envs are too few for {w} worker processes + inline (needs num_envs >= {w + 1})"
        else:
            why = _common.whole_workers_reason(num_envs, w, batch_size, inline=use_inline)
        if why is None:
            measured.append((w, use_inline))
        else:
            skipped.append({"workers": w, "inline": use_inline, "reason": why})

    for w in workers:
        if w == 0:
            if inline == "off":
                skipped.append({"workers": 0, "inline": True,
                                "reason": "no worker process means the main process steps every env, which "
                                          "--inline off excludes"})
            else:
                consider(0, True)
            continue
        if inline != "on":
            consider(w, False)
        if inline == "on" or (inline == "auto" and env.steps_inline and w + 1 <= cores):
            consider(w, True)
    return measured, skipped


def nothing_to_measure(inline: str, num_envs: int, batch_size: int, workers: List[int],
                       skipped: List[Dict[str, Any]]) -> str:
    """The usage error when :func:`plan_configurations` skipped every configuration: it names the
    argument that excluded them and each one's reason."""
    tried = ", ".join(map(str, workers))
    reasons = "; ".join(f"{config_text(s['workers'], s['inline'])}: {s['reason']}" for s in skipped)
    if len({s["reason"] for s in skipped}) == 1:
        reasons = skipped[0]["reason"]
    if inline == "on":
        return (f"argument --inline: on: no worker count tried ({tried}) can have the main process step a share "
                f"of the envs: {reasons} (--inline off or auto measures without it)")
    if workers == [0] and inline == "off":
        return ("argument --inline: off: --workers 0 means no worker process, the main process stepping every env, "
                "which --inline off excludes; give --workers 1 or more, or --inline auto")
    by_batch = all(_common.whole_workers_reason(num_envs, s["workers"], batch_size, inline=s["inline"])
                   == s["reason"] for s in skipped)
    if by_batch and batch_size < num_envs and any(s["workers"] > 0 for s in skipped):
        return (f"argument --batch-size: a batch of {batch_size} of {num_envs} envs is not whole workers for any "
                f"worker count tried ({tried}): num_envs must be a multiple of the worker count and the batch a "
                "multiple of num_envs / workers")
    return f"argument --workers: nothing to measure for the worker counts tried ({tried}): {reasons}"


def arguments_text(options: Dict[str, Any]) -> str:
    """``AsyncVectorEnv`` keyword arguments as code: ``"num_workers=1, inline=True"``."""
    return ", ".join(f"{k}={v!r}" for k, v in options.items())


def noise(c: Dict[str, Any]) -> float:
    """The relative spread of configuration ``c``'s steps/s over the :data:`PARTS` parts of its
    timed window (``steps_per_s_parts``): (max - min) / mean; 0 with fewer than two parts."""
    parts = c.get("steps_per_s_parts") or []
    mean = sum(parts) / len(parts) if parts else 0.0
    return (max(parts) - min(parts)) / mean if len(parts) >= 2 and mean > 0 else 0.0


def recommend(configs: List[Dict[str, Any]], default: Optional[Tuple[int, bool]] = None) -> Dict[str, Any]:
    """The recommended configuration of ``configs`` by :data:`RULE`, with the reason: AsyncVectorEnv's
    ``default`` unless another is ahead beyond the noise; ties go to fewer worker processes, then to
    no inline share. Returns ``workers``, ``inline``, ``default``, ``fastest_workers``,
    ``fastest_inline``, ``noise``, ``reason`` and ``rule``."""
    fastest = max(configs, key=lambda c: (c["steps_per_s"], -c["workers"], -int(c["inline"])))
    best_sps, best_cpu = fastest["steps_per_s"], fastest["cpu"]["tree_cores"]
    behind = lambda c: 1 - c["steps_per_s"] / best_sps if best_sps > 0 else 0.0  # noqa: E731
    threshold = lambda c: max(noise(fastest), noise(c))  # noqa: E731
    # No CPU (or no step) measured for the fastest (a run shorter than the clock's tick): no saving to weigh.
    thrifty = [c for c in configs if c is not fastest and best_cpu > 0 and best_sps > 0
               and c["steps_per_s"] >= (1 - NEAR_FRACTION) * best_sps
               and c["cpu"]["tree_cores"] <= (1 - CPU_SAVING) * best_cpu]
    base = next((c for c in configs if default is not None and _is(c, {"workers": default[0], "inline": default[1]})),
                None)
    kept = False  # (the default, though not the fastest)
    if thrifty:
        pick = min(thrifty, key=lambda c: (c["cpu"]["tree_cores"], c["workers"], int(c["inline"])))
        saving = 1 - pick["cpu"]["tree_cores"] / best_cpu
        reason = (f"{pick['steps_per_s']:,.0f} steps/s is within 5% of the highest "
                  f"({fastest['steps_per_s']:,.0f} steps/s with {config_text(fastest['workers'], fastest['inline'])}, "
                  f"{behind(pick):.1%} less) while the process tree uses {saving:.0%} less CPU "
                  f"({pick['cpu']['tree_cores']:.2f} vs {best_cpu:.2f} cores busy)")
        limit = threshold(pick)
    elif base is not None and base is not fastest and behind(base) <= threshold(base):
        pick, kept, limit = base, True, threshold(base)
        reason = (f"AsyncVectorEnv's default, kept: the fastest ({config_text(fastest['workers'], fastest['inline'])}, "
                  f"{fastest['steps_per_s']:,.0f} steps/s) is {behind(base):.1%} ahead, within the noise of "
                  f"{limit:.1%} (the spread of steps/s over the {PARTS} parts of each run)")
    else:
        pick = fastest
        others = sorted((c for c in configs if c is not fastest), key=lambda c: -c["steps_per_s"])
        reason = f"the highest throughput ({pick['steps_per_s']:,.0f} steps/s)"
        limit = noise(pick)
        if others:
            runner = others[0]
            limit = threshold(runner)
            within = behind(runner) <= limit
            reason += (f", {behind(runner):.1%} ahead of the next best "
                       f"({config_text(runner['workers'], runner['inline'])}), "
                       + ("within" if within else "beyond") + f" the noise of {limit:.1%} (the spread of steps/s "
                       f"over the {PARTS} parts of each run)" + ("; a rerun may order them the other way" if within
                                                                  else ""))
    return {"workers": pick["workers"], "inline": bool(pick["inline"]), "default": kept or pick is base,
            "fastest_workers": fastest["workers"], "fastest_inline": bool(fastest["inline"]), "noise": limit,
            "reason": reason, "rule": RULE}


def _progress(err):
    from rich.progress import BarColumn, Progress, TextColumn

    return Progress(
        TextColumn("{task.description:<30}"),
        BarColumn(bar_width=14),
        TextColumn("{task.completed:5.1f}/{task.total:.1f} s"),
        TextColumn("{task.fields[rate]}"),
        console=err, auto_refresh=False, transient=False,
    )


def _is(c: Dict[str, Any], rec: Dict[str, Any]) -> bool:
    """Whether configuration ``c`` is the one ``rec`` (a :func:`recommend` result) names."""
    return c["workers"] == rec["workers"] and bool(c["inline"]) == rec["inline"]


def _table(configs: List[Dict[str, Any]], rec: Dict[str, Any], wide: bool):
    from rich import box
    from rich.table import Table

    columns = [("workers", lambda c: "0 (in-process)" if c["workers"] == 0
                else f"{c['workers']}" + (" + inline" if c["inline"] else "")),
               ("steps/s", lambda c: f"{c['steps_per_s']:,.0f}"),
               ("noise", lambda c: f"{noise(c):.0%}"),
               ("µs/step", lambda c: f"{c['us_per_env_step']:.3f}"),
               ("p50 ms", lambda c: f"{c['batch_latency_ms']['p50']:.3f}"),
               ("p99 ms", lambda c: f"{c['batch_latency_ms']['p99']:.3f}"),
               ("tree CPU", lambda c: f"{c['cpu']['tree_cores']:.2f}"),
               ("main CPU", lambda c: f"{c['cpu']['main_cores']:.2f}"),
               ("tree µs CPU/step", lambda c: f"{c['cpu']['tree_us_per_env_step']:.3f}"),
               ("main µs CPU/step", lambda c: f"{c['cpu']['main_us_per_env_step']:.3f}")]
    if not wide:
        columns = [col for col in columns if col[0] in NARROW_COLUMNS]
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, _ in columns:
        t.add_column(name, justify="right", no_wrap=True)
    t.add_column("", no_wrap=True)
    for c in sorted(configs, key=lambda c: (c["workers"], c["inline"])):
        t.add_row(*(cell(c) for _, cell in columns), "<- recommended" if _is(c, rec) else "")
    return t


def plot(path: str, configs: List[Dict[str, Any]], rec: Dict[str, Any], title: str) -> None:
    """A PNG of steps/s and CPU against worker processes; inline configurations dashed, the
    recommended one starred."""
    import matplotlib.ticker
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # the Agg canvas directly, not pyplot: no GUI backend, no global state changed in the caller
    fig = Figure(figsize=(7, 6), dpi=100)
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for inline in (False, True):
        series = [c for c in configs if bool(c["inline"]) == inline]
        if not series:
            continue
        w = [c["workers"] for c in series]
        suffix, style = (", + inline", "--") if inline else ("", "-")
        top.plot(w, [c["steps_per_s"] for c in series], "o" + style, color="tab:purple" if inline else "tab:blue",
                 label="steps/s" + suffix)
        bottom.plot(w, [c["cpu"]["tree_cores"] for c in series], "s" + style, color="tab:orange",
                    label="process tree" + suffix, alpha=0.7 if inline else 1.0)
        bottom.plot(w, [c["cpu"]["main_cores"] for c in series], "^" + style, color="tab:green",
                    label="main process" + suffix, alpha=0.7 if inline else 1.0)
    sps = [c["steps_per_s"] for c in configs]
    cpu = [c["cpu"][k] for c in configs for k in ("tree_cores", "main_cores")]
    top.set_ylabel("env steps / s")
    top.set_ylim(0, max(sps) * 1.15)
    top.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    top.grid(alpha=0.3)
    pick = next(c for c in configs if _is(c, rec))
    top.plot([pick["workers"]], [pick["steps_per_s"]], "*", color="tab:red", markersize=16,
             label=f"recommended: {config_text(rec['workers'], rec['inline'])}")
    top.legend(loc="best")
    bottom.set_ylabel("CPU (cores busy)")
    bottom.set_ylim(0, max(cpu) * 1.3)
    bottom.set_xlabel("worker processes")
    bottom.set_xticks(sorted({c["workers"] for c in configs}))
    bottom.grid(alpha=0.3)
    bottom.legend(loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="png")


def measure_configuration(env: _common.EnvTarget, num_envs: int, workers: int, *, inline: bool = False,
                          batch_size: Optional[int] = None, device: str = "cpu", seconds: float = 3.0, seed: int = 0,
                          spin_us: Optional[float] = None, warmup_s: Optional[float] = None,
                          on_phase=lambda phase: None, on_progress=lambda elapsed, steps: None) -> Dict[str, Any]:
    """Measures one configuration of ``ringenv tune`` by the one measurement loop and returns its
    figures (``benches/grid.py``'s "ringenv tune" rows use it too). Raises :class:`RunError` naming
    the env and configuration when the env could not be built or stepped."""
    batch = num_envs if batch_size is None else batch_size
    try:
        m = measure(functools.partial(env.make_ringenv, num_envs, workers, batch, device, spin_us, inline=inline),
                    num_envs=num_envs, seconds=seconds, seed=seed, batch_size=batch, warmup_s=warmup_s,
                    on_phase=on_phase, on_progress=on_progress)
    except (KeyboardInterrupt, UsageError):
        raise
    except Exception as e:
        raise RunError(f"{env.name} with {config_text(workers, inline)} failed: {type(e).__name__}: {e}") from e
    parts = [p for p in np.array_split(m.latencies_s, PARTS) if len(p) and p.sum() > 0]
    return {**m.figures(), "steps_per_s_parts": [len(p) * batch / float(p.sum()) for p in parts]}


def run(args, argv: Optional[List[str]] = None) -> int:
    workers = validate(args)
    env = _common.resolve_env(args.env, args.env_kwargs, prefer_builtin=not args.no_builtin)
    n, seconds = args.num_envs, args.seconds
    batch = n if args.batch_size is None else args.batch_size
    if args.workers == "auto" and args.inline != "off" and batch == n and env.steps_inline:
        workers = [0, *workers]  # the in-process baseline, SyncVectorEnv's layout
    plan, skipped = plan_configurations(env, n, batch, workers, args.inline, _common.usable_cores())
    if not plan:
        raise UsageError(nothing_to_measure(args.inline, n, batch, workers, skipped))
    out, err = _common.consoles()
    info = _common.machine_info()
    out.print(_common.machine_line(info))
    mode = f"async batches of {batch} (recv/send)" if batch < n else "every env per step"
    device = "" if args.device == "cpu" else f", staged on {args.device}"
    spin = ("" if args.spin_us is None else
            f", spin bound {args.spin_us:g} µs" + (" (never spin)" if args.spin_us == 0 else ""))
    out.print(f"tune {env.label}: {n} envs, {mode}{device}{spin}, "
              f"configurations {', '.join(config_text(w, i) for w, i in plan)}; {seconds:g} s "
              f"each after a warm-up, random actions (seed {args.seed})")

    configs: List[Dict[str, Any]] = []
    with _progress(err) as progress:
        for w, inline in plan:
            name = config_text(w, inline)
            task = progress.add_task(f"{name}: starting", total=seconds, rate="")
            progress.refresh()

            def on_phase(phase, task=task, name=name):
                if phase in ("warmup", "measure", "close"):
                    label = {"warmup": "warming up", "measure": "measuring", "close": "closing"}[phase]
                    progress.update(task, description=f"{name}: {label}")
                    progress.refresh()

            def on_progress(elapsed, steps, task=task):
                progress.update(task, completed=min(elapsed, seconds),
                                rate=f"{steps * batch / max(elapsed, 1e-9):,.0f} steps/s")
                progress.refresh()

            figures = measure_configuration(env, n, w, inline=inline, batch_size=batch, device=args.device,
                                            seconds=seconds, seed=args.seed, spin_us=args.spin_us,
                                            on_phase=on_phase, on_progress=on_progress)
            progress.update(task, description=f"{name}: done", completed=seconds,
                            rate=f"{figures['steps_per_s']:,.0f} steps/s")
            progress.refresh()
            configs.append({"workers": w, "inline": inline, **figures})

    from ringenv._plan import plan_workers

    default = plan_workers(n, None, None, "python" if env.steps_inline else None, batch, None)
    rec = recommend(configs, default)
    rec["arguments"] = _common.vector_options(n, rec["workers"], rec["inline"], batch, args.device, args.spin_us)
    out.print()
    table = _table(configs, rec, args.wide)
    if args.wide:
        _common.print_table(out, table)
    else:
        out.print(table)
    for c in skipped:
        out.print(f"{config_text(c['workers'], c['inline'])}: skipped, {c['reason']}")
    out.print()
    out.print(f"recommended: {config_text(rec['workers'], rec['inline'])} ({arguments_text(rec['arguments'])}) "
              f"- {rec['reason']}")
    out.print(f"columns: noise = spread of steps/s over {PARTS} parts of the run; p50/p99 ms = latency of one "
              "vector step; CPU = cores busy" + ("" if args.wide else "; --wide shows every column") +
              " (docs/CLI.md)", style="dim")
    report = {
        "schema": "ringenv.tune/3",
        "command": ["ringenv", *(argv or [])],
        "machine": info,
        "env": {"id": env.name, "kind": env.kind, "label": env.label, "kwargs": env.kwargs},
        "settings": {"num_envs": n, "batch_size": batch, "workers": workers, "inline": args.inline,
                     "seconds": seconds, "seed": args.seed, "device": args.device, "spin_us": args.spin_us,
                     "warmup": WARMUP_TEXT, "action_batches": ACTION_BATCHES},
        "configurations": configs,
        "skipped": skipped,
        "recommendation": rec,
    }
    if args.json:
        _common.write_json(args.json, report)
        out.print(f"wrote {args.json}")
    if args.plot:
        plot(args.plot, configs, rec, f"ringenv tune {env.name}: {n} envs, {info['cores']} cores ({info['machine']})")
        out.print(f"wrote {args.plot}")
    return 0
