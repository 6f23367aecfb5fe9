//! A worker's info arena: a fixed region of the segment where the worker leaves the payload of
//! its last completion (the infos of a step or reset, typed ([`crate::infos`]) or pickled, a
//! call's results), so that per-step infos cost a `memcpy` on each side instead of a
//! control-socket message.
//!
//! Each worker owns one arena of [`crate::Layout::info_arena_bytes`] bytes: a 16-byte header,
//! `len: u64` then `seq: u64`, then `len` payload bytes. The worker writes it
//! ([`InfoArena::write`]) before pushing a completion flagged [`crate::Completion::is_in_arena`];
//! the main process copies it out ([`InfoArena::read`]) before sending the next command.
//!
//! SYNC POINT: the completion ring's Release push and Acquire pop order the arena bytes; the
//! arena itself has no atomics.
//!
//! A length beyond the capacity or a sequence number other than the completion's is an
//! [`InfoArenaError`]; a payload that does not fit goes on the control socket instead.
//!
//! ```
//! use ringenv_runtime::{InfoArena, InfoArenaError};
//! let mut bytes = vec![0u8; 64];
//! let mut arena = InfoArena::new(&mut bytes, 0);
//! assert_eq!(arena.capacity(), 48);
//! assert!(arena.write(7, b"infos"));
//! assert_eq!(arena.read(7).unwrap(), b"infos");
//! assert!(matches!(arena.read(8), Err(InfoArenaError::Seq { .. })));
//! assert!(!arena.write(8, &[0; 49])); // too large: goes on the socket instead
//! ```

/// Bytes of the arena's header (`len: u64`, `seq: u64`).
pub const HEADER: usize = 16;

/// Why an arena's content was refused by the main process.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InfoArenaError {
    /// The recorded length exceeds the arena's capacity (a corrupt arena).
    #[error("worker {worker}'s info arena records a payload of {length} bytes, more than its capacity of {capacity}")]
    Length {
        /// The worker whose arena it is.
        worker: usize,
        /// The length found, in bytes.
        length: u64,
        /// The arena's payload capacity, in bytes.
        capacity: usize,
    },
    /// The recorded sequence number is not the completion's (a stale or corrupt arena).
    #[error("worker {worker}'s info arena holds the payload of command {found}, not of command {expected}")]
    Seq {
        /// The worker whose arena it is.
        worker: usize,
        /// The sequence number found.
        found: u64,
        /// The completion's sequence number.
        expected: u64,
    },
}

/// One worker's info arena (see the module docs).
pub struct InfoArena<'a> {
    bytes: &'a mut [u8],
    worker: usize,
}

impl<'a> InfoArena<'a> {
    /// The arena of `worker` over `bytes` (the header, then the payload capacity). An arena
    /// shorter than [`HEADER`] has no capacity: every write is refused.
    pub fn new(bytes: &'a mut [u8], worker: usize) -> InfoArena<'a> {
        InfoArena { bytes, worker }
    }

    /// Payload capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.bytes.len().saturating_sub(HEADER)
    }

    /// Leaves `payload` as the result of command `seq`; `false` (and nothing written) when it
    /// does not fit.
    pub fn write(&mut self, seq: u64, payload: &[u8]) -> bool {
        if self.bytes.len() < HEADER || payload.len() > self.capacity() {
            return false;
        }
        self.bytes[HEADER..HEADER + payload.len()].copy_from_slice(payload);
        self.bytes[..8].copy_from_slice(&(payload.len() as u64).to_ne_bytes());
        self.bytes[8..HEADER].copy_from_slice(&seq.to_ne_bytes());
        true
    }

    /// A copy of the payload of command `seq`.
    ///
    /// # Errors
    /// [`InfoArenaError::Length`] when the recorded length exceeds the capacity,
    /// [`InfoArenaError::Seq`] when the arena holds another command's payload.
    pub fn read(&self, seq: u64) -> Result<Vec<u8>, InfoArenaError> {
        let capacity = self.capacity();
        if self.bytes.len() < HEADER {
            return Err(InfoArenaError::Length { worker: self.worker, length: 0, capacity });
        }
        let length = u64::from_ne_bytes(self.bytes[..8].try_into().expect("8 bytes"));
        let found = u64::from_ne_bytes(self.bytes[8..HEADER].try_into().expect("8 bytes"));
        if found != seq {
            return Err(InfoArenaError::Seq { worker: self.worker, found, expected: seq });
        }
        let len = usize::try_from(length).ok().filter(|&l| l <= capacity);
        let len = len.ok_or(InfoArenaError::Length { worker: self.worker, length, capacity })?;
        Ok(self.bytes[HEADER..HEADER + len].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_does_not_fit() {
        let mut bytes = vec![0u8; 1024];
        let mut arena = InfoArena::new(&mut bytes, 3);
        assert!(arena.write(1, &[5; 1008]));
        assert_eq!(arena.read(1).unwrap(), vec![5; 1008]);
        assert!(arena.write(2, b""));
        assert_eq!(arena.read(2).unwrap(), b"");
        assert!(!arena.write(3, &[0; 1009]));
        assert_eq!(arena.read(2).unwrap(), b"", "a refused write leaves the arena as it was");
        let mut none = [0u8; 8];
        let mut tiny = InfoArena::new(&mut none, 0);
        assert!(!tiny.write(1, b""));
        assert!(tiny.read(0).is_err());
    }

    #[test]
    fn a_corrupt_length_or_seq_is_an_error_naming_the_worker() {
        let mut bytes = vec![0u8; 64];
        InfoArena::new(&mut bytes, 2).write(9, b"abc");
        for length in [49u64, u64::MAX, 1 << 40] {
            bytes[..8].copy_from_slice(&length.to_ne_bytes());
            let e = InfoArena::new(&mut bytes, 2).read(9).unwrap_err();
            assert_eq!(e, InfoArenaError::Length { worker: 2, length, capacity: 48 });
            assert!(e.to_string().contains("worker 2") && e.to_string().contains("capacity of 48"), "{e}");
        }
        bytes[..8].copy_from_slice(&48u64.to_ne_bytes());
        assert_eq!(InfoArena::new(&mut bytes, 2).read(9).unwrap().len(), 48, "the full capacity is fine");
        let e = InfoArena::new(&mut bytes, 2).read(10).unwrap_err();
        assert_eq!(e, InfoArenaError::Seq { worker: 2, found: 9, expected: 10 });
    }
}
