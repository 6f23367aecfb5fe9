//! ringenv's runtime: the shared-memory segment, its layout, the lock-free rings, the futex
//! wake-up protocol, worker supervision, and the pool API.
//!
//! This crate knows nothing of Python. Its modules are private; this file re-exports their public
//! API, so a caller names `ringenv_runtime::Pool`, never a module path.
//! Read the sources bottom-up: `layout.rs`, `segment.rs`, `ring.rs`, `wakeup.rs`, `wait.rs`, then
//! `pool.rs` (main side) and `endpoint.rs` (worker side).
#![warn(missing_docs, unsafe_op_in_unsafe_fn)]

#[cfg(not(target_os = "linux"))]
compile_error!(
    "ringenv runs on Linux only: its shared memory is a sealed memfd and its wake-ups are futexes, \
     which this target's kernel does not have (README, \"Installing it in your own project\")"
);

mod action_bounds;
mod async_batch;
mod control;
mod descriptor;
mod dtype;
mod endpoint;
mod error;
mod futex;
mod header;
mod info_arena;
pub mod infos;
mod layout;
mod memory;
mod metrics;
mod monitor;
mod pool;
mod process_id;
mod restart;
mod ring;
mod segment;
mod slot;
#[cfg(feature = "cuda")]
mod staging;
mod supervisor;
mod sync;
mod wait;
mod wakeup;

pub use action_bounds::ActionBounds;
pub use async_batch::{RecvOrder, WorkerOutcome};
pub use control::{ControlChannel, ControlError, ControlMessage, RemoteError, MAX_FRAME};
pub use descriptor::{Command, CommandKind, Completion, DescriptorError};
pub use dtype::{DType, Element};
pub use endpoint::{ConnectError, EndpointArgs, WorkerEndpoint};
pub use error::{EnvIds, ExitStatus, Failure, SpawnError, StateError, SubmitError, WaitError, WorkerFailure};
pub use futex::{DefaultFutex, Futex, LocalFutex, SharedFutex};
pub use header::{
    read as read_header, read_settings as read_header_settings, write as write_header, write_with as write_header_with,
    HeaderError, LAYOUT_VERSION, MAGIC,
};
pub use info_arena::{InfoArena, InfoArenaError, HEADER as INFO_ARENA_HEADER};
pub use layout::{
    ArraySpec, Layout, LayoutError, SlotOffsets, ARRAY_ALIGN, COMMAND_RING_CAPACITY, DEFAULT_INFO_ARENA, HEADER_REGION,
    MAX_LEAVES, MAX_NDIM,
};
pub use memory::{HeapMemory, Memory};
pub use metrics::{PoolMetrics, PoolSnapshot, WorkerMetrics, WorkerSnapshot, LAST_ERROR_BYTES};
pub use monitor::{
    list_pools, Monitor, MonitorError, PoolEntry, PoolView, WorkerView, MAX_SEGMENT_BYTES,
    MAX_WORKERS as MONITOR_MAX_WORKERS,
};
pub use pool::{
    Cancel, CloseNotice, CloseProgress, CloseReason, Outcome, Pool, PoolConfig, PoolState, CANCEL_CHECK,
    CLOSE_PATIENCE, CLOSE_TAKEN,
};
pub use process_id::current_pid;
pub use restart::{CrashLoopGuard, FailurePolicy, RestartPolicy};
pub use ring::{Consumer, Corruption, PushError, Ring, MAX_PUSH_RETRIES};
pub use segment::{ReadOnlySegment, Segment, SegmentError};
pub use slot::{Array, SeedFlags, SlotRef, SlotView};
#[cfg(feature = "cuda")]
pub use staging::{
    device_count as cuda_device_count, driver_present as cuda_driver_present, CudaStaging, HostToDevice, PinMode,
    StagingError,
};
pub use supervisor::WorkerCommand;
pub use wait::{Probe, SpinPolicy, SpinSettings, Spinner, CUT_AT, STALL, YIELD_EVERY};
pub use wakeup::Wakeup;
