//! `ringenv-worker`: the worker process for ringenv's built-in Rust envs. A pool starts it with
//! the descriptors of its segment and control socket; the env id arrives in the init payload.
use clap::Parser;
use ringenv_worker::{registry, worker_loop, WorkerCli};

fn main() {
    let cli = WorkerCli::parse();
    std::process::exit(worker_loop::run(&cli.endpoint_args(), registry::build_host));
}
