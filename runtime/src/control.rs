//! The control channel: one Unix stream socket per worker for what is rare or variable-sized
//! (the handshake, errors with the remote traceback, reset options, and payloads too large for
//! the worker's info arena; see [`crate::info_arena`]). Each end counts the messages it sent and
//! received, so tests can check that the step path stays off the socket.
//!
//! Frames are a little-endian `u32` length followed by a [`ControlMessage`] encoded with
//! `postcard` (serde). The step path never touches the socket unless a command or completion is
//! flagged as carrying a message, so empty infos cost nothing.
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
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

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.env_id {
            Some(env) => write!(f, "{}: {} (env {env})", self.kind, self.message)?,
            None => write!(f, "{}: {}", self.kind, self.message)?,
        }
        if !self.traceback.is_empty() {
            write!(f, "\n{}", self.traceback)?;
        }
        Ok(())
    }
}
impl std::error::Error for RemoteError {}

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
#[derive(Debug)]
pub enum ControlError {
    /// The peer closed the socket (it exited).
    Closed,
    /// Nothing arrived within the timeout.
    Timeout,
    /// A frame was malformed: says how.
    Protocol(String),
    /// The socket failed.
    Io(std::io::Error),
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::Closed => write!(f, "the control socket was closed by the peer"),
            ControlError::Timeout => write!(f, "no control message arrived in time"),
            ControlError::Protocol(why) => write!(f, "malformed control message: {why}"),
            ControlError::Io(e) => write!(f, "control socket error: {e}"),
        }
    }
}
impl std::error::Error for ControlError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ControlError::Io(e) => Some(e),
            _ => None,
        }
    }
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
    /// larger than [`MAX_FRAME`].
    pub fn send(&mut self, message: &ControlMessage) -> Result<(), ControlError> {
        let body = postcard::to_allocvec(message).map_err(|e| ControlError::Protocol(e.to_string()))?;
        if body.len() > MAX_FRAME {
            return Err(ControlError::Protocol(format!("frame of {} bytes exceeds {MAX_FRAME}", body.len())));
        }
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.extend_from_slice(&body);
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
        // Grow the buffer as bytes arrive: a corrupt length must not allocate up to MAX_FRAME.
        let mut body = Vec::new();
        (&mut self.stream).take(len as u64).read_to_end(&mut body).map_err(mid_frame)?;
        if body.len() != len {
            return Err(ControlError::Closed);
        }
        self.counts.1 += 1;
        postcard::from_bytes(&body).map_err(|e| ControlError::Protocol(e.to_string()))
    }
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
}
