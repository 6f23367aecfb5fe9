// The configuration of a pool of ringenv's built-in Rust envs served by the `ringenv-worker`
// binary, shared by the workers crate's integration tests (tests/rust/pool.rs, async_batch.rs,
// corrupt.rs, process_lifetime.rs). Included with #[path], so each test crate compiles its own
// copy and `CARGO_BIN_EXE_ringenv-worker` names its binary.
#![allow(dead_code)]

use ringenv_runtime::{DType, Layout, PoolConfig, WorkerCommand};
use ringenv_worker::registration;

/// A pool configuration of `num_envs` envs of the built-in `id` over `num_workers` workers, two
/// slots deep, float32 rewards, default kwargs.
pub fn builtin_config(id: &str, num_envs: usize, num_workers: usize) -> PoolConfig {
    let kwargs = serde_json::Value::Null;
    let (obs, act) = registration::spaces(id, &kwargs).unwrap();
    let layout = Layout::single(num_envs, num_workers, 2, obs.array_spec(), act.array_spec(), DType::F32).unwrap();
    let init = serde_json::to_vec(&registration::RustInit { id: id.into(), kwargs }).unwrap();
    PoolConfig::new(layout, WorkerCommand::new(env!("CARGO_BIN_EXE_ringenv-worker")), init)
}
