//! The parsing properties fuzzed by `fuzz/fuzz_targets/*.rs` (cargo-fuzz, nightly) and checked
//! on stable by `tests/rust/proptest_parsing.rs`, which includes this file with `#[path]`.
//!
//! Everything here reads bytes another process controls: the segment header a worker validates
//! before touching the segment, the 16-byte descriptors popped from the rings, and the frames of
//! the control socket. Each function takes arbitrary bytes and panics only when a property is
//! violated (a parser that panics violates the first of them):
//!
//! - `header::read` returns `Ok` or a [`HeaderError`]; an `Ok` layout re-encodes to a header that
//!   reads back equal, fits the mapping, and has every region inside it.
//! - A `Command`'s kind decodes iff its code is known; a decoded command and a completion
//!   re-encode to the same bytes through their constructors.
//! - `postcard` decoding of a `ControlMessage` returns `Ok` or `Err`; what decodes re-encodes and
//!   decodes to the same message. `ControlChannel::recv` on any byte stream that then closes
//!   returns messages, then an error, and never hangs.
//!
//! ```text
//! properties::header(&bytes);      // fuzz target `header`
//! properties::descriptor(&bytes);  // fuzz target `descriptor`: descriptors and control frames
//! ```
#![allow(dead_code)]

use ringenv_runtime::HEADER_REGION;
use ringenv_runtime::{
    read_header, write_header, ArraySpec, Command, CommandKind, Completion, ControlChannel, ControlError,
    ControlMessage, DType, HeaderError, InfoArena, Layout,
};
use std::io::Write;
use std::time::Duration;

/// Largest input the stream property writes to a socket: below a Unix socket's buffer, so the
/// write never blocks waiting for the reader.
pub const MAX_STREAM: usize = 64 * 1024;

/// A cursor over the fuzz input that yields zeroes once it is exhausted.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(std::array::from_fn(|_| self.u8()))
    }
}

fn dtype(b: u8) -> DType {
    DType::from_code(1 + u32::from(b % 12)).expect("codes 1..=12 exist")
}

fn spec(bytes: &mut Bytes<'_>) -> ArraySpec {
    let dtype = dtype(bytes.u8());
    let ndim = bytes.u8() % 3;
    let shape: Vec<usize> = (0..ndim).map(|_| usize::from(bytes.u8() % 5)).collect();
    ArraySpec::new(dtype, &shape)
}

/// A small valid layout chosen by the input, or `None` when the choice is invalid.
fn layout(bytes: &mut Bytes<'_>) -> Option<Layout> {
    let num_envs = 1 + usize::from(bytes.u8() % 16);
    let num_workers = 1 + usize::from(bytes.u8()) % num_envs;
    let depth = 2 + usize::from(bytes.u8() % 3);
    let (n_obs, n_act) = (bytes.u8() % 3, bytes.u8() % 3);
    let obs = (0..n_obs).map(|_| spec(bytes)).collect();
    let action = (0..n_act).map(|_| spec(bytes)).collect();
    let reward = if bytes.u8().is_multiple_of(2) { DType::F32 } else { DType::F64 };
    Layout::new(num_envs, num_workers, depth, obs, action, reward).ok()
}

/// Reads `page` as a header of a `mapped`-byte segment and checks what comes back.
fn read_and_check(page: &[u8], mapped: usize) {
    match read_header(page, mapped) {
        Ok(layout) => {
            let total = layout.total_size();
            assert!(total <= mapped, "accepted a {total}-byte layout in a {mapped}-byte mapping");
            assert!(layout.depth >= 2 && layout.num_workers >= 1 && layout.num_workers <= layout.num_envs);
            let last_slot_end = layout.slot_offset(layout.depth - 1) + layout.slot_stride();
            assert!(last_slot_end <= total, "slots end at {last_slot_end}, past the segment's {total} bytes");
            let last_command = layout.command_offset(layout.num_workers - 1) + layout.command_stride();
            assert!(last_command <= layout.slots_offset(), "command regions overlap the slots");
            let mut again = vec![0u8; HEADER_REGION];
            write_header(&mut again, &layout);
            assert_eq!(read_header(&again, mapped), Ok(layout), "a re-encoded header reads back differently");
        }
        Err(e) => {
            // Every error renders (the worker sends the text to the main process).
            assert!(!e.to_string().is_empty());
            if let HeaderError::TooSmall { mapped: m, .. } = e {
                assert_eq!(m, mapped);
            }
        }
    }
}

