//! Loom models of the lock-free ring (`runtime/src/ring.rs`): push/pop in order, full, empty,
//! wrap-around, several producers, the single-consumer claim, and `has_ready` -> `pop`.
//!
//! Each model runs the ring's own code (its atomics and cells come from the crate's `sync`
//! module, loom's under `cfg(loom)`) over a heap block, through the same `Ring::init` /
//! `Ring::attach` the segment uses. Loom explores every interleaving up to the preemption bound
//! and every outcome of the C11 memory model it simulates; a value read from a cell without a
//! happens-before edge from its write fails the model as a data race, so the stamp protocol's
//! claim "a popped cell was fully written" is checked, not assumed.
//!
//! At most one thread of a model spins: a push that claimed a cell and is preempted before
//! publishing it stalls the consumer of that cell until it runs again (as in Vyukov's queue, which
//! this ring is), and loom cannot bound a model in which two threads spin on a third that it may
//! never schedule again.
//!
//! Compiles to nothing unless built with `--cfg loom`:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p ringenv-runtime --release --test loom_ring --test loom_wakeup -- --nocapture
//! ```
#![cfg(loom)]

#[path = "loom_support.rs"]
mod support;

use loom::thread;
use ringenv_runtime::{Command, CommandKind, Completion, PushError};
use support::*;

fn command(seq: u64) -> Command {
    Command::new(CommandKind::Step, (seq % 2) as u32, seq, false)
}

/// One producer pushes three commands through two cells while the consumer pops them: the ring
/// is found full and empty along the way and its first cell is reused (a wrap-around, stamp
/// `pos + capacity`). Everything arrives once, in order, intact.
#[test]
fn spsc_three_commands_through_two_cells_arrive_in_order() {
    check("spsc_three_commands_through_two_cells_arrive_in_order", || {
        let ring = ring::<Command>(2);
        let consumer = ring.acquire_consumer().unwrap();
        let producer = ring.clone();
        let t = thread::spawn(move || {
            for seq in 1..=3 {
                push_blocking(&producer, command(seq));
            }
        });
        for seq in 1..=3 {
            assert_eq!(pop_blocking(&consumer), command(seq));
        }
        t.join().unwrap();
        assert_eq!(consumer.pop(), None);
        assert!(ring.is_empty() && !ring.has_ready());
    });
}

/// Two producers (workers) push two completions each into a four-cell completion ring whose
/// positions start three pushes in, so their cells wrap around (stamps of the second lap) while
/// the producers race for them. The consumer (the main process) gets each completion exactly
/// once, each producer's in its own order. The ring has room for all four, so only the consumer
/// spins.
#[test]
fn mpsc_two_producers_wrap_around_and_lose_and_duplicate_nothing() {
    check("mpsc_two_producers_wrap_around_and_lose_and_duplicate_nothing", || {
        let ring = ring::<Completion>(4);
        let consumer = ring.acquire_consumer().unwrap();
        for seq in 0..3 {
            ring.push(Completion::new(9, seq, false, false)).unwrap();
            assert_eq!(consumer.pop().map(|c| c.seq), Some(seq));
        }
        let producers: Vec<_> = (0..2u32)
            .map(|worker| {
                let ring = ring.clone();
                thread::spawn(move || {
                    for seq in 1..=2 {
                        ring.push(Completion::new(worker, seq, false, false)).expect("room for all four");
                    }
                })
            })
            .collect();
        let mut next = [1u64; 2];
        for _ in 0..4 {
            let c = pop_blocking(&consumer);
            let w = c.worker as usize;
            assert_eq!(c.seq, next[w], "worker {w} out of order or duplicated");
            next[w] += 1;
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(next, [3, 3]);
        assert_eq!(consumer.pop(), None, "nothing beyond what was pushed");
    });
}

/// Two producers race for the one cell a concurrent pop frees in a full ring: at most one push
/// lands, a refused push gets its value back, and no unpopped value is ever overwritten.
#[test]
fn full_ring_two_producers_race_for_the_one_freed_cell() {
    check("full_ring_two_producers_race_for_the_one_freed_cell", || {
        let ring = ring::<Command>(2);
        let consumer = ring.acquire_consumer().unwrap();
        ring.push(command(1)).unwrap();
        ring.push(command(2)).unwrap();
        let producers: Vec<_> = [3, 4]
            .into_iter()
            .map(|seq| {
                let ring = ring.clone();
                thread::spawn(move || match ring.push(command(seq)) {
                    Ok(()) => Some(seq),
                    Err(PushError::Full(back)) => {
                        assert_eq!(back, command(seq), "the refused value comes back");
                        None
                    }
                    Err(e @ PushError::Corrupt(..)) => panic!("a sound ring reported {e}"),
                })
            })
            .collect();
        assert_eq!(consumer.pop(), Some(command(1)));
        let landed: Vec<u64> = producers.into_iter().filter_map(|p| p.join().unwrap()).collect();
        assert!(landed.len() <= 1, "one freed cell, yet {landed:?} landed");
        assert_eq!(consumer.pop(), Some(command(2)));
        assert_eq!(consumer.pop(), landed.first().map(|&seq| command(seq)));
        assert_eq!(consumer.pop(), None);
    });
}

/// Two handles on the same memory (two processes attaching one ring) race to claim the
/// consumer: exactly one wins.
#[test]
fn consumer_claim_has_exactly_one_winner_across_handles() {
    check("consumer_claim_has_exactly_one_winner_across_handles", || {
        let (ring, mem) = ring_in::<Command>(4);
        let other = attach::<Command>(&mem, 4);
        let t = thread::spawn(move || other.acquire_consumer().is_some());
        let here = ring.acquire_consumer().is_some();
        let there = t.join().unwrap();
        assert!(here ^ there, "claims: here {here}, there {there}");
    });
}

/// What the wait loops rely on: once `has_ready` says a descriptor is there, `pop` returns it,
/// intact, even when it was pushed through another handle (another process's mapping).
#[test]
fn has_ready_implies_the_next_pop_succeeds() {
    check("has_ready_implies_the_next_pop_succeeds", || {
        let (ring, mem) = ring_in::<Command>(2);
        let consumer = ring.acquire_consumer().unwrap();
        let producer = attach::<Command>(&mem, 2);
        let t = thread::spawn(move || {
            producer.push(command(7)).unwrap();
            producer.push(command(8)).unwrap();
        });
        for seq in [7, 8] {
            while !ring.has_ready() {
                thread::yield_now();
            }
            assert_eq!(consumer.pop(), Some(command(seq)), "has_ready said yes");
        }
        t.join().unwrap();
        assert!(!ring.has_ready());
        assert_eq!(consumer.pop(), None);
    });
}
