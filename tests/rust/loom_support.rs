//! Shared by the loom models (`tests/rust/loom_ring.rs`, `loom_wakeup.rs`), included with
//! `#[path]`: the model runner that counts and reports the executions loom explored (preemption
//! bound 3 unless `LOOM_MAX_PREEMPTIONS` says otherwise), and rings over a process-local memory
//! block, built with the same `Ring::init` / `Ring::attach` the segment uses.
#![allow(dead_code)]

use bytemuck::Pod;
use ringenv_runtime::Ring;
use ringenv_runtime::{HeapMemory, Memory};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Preemption bound used when `LOOM_MAX_PREEMPTIONS` is not set: loom's documentation notes
/// that 2 or 3 finds most bugs while keeping the state space tractable.
pub const DEFAULT_PREEMPTIONS: usize = 3;

/// Runs `model` under loom: every interleaving (up to the preemption bound), every weak-memory
/// outcome loom models. Prints how many executions were explored.
pub fn check(name: &str, model: impl Fn() + Sync + Send + 'static) {
    let executions = Arc::new(AtomicUsize::new(0));
    let counter = executions.clone();
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(DEFAULT_PREEMPTIONS);
    }
    let bound = builder.preemption_bound;
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        model();
    });
    let n = executions.load(Ordering::Relaxed);
    eprintln!("loom model {name}: {n} executions explored (preemption bound {bound:?})");
}

/// A fresh ring of `capacity` cells in its own zeroed block.
pub fn ring<T: Pod>(capacity: usize) -> Ring<T> {
    let mem: Arc<dyn Memory> = Arc::new(HeapMemory::new(Ring::<T>::mem_size(capacity)));
    // SAFETY: a fresh zeroed block of the right size, used by nothing else.
    unsafe { Ring::init(mem, 0, capacity) }
}

/// A second handle on the ring at offset 0 of `ring`'s memory, as another process gets with
/// `Ring::attach` (handles share nothing but the memory).
pub fn attach<T: Pod>(mem: &Arc<dyn Memory>, capacity: usize) -> Ring<T> {
    // SAFETY: the block holds a ring of this type and capacity, initialised by `ring_in`.
    unsafe { Ring::attach(mem.clone(), 0, capacity) }.expect("the ring fits")
}

/// A fresh ring of `capacity` cells and its memory block (for `attach`).
pub fn ring_in<T: Pod>(capacity: usize) -> (Ring<T>, Arc<dyn Memory>) {
    let mem: Arc<dyn Memory> = Arc::new(HeapMemory::new(Ring::<T>::mem_size(capacity)));
    // SAFETY: a fresh zeroed block of the right size, used by nothing else.
    (unsafe { Ring::init(mem.clone(), 0, capacity) }, mem)
}

/// Pushes `value`, yielding to the other modelled threads while the ring is full.
pub fn push_blocking<T: Pod>(ring: &Ring<T>, mut value: T) {
    while let Err(ringenv_runtime::PushError::Full(back)) = ring.push(value) {
        value = back;
        loom::thread::yield_now();
    }
}

/// Pops a value, yielding to the other modelled threads while the ring is empty.
pub fn pop_blocking<T: Pod>(consumer: &ringenv_runtime::Consumer<T>) -> T {
    loop {
        if let Some(v) = consumer.pop() {
            return v;
        }
        loom::thread::yield_now();
    }
}