/// The header property. The first byte picks the mode: even, the rest is the raw header page
/// (after an 8-byte mapping size); odd, the rest chooses a small valid layout, whose header is
/// then patched with (offset, value) pairs, so mutations start from a header that passes the
/// magic and version checks and reach the layout and offset validation.
pub fn header(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut bytes = Bytes(rest);
    let mut page = vec![0u8; HEADER_REGION];
    let mapped;
    if mode % 2 == 0 {
        mapped = (bytes.u64() % (1 << 40)) as usize;
        let raw = bytes.0;
        let n = raw.len().min(HEADER_REGION);
        page[..n].copy_from_slice(&raw[..n]);
    } else {
        let Some(layout) = layout(&mut bytes) else { return };
        write_header(&mut page, &layout);
        mapped = match bytes.u8() % 4 {
            0 => layout.total_size() - 1,
            1 => layout.total_size() + usize::from(bytes.u8()),
            _ => layout.total_size(),
        };
        // Patches: a 2-byte offset into the page, a width of 1, 2, 4 or 8 bytes, a value.
        while bytes.0.len() >= 3 {
            let offset = usize::from(u16::from_le_bytes([bytes.u8(), bytes.u8()])) % HEADER_REGION;
            let width = 1usize << (bytes.u8() % 4);
            let value = bytes.u64().to_le_bytes();
            let end = (offset + width).min(HEADER_REGION);
            page[offset..end].copy_from_slice(&value[..end - offset]);
        }
    }
    read_and_check(&page, mapped);
}

/// The descriptor property: the first 16 bytes as a `Command` and as a `Completion`, then all
/// of the input as a postcard `ControlMessage` and as a control-socket byte stream.
pub fn descriptor(data: &[u8]) {
    let mut raw = [0u8; 16];
    let n = data.len().min(16);
    raw[..n].copy_from_slice(&data[..n]);
    command_and_completion(raw);
    info_arena(data);
    control_message(data);
    control_stream(&data[..data.len().min(MAX_STREAM)]);
}

fn command_and_completion(raw: [u8; 16]) {
    let code = u16::from_le_bytes([raw[0], raw[1]]);
    let flags = u16::from_le_bytes([raw[2], raw[3]]);
    let c: Command = bytemuck::pod_read_unaligned(&raw);
    match c.kind() {
        Ok(kind) => {
            assert!((1..=4).contains(&code) && kind as u16 == code, "code {code} decoded as {kind:?}");
            assert_eq!(c.has_message(), flags & 1 != 0);
            let again = Command::new(kind, c.slot, c.seq, c.has_message());
            if flags <= 1 {
                assert_eq!(bytemuck::bytes_of(&again), &raw, "a command does not re-encode to its bytes");
            }
            if kind == CommandKind::Close {
                assert_eq!(again.kind(), Ok(CommandKind::Close));
            }
        }
        Err(e) => {
            assert!(!(1..=4).contains(&code), "known code {code} refused");
            assert_eq!(e.kind, code);
            assert!(e.to_string().contains(&code.to_string()));
        }
    }
    let k: Completion = bytemuck::pod_read_unaligned(&raw);
    let cflags = u32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]);
    assert_eq!((k.is_error(), k.has_message()), (cflags & 1 != 0, cflags & 2 != 0));
    if cflags == 0 || cflags == 2 || cflags == 3 {
        let again = Completion::new(k.worker, k.seq, k.is_error(), k.has_message());
        assert_eq!(bytemuck::bytes_of(&again), &raw, "a completion does not re-encode to its bytes");
    }
}

/// Any bytes as an info arena: its recorded length and sequence number are bounds-checked.
fn info_arena(data: &[u8]) {
    let mut bytes = data.to_vec();
    let seq = bytes.get(8..16).map_or(0, |s| u64::from_ne_bytes(s.try_into().expect("8 bytes")));
    let arena = InfoArena::new(&mut bytes, 0);
    match arena.read(seq) {
        Ok(payload) => assert!(payload.len() <= arena.capacity(), "a payload beyond the capacity was read"),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    assert!(arena.read(seq.wrapping_add(1)).is_err(), "another command's payload was accepted");
}

fn control_message(data: &[u8]) {
    if let Ok(message) = postcard::from_bytes::<ControlMessage>(data) {
        let bytes = postcard::to_allocvec(&message).expect("a decoded message encodes");
        assert_eq!(postcard::from_bytes::<ControlMessage>(&bytes).ok(), Some(message));
    }
}

fn control_stream(data: &[u8]) {
    let (mut writer, reader) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    writer.write_all(data).expect("the input fits the socket buffer");
    drop(writer);
    let mut channel = ControlChannel::new(reader);
    // Each message takes at least a 4-byte length and a 1-byte tag, so the loop is bounded.
    for _ in 0..=data.len() / 5 + 1 {
        match channel.recv(Some(Duration::from_secs(10))) {
            Ok(_) => continue,
            Err(ControlError::Closed | ControlError::Protocol(_)) => return,
            Err(e) => panic!("a closed stream must end in Closed or Protocol, got {e}"),
        }
    }
    panic!("more messages than the stream has bytes for");
}
