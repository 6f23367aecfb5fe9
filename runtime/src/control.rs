//! The control channel: one Unix stream socket per worker for what is rare or variable-sized
//! (the handshake, errors with the remote traceback, reset options, payloads too large for the
//! info arena). Frames are a little-endian `u32` length and a `postcard`-encoded
//! [`ControlMessage`]. Each end counts its messages, so tests can check that steps stay off it.
//!
//! ```
//! use ringenv_runtime::{ControlChannel, ControlMessage};
//! use std::os::unix::net::UnixStream;
//! let (a, b) = UnixStream::pair().unwrap();
//! let (mut a, mut b) = (ControlChannel::new(a), ControlChannel::new(b));
//! a.send(&ControlMessage::Payload(vec![1, 2, 3])).unwrap();
//! assert_eq!(b.recv(None).unwrap(), ControlMessage::Payload(vec![1, 2, 3]));
//! ```

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Largest frame accepted, in bytes (1 GiB): a length beyond it means a corrupt stream.
pub const MAX_FRAME: usize = 1 << 30;

/// An error raised inside a worker, with what the caller needs to re-raise it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default, thiserror::Error)]
#[error("{kind}: {message}{}{}", .env_id.map_or(String::new(), |env| format!(" (env {env})")),
        if .traceback.is_empty() { String::new() } else { format!("\n{}", .traceback) })]
pub struct RemoteError {
    /// The env that raised it, when known (a global env id).
    pub env_id: Option<u64>,
    /// The exception type (for example `"ValueError"`) or `"panic"` for a Rust panic.
    pub kind: String,
    /// The exception message.
    pub message: String,
    /// The remote traceback (Python) or panic location (Rust), as text.
    pub traceback: String,
    /// Opaque bytes for the caller's language (a pickled exception from a Python worker).
    pub payload: Vec<u8>,
}

/// A message on the control channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlMessage {
    /// Main -> worker, first message: what to build (opaque: cloudpickled factories, or a Rust
    /// env id with its arguments).
    Init(Vec<u8>),
    /// Worker -> main: the envs are built and match the segment's layout.
    Ready,
    /// Either way: an opaque payload attached to a command or completion (reset options,
    /// infos).
    Payload(Vec<u8>),
    /// Worker -> main: a command or the start-up failed.
    Error(RemoteError),
}

/// Why a message could not be received or sent.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The peer closed the socket (it exited).
    #[error("the control socket was closed by the peer")]
    Closed,
    /// Nothing arrived within the timeout.
    #[error("no control message arrived in time")]
    Timeout,
    /// A frame was malformed: says how.
    #[error("malformed control message: {0}")]
    Protocol(String),
    /// The socket failed.
    #[error("control socket error: {0}")]
    Io(#[source] std::io::Error),
    /// A frame's buffer of `bytes` bytes could not be allocated (a process under `ulimit -v`, or
    /// with memory overcommit off): an error, not the abort of Rust's infallible allocation.
    #[error("cannot allocate {bytes} bytes for a control message (out of memory)")]
    OutOfMemory {
        /// The bytes asked for.
        bytes: usize,
    },
}

impl From<std::io::Error> for ControlError {
    fn from(e: std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionReset => ControlError::Closed,
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => ControlError::Timeout,
            _ => ControlError::Io(e),
        }
    }
}

/// One end of a control socket.
#[derive(Debug)]
pub struct ControlChannel {
    stream: UnixStream,
    /// Messages sent and received on this end.
    counts: (u64, u64),
}

impl ControlChannel {
    /// Wraps a connected stream.
    pub fn new(stream: UnixStream) -> ControlChannel {
        ControlChannel { stream, counts: (0, 0) }
    }

    /// Messages `(sent, received)` on this end so far.
    pub fn message_counts(&self) -> (u64, u64) {
        self.counts
    }

    /// The underlying stream.
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Sends one message (blocking until the kernel took it).
    ///
    /// # Errors
    /// [`ControlError::Closed`] when the peer is gone, [`ControlError::Protocol`] for a message
    /// larger than [`MAX_FRAME`], [`ControlError::OutOfMemory`] when its frame cannot be
    /// allocated.
    pub fn send(&mut self, message: &ControlMessage) -> Result<(), ControlError> {
        match message {
            ControlMessage::Init(bytes) => self.send_bytes(INIT, bytes),
            ControlMessage::Payload(bytes) => self.send_bytes(PAYLOAD, bytes),
            other => {
                let body = postcard::to_allocvec(other).map_err(|e| ControlError::Protocol(e.to_string()))?;
                self.write_frame(&[], &body)
            }
        }
    }

    /// Sends `ControlMessage::Init(bytes)` without copying `bytes` into a message first (an init
    /// payload holds the pickled factories and spaces: hundreds of MB for a big `Box` space).
    ///
    /// # Errors
    /// As [`ControlChannel::send`].
    pub fn send_init(&mut self, bytes: &[u8]) -> Result<(), ControlError> {
        self.send_bytes(INIT, bytes)
    }

