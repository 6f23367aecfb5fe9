//! The four arguments the supervisor appends to a worker's command line, read back by the test
//! binaries that re-execute themselves as a pool's workers.

use ringenv_runtime::EndpointArgs;

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> T {
    let at = args.iter().position(|a| a == name).unwrap_or_else(|| panic!("{name} missing"));
    args[at + 1].parse().unwrap_or_else(|_| panic!("{name} is not a number"))
}

/// `--segment-fd`, `--control-fd`, `--worker` and `--parent-pid` from `args` (panics naming a
/// missing or malformed one).
pub fn endpoint_args(args: &[String]) -> EndpointArgs {
    EndpointArgs {
        segment_fd: arg(args, "--segment-fd"),
        control_fd: arg(args, "--control-fd"),
        worker: arg(args, "--worker"),
        parent_pid: arg(args, "--parent-pid"),
    }
}
