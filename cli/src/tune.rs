//! `ringenv tune`: measure an env through a pool with each worker count, then recommend one.
//!
//! Per configuration: steps/s (env steps; a vector step of N envs counts N), µs per env step,
//! batch latency p50/p99 (one vector step, ms), and CPU of the whole process tree and of the main
//! process, as cores busy (CPU seconds per wall second). The recommendation is the highest
//! throughput, unless a configuration within 5% of it uses at least 25% less tree CPU: the same
//! rule as the Python `ringenv tune` (docs/CLI.md). `--spin-us` sets the pool's spin bound
//! (docs/WAKEUP.md); each row names how its spinners probe (`pause`, or `yield` when the workers
//! and the main process outnumber the cores).

use crate::{actions, target};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use ringenv_runtime::{DType, Layout, Pool, PoolConfig, Probe, SpinPolicy, WorkerCommand};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Arguments of `ringenv tune`.
#[derive(Args, Debug)]
pub struct TuneArgs {
    /// A built-in id (CartPole-v1, BlocksWorld-v0) or BINARY:ID of a worker binary.
    pub env: String,
    /// Envs in the pool.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    pub num_envs: u64,
    /// Worker counts to try: `auto` (1, 2, 4, ... up to the cores, and the cores) or a list `1,2,4`.
    #[arg(long, default_value = "auto")]
    pub workers: String,
    /// Seconds of measured stepping per configuration, after a warm-up.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Seed of the resets and of the random actions.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Constructor arguments of the env, a JSON object.
    #[arg(long, default_value = "{}")]
    pub env_kwargs: String,
    /// Write every figure to this JSON file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Bound of every wait's spin phase in µs, 0 to never spin (default: the runtime's, 100 µs;
    /// within it each waiter learns how long to spin, docs/WAKEUP.md).
    #[arg(long)]
    pub spin_us: Option<f64>,
}

/// The spin policy `--spin-us` asks for.
fn spin_policy(spin_us: Option<f64>) -> Result<SpinPolicy, String> {
    match spin_us {
        None => Ok(SpinPolicy::default()),
        Some(us) => Duration::try_from_secs_f64(us / 1e6)
            .map(|spin| SpinPolicy { spin })
            .map_err(|_| format!("argument --spin-us: must be a number of microseconds >= 0, got {us}")),
    }
}

/// USER_HZ: the unit of the times in `/proc/<pid>/stat`, 100 on Linux x86 and arm (proc(5)).
const TICKS_PER_SECOND: f64 = 100.0;

fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / TICKS_PER_SECOND // utime and stime: fields 14 and 15 of the line
}

fn worker_counts(spec: &str, num_envs: usize) -> Result<Vec<usize>, String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut counts: Vec<usize> = if spec == "auto" {
        let mut v: Vec<usize> =
            std::iter::successors(Some(1usize), |n| Some(n * 2)).take_while(|&n| n <= cores).collect();
        v.push(cores);
        v
    } else {
        spec.split(',')
            .map(|s| s.trim().parse::<usize>().ok().filter(|&n| n > 0))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| format!("argument --workers: {spec:?} is not 'auto' or a list of positive integers"))?
    };
    counts.sort_unstable();
    counts.dedup();
    counts.retain(|&w| w <= num_envs);
    if counts.is_empty() {
        return Err(format!("argument --workers: no worker count in {spec:?} is at most --num-envs ({num_envs})"));
    }
    Ok(counts)
}

fn percentile(sorted_ms: &[f64], p: f64) -> f64 {
    sorted_ms[((sorted_ms.len() - 1) as f64 * p).round() as usize]
}