    /// The frame of a variant holding bytes, as postcard encodes it (the variant's index and the
    /// length as varints, then the bytes), built with one copy of `bytes` into a buffer
    /// allocated fallibly.
    fn send_bytes(&mut self, variant: u32, bytes: &[u8]) -> Result<(), ControlError> {
        let mut head = [0u8; 2 * MAX_VARINT];
        let mut n = varint(variant as u64, &mut head);
        n += varint(bytes.len() as u64, &mut head[n..]);
        self.write_frame(&head[..n], bytes)
    }

    /// Writes the frame of a body made of `head` then `rest`: its length, then the body, from one
    /// buffer (one `write`, as the reader expects no pause inside a frame).
    fn write_frame(&mut self, head: &[u8], rest: &[u8]) -> Result<(), ControlError> {
        let len = head.len() + rest.len();
        if len > MAX_FRAME {
            return Err(ControlError::Protocol(format!("frame of {len} bytes exceeds {MAX_FRAME}")));
        }
        let mut frame = buffer(4 + len)?;
        frame.extend_from_slice(&(len as u32).to_le_bytes());
        frame.extend_from_slice(head);
        frame.extend_from_slice(rest);
        self.stream.write_all(&frame)?;
        self.counts.0 += 1;
        Ok(())
    }

    /// Receives one message, waiting at most `timeout` for it to start (`None`: forever). Once a
    /// frame has started, its rest is awaited for up to 30 s more; a peer that stalls mid-frame
    /// is a protocol error.
    ///
    /// # Errors
    /// [`ControlError::Timeout`] (also when a signal, such as Ctrl-C, interrupted the wait before
    /// the frame started: nothing was consumed, so the caller may run its handlers and call
    /// again), [`ControlError::Closed`], [`ControlError::Protocol`].
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<ControlMessage, ControlError> {
        let mut len = [0u8; 4];
        self.stream.set_read_timeout(timeout.map(|t| t.max(Duration::from_micros(1))))?;
        let first = match self.stream.read(&mut len) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Err(ControlError::Timeout),
            other => other?,
        };
        if first == 0 {
            return Err(ControlError::Closed);
        }
        self.stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        self.stream.read_exact(&mut len[first..]).map_err(mid_frame)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(ControlError::Protocol(format!("frame length {len} exceeds {MAX_FRAME}")));
        }
        // Grow the buffer as bytes arrive, a chunk at a time and fallibly: a corrupt length must
        // not allocate up to MAX_FRAME, and a large frame where memory is limited is an error.
        let mut body = Vec::new();
        while body.len() < len {
            let chunk = (len - body.len()).min(RECV_CHUNK);
            // `try_reserve` grows geometrically: O(len) copying in all.
            body.try_reserve(chunk).map_err(|_| ControlError::OutOfMemory { bytes: len })?;
            let got = (&mut self.stream).take(chunk as u64).read_to_end(&mut body).map_err(mid_frame)?;
            if got == 0 {
                return Err(ControlError::Closed);
            }
        }
        self.counts.1 += 1;
        decode(body)
    }
}

/// The variant indices of [`ControlMessage`] that hold bytes (postcard encodes a variant as its
/// index, in declaration order).
const INIT: u32 = 0;
const PAYLOAD: u32 = 2;
/// The most bytes a varint of a `u64` takes.
const MAX_VARINT: usize = 10;
/// How much the receive buffer grows at a time, in bytes (1 MiB).
const RECV_CHUNK: usize = 1 << 20;

/// An empty buffer with room for `len` bytes, allocated fallibly.
fn buffer(len: usize) -> Result<Vec<u8>, ControlError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| ControlError::OutOfMemory { bytes: len })?;
    Ok(v)
}

/// Writes `value` as a postcard varint (LEB128: 7 bits a byte, lowest first) into `out`; returns
/// its length.
fn varint(mut value: u64, out: &mut [u8]) -> usize {
    let mut n = 0;
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out[n] = byte;
            return n + 1;
        }
        out[n] = byte | 0x80;
        n += 1;
    }
}

