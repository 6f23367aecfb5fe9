//! `ringenv`: the command line as a Rust binary, for Rust envs with no Python involved.
//!
//! `ringenv tune ENV` steps ENV through a ringenv pool with each worker count in turn and
//! recommends one, like the Python package's `ringenv tune` (docs/CLI.md) but for Rust envs
//! only: a built-in id (`CartPole-v1`, `BlocksWorld-v0`, served by this binary itself, through
//! its hidden `worker` subcommand) or `BINARY:ID` for a worker binary built with the SDK
//! (`worker_main!`).
//! Build it with `cargo build --release -p ringenv-cli`.

mod actions;
mod target;
mod tune;

use clap::{Parser, Subcommand};

/// ringenv's command line for Rust envs.
#[derive(Parser, Debug)]
#[command(name = "ringenv", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure ENV with each worker count and recommend one.
    Tune(tune::TuneArgs),
    /// Serve built-in envs as a pool's worker (started by the pool, not by hand).
    #[command(hide = true)]
    Worker(ringenv_worker::WorkerCli),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Tune(args) => tune::run(&args),
        Command::Worker(w) => std::process::exit(ringenv_worker::worker_loop::run(
            &w.endpoint_args(),
            ringenv_worker::registry::build_host,
        )),
    };
    if let Err(e) = result {
        eprintln!("ringenv tune: error: {e}");
        std::process::exit(1);
    }
}
