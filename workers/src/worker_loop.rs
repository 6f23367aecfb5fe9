//! The worker loop: join the pool, build the envs from the init payload, then serve commands
//! until told to close.
//!
//! Every command is answered with exactly one completion, in order, so the main process never
//! waits for a command a worker dropped. An env error is a failed completion carrying the
//! error; the loop goes on serving.
//!
//! ```no_run
//! use ringenv_worker::{worker_loop, registration, WorkerCli};
//! use clap::Parser;
//! let cli = WorkerCli::parse();
//! std::process::exit(worker_loop::run(&cli.endpoint_args(), registration::build_host));
//! ```

use crate::host::EnvHost;
use ringenv_runtime::{CommandKind, ControlError, EndpointArgs, RemoteError, WorkerEndpoint};

/// Builds the hosted envs from the init payload and the connected endpoint.
pub type HostBuilder<'a> = dyn FnOnce(&[u8], &WorkerEndpoint) -> Result<Box<dyn EnvHost + 'a>, RemoteError> + 'a;

/// Runs a worker to completion and returns its process exit code: 0 after a `Close` command,
/// 2 when it could not join the pool, 3 when its envs could not be built, 4 when the control
/// channel failed. Once joined, a panic that ends the process leaves its text in the worker's
/// metrics for the pool ([`crate::panic::LastWords`]).
pub fn run<'a>(
    args: &EndpointArgs,
    build: impl FnOnce(&[u8], &WorkerEndpoint) -> Result<Box<dyn EnvHost + 'a>, RemoteError> + 'a,
) -> i32 {
    // SAFETY: the supervisor handed exactly these descriptors to this process for the endpoint.
    let mut endpoint = match unsafe { WorkerEndpoint::connect(args) } {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ringenv worker {}: {e}", args.worker);
            return 2;
        }
    };
    // SAFETY: the endpoint owns the segment's mapping and is declared first, so it outlives
    // the guard (dropped first, in reverse order of declaration).
    let _last_words =
        unsafe { crate::panic::LastWords::register(endpoint.segment().worker_metrics(endpoint.worker())) };
    let init = match endpoint.recv_init() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("ringenv worker {}: {e}", args.worker);
            return 4;
        }
    };
    let mut host = match build(&init, &endpoint) {
        Ok(h) => h,
        Err(e) => {
            let _ = endpoint.send_startup_error(e);
            return 3;
        }
    };
    if endpoint.send_ready().is_err() {
        return 4;
    }
    match serve(&mut endpoint, host.as_mut()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ringenv worker {}: {e}", args.worker);
            4
        }
    }
}

/// Serves commands until `Close`.
///
/// # Errors
/// [`ControlError`] when the control channel fails (the main process is gone).
pub fn serve(endpoint: &mut WorkerEndpoint, host: &mut dyn EnvHost) -> Result<(), ControlError> {
    let depth = endpoint.segment().layout().depth;
    loop {
        let command = endpoint.next_command();
        let slot = command.slot as usize;
        let kind = match command.kind() {
            Ok(CommandKind::Close) => {
                // Said before the envs close: the pool waits as long as their close takes for a
                // worker that took its Close, and not for one that did not (a stopped or stuck one).
                endpoint.segment().worker_metrics(endpoint.worker()).set_closing();
                host.close();
                return Ok(());
            }
            Ok(k) if slot < depth => k,
            Ok(k) => {
                let message = format!("{k:?} command names slot {slot}, but the segment has {depth}");
                endpoint.complete(
                    command.seq,
                    Err(RemoteError { kind: "ProtocolError".into(), message, ..Default::default() }),
                )?;
                continue;
            }
            Err(e) => {
                let error = RemoteError { kind: "ProtocolError".into(), message: e.to_string(), ..Default::default() };
                endpoint.complete(command.seq, Err(error))?;
                continue;
            }
        };
        let payload = if command.has_message() { Some(endpoint.recv_payload()?) } else { None };
        let result = host.run(kind, &mut endpoint.slot(slot), slot, payload.as_deref());
        endpoint.complete(command.seq, result)?;
    }
}
