//! The pool's wait policy reaches its workers, and its waiters stop spinning through long waits.
//!
//! The main process decides the pool's [`SpinSettings`] (the spin bound of `PoolConfig::spin`, and
//! whether spinners yield because the workers plus the main process outnumber the cores) and
//! records them in the segment header. Each worker here is this test binary, re-executed; it
//! answers a `Call` with the settings its endpoint's `Spinner` follows, and lingers 2 ms in each
//! step. Nothing asserted depends on timing or scheduling: settings, and counts of waits with a
//! spin phase under a policy that never spins (how a waiter learns is unit-tested in `wait.rs`).
//!
//! Its own `main` (`harness = false`): the supervisor appends `--segment-fd N ...` to a worker's
//! command line, which libtest would refuse.

#[path = "support/endpoint_args.rs"]
mod endpoint_args;
use ringenv_runtime::{
    ArraySpec, CommandKind, DType, Layout, Pool, PoolConfig, Probe, SpinPolicy, SpinSettings, WorkerCommand,
    WorkerEndpoint,
};
use std::time::Duration;

/// The init payload the worker checks.
const INIT: &[u8] = b"spin-settings-echo";
/// How long a worker lingers in each step.
const STEP_TIME: Duration = Duration::from_millis(2);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--segment-fd") {
        serve(&args);
        return;
    }
    let tests: [(&str, fn()); 2] = [
        ("workers_follow_the_pools_spin_settings", workers_follow_the_pools_spin_settings),
        (
            "a_pool_that_never_spins_has_no_wait_with_a_spin_phase",
            a_pool_that_never_spins_has_no_wait_with_a_spin_phase,
        ),
    ];
    if args.iter().any(|a| a == "--list") {
        tests.iter().for_each(|(name, _)| println!("{name}: test"));
        return;
    }
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-'));
    let ignored = args.iter().any(|a| a == "--ignored");
    for (name, test) in tests {
        if ignored || filter.is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        test();
        println!("test {name} ... ok");
    }
}

/// The worker: steps linger [`STEP_TIME`]; a call answers with the spin bound in nanoseconds and
/// the probe code its spinner follows.
fn serve(args: &[String]) {
    let endpoint_args = endpoint_args::endpoint_args(args);
    // SAFETY: the supervisor handed these two descriptors to this process for this purpose.
    let mut ep = unsafe { WorkerEndpoint::connect(&endpoint_args) }.expect("the segment is valid");
    assert_eq!(ep.recv_init().expect("an init payload"), INIT);
    ep.send_ready().expect("the main process is there");
    loop {
        let command = ep.next_command();
        let answer = match command.kind().expect("a known command kind") {
            CommandKind::Close => return,
            CommandKind::Step => {
                std::thread::sleep(STEP_TIME);
                None
            }
            CommandKind::Reset => None,
            CommandKind::Call => {
                let settings = ep.spinner().settings();
                let mut bytes = (settings.policy.spin.as_nanos() as u64).to_le_bytes().to_vec();
                bytes.extend_from_slice(&settings.probe.code().to_le_bytes());
                Some(bytes)
            }
        };
        ep.complete(command.seq, Ok(answer)).expect("the main process is there");
    }
}

fn spawn(num_workers: usize, spin: SpinPolicy) -> Pool {
    let (obs, act) = (ArraySpec::new(DType::F32, &[1]), ArraySpec::new(DType::I64, &[]));
    let layout = Layout::single(num_workers, num_workers, 2, obs, act, DType::F32).unwrap();
    let exe = std::env::current_exe().expect("the test binary");
    let mut config = PoolConfig::new(layout, WorkerCommand::new(exe), INIT.to_vec());
    config.spin = spin;
    Pool::spawn(config).expect("the workers start")
}

fn workers_follow_the_pools_spin_settings() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (num_workers, spin) in [(1, SpinPolicy::default()), (3, SpinPolicy { spin: Duration::from_micros(37) })]
        .into_iter()
        .chain([(cores, SpinPolicy::NEVER)])
    {
        let mut pool = spawn(num_workers, spin);
        let expected = SpinSettings::for_pool(spin, num_workers);
        assert_eq!(pool.segment().spin_settings(), expected);
        if num_workers >= cores {
            assert_eq!(expected.probe, Probe::Yield, "{num_workers} workers and the main process on {cores} cores");
        }
        pool.submit(CommandKind::Call, None).unwrap();
        let out = pool.wait(Some(Duration::from_secs(30))).unwrap();
        assert_eq!(out.messages.len(), num_workers, "every worker answers");
        for (w, bytes) in out.messages {
            let spin_ns = u64::from_le_bytes(bytes[..8].try_into().unwrap());
            let probe = Probe::from_code(u32::from_le_bytes(bytes[8..12].try_into().unwrap()));
            let got =
                SpinSettings { policy: SpinPolicy { spin: Duration::from_nanos(spin_ns) }, probe: probe.unwrap() };
            assert_eq!(got, expected, "worker {w} of {num_workers}");
        }
        pool.close(Duration::from_secs(5));
    }
}

fn a_pool_that_never_spins_has_no_wait_with_a_spin_phase() {
    const STEPS: u32 = 6;
    let mut pool = spawn(2, SpinPolicy::NEVER);
    for _ in 0..STEPS {
        pool.step(&[0i64, 1].map(i64::to_le_bytes).concat()).unwrap();
    }
    // Decided by the policy alone, whatever the scheduling: no wait of the main process or of a
    // worker counted a spin phase (a count of sleeps would not do: a wait may find its condition
    // already true without sleeping).
    let segment = pool.segment();
    assert_eq!(segment.completion_wakeup().spins(), 0, "the main process spun");
    for w in 0..2 {
        assert_eq!(segment.command_wakeup(w).expect("worker in range").spins(), 0, "worker {w} spun");
    }
    pool.close(Duration::from_secs(5));
}
