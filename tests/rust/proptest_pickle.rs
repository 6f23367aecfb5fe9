//! Property tests of the Rust workers' pickle reader (`ringenv_worker::pickle::decode`), which
//! reads reset options a main process sent: arbitrary bytes, and streams built from the opcodes
//! it knows, decode to a value or a `PickleError`, never panic, and never allocate much more
//! than the input (a 5-byte `LONG_BINPUT` once asked for 128 GiB).
//!
//! A global allocator here tracks the bytes live on the calling thread, so each case measures
//! the peak of its own `decode` call. The case count is proptest's (256, or `PROPTEST_CASES`).

use proptest::collection::vec;
use proptest::prelude::*;
use ringenv_worker::pickle;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Bytes live on this thread now, and the most since the last reset. Const-initialised with
    /// no destructor: touching them never allocates.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

struct Tracking;

fn track(delta: isize) {
    let _ = LIVE.try_with(|l| {
        l.set(l.get() + delta);
        let _ = PEAK.try_with(|p| p.set(p.get().max(l.get())));
    });
}

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as isize));
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        track(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// Decodes `data` and returns the peak of bytes allocated during the call (the result dropped).
fn peak_of_decode(data: &[u8]) -> usize {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    drop(std::hint::black_box(pickle::decode(data)));
    (PEAK.with(Cell::get) - base).max(0) as usize
}

/// The allowed peak for an input of `n` bytes: the reader's values, stack and memo are each a
/// small multiple of the input (a JSON value is 32 bytes, a map entry a few more), plus the
/// 16 MiB bound on strings fetched from the memo.
fn bound(n: usize) -> usize {
    (16 << 20) + 1024 * n + 4096
}

/// Fragments of the opcodes the reader knows, with arguments (some forged: huge memo indexes,
/// lengths past the end), so that streams nest, memoise and fetch.
fn fragment() -> impl Strategy<Value = Vec<u8>> {
    let fixed: Vec<&'static [u8]> = vec![
        b"\x80\x05",
        b"\x95\x08\x00\x00\x00\x00\x00\x00\x00",
        b".",
        b"(",
        b"N",
        b"\x88",
        b"\x89",
        b"J\x01\x00\x00\x00",
        b"K\x07",
        b"M\x01\x02",
        b"\x8a\x02\x01\x80",
        b"G?\xf0\x00\x00\x00\x00\x00\x00",
        b"\x8c\x03abc",
        b"X\x02\x00\x00\x00hi",
        b"X\xff\xff\xff\xff",
        b"\x8d\xff\xff\xff\xff\xff\xff\xff\xff",
        b"}",
        b"]",
        b")",
        b"t",
        b"\x85",
        b"\x86",
        b"\x87",
        b"s",
        b"u",
        b"a",
        b"e",
        b"\x94",
        b"q\x00",
        b"q\xff",
        b"r\xff\xff\xff\xff",
        b"r\x00\x00\x01\x00",
        b"h\x00",
        b"h\xff",
        b"j\xff\xff\xff\xff",
    ];
    prop_oneof![
        4 => proptest::sample::select(fixed).prop_map(<[u8]>::to_vec),
        1 => vec(any::<u8>(), 0..8),
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_decode_or_refuse_within_bounded_memory(data in vec(any::<u8>(), 0..512)) {
        let peak = peak_of_decode(&data);
        prop_assert!(peak <= bound(data.len()), "{} bytes of input allocated {peak} bytes", data.len());
    }

    #[test]
    fn opcode_streams_decode_or_refuse_within_bounded_memory(parts in vec(fragment(), 0..300)) {
        let data = parts.concat();
        let peak = peak_of_decode(&data);
        prop_assert!(peak <= bound(data.len()), "{} bytes of input allocated {peak} bytes", data.len());
    }
}

#[test]
fn a_five_byte_memo_index_allocates_nothing_wild() {
    // None, then LONG_BINPUT 0xffffffff: asked for a memo of 2^32 entries before the fix.
    let data = b"Nr\xff\xff\xff\xff.";
    let peak = peak_of_decode(data);
    assert!(peak <= bound(data.len()), "allocated {peak} bytes");
    assert!(pickle::decode(data).unwrap_err().0.contains("memo index"));
}
