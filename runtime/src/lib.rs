//! ringenv's runtime: the shared-memory segment, its layout, the lock-free rings, the futex
//! wake-up protocol, worker supervision, and the pool API.
//!
//! This crate knows nothing of Python. Read it bottom-up: [`dtype`] and [`layout`] (where
//! everything lives), [`header`] and [`segment`] (the memfd and its validation), [`ring`],
//! [`futex`], [`wakeup`] and [`spin`] (the lock-free data path), [`descriptor`] and [`control`] (what
//! travels), [`supervisor`] (processes), then [`pool`] (main side) and [`endpoint`] (worker side).
#![warn(missing_docs, unsafe_op_in_unsafe_fn)]

pub mod advert;
pub mod async_batch;
pub mod control;
pub mod descriptor;
pub mod dtype;
pub mod endpoint;
pub mod error;
pub mod futex;
pub mod header;
pub mod info_arena;
pub mod layout;
pub mod memory;
pub mod metrics;
pub mod monitor;
pub mod pool;
pub mod restart;
pub mod ring;
pub mod segment;
pub mod slot;
pub mod spin;
#[cfg(feature = "cuda")]
pub mod staging;
pub mod supervisor;
mod sync;
pub mod wakeup;

pub use async_batch::{RecvOrder, WorkerOutcome};
pub use control::{ControlChannel, ControlError, ControlMessage, RemoteError};
pub use descriptor::{Command, CommandKind, Completion, DescriptorError};
pub use dtype::{DType, Element};
pub use endpoint::{ConnectError, EndpointArgs, WorkerEndpoint};
pub use error::{ExitStatus, PoolError, WorkerFailure};
pub use header::HeaderError;
pub use info_arena::{InfoArena, InfoArenaError};
pub use layout::{ArraySpec, Layout, LayoutError, COMMAND_RING_CAPACITY, DEFAULT_INFO_ARENA};
pub use pool::{Outcome, Pool, PoolConfig};
pub use restart::{FailurePolicy, RestartPolicy};
pub use ring::{Consumer, Full, Ring};
pub use segment::{Segment, SegmentError};
pub use slot::{Array, SlotView};
pub use spin::{Probe, SpinPolicy, SpinSettings, Spinner};
#[cfg(feature = "cuda")]
pub use staging::{CudaStaging, HostToDevice, PinMode, StagingError};
pub use supervisor::WorkerCommand;
pub use wakeup::Wakeup;