/// Reads a postcard varint from the start of `bytes`: `(value, its length)`, or `None` when it
/// is malformed (unterminated, or past 64 bits).
fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(MAX_VARINT) {
        let bits = u64::from(byte & 0x7f);
        if i == MAX_VARINT - 1 && bits > 1 {
            return None;
        }
        value |= bits << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// The message of frame `body`. A variant holding bytes keeps `body`'s own buffer (its header
/// drained off): no second allocation of a large payload.
fn decode(mut body: Vec<u8>) -> Result<ControlMessage, ControlError> {
    let malformed = |why: &str| ControlError::Protocol(why.to_string());
    let (variant, n) = read_varint(&body).ok_or_else(|| malformed("bad variant index"))?;
    if variant == u64::from(INIT) || variant == u64::from(PAYLOAD) {
        let (len, m) = read_varint(&body[n..]).ok_or_else(|| malformed("bad payload length"))?;
        if len != (body.len() - n - m) as u64 {
            return Err(malformed("payload length does not match the frame"));
        }
        body.drain(..n + m);
        return Ok(if variant == u64::from(INIT) { ControlMessage::Init(body) } else { ControlMessage::Payload(body) });
    }
    postcard::from_bytes(&body).map_err(|e| ControlError::Protocol(e.to_string()))
}

fn mid_frame(e: std::io::Error) -> ControlError {
    match ControlError::from(e) {
        ControlError::Timeout => ControlError::Protocol("the peer stalled in the middle of a frame".into()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_eof_is_closed() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut a, mut b) = (ControlChannel::new(a), ControlChannel::new(b));
        let err =
            RemoteError { env_id: Some(3), kind: "ValueError".into(), message: "bad".into(), ..Default::default() };
        for m in [ControlMessage::Init(vec![0; 100_000]), ControlMessage::Ready, ControlMessage::Error(err)] {
            let sent = m.clone();
            let t = std::thread::spawn(move || {
                a.send(&sent).unwrap();
                a
            });
            assert_eq!(b.recv(Some(Duration::from_secs(5))).unwrap(), m);
            a = t.join().unwrap();
        }
        assert!(matches!(b.recv(Some(Duration::from_millis(10))), Err(ControlError::Timeout)));
        assert_eq!((a.message_counts(), b.message_counts()), ((3, 0), (0, 3)));
        drop(a);
        assert!(matches!(b.recv(None), Err(ControlError::Closed)));
    }

    #[test]
    fn oversized_length_is_a_protocol_error() {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&u32::MAX.to_le_bytes()).unwrap();
        let mut b = ControlChannel::new(b);
        assert!(matches!(b.recv(None), Err(ControlError::Protocol(_))));
    }

    /// Each message's frame, read raw off the socket.
    fn frame_of(message: &ControlMessage) -> Vec<u8> {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut a = ControlChannel::new(a);
        let sent = message.clone();
        let t = std::thread::spawn(move || a.send(&sent).unwrap());
        let mut len = [0u8; 4];
        b.read_exact(&mut len).unwrap();
        let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
        b.read_exact(&mut body).unwrap();
        t.join().unwrap();
        body
    }

    #[test]
    fn byte_variants_are_framed_as_postcard_encodes_them() {
        // Lengths around each varint width (1, 2, 3 bytes), and both variants holding bytes.
        for n in [0usize, 1, 127, 128, 16_383, 16_384, 300_000] {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
            for m in [ControlMessage::Init(bytes.clone()), ControlMessage::Payload(bytes.clone())] {
                let body = frame_of(&m);
                assert_eq!(body, postcard::to_allocvec(&m).unwrap(), "{n} bytes");
                assert_eq!(decode(body).unwrap(), m);
            }
        }
    }

    #[test]
    fn send_init_frames_what_send_of_init_does() {
        let bytes: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let (a, b) = UnixStream::pair().unwrap();
        let (mut a, mut b) = (ControlChannel::new(a), ControlChannel::new(b));
        let sent = bytes.clone();
        let t = std::thread::spawn(move || a.send_init(&sent).unwrap());
        assert_eq!(b.recv(Some(Duration::from_secs(5))).unwrap(), ControlMessage::Init(bytes));
        t.join().unwrap();
    }

    #[test]
    fn a_byte_variant_whose_length_disagrees_with_its_frame_is_a_protocol_error() {
        let mut body = postcard::to_allocvec(&ControlMessage::Payload(vec![1, 2, 3])).unwrap();
        body.push(0); // one byte more than the payload's length says
        assert!(matches!(decode(body), Err(ControlError::Protocol(_))));
        let body = postcard::to_allocvec(&ControlMessage::Init(vec![9; 200])).unwrap();
        assert!(matches!(decode(body[..body.len() - 1].to_vec()), Err(ControlError::Protocol(_))));
        assert!(matches!(decode(vec![0x80; 11]), Err(ControlError::Protocol(_))));
        // an unterminated varint
    }

    #[test]
    fn varints_round_trip_at_every_width() {
        let mut out = [0u8; MAX_VARINT];
        for value in [0u64, 1, 127, 128, 16_383, 16_384, u32::MAX as u64, u64::MAX] {
            let n = varint(value, &mut out);
            assert_eq!(read_varint(&out[..n]), Some((value, n)));
            assert_eq!(&out[..n], postcard::to_allocvec(&value).unwrap().as_slice(), "{value}");
        }
        assert_eq!(read_varint(&[0xff; 9]), None);
        assert_eq!(read_varint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]), None);
        // past 64 bits
    }

    #[test]
    fn a_frame_buffer_that_cannot_be_allocated_is_an_error_not_an_abort() {
        assert!(matches!(buffer(usize::MAX / 2), Err(ControlError::OutOfMemory { bytes }) if bytes == usize::MAX / 2));
        assert_eq!(buffer(16).unwrap().capacity(), 16);
    }
}
