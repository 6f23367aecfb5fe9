"""The ``ringenv`` command (``ringenv.cli``): argument checking and ``tune`` (table, JSON report,
PNG plot, recommendation), run both in a subprocess (``python -m ringenv.cli``) and in-process
(``ringenv.cli.main``), on tiny budgets. No assertion depends on how fast anything runs."""

from __future__ import annotations

import json
import math
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ringenv.cli
from ringenv.cli import tune as tune_mod
from ringenv.cli import _common
from ringenv.cli._common import EnvTarget, auto_workers, resolve_env

TESTS_DIR = Path(__file__).resolve().parent
FACTORY = "helper_envs:CounterEnv"  # a module:callable from a test helper module
TINY = ["--seconds", "0.3", "--num-envs", "4"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_cli(*args, cwd=TESTS_DIR, launcher=None, timeout=50, extra_env=None):
    """Runs ``python -m ringenv.cli ARGS`` (or ``python LAUNCHER ARGS``) in a subprocess, with the
    variables ``extra_env`` added to its environment; the test helper modules are importable
    through the working directory ``cwd``."""
    env = dict(os.environ, PYTHONIOENCODING="utf-8", **(extra_env or {}))
    cmd = [sys.executable, *([str(launcher)] if launcher else ["-m", "ringenv.cli"]), *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, encoding="utf-8",
                          timeout=timeout)


# -- bad arguments: exit status 2, one line naming the argument, nothing measured ----------------

BAD_ARGUMENTS = [
    (["tune", "CartPole-v1", "--workers", "1,x"], "argument --workers", "'1,x'"),
    (["tune", "CartPole-v1", "--workers", "1,-2"], "argument --workers", "integers >= 0"),
    (["tune", "CartPole-v1", "--workers", ""], "argument --workers", "integers >= 0"),
    (["tune", "CartPole-v1", "--num-envs", "4", "--workers", "1,8"], "argument --workers", "8 workers"),
    (["tune", "NoSuchEnv-v0"], "argument ENV", "NoSuchEnv-v0"),
    (["tune", "helper_envs:no_such_factory"], "argument ENV", "no_such_factory"),
    (["tune", "no_such_module_xyz:make"], "argument ENV", "no_such_module_xyz"),
    (["tune", "CartPole-v1", "--device", "tpu"], "argument --device", "'tpu'"),
    (["tune", "CartPole-v1", "--device", "cuda:x"], "argument --device", "'cuda:x'"),
    (["tune", "CartPole-v1", "--num-envs", "4", "--batch-size", "3", "--workers", "1,2"], "argument --batch-size",
     "not whole workers for any worker count tried (1, 2)"),
    (["tune", "CartPole-v1", "--batch-size", "32"], "argument --batch-size", "more than --num-envs (16)"),
    (["tune", "CartPole-v1", "--seconds", "0"], "argument --seconds", "positive"),
    (["tune", "CartPole-v1", "--seconds", "-1"], "argument --seconds", "positive"),
    (["tune", "CartPole-v1", "--seconds", "inf"], "argument --seconds", "positive"),
    (["tune", "CartPole-v1", "--num-envs", "0"], "argument --num-envs", "positive"),
    (["tune", "CartPole-v1", "--env-kwargs", "[1, 2]"], "argument --env-kwargs", "JSON object"),
    (["tune", "CartPole-v1", "--json", "/no/such/dir/report.json"], "argument --json", "does not exist"),
    (["tune", "CartPole-v1", "--spin-us", "-1"], "argument --spin-us", "from 0 to 10,000,000"),
    (["tune", "CartPole-v1", "--spin-us", "nan"], "argument --spin-us", "from 0 to 10,000,000"),
    (["tune", "CartPole-v1", "--spin-us", "fast"], "argument --spin-us", "'fast' is not a number"),
    (["tune", "CartPole-v1", "--spin-us", "1e30"], "argument --spin-us", "from 0 to 10,000,000"),
    (["tune", "CartPole-v1", "--json", "/proc/report.json"], "argument --json", "cannot write in directory '/proc'"),
    (["tune", "CartPole-v1", "--plot", "/proc/tune.png"], "argument --plot", "cannot write in directory '/proc'"),
    (["tune", "CartPole-v1", "--workers", "0", "--inline", "off"], "argument --inline",
     "--workers 0 means no worker process"),
    # no configuration left by the env or the batch, not by a --batch-size the user gave: the reason
    (["tune", "CartPole-v1", "--workers", "0", "--batch-size", "8"], "argument --workers",
     "nothing to measure for the worker counts tried (0): 0 workers step all 16 envs in one block: async batches "
     "need worker processes"),
    # a PATH:ID whose PATH is not a program is named as such, not tried as a module to import
    (["tune", "./no/such/binary:Foo-v0"], "argument ENV", "worker binary './no/such/binary' not found"),
    (["tune", "/:Foo-v0"], "argument ENV", "worker binary '/' is a directory"),
    (["tune"], "ENV", "required"),
    (["tune", "CartPole-v1", "--inline", "maybe"], "argument --inline", "invalid choice: 'maybe' (choose from"),
    (["tune", "CartPole-v1", "--inline", "True"], "argument --inline", "'auto', 'on', 'off'"),
    (["tune", "CartPole-v1", "--num-envs", "4", "--workers", "4", "--inline", "on"], "argument --inline",
     "4 envs are too few for 4 worker processes + inline (needs num_envs >= 5)"),
    (["tune", "CartPole-v1", "--num-envs", "4", "--batch-size", "2", "--workers", "2", "--inline", "on"],
     "argument --inline", "4 envs do not split evenly over 3 blocks (2 workers + inline)"),
    (["frobnicate", "CartPole-v1"], "argument COMMAND", "frobnicate"),
]


def _check_usage_error(code, stdout, stderr, argv, names, detail):
    assert code == 2, (code, stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected a one-line message, got: {stderr!r}"
    command = argv[0] if argv[0] == "tune" else None
    prefix = f"ringenv {command}: error: " if command else "ringenv: error: "
    assert lines[0].startswith(prefix), lines[0]
    assert names in lines[0] and detail in lines[0], lines[0]
    assert "steps/s" not in stdout  # rejected before anything was measured


@pytest.mark.parametrize("argv,names,detail", BAD_ARGUMENTS, ids=[" ".join(a[0]) for a in BAD_ARGUMENTS])
def test_bad_arguments_in_process(capsys, argv, names, detail):
    code = ringenv.cli.main(argv)
    captured = capsys.readouterr()
    _check_usage_error(code, captured.out, captured.err, argv, names, detail)


@pytest.mark.parametrize("argv,names,detail", [BAD_ARGUMENTS[i] for i in (0, 4, 7, 9, 12)],
                         ids=["workers", "env", "device", "batch-size", "seconds"])
def test_bad_arguments_in_subprocess(argv, names, detail):
    p = run_cli(*argv)
    _check_usage_error(p.returncode, p.stdout, p.stderr, argv, names, detail)


@pytest.mark.parametrize("command", [[], ["tune"], ["top"]])
def test_help_fits_80_columns(command):
    p = run_cli(*command, "--help", extra_env={"COLUMNS": "80"})
    assert p.returncode == 0 and "usage: ringenv" in p.stdout, p.stderr
    _fits(p.stdout)


def test_version_prints_the_package_version(capsys):
    import ringenv

    assert ringenv.cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"ringenv {ringenv.__version__}\n"


def test_plot_without_matplotlib_names_the_extra_to_install(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed: find_spec gives None
    code = ringenv.cli.main(["tune", "CartPole-v1", "--plot", str(tmp_path / "t.png")])
    err = capsys.readouterr().err
    assert code == 2 and 'pip install "ringenv[plot]"' in err and len(err.strip().splitlines()) == 1, err


def test_nothing_but_tune_plot_imports_matplotlib():
    code = ("import sys, ringenv, ringenv.cli, ringenv.cli.tune, ringenv.cli.top, "
            "ringenv.cli._measure; ringenv.cli.build_parser(); print(sorted(m for m in sys.modules if 'matplotlib' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("module", ["ringenv", "ringenv.cli"])
def test_python_dash_m_runs_the_command_line(module):
    """``python -m ringenv`` and ``python -m ringenv.cli`` are the ``ringenv`` command."""
    done = subprocess.run([sys.executable, "-m", module, "tune", "--help"], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ringenv tune ") and "--num-envs" in done.stdout


def test_help_lists_the_options(capsys):
    assert ringenv.cli.main(["tune", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--num-envs", "--workers", "--batch-size", "--seconds", "--device", "--json", "--plot", "--seed",
                   "--spin-us", "--inline {auto,on,off}"):
        assert option in out
    assert "1 worker + inline" in out and "inline=True" in out


def test_inline_defaults_to_auto():
    assert ringenv.cli.build_parser().parse_args(["tune", "CartPole-v1"]).inline == "auto"
    assert ringenv.cli.build_parser().parse_args(["tune", "CartPole-v1", "--inline", "on"]).inline == "on"


def test_workers_list_is_parsed_sorted_and_deduplicated():
    args = ringenv.cli.build_parser().parse_args(["tune", "CartPole-v1", "--workers", "4, 2,2,1"])
    assert args.workers == [1, 2, 4]
    assert ringenv.cli.build_parser().parse_args(["tune", "CartPole-v1"]).workers == "auto"


@pytest.mark.parametrize("cores,num_envs,expected", [
    (1, 16, [1]), (2, 16, [1, 2]), (4, 16, [1, 2, 4]), (6, 16, [1, 2, 4, 6]), (12, 16, [1, 2, 4, 8, 12]),
    (16, 16, [1, 2, 4, 8, 16]), (8, 4, [1, 2, 4]), (6, 5, [1, 2, 4]),
])
def test_auto_workers(cores, num_envs, expected):
    assert auto_workers(cores, num_envs) == expected


# -- the recommendation rule ------------------------------------------------------------------------


def _config(workers, sps, tree_cores, inline=False):
    return {"workers": workers, "inline": inline, "steps_per_s": sps, "cpu": {"tree_cores": tree_cores}}


def test_recommend_the_fastest_when_nothing_is_close_and_thriftier():
    rec = tune_mod.recommend([_config(1, 500.0, 1.0), _config(2, 1000.0, 2.0), _config(4, 900.0, 1.0)])
    assert (rec["workers"], rec["fastest_workers"]) == (2, 2)
    assert "highest throughput" in rec["reason"]


@pytest.mark.parametrize("sps", [1000.0, 0.0])
def test_recommend_with_no_cpu_measured_picks_the_fastest_without_dividing_by_zero(sps):
    # A run shorter than the CPU clock's tick measures 0.00 cores everywhere (and maybe no step).
    rec = tune_mod.recommend([_config(1, sps, 0.0), _config(2, sps * 0.99, 0.0)])
    assert rec["workers"] == 1 and "highest throughput" in rec["reason"]


def test_recommend_a_thriftier_configuration_within_5_percent():
    # 4 workers: 3% slower than 2 workers with 40% less tree CPU; 8 workers: as fast, but only 10% less CPU
    rec = tune_mod.recommend([_config(2, 1000.0, 2.0), _config(4, 970.0, 1.2), _config(8, 999.0, 1.8)])
    assert (rec["workers"], rec["fastest_workers"]) == (4, 2)
    assert "within 5%" in rec["reason"] and "40% less CPU" in rec["reason"]


def test_recommend_picks_the_least_cpu_among_thrifty_ones():
    rec = tune_mod.recommend([_config(1, 960.0, 1.0), _config(2, 1000.0, 2.0), _config(3, 980.0, 1.4)])
    assert rec["workers"] == 1


@pytest.mark.parametrize("sps,tree", [(940.0, 1.0), (990.0, 1.6)], ids=["6% slower", "20% less CPU"])
def test_recommend_ignores_configurations_outside_the_thresholds(sps, tree):
    rec = tune_mod.recommend([_config(2, 1000.0, 2.0), _config(1, sps, tree)])
    assert rec["workers"] == 2


def test_recommend_names_the_inline_share():
    # the fastest is 1 worker + inline; the reason names it and the runner-up by their configuration
    rec = tune_mod.recommend([_config(1, 800.0, 1.0), _config(1, 1000.0, 1.6, inline=True), _config(2, 700.0, 1.8)])
    assert (rec["workers"], rec["inline"], rec["fastest_workers"], rec["fastest_inline"]) == (1, True, 1, True)
    assert "next best (1 worker)" in rec["reason"]
    # a thriftier configuration within 5%: 2 workers without inline; the fastest is named with + inline
    rec = tune_mod.recommend([_config(2, 1000.0, 2.0, inline=True), _config(2, 970.0, 1.2)])
    assert (rec["workers"], rec["inline"], rec["fastest_inline"]) == (2, False, True)
    assert "1,000 steps/s with 2 workers + inline" in rec["reason"]


def test_recommend_breaks_a_tie_towards_no_inline_share():
    rec = tune_mod.recommend([_config(1, 1000.0, 1.5, inline=True), _config(1, 1000.0, 1.5)])
    assert (rec["workers"], rec["inline"]) == (1, False)


def _noisy(workers, sps, tree_cores, spread, inline=False):
    """A configuration whose steps/s over the parts of its run spread by ``spread`` (a fraction)."""
    c = _config(workers, sps, tree_cores, inline)
    c["steps_per_s_parts"] = [sps * (1 - spread / 2), sps, sps, sps, sps * (1 + spread / 2)]
    return c


def test_noise_is_the_spread_of_steps_per_s_over_the_parts_of_a_run():
    assert tune_mod.noise(_noisy(1, 1000.0, 1.0, 0.08)) == pytest.approx(0.08)
    assert tune_mod.noise(_config(1, 1000.0, 1.0)) == 0.0, "no parts (a run of one step): no spread"


def test_recommend_keeps_the_default_when_the_fastest_is_ahead_by_less_than_the_noise():
    # 2 workers is 3% ahead of the default (1 worker + inline), but the runs spread by 10%
    configs = [_noisy(1, 970.0, 1.0, 0.10, inline=True), _noisy(2, 1000.0, 1.0, 0.02)]
    rec = tune_mod.recommend(configs, default=(1, True))
    assert (rec["workers"], rec["inline"], rec["default"]) == (1, True, True)
    assert rec["noise"] == pytest.approx(0.10)
    assert "AsyncVectorEnv's default, kept" in rec["reason"] and "3.0% ahead, within the noise of 10.0%" in rec["reason"]
    # beyond the noise: the fastest
    rec = tune_mod.recommend([_noisy(1, 970.0, 1.0, 0.01, inline=True), _noisy(2, 1000.0, 1.0, 0.02)],
                             default=(1, True))
    assert (rec["workers"], rec["default"]) == (2, False)
    assert "3.0% ahead of the next best (1 worker + inline), beyond the noise of 2.0%" in rec["reason"]


def test_recommend_without_the_default_measured_says_the_order_is_within_the_noise():
    rec = tune_mod.recommend([_noisy(1, 999.0, 1.0, 0.05), _noisy(2, 1000.0, 1.0, 0.05)], default=(4, False))
    assert (rec["workers"], rec["default"]) == (2, False)
    assert "0.1% ahead of the next best (1 worker), within the noise of 5.0%" in rec["reason"]
    assert "a rerun may order them the other way" in rec["reason"]


# -- which configurations --inline measures (nothing run) --------------------------------------------

PY_ENV = EnvTarget("helper_envs:CounterEnv", "factory", python_factory=lambda: None)
RUST_ENV = EnvTarget("CartPole-v1", "builtin")
BINARY_ENV = EnvTarget("CartPole-v1", "builtin", worker="target/release/ringenv-worker")
F, T = False, True


@pytest.mark.parametrize("env,num_envs,batch,workers,inline,cores,measured,skipped", [
    (PY_ENV, 16, 16, [1, 2, 4], "off", 8, [(1, F), (2, F), (4, F)], []),
    (PY_ENV, 16, 16, [1, 2, 4], "on", 2, [(1, T), (2, T), (4, T)], []),
    # auto: both where w + 1 <= cores, inline=False alone above
    (PY_ENV, 16, 16, [1, 2, 4], "auto", 4, [(1, F), (1, T), (2, F), (2, T), (4, F)], []),
    (RUST_ENV, 16, 16, [1, 2], "auto", 2, [(1, F), (1, T), (2, F)], []),
    (RUST_ENV, 16, 16, [1, 2], "auto", 1, [(1, F), (2, F)], []),
    # a worker binary's envs: auto never measures inline; on skips every count, saying why
    (BINARY_ENV, 16, 16, [1, 2], "auto", 8, [(1, F), (2, F)], []),
    (BINARY_ENV, 16, 16, [1, 2], "on", 8, [], [(1, T, "worker binary"), (2, T, "worker binary")]),
    # no env left for the main process's block
    (PY_ENV, 4, 4, [2, 4], "on", 8, [(2, T)], [(4, T, "4 envs are too few for 4 worker processes + inline "
                                                   "(needs num_envs >= 5)")]),
    (PY_ENV, 4, 4, [4], "auto", 8, [(4, F)], [(4, T, "needs num_envs >= 5")]),
    # async batches: the blocks are the processes' and the inline share's (w + 1 of them)
    (PY_ENV, 4, 2, [1, 2, 3], "on", 8, [(1, T), (3, T)],
     [(2, T, "4 envs do not split evenly over 3 blocks (2 workers + inline)")]),
    (PY_ENV, 6, 3, [1, 2], "auto", 8, [(1, T), (2, F)],
     [(1, F, "batch 3 is not whole workers of 6 envs each"),
      (2, T, "batch 3 is not whole blocks of 2 envs each over 3 blocks (2 workers + inline)")]),
    # 0 workers: one configuration, the main process stepping every env (inline), where it can be
    (PY_ENV, 16, 16, [0, 1], "auto", 2, [(0, T), (1, F), (1, T)], []),
    (RUST_ENV, 16, 16, [0, 2], "on", 2, [(0, T), (2, T)], []),
    (PY_ENV, 16, 16, [0, 1], "off", 2, [(1, F)], [(0, T, "--inline off excludes")]),
    (BINARY_ENV, 16, 16, [0, 1], "auto", 2, [(1, F)], [(0, T, "worker binary")]),
    (PY_ENV, 16, 8, [0, 2], "auto", 2, [(2, F)], [(0, T, "0 workers step all 16 envs in one block: async batches "
                                                      "need worker processes")]),
], ids=["off", "on", "auto-4-cores", "auto-rust-2-cores", "auto-1-core", "auto-binary", "on-binary", "on-too-few-envs",
        "auto-too-few-envs", "on-async", "auto-async", "0-auto", "0-on", "0-off", "0-binary", "0-async"])
def test_plan_configurations(env, num_envs, batch, workers, inline, cores, measured, skipped):
    got, got_skipped = tune_mod.plan_configurations(env, num_envs, batch, workers, inline, cores)
    assert got == measured
    assert [(s["workers"], s["inline"]) for s in got_skipped] == [(w, i) for w, i, _ in skipped]
    for s, (_, _, reason) in zip(got_skipped, skipped):
        assert reason in s["reason"], s["reason"]


def test_plan_configurations_refuses_an_unknown_inline_mode():
    with pytest.raises(ValueError, match="inline must be one of"):
        tune_mod.plan_configurations(PY_ENV, 4, 4, [1], "yes", 2)


# -- tune ------------------------------------------------------------------------------------------

CONFIG = r"^\s*(\d+(?: \+ inline| \(in-process\))?)"
#: A row of the table: workers, steps/s, noise %, p50 ms, p99 ms, tree CPU, the mark.
ROW = re.compile(CONFIG + r"\s+([\d,]+)\s+(\d+)%\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)(\s+<- recommended)?\s*$")
#: A row with --wide: workers, steps/s, noise %, µs/step, p50, p99, tree CPU, main CPU, tree and main
#: µs CPU/step, the mark.
WIDE_ROW = re.compile(CONFIG + r"\s+([\d,]+)\s+(\d+)%" + r"\s+([\d.]+)" * 7 + r"(\s+<- recommended)?\s*$")


def _flat(text: str) -> str:
    """``text`` with its line breaks (rich wraps at the terminal's width) and runs of spaces as one space."""
    return " ".join(text.split())


def _fits(text: str, width: int = 80) -> None:
    long = [line for line in text.splitlines() if len(line) > width]
    assert not long, f"lines wider than {width} columns: {long}"


def _row_config(m):
    """``(workers, inline)`` of a table row: "2" is (2, False), "1 + inline" is (1, True),
    "0 (in-process)" is (0, True)."""
    return int(m.group(1).split()[0]), m.group(1).endswith(("+ inline", "(in-process)"))


def _check_tune(stdout: str, report_path: Path, plot_path: Path, expected, kind: str, env_id: str,
                num_envs: int = 4, inline: str = "auto", wide: bool = False):
    """Checks a tune run's table (with ``wide``, of every column), JSON report and plot;
    ``expected`` is the measured configurations ``(workers, inline)`` in order."""
    expected = list(expected)
    workers = sorted({w for w, _ in expected})
    header = next(line for line in stdout.splitlines() if line.strip().startswith("workers"))
    columns = ["steps/s", "noise", "p50 ms", "p99 ms", "tree CPU"]
    more = ["µs/step", "main CPU", "tree µs CPU/step", "main µs CPU/step"]
    for column in columns + more:
        assert (column in header) == (wide or column in columns), (column, header)
    rows = [m for m in map(WIDE_ROW.match if wide else ROW.match, stdout.splitlines()) if m]
    assert [_row_config(m) for m in rows] == expected, stdout
    mark = 11 if wide else 7
    assert sum(1 for m in rows if m.group(mark)) == 1, "exactly one row is marked recommended"
    names = ", ".join(tune_mod.config_text(w, i) for w, i in expected)
    assert f"configurations {names};" in _flat(stdout)

    report = json.loads(report_path.read_text())
    assert report["schema"] == "ringenv.tune/3"
    for key in ("machine", "env", "settings", "configurations", "recommendation", "command"):
        assert key in report
    machine = report["machine"]
    assert machine["cores"] >= 1
    for key in ("platform", "python", "ringenv", "gymnasium"):
        assert isinstance(machine[key], str) and machine[key]
    assert report["env"]["kind"] == kind and report["env"]["id"] == env_id
    assert report["settings"]["num_envs"] == num_envs and report["settings"]["batch_size"] == num_envs
    assert report["settings"]["workers"] == workers and report["settings"]["device"] == "cpu"
    assert report["settings"]["inline"] == inline

    configs = report["configurations"]
    assert [(c["workers"], c["inline"]) for c in configs] == expected
    for c, m in zip(configs, rows):
        for key in ("steps_per_s", "us_per_env_step", "wall_s", "startup_s"):
            assert isinstance(c[key], float) and c[key] > 0 and math.isfinite(c[key]), key
        assert c["vector_steps"] > 0 and c["env_steps"] == c["vector_steps"] * num_envs
        assert c["steps_per_s"] == pytest.approx(c["env_steps"] / c["wall_s"])
        assert c["us_per_env_step"] == pytest.approx(1e6 / c["steps_per_s"])
        lat = c["batch_latency_ms"]
        assert 0 < lat["p50"] <= lat["p99"] <= lat["max"]
        cpu = c["cpu"]
        # CPU time comes in clock ticks (10 ms): a short run on a busy machine may read 0
        for key in ("tree_s", "main_s", "tree_cores", "main_cores", "tree_us_per_env_step", "main_us_per_env_step"):
            assert cpu[key] >= 0 and math.isfinite(cpu[key]), key
        assert cpu["workers_s"] >= 0 and (c["workers"] > 0 or cpu["workers_s"] == 0), "none without a worker"
        assert cpu["tree_s"] == pytest.approx(cpu["main_s"] + cpu["workers_s"])
        assert cpu["tree_cores"] == pytest.approx(cpu["tree_s"] / c["wall_s"])
        assert cpu["tree_us_per_env_step"] == pytest.approx(1e6 * cpu["tree_s"] / c["env_steps"])
        assert c["worker_processes"] == c["workers"], "the CPU of every worker process (and only those) is counted"
        # the table shows the same figures as the report
        assert m.group(2) == f"{c['steps_per_s']:,.0f}"
        assert m.group(3) == f"{100 * tune_mod.noise(c):.0f}"
        assert len(c["steps_per_s_parts"]) == tune_mod.PARTS
        assert m.group(7 if wide else 6) == f"{cpu['tree_cores']:.2f}"
        if wide:
            assert m.group(8) == f"{cpu['main_cores']:.2f}"

    rec = report["recommendation"]
    assert (rec["workers"], rec["inline"]) in expected and (rec["fastest_workers"], rec["fastest_inline"]) in expected
    fastest = max(configs, key=lambda c: c["steps_per_s"])
    assert (rec["fastest_workers"], rec["fastest_inline"]) == (fastest["workers"], fastest["inline"])
    assert rec["reason"] and rec["rule"]
    assert rec["arguments"] == {"num_workers": rec["workers"], "inline": rec["inline"]}
    marked = next(m for m in rows if m.group(mark))
    assert _row_config(marked) == (rec["workers"], rec["inline"])
    assert (f"recommended: {tune_mod.config_text(rec['workers'], rec['inline'])} (num_workers={rec['workers']}, "
            f"inline={rec['inline']}) - " in _flat(stdout)), stdout
    assert 0 <= rec["noise"] and f"noise of {100 * rec['noise']:.1f}%" in _flat(stdout)

    data = plot_path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 10_000, "a plot with axes, lines and labels is more than a few bytes"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert width >= 400 and height >= 300


def test_tune_builtin_in_subprocess(tmp_path):
    report, png = tmp_path / "tune.json", tmp_path / "tune.png"
    p = run_cli("tune", "CartPole-v1", *TINY, "--workers", "1,2", "--seed", "3", "--inline", "on", "--json", report,
                "--plot", png, extra_env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    _fits(p.stdout)
    _fits(p.stderr)
    assert "CartPole-v1 (ringenv built-in, Rust)" in _flat(p.stdout)
    _check_tune(p.stdout, report, png, [(1, True), (2, True)], "builtin", "CartPole-v1", inline="on")
    assert json.loads(report.read_text())["settings"]["seed"] == 3


def test_tune_factory_in_process(tmp_path, capsys):
    report, png = tmp_path / "tune.json", tmp_path / "tune.png"
    code = ringenv.cli.main(["tune", FACTORY, *TINY, "--workers", "2,1", "--inline", "off", "--json", str(report),
                             "--plot", str(png), "--wide"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"{FACTORY} (factory, Python)" in _flat(captured.out)
    _check_tune(captured.out, report, png, [(1, False), (2, False)], "factory", FACTORY, inline="off", wide=True)


def _record_vector_envs(monkeypatch):
    """Makes ``ringenv.AsyncVectorEnv`` (as tune builds it: directly, or through make_vec) record
    ``(num_workers, inline)`` as planned by each vector env built; returns the list."""
    import ringenv
    import ringenv.registration

    built = []

    class Recording(ringenv.AsyncVectorEnv):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append((self.num_workers, self.inline))

    monkeypatch.setattr(ringenv, "AsyncVectorEnv", Recording)
    monkeypatch.setattr(ringenv.registration, "AsyncVectorEnv", Recording)
    return built


@pytest.mark.parametrize("cores,expected", [(2, [(1, False), (1, True), (2, False)]), (1, [(1, False), (2, False)])])
def test_tune_inline_auto_measures_both_where_a_core_is_left_for_the_main_process(tmp_path, capsys, monkeypatch,
                                                                                     cores, expected):
    # --inline auto (the default): w worker processes alone, and w + inline where w + 1 <= cores;
    # the cores are made up, so the choice does not depend on this machine
    monkeypatch.setattr(_common, "usable_cores", lambda: cores)
    built = _record_vector_envs(monkeypatch)
    report, png = tmp_path / "tune.json", tmp_path / "tune.png"
    code = ringenv.cli.main(["tune", "CartPole-v1", "--no-builtin", *TINY, "--workers", "1,2", "--json", str(report),
                             "--plot", str(png)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    _check_tune(captured.out, report, png, expected, "gymnasium", "CartPole-v1")
    assert built == expected, "each configuration reached the vector env as measured: processes and inline share"
    assert json.loads(report.read_text())["skipped"] == []


def test_tune_0_workers_steps_every_env_in_the_main_process(tmp_path, capsys, monkeypatch):
    # --workers 0: no worker process (num_workers=0), the main process steps every env, its CPU
    # the whole tree's; measured and named like any configuration, and recommendable
    monkeypatch.setattr(_common, "usable_cores", lambda: 2)
    built = _record_vector_envs(monkeypatch)
    report, png = tmp_path / "tune.json", tmp_path / "tune.png"
    code = ringenv.cli.main(["tune", FACTORY, *TINY, "--workers", "0,1", "--json", str(report), "--plot", str(png)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    expected = [(0, True), (1, False), (1, True)]
    _check_tune(captured.out, report, png, expected, "factory", FACTORY)
    assert built == expected
    in_process = json.loads(report.read_text())["configurations"][0]
    assert in_process["worker_processes"] == 0 and in_process["cpu"]["workers_s"] == 0
    assert in_process["cpu"]["tree_s"] == in_process["cpu"]["main_s"] > 0


@pytest.mark.parametrize("extra,expected", [
    ([], [(0, True), (1, False), (1, True), (2, False)]),  # auto: the in-process baseline first
    (["--inline", "off"], [(1, False), (2, False)]),  # no main-process stepping asked for: no 0
    (["--batch-size", "2"], [(1, True), (2, False)]),  # async batches need worker processes: no 0
])
def test_tune_auto_workers_include_0_where_the_main_process_can_step_every_env(capsys, monkeypatch, extra, expected):
    monkeypatch.setattr(_common, "usable_cores", lambda: 2)
    built = _record_vector_envs(monkeypatch)
    code = ringenv.cli.main(["tune", FACTORY, *TINY, "--workers", "auto", *extra])
    out = capsys.readouterr().out
    assert code == 0
    assert built == expected, out
    assert ("0 workers (in-process)" in _flat(out)) == ((0, True) in expected)


def _tune(tmp_path, capsys, *args: str) -> tuple:
    """Runs ``ringenv tune ARGS --json FILE`` in this process, checks it exited 0, and returns
    ``(stdout, the JSON report)``."""
    report = tmp_path / "tune.json"
    code = ringenv.cli.main(["tune", *args, "--json", str(report)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out, json.loads(report.read_text())


def test_tune_inline_on_steps_a_python_share_in_the_main_process(tmp_path, capsys, monkeypatch):
    built = _record_vector_envs(monkeypatch)
    out, data = _tune(tmp_path, capsys, FACTORY, *TINY, "--workers", "1,3,4", "--inline", "on")
    assert built == [(1, True), (3, True)]
    rows = [_row_config(m) for m in map(ROW.match, out.splitlines()) if m]
    assert rows == [(1, True), (3, True)], out
    assert "4 workers + inline: skipped, 4 envs are too few for 4 worker processes + inline" in _flat(out)
    assert data["skipped"] == [{"workers": 4, "inline": True,
                                "reason": "4 envs are too few for 4 worker processes + inline (needs num_envs >= 5)"}]
    for c in data["configurations"]:
        assert c["inline"] is True and c["env_steps"] > 0
        assert c["worker_processes"] == c["workers"], "the main process is not counted as a worker"
    rec = data["recommendation"]
    assert rec["inline"] is True and rec["arguments"] == {"num_workers": rec["workers"], "inline": True}


def test_tune_inline_off_never_steps_in_the_main_process(capsys, monkeypatch):
    monkeypatch.setattr(_common, "usable_cores", lambda: 64)
    built = _record_vector_envs(monkeypatch)
    code = ringenv.cli.main(["tune", "CartPole-v1", *TINY, "--workers", "1,2", "--inline", "off"])
    out = capsys.readouterr().out
    assert code == 0
    assert built == [(1, False), (2, False)]
    assert "+ inline" not in out and "(num_workers=" in _flat(out) and "inline=False)" in _flat(out)


def test_tune_from_a_console_script_finds_factories_in_the_working_directory(tmp_path):
    # What pip's `ringenv` console script does: sys.path[0] is the script's directory, not the cwd.
    launcher = tmp_path / "bin" / "ringenv"
    launcher.parent.mkdir()
    launcher.write_text("import sys\nfrom ringenv.cli import main\nsys.exit(main())\n")
    report = tmp_path / "tune.json"
    p = run_cli("tune", FACTORY, "--seconds", "0.2", "--num-envs", "2", "--workers", "1", "--json", report,
                launcher=launcher)
    assert p.returncode == 0, p.stderr
    assert json.loads(report.read_text())["configurations"][0]["env_steps"] > 0


def test_tune_reports_an_env_that_cannot_be_built(capsys):
    # os:getcwd is callable but returns no env: a run error (exit status 1), not a usage error
    code = ringenv.cli.main(["tune", "os:getcwd", *TINY, "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 1
    assert "ringenv tune: error: os:getcwd with 1 worker failed" in err


def test_tune_async_batches_measures_recv_send_and_says_why_worker_counts_are_skipped(tmp_path, capsys):
    # 4 envs, batches of 2: 2 and 4 workers give whole-worker batches; 1 worker (a block of 4 envs
    # is more than a batch) and 3 workers (4 envs do not split evenly) are skipped, not errors
    out, data = _tune(tmp_path, capsys, "CartPole-v1", *TINY, "--batch-size", "2", "--workers", "1,2,3,4",
                      "--inline", "off")
    assert "async batches of 2 (recv/send)" in _flat(out)
    rows = [m for m in map(ROW.match, out.splitlines()) if m]
    assert [_row_config(m) for m in rows] == [(2, False), (4, False)], out
    assert "1 worker: skipped, batch 2 is not whole workers of 4 envs each" in _flat(out)
    assert "3 workers: skipped, 4 envs do not split evenly over 3 workers" in _flat(out)

    assert data["settings"]["batch_size"] == 2 and data["settings"]["workers"] == [1, 2, 3, 4]
    assert [(s["workers"], s["inline"]) for s in data["skipped"]] == [(1, False), (3, False)]
    assert [(c["workers"], c["inline"]) for c in data["configurations"]] == [(2, False), (4, False)]
    for c in data["configurations"]:
        assert c["async"] is True and c["batch_size"] == 2
        assert c["vector_steps"] > 0 and c["env_steps"] == 2 * c["vector_steps"], "a recv is 2 env steps, not 4"
        assert c["worker_processes"] == c["workers"]
    assert data["recommendation"]["workers"] in (2, 4)
    assert data["recommendation"]["arguments"]["batch_size"] == 2, "the arguments to use include the batch size"
    assert "inline=False, batch_size=2)" in _flat(out)


def test_tune_async_batches_with_inline_count_the_main_process_as_a_block(tmp_path, capsys):
    # 4 envs, batches of 2, --inline on: 1 worker + inline is 2 blocks of 2 (a batch is one block);
    # 2 workers + inline would be 3 blocks, which 4 envs do not split into evenly
    out, data = _tune(tmp_path, capsys, "CartPole-v1", *TINY, "--batch-size", "2", "--workers", "1,2", "--inline", "on")
    assert [(c["workers"], c["inline"]) for c in data["configurations"]] == [(1, True)]
    (c,) = data["configurations"]
    assert c["async"] is True and c["env_steps"] == 2 * c["vector_steps"] > 0
    assert data["skipped"] == [{"workers": 2, "inline": True,
                                "reason": "4 envs do not split evenly over 3 blocks (2 workers + inline)"}]
    assert "recommended: 1 worker + inline (num_workers=1, inline=True, batch_size=2) - " in _flat(out)


def test_tune_batch_size_equal_to_num_envs_is_not_async(tmp_path, capsys):
    out, data = _tune(tmp_path, capsys, "CartPole-v1", *TINY, "--batch-size", "4", "--workers", "3", "--inline", "off")
    assert data["skipped"] == [] and data["configurations"][0]["async"] is False
    assert data["configurations"][0]["env_steps"] == 4 * data["configurations"][0]["vector_steps"]


def test_tune_spin_us_reaches_the_vector_env(tmp_path, capsys, monkeypatch):
    # --spin-us is passed as AsyncVectorEnv(spin_us=...) and recorded; without it nothing is passed,
    # so ringenv's own wake-up policy runs as in a user's program
    from ringenv.registration import ResolvedId

    seen = []
    real = ResolvedId.make

    def recording(self, num_envs, vector_kwargs=None):
        seen.append(dict(vector_kwargs or {}))
        return real(self, num_envs, vector_kwargs)

    monkeypatch.setattr(ResolvedId, "make", recording)
    out, data = _tune(tmp_path, capsys, "CartPole-v1", *TINY, "--workers", "1", "--inline", "off", "--spin-us", "25")
    assert "spin bound 25 µs" in _flat(out)
    assert seen == [{"num_workers": 1, "inline": False, "spin_us": 25.0}]
    assert "(num_workers=1, inline=False, spin_us=25.0)" in _flat(out)
    assert data["settings"]["spin_us"] == 25.0
    out, data = _tune(tmp_path, capsys, "CartPole-v1", *TINY, "--workers", "1", "--inline", "off")
    assert seen[1] == {"num_workers": 1, "inline": False}, "no spin_us: ringenv's default policy"
    assert data["settings"]["spin_us"] is None
    assert "spin bound" not in _flat(out)


def test_tune_spin_us_zero_never_spins_and_still_measures(tmp_path, capsys):
    out, data = _tune(tmp_path, capsys, "CartPole-v1", *TINY, "--workers", "2", "--inline", "off", "--spin-us", "0")
    assert "spin bound 0 µs (never spin)" in _flat(out)
    (config,) = data["configurations"]
    assert config["env_steps"] > 0 and config["worker_processes"] == 2



def test_tune_a_worker_binary_as_binary_colon_id(worker_binary, tmp_path):
    # what the Rust `ringenv tune` did: a worker binary built on the SDK, tuned as BINARY:ID
    report = tmp_path / "tune.json"
    p = run_cli("tune", f"{worker_binary}:CartPole-v1", *TINY, "--workers", "1,2", "--spin-us", "50",
                "--env-kwargs", '{}', "--json", report, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"CartPole-v1 (Rust, worker binary {worker_binary})" in _flat(p.stdout)
    assert "spin bound 50 µs" in _flat(p.stdout) and "recommended:" in _flat(p.stdout)
    data = json.loads(report.read_text())
    assert data["env"]["kind"] == "builtin" and data["env"]["id"] == "CartPole-v1"
    assert data["env"]["kwargs"] == {} and data["settings"]["spin_us"] == 50.0
    assert data["settings"]["inline"] == "auto"
    # auto never steps a worker binary's envs inline: only its processes can run them
    assert [(c["workers"], c["inline"]) for c in data["configurations"]] == [(1, False), (2, False)]
    assert data["skipped"] == []
    for c in data["configurations"]:
        assert c["env_steps"] > 0 and c["worker_processes"] == c["workers"]
        assert c["cpu"]["workers_s"] > 0, "the worker binary's processes are measured"


def test_tune_a_worker_binary_with_inline_on_is_a_usage_error(worker_binary, capsys):
    argv = ["tune", f"{worker_binary}:CartPole-v1", *TINY, "--workers", "1,2", "--inline", "on"]
    code = ringenv.cli.main(argv)
    captured = capsys.readouterr()
    _check_usage_error(code, captured.out, captured.err, argv, "argument --inline",
                       "no worker count tried (1, 2) can have the main process step a share of the envs: a worker "
                       "binary's envs run only in its worker processes, never inline")


def test_an_unknown_id_names_the_package_form_and_that_form_imports_the_package(capsys):
    argv = ["tune", "NoSuchPackageEnv-v0", *TINY]
    code = ringenv.cli.main(argv)
    captured = capsys.readouterr()
    _check_usage_error(code, captured.out, captured.err, argv, "argument ENV", "PACKAGE:ID")
    # the form the message names: importing minigrid registers its ids
    target = resolve_env("minigrid:MiniGrid-DoorKey-8x8-v0")
    assert (target.name, target.kind) == ("MiniGrid-DoorKey-8x8-v0", "gymnasium")


def test_tune_a_worker_binary_with_workers_0_names_why_nothing_is_measured(worker_binary, capsys):
    argv = ["tune", f"{worker_binary}:CartPole-v1", *TINY, "--workers", "0"]
    code = ringenv.cli.main(argv)
    captured = capsys.readouterr()
    _check_usage_error(code, captured.out, captured.err, argv, "argument --workers",
                       "nothing to measure for the worker counts tried (0): a worker binary's envs run only in its "
                       "worker processes, never inline")


def test_tune_a_worker_binary_with_an_unknown_id_is_a_usage_error(worker_binary, capsys):
    argv = ["tune", f"{worker_binary}:NoSuchEnv-v0", *TINY]
    code = ringenv.cli.main(argv)
    captured = capsys.readouterr()
    _check_usage_error(code, captured.out, captured.err, argv, "argument ENV", "NoSuchEnv-v0")


# -- the one measurement loop -------------------------------------------------------------------------


def test_measure_counts_only_the_envs_own_worker_processes():
    # a process started before the env (a busy neighbour, an earlier env) is never counted as a worker
    import gymnasium as gym

    from ringenv.cli._measure import measure

    neighbour = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        fns = [lambda: gym.make("CartPole-v1")] * 2
        sync = measure(lambda: gym.vector.SyncVectorEnv(fns), num_envs=2, seconds=0.1, seed=0)
        assert sync.worker_processes == 0 and sync.worker_cpu_s == 0
        assert sync.main_cpu_s > 0 and sync.env_steps == 2 * sync.vector_steps > 0
        procs = measure(lambda: gym.vector.AsyncVectorEnv(fns), num_envs=2, seconds=0.2, seed=0)
        assert procs.worker_processes == 2
        figures = procs.figures()
        assert figures["cpu"]["tree_s"] == pytest.approx(figures["cpu"]["main_s"] + figures["cpu"]["workers_s"])
    finally:
        neighbour.kill()
        neighbour.wait()


_CHURN = """
import resource, sys
import gymnasium as gym
import numpy as np
from ringenv.cli import _measure

if sys.argv[1] == "measure":  # measure() settles the allocator before building the env
    _measure.measure(lambda: gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")]), num_envs=1,
                     seconds=0.0, seed=0, warmup_s=0.0)

def step():  # what a copying vector env does each step: blocks above glibc's first mmap threshold
    blocks = [np.ones(135 << 10, np.uint8) for _ in range(9)]
    del blocks

step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                    reason="glibc's dynamic mmap threshold is what settle_allocator sets up")
def test_every_measurement_starts_from_a_settled_allocator_so_no_runtime_pays_fresh_page_faults():
    # In a fresh process, glibc hands 1.2 MB of blocks back to the kernel after every step, so
    # each step faults its pages in again; once measure() has run (settle_allocator), it keeps them.
    faults = {how: int(subprocess.run([sys.executable, "-c", _CHURN, how], capture_output=True, text=True,
                                      check=True).stdout) for how in ("fresh", "measure")}
    assert faults["fresh"] > 50 * 100, faults  # ~300 pages a step: the premise on this glibc
    assert faults["measure"] < 50, faults


def test_measure_closes_the_env_when_a_step_raises():
    import gymnasium as gym

    from ringenv.cli._measure import measure

    closed = []

    class Broken(gym.vector.SyncVectorEnv):
        def step(self, actions):
            raise RuntimeError("env broke")

        def close(self, **kwargs):
            closed.append(True)
            super().close(**kwargs)

    with pytest.raises(RuntimeError, match="env broke"):
        measure(lambda: Broken([lambda: gym.make("CartPole-v1")]), num_envs=1, seconds=0.1, seed=0)
    assert closed == [True]


def test_measure_interrupted_closes_at_once_without_waiting_for_the_pending_step():
    """A Ctrl-C while a step hangs (``ringenv tune`` of an env that never returns): the env is
    closed with ``terminate=True``, which does not wait for the step, so the first Ctrl-C ends the
    command; a close without ``terminate`` (another runtime) is called plainly."""
    import gymnasium as gym

    from ringenv.cli._measure import measure

    for accepts_terminate in (True, False):
        closes = []

        class Hung(gym.vector.SyncVectorEnv):
            def step(self, actions):
                raise KeyboardInterrupt  # what Ctrl-C raises in a step that would never return

        if accepts_terminate:
            def close(self, **kwargs):
                closes.append(kwargs)
                gym.vector.SyncVectorEnv.close(self, **kwargs)
        else:
            def close(self):
                closes.append({})
                gym.vector.SyncVectorEnv.close(self)
        Hung.close = close

        with pytest.raises(KeyboardInterrupt):
            measure(lambda: Hung([lambda: gym.make("CartPole-v1")]), num_envs=1, seconds=0.1, seed=0)
        assert closes == ([{"terminate": True}] if accepts_terminate else [{}])

    # a measurement that ends well closes plainly, once (the pending-step-free close)
    closes = []

    class Fine(gym.vector.SyncVectorEnv):
        def close(self, **kwargs):
            closes.append(kwargs)
            super().close(**kwargs)

    m = measure(lambda: Fine([lambda: gym.make("CartPole-v1")]), num_envs=1, seconds=0.05, seed=0)
    assert m.vector_steps > 0 and closes == [{}]


def test_measure_spends_the_policy_time_between_recv_and_send_and_before_each_step():
    # the caller's own work (policy_s) falls between a recv and its send, and before each step
    import gymnasium as gym

    from ringenv.cli._measure import measure

    events = []
    clock = time.perf_counter

    class Recorded(gym.vector.SyncVectorEnv):
        def async_reset(self, seed=None):
            self.reset(seed=seed)

        def recv(self):
            events.append(("recv", clock()))
            return None, None, None, None, {"env_id": np.arange(1)}

        def send(self, actions, env_ids):
            events.append(("send", clock()))

        def step(self, actions):
            events.append(("step", clock()))
            return super().step(actions)

    make = lambda: Recorded([lambda: gym.make("CartPole-v1")] * 2)  # noqa: E731
    measure(make, num_envs=2, batch_size=1, seconds=0.05, seed=0, policy_s=0.002)
    pairs = list(zip(events[::2], events[1::2]))
    assert len(pairs) >= 8 and all(a[0] == "recv" and b[0] == "send" for a, b in pairs)
    assert min(b[1] - a[1] for a, b in pairs) >= 0.002
    events.clear()
    measure(make, num_envs=2, seconds=0.05, seed=0, policy_s=0.002)
    steps = [t for kind, t in events]
    assert len(steps) >= 8 and min(b - a for a, b in zip(steps, steps[1:])) >= 0.002


def _cuda_unavailable_reason():
    """The CudaUnavailableError message on this machine, or None where CUDA can be used."""
    from ringenv._staging import parse_device
    from ringenv.errors import CudaUnavailableError

    try:
        parse_device("cuda")
    except CudaUnavailableError as e:
        return str(e)
    return None


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_tune_device_cuda_without_cuda_is_a_usage_error_naming_why(capsys, device):
    why = _cuda_unavailable_reason()
    if why is None:
        pytest.skip(f"CUDA is usable here, so --device {device} is accepted: the usage error cannot be shown")
    argv = ["tune", "CartPole-v1", *TINY, "--device", device]
    code = ringenv.cli.main(argv)
    captured = capsys.readouterr()
    _check_usage_error(code, captured.out, captured.err, argv, "argument --device", f"{device!r} cannot be used")
    if device == "cuda":
        assert why in captured.err, "the CudaUnavailableError's own message says why"


def test_tune_device_cuda_in_subprocess():
    why = _cuda_unavailable_reason()
    if why is None:
        pytest.skip("CUDA is usable here, so --device cuda is accepted: the usage error cannot be shown")
    argv = ["tune", "CartPole-v1", "--device", "cuda"]
    p = run_cli(*argv)
    _check_usage_error(p.returncode, p.stdout, p.stderr, argv, "argument --device", why)
