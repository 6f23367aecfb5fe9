// The two-process ring harness shared by tests/rust/cross_process.rs and
// benches/ring_roundtrip.rs: a child process, started by re-executing the current binary with
// RINGENV_ECHO_FD set, attaches the segment and echoes every command back as a completion.
// Included with #[path], so each user compiles its own copy and uses a part of it.
#![allow(dead_code)]

use ringenv_runtime::{
    ArraySpec, Command, CommandKind, Completion, Consumer, DType, Layout, Probe, Ring, Segment, SpinPolicy,
    SpinSettings, Spinner,
};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Child;
use std::time::Duration;

/// The environment variable holding the segment descriptor in the child.
pub const ECHO_FD: &str = "RINGENV_ECHO_FD";
/// The environment variable holding the child's spin time in microseconds.
pub const ECHO_SPIN_US: &str = "RINGENV_ECHO_SPIN_US";

/// A one-worker segment for the echo harness.
pub fn echo_segment() -> Segment {
    let layout =
        Layout::single(1, 1, 2, ArraySpec::new(DType::F32, &[1]), ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
    Segment::create(layout).unwrap()
}

/// Starts `current_exe() args...` as the echo child of `segment`, spinning `spin` before it sleeps.
pub fn spawn_echo(segment: &Segment, args: &[&str], spin: Duration) -> Child {
    spawn_child(segment.fd().as_raw_fd(), ECHO_FD, args, &[(ECHO_SPIN_US, spin.as_micros().to_string())])
}

/// Re-executes the current binary with `args`, handing it descriptor `fd` (named by the
/// environment variable `fd_var`) and the extra environment `env`; its stdout is discarded.
fn spawn_child(fd: i32, fd_var: &str, args: &[&str], env: &[(&str, String)]) -> Child {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(args).env(fd_var, fd.to_string()).stdout(std::process::Stdio::null());
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    // SAFETY: only fcntl runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            rustix::io::fcntl_setfd(std::os::fd::BorrowedFd::borrow_raw(fd), rustix::io::FdFlags::empty())?;
            Ok(())
        });
    }
    cmd.spawn().unwrap()
}

/// The child's side: returns false when this process is not an echo child.
pub fn run_echo_child() -> bool {
    let Ok(fd) = std::env::var(ECHO_FD) else { return false };
    let spin_us: u64 = std::env::var(ECHO_SPIN_US).map(|s| s.parse().unwrap()).unwrap_or(50);
    let policy = SpinPolicy { spin: Duration::from_micros(spin_us) };
    let mut waiter = Spinner::new(SpinSettings { policy, probe: Probe::Pause });
    // SAFETY: the parent handed this descriptor to this process for the segment.
    let segment = Segment::attach(unsafe { OwnedFd::from_raw_fd(fd.parse().unwrap()) }).unwrap();
    let commands = segment.command_ring(0).acquire_consumer().unwrap();
    let completions = segment.completion_ring(0);
    loop {
        let ring = commands.ring();
        // A long timeout: a wait that times out re-announces its sleep, and a test that watched it
        // go to sleep (cross_process.rs) must not meet it between the two.
        waiter.wait(segment.command_wakeup(0).unwrap(), || ring.has_ready(), Duration::from_secs(60));
        let Some(c) = commands.pop() else { continue };
        if c.kind() == Ok(CommandKind::Close) {
            return true;
        }
        completions.push(Completion::new(0, c.seq, false, false)).unwrap();
        segment.completion_wakeup().notify();
    }
}

/// The parent's side of one round trip: returns the echoed sequence number.
pub fn round_trip(
    segment: &Segment,
    commands: &Ring<Command>,
    completions: &Consumer<Completion>,
    seq: u64,
    spin: SpinPolicy,
) -> u64 {
    commands.push(Command::new(CommandKind::Step, 0, seq, false)).unwrap();
    segment.command_wakeup(0).unwrap().notify();
    loop {
        if let Some(c) = completions.pop() {
            return c.seq;
        }
        let ring = completions.ring();
        assert!(
            // A fresh waiter: every round trip spins the whole bound (or none) before it sleeps.
            Spinner::new(SpinSettings { policy: spin, probe: Probe::Pause }).wait(
                segment.completion_wakeup(),
                || ring.has_ready(),
                Duration::from_secs(10)
            ),
            "echo child silent"
        );
    }
}

/// Tells the echo child to exit and reaps it.
pub fn close_echo(segment: &Segment, commands: &Ring<Command>, mut child: Child) {
    commands.push(Command::new(CommandKind::Close, 0, 0, false)).unwrap();
    segment.command_wakeup(0).unwrap().notify();
    assert!(child.wait().unwrap().success());
}

/// The environment variable holding the socket descriptor of a socket-echo child.
pub const SOCKET_ECHO_FD: &str = "RINGENV_SOCKET_ECHO_FD";

/// Starts `current_exe() args...` as a child echoing 16-byte messages on `socket` (the pipe-style
/// peer of the ring: what a pipe-per-env runtime does for every step).
pub fn spawn_socket_echo(socket: &std::os::unix::net::UnixStream, args: &[&str]) -> Child {
    spawn_child(socket.as_raw_fd(), SOCKET_ECHO_FD, args, &[])
}

/// The socket-echo child's side: returns false when this process is not one.
pub fn run_socket_echo_child() -> bool {
    use std::io::{Read, Write};
    let Ok(fd) = std::env::var(SOCKET_ECHO_FD) else { return false };
    // SAFETY: the parent handed this descriptor to this process.
    let mut s = std::os::unix::net::UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd.parse().unwrap()) });
    let mut buf = [0u8; 16];
    while s.read_exact(&mut buf).is_ok() {
        if s.write_all(&buf).is_err() {
            break;
        }
    }
    true
}
