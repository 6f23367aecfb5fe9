//! A worker binary's entry point: one macro (or [`Registry::main`]) turns a crate into a program
//! that a ringenv pool starts as a worker, and that Python asks for an env's spaces.
//!
//! The program understands:
//!
//! - `PROGRAM describe ID [--env-kwargs JSON]`: prints one line of JSON,
//!   `{"id", "observation_space", "action_space", "arguments"}` (see
//!   [`Registry::describe`]), or `{"error": {"kind", "message"}}` with exit status 1.
//!   `ringenv.make_vec(..., worker=PROGRAM)` runs this before starting any worker.
//! - `PROGRAM list`: prints `{"name", "envs": [{"id", "arguments"}, ...]}`.
//! - `PROGRAM check ID [--env-kwargs JSON] [--steps N] [--seed S]`: runs
//!   [`check_env`](crate::check_env) and prints its report; exit status 0 when it passed, 1
//!   when it found problems (or stepped nothing, `--steps 0`).
//!
//! - `--kwargs` is an older spelling of `--env-kwargs` (what Python passes).
//! - `PROGRAM --segment-fd N --control-fd N --worker K --parent-pid P`: the arguments a pool's
//!   supervisor appends ([`WorkerCli`]); the program serves as worker `K` until the pool closes
//!   it, building its envs from the JSON init payload `{"id", "kwargs"}`.
//!
//! ```
//! use ringenv_worker::{entry, envs::CartPole, Registry};
//! let registry = Registry::new("demo").env("CartPole-v1", CartPole::new);
//! let mut out = Vec::new();
//! let args = ["demo", "describe", "demo:CartPole-v1"].map(String::from);
//! assert_eq!(entry::run_cli(&registry, &args, &mut out), 0);
//! let description: serde_json::Value = serde_json::from_slice(&out).unwrap();
//! assert_eq!(description["action_space"], serde_json::json!({"kind": "discrete", "n": 2, "start": 0}));
//! ```

use crate::check::CheckOptions;
use crate::{worker_loop, Registry, WorkerCli};
use clap::Parser;
use ringenv_runtime::RemoteError;
use serde_json::{json, Value};
use std::io::Write;

/// The subcommands a worker binary understands besides the worker arguments. (Python tells a
/// worker binary from another program by the start of this description, "A ringenv worker
/// binary: serves Rust envs", before running its `list`: keep it.)
#[derive(Parser, Debug)]
#[command(about = "A ringenv worker binary: serves Rust envs to ringenv pools (started by a pool with \
             --segment-fd, --control-fd, --worker and --parent-pid), and describes and checks them.")]
