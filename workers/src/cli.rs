//! The command line every worker accepts: the four arguments the supervisor appends.
//!
//! ```
//! use clap::Parser;
//! use ringenv_worker::WorkerCli;
//! let cli = WorkerCli::parse_from(["w", "--segment-fd", "3", "--control-fd", "4",
//!                                  "--worker", "1", "--parent-pid", "99"]);
//! assert_eq!(cli.endpoint_args().worker, 1);
//! ```

use clap::Parser;
use ringenv_runtime::EndpointArgs;

/// Arguments of a worker process (added by the pool's supervisor; not meant to be typed).
#[derive(Parser, Debug, Clone)]
#[command(name = "ringenv-worker", about = "A ringenv worker process (started by a pool, not by hand).")]
pub struct WorkerCli {
    /// Descriptor of the inherited shared memory segment.
    #[arg(long)]
    pub segment_fd: i32,
    /// Descriptor of the inherited control socket.
    #[arg(long)]
    pub control_fd: i32,
    /// This worker's index in the pool.
    #[arg(long)]
    pub worker: usize,
    /// Process id of the main process.
    #[arg(long)]
    pub parent_pid: u32,
}

impl WorkerCli {
    /// The endpoint arguments.
    pub fn endpoint_args(&self) -> EndpointArgs {
        EndpointArgs {
            segment_fd: self.segment_fd,
            control_fd: self.control_fd,
            worker: self.worker,
            parent_pid: self.parent_pid,
        }
    }
}
