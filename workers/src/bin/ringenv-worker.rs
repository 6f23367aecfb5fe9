//! `ringenv-worker`: the worker program of ringenv's built-in Rust env (`CartPole-v1`). A pool starts it with the descriptors of its segment and control socket;
//! the env id arrives in the init payload. Like every worker binary made with the SDK, it also
//! answers `describe ENV_ID`, `list` and `check ENV_ID` (see `ringenv_worker::entry`).

#[global_allocator]
static ALLOCATOR: ringenv_worker::CountingAlloc = ringenv_worker::CountingAlloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let registry = ringenv_worker::registration::builtins();
    std::process::exit(ringenv_worker::entry::run_cli(registry, &args, &mut std::io::stdout().lock()));
}