enum Command {
    /// Print the spaces of env ID as JSON (what ringenv.make_vec reads).
    Describe {
        /// The env's registry id (optionally NAME:ID).
        id: String,
        /// Keyword arguments of the env, a JSON object (also spelled --kwargs).
        #[arg(long = "env-kwargs", visible_alias = "kwargs", value_name = "JSON", default_value = "{}")]
        kwargs: String,
    },
    /// Print the env ids and their arguments as JSON.
    List,
    /// Run check_env on env ID and print the report (exit status 1 when it finds problems).
    Check {
        /// The env's registry id (optionally NAME:ID).
        id: String,
        /// Keyword arguments of the env, a JSON object (also spelled --kwargs).
        #[arg(long = "env-kwargs", visible_alias = "kwargs", value_name = "JSON", default_value = "{}")]
        kwargs: String,
        /// Steps per run.
        #[arg(long, default_value_t = 1000)]
        steps: usize,
        /// Seed of the resets and the random actions.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

fn parse_kwargs(text: &str) -> Result<Value, RemoteError> {
    serde_json::from_str(text).map_err(|e| RemoteError {
        kind: "ValueError".into(),
        message: format!("--env-kwargs is not JSON: {e}"),
        ..Default::default()
    })
}

fn error_json(e: &RemoteError) -> Value {
    json!({"error": {"kind": e.kind, "message": e.message, "traceback": e.traceback}})
}

/// Runs the program with `args` (`args[0]` the program name), writing results to `out`;
/// returns the exit status (see the [module docs](self) for an example). Worker mode (the
/// pool's four arguments) serves until the pool closes the worker, with
/// [`worker_loop::run`]'s exit statuses.
pub fn run_cli(registry: &Registry, args: &[String], out: &mut dyn Write) -> i32 {
    let worker_mode = args.get(1).is_some_and(|a| a.starts_with("--") && a != "--help" && a != "--version");
    if worker_mode {
        return match WorkerCli::try_parse_from(args) {
            Ok(cli) => worker_loop::run(&cli.endpoint_args(), |init, endpoint| registry.build_host(init, endpoint)),
            Err(e) => {
                let _ = e.print();
                2
            }
        };
    }
    let command = match Command::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let (text, status) = match command {
        Command::Describe { id, kwargs } => match parse_kwargs(&kwargs).and_then(|k| registry.describe(&id, &k)) {
            Ok(d) => (d.to_string(), 0),
            Err(e) => (error_json(&e).to_string(), 1),
        },
        Command::List => {
            let envs: Vec<Value> = registry
                .ids()
                .into_iter()
                .map(|id| json!({"id": id, "arguments": registry.arguments(id).unwrap_or_default()}))
                .collect();
            (json!({"name": registry.name(), "envs": envs}).to_string(), 0)
        }
        Command::Check { id, kwargs, steps, seed } => {
            let options = CheckOptions { steps, seed };
            match parse_kwargs(&kwargs).and_then(|k| registry.check(&id, &k, &options)) {
                Ok(report) => (report.to_string(), i32::from(!report.is_ok())),
                Err(e) => (format!("check {id}: {e}"), 1),
            }
        }
    };
    match writeln!(out, "{text}") {
        Ok(()) => status,
        Err(_) => 1,
    }
}

impl Registry {
    /// Runs the program with the process's arguments (see the [module docs](crate::entry)) and
    /// exits with its status.
    pub fn main(self) -> ! {
        let args: Vec<String> = std::env::args().collect();
        let status = run_cli(&self, &args, &mut std::io::stdout().lock());
        std::process::exit(status)
    }
}

/// Defines `main` for a worker binary serving the given env ids, and makes
/// [`CountingAlloc`](crate::CountingAlloc) the global allocator (so that `check` measures
/// allocation in `step`). The registry is named after the crate (`CARGO_PKG_NAME`), so ids may be
/// asked for as `crate_name:ID`.
///
/// ```
/// // src/main.rs of a crate: the whole file.
/// ringenv_worker::worker_main! {
///     "CartPole-v1" => ringenv_worker::envs::CartPole::new,            // no arguments
///     "Poles-v0" => |n: usize| match n {                                // typed arguments, Result
///         0 => Err("n must be positive"),
///         _ => Ok(ringenv_worker::envs::CartPole::new()),
///     },
/// }
/// # // (rustdoc wraps this example in its own `main`; the macro's `main` and allocator are
/// # // still compiled, and the allocator counts:)
/// # assert!(ringenv_worker::alloc::allocations().is_some());
/// ```
#[macro_export]
macro_rules! worker_main {
    ($($id:expr => $make:expr),+ $(,)?) => {
        #[global_allocator]
        static RINGENV_WORKER_ALLOCATOR: $crate::CountingAlloc = $crate::CountingAlloc;

        fn main() {
            $crate::Registry::new(env!("CARGO_PKG_NAME"))
                $(.env($id, $make))+
                .main()
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::CartPole;

    fn registry() -> Registry {
        Registry::new("demo").env("CartPole-v1", CartPole::new).env("Poles-v0", |n: usize| match n {
            0 => Err("n must be positive"),
            _ => Ok(CartPole::new()),
        })
    }

    fn run(args: &[&str]) -> (i32, String) {
        let mut out = Vec::new();
        let args: Vec<String> = std::iter::once("demo").chain(args.iter().copied()).map(String::from).collect();
        let status = run_cli(&registry(), &args, &mut out);
        (status, String::from_utf8(out).unwrap())
    }

    #[test]
    fn env_kwargs_and_its_older_spelling_kwargs_are_one_option() {
        for option in ["--env-kwargs", "--kwargs"] {
            let (status, out) = run(&["describe", "Poles-v0", option, "4"]);
            let description: Value = serde_json::from_str(&out).unwrap();
            assert_eq!((status, &description["observation_space"]["shape"]), (0, &json!([4])), "{option}: {out}");
            let (status, out) = run(&["describe", "Poles-v0", option, "0"]);
            assert!(status == 1 && out.contains("n must be positive"), "{option}: {out}");
            let (status, out) = run(&["check", "Poles-v0", option, "3", "--steps", "300"]);
            assert_eq!(status, 0, "{option}: {out}");
            assert!(out.trim_end().ends_with("PASSED"), "{out}");
        }
        let (status, out) = run(&["describe", "Poles-v0", "--env-kwargs", "{nope"]);
        assert_eq!(status, 1);
        assert!(out.contains("--env-kwargs is not JSON"), "{out}");
    }

    #[test]
    fn check_of_an_unknown_id_lists_the_ids_and_a_check_of_no_step_fails() {
        let (status, out) = run(&["check", "Nope-v0"]);
        assert_eq!(status, 1);
        assert!(out.contains(r#"no env "Nope-v0" in demo; its ids are ["CartPole-v1", "Poles-v0"]"#), "{out}");
        let (status, out) = run(&["check", "CartPole-v1", "--steps", "0"]);
        assert_eq!(status, 1, "{out}");
        assert!(out.contains("NOTHING CHECKED"), "{out}");
    }
}