/// One configuration's figures.
fn measure(t: &target::Target, args: &TuneArgs, workers: usize) -> Result<Value, String> {
    let n = args.num_envs as usize;
    let layout =
        Layout::new(n, workers, 2, t.observation.leaves(), t.action.leaves(), DType::F32).map_err(|e| e.to_string())?;
    let init = serde_json::to_vec(&json!({"env_id": t.env_id, "kwargs": t.kwargs})).expect("JSON");
    let started = Instant::now();
    let mut command = WorkerCommand::new(&t.program);
    command.args = t.args.iter().map(Into::into).collect();
    let mut config = PoolConfig::new(layout, command, init);
    config.spin = spin_policy(args.spin_us)?;
    let mut pool = Pool::spawn(config).map_err(|e| e.to_string())?;
    let spin = pool.segment().spin_settings();
    let probe = match spin.probe {
        Probe::Pause => "pause",
        Probe::Yield => "yield",
    };
    let startup_s = started.elapsed().as_secs_f64();
    let batches = actions::batches(&t.action, n, 256, args.seed)?;
    pool.reset(&(0..n as u64).map(|i| Some(args.seed + i)).collect::<Vec<_>>()).map_err(|e| e.to_string())?;
    for b in batches.iter().take(32) {
        pool.step(b).map_err(|e| e.to_string())?;
    }
    let pids = pool.worker_pids();
    let cpu = |pids: &[u32]| pids.iter().map(|&p| cpu_seconds(p)).sum::<f64>();
    let (main0, workers0) = (cpu_seconds(std::process::id()), cpu(&pids));
    let bar = ProgressBar::new((args.seconds * 1000.0) as u64);
    bar.set_style(ProgressStyle::with_template("{prefix:>10} {bar:30} {pos}/{len} ms {msg}").expect("template"));
    bar.set_prefix(format!("{workers} workers"));
    let mut latencies = Vec::new();
    let start = Instant::now();
    let budget = Duration::from_secs_f64(args.seconds);
    'run: loop {
        for b in &batches {
            let t0 = Instant::now();
            pool.step(b).map_err(|e| e.to_string())?;
            latencies.push(t0.elapsed().as_secs_f64() * 1e3);
            if latencies.len() % 256 == 0 {
                let el = start.elapsed();
                bar.set_position(el.as_millis() as u64);
                bar.set_message(format!("{:.0} steps/s", (latencies.len() * n) as f64 / el.as_secs_f64()));
                if el >= budget {
                    break 'run;
                }
            }
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let (main_s, workers_s) = (cpu_seconds(std::process::id()) - main0, cpu(&pids) - workers0);
    bar.finish_and_clear();
    pool.close(Duration::from_secs(2));
    latencies.sort_by(f64::total_cmp);
    let steps = latencies.len() * n;
    Ok(json!({
        "workers": workers,
        "env_steps": steps,
        "wall_s": wall,
        "startup_s": startup_s,
        "steps_per_s": steps as f64 / wall,
        "us_per_env_step": wall * 1e6 / steps as f64,
        "batch_latency_ms": {"p50": percentile(&latencies, 0.5), "p99": percentile(&latencies, 0.99)},
        "cpu": {"tree_cores": (main_s + workers_s) / wall, "main_cores": main_s / wall},
        "spin": {"bound_us": spin.policy.spin.as_secs_f64() * 1e6, "probe": probe},
    }))
}

/// The recommended row and the reason (the rule in the module docs).
pub fn recommend(rows: &[Value]) -> (usize, String) {
    let sps = |r: &Value| r["steps_per_s"].as_f64().unwrap_or(0.0);
    let tree = |r: &Value| r["cpu"]["tree_cores"].as_f64().unwrap_or(0.0);
    let best = (0..rows.len()).max_by(|&a, &b| sps(&rows[a]).total_cmp(&sps(&rows[b]))).unwrap_or(0);
    let frugal = (0..rows.len())
        .filter(|&i| sps(&rows[i]) >= 0.95 * sps(&rows[best]) && tree(&rows[i]) <= 0.75 * tree(&rows[best]))
        .min_by(|&a, &b| tree(&rows[a]).total_cmp(&tree(&rows[b])));
    match frugal {
        Some(i) if i != best => (
            i,
            format!(
                "within 5% of the highest throughput ({} workers) at {:.0}% less CPU",
                rows[best]["workers"],
                100.0 * (1.0 - tree(&rows[i]) / tree(&rows[best]))
            ),
        ),
        _ => (best, "the highest throughput".into()),
    }
}

/// Runs `ringenv tune`.
///
/// # Errors
/// A message naming the bad argument or the failed measurement.
pub fn run(args: &TuneArgs) -> Result<(), String> {
    if args.seconds.is_nan() || args.seconds <= 0.0 {
        return Err(format!("argument --seconds: must be positive, got {}", args.seconds));
    }
    let kwargs: Value =
        serde_json::from_str(&args.env_kwargs).map_err(|e| format!("argument --env-kwargs: not JSON: {e}"))?;
    let t = target::resolve(&args.env, kwargs)?;
    let counts = worker_counts(&args.workers, args.num_envs as usize)?;
    let bound_us = spin_policy(args.spin_us)?.spin.as_secs_f64() * 1e6;
    println!(
        "tune {} ({} envs; workers {counts:?}; {} s each; spin bound {bound_us} µs)",
        t.name, args.num_envs, args.seconds
    );
    let rows = counts.iter().map(|&w| measure(&t, args, w)).collect::<Result<Vec<_>, _>>()?;
    let (pick, reason) = recommend(&rows);
    println!(
        "{:>8} {:>12} {:>9} {:>8} {:>8} {:>9} {:>9} {:>6}",
        "workers", "steps/s", "µs/step", "p50 ms", "p99 ms", "tree CPU", "main CPU", "probe"
    );
    for (i, r) in rows.iter().enumerate() {
        println!(
            "{:>8} {:>12.0} {:>9.3} {:>8.3} {:>8.3} {:>9.2} {:>9.2} {:>6}{}",
            r["workers"].as_u64().unwrap_or(0),
            r["steps_per_s"].as_f64().unwrap_or(0.0),
            r["us_per_env_step"].as_f64().unwrap_or(0.0),
            r["batch_latency_ms"]["p50"].as_f64().unwrap_or(0.0),
            r["batch_latency_ms"]["p99"].as_f64().unwrap_or(0.0),
            r["cpu"]["tree_cores"].as_f64().unwrap_or(0.0),
            r["cpu"]["main_cores"].as_f64().unwrap_or(0.0),
            r["spin"]["probe"].as_str().unwrap_or("-"),
            if i == pick { "   <- recommended" } else { "" }
        );
    }
    println!("recommended: {} workers - {reason}", rows[pick]["workers"]);
    if let Some(path) = &args.json {
        let report = json!({"env": t.name, "num_envs": args.num_envs, "rows": rows,
                            "recommended": {"workers": rows[pick]["workers"], "reason": reason}});
        std::fs::write(path, serde_json::to_vec_pretty(&report).expect("JSON"))
            .map_err(|e| format!("argument --json: cannot write {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workers: usize, sps: f64, tree: f64) -> Value {
        json!({"workers": workers, "steps_per_s": sps, "cpu": {"tree_cores": tree}})
    }

    #[test]
    fn the_fastest_wins_unless_a_near_one_is_much_cheaper() {
        assert_eq!(recommend(&[row(1, 100.0, 1.0), row(2, 150.0, 2.0)]).0, 1);
        let (pick, reason) = recommend(&[row(1, 96.0, 1.0), row(2, 100.0, 2.0)]);
        assert_eq!(pick, 0);
        assert!(reason.contains("50% less CPU"), "{reason}");
        assert_eq!(recommend(&[row(1, 94.0, 1.0), row(2, 100.0, 2.0)]).0, 1, "more than 5% slower");
        assert_eq!(recommend(&[row(1, 99.0, 1.9), row(2, 100.0, 2.0)]).0, 1, "not 25% cheaper");
    }

    #[test]
    fn worker_lists_are_parsed_and_bounded() {
        assert_eq!(worker_counts("4,1,2,2", 3).unwrap(), vec![1, 2]);
        assert!(worker_counts("1,x", 8).is_err());
        assert!(worker_counts("0", 8).is_err());
        assert!(worker_counts("9", 8).unwrap_err().contains("--num-envs"));
        assert!(worker_counts("auto", 64).unwrap().contains(&1));
    }

    #[test]
    fn spin_bounds_are_checked() {
        assert_eq!(spin_policy(None).unwrap(), SpinPolicy::default());
        assert_eq!(spin_policy(Some(0.0)).unwrap(), SpinPolicy::NEVER);
        assert_eq!(spin_policy(Some(2.5)).unwrap().spin, Duration::from_nanos(2500));
        assert!(spin_policy(Some(-1.0)).unwrap_err().contains("--spin-us"));
        assert!(spin_policy(Some(f64::NAN)).is_err());
    }
}
