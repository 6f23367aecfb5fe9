//! The small fixed-size descriptors that travel through the rings; payloads never do.
//!
//! A [`Command`] goes from the main process to one worker, a [`Completion`] from a worker back.
//! Both are 16 bytes, `#[repr(C)]` and `Pod`, so a ring cell holds one by value.
//!
//! ```
//! use ringenv_runtime::{Command, CommandKind};
//! let c = Command::new(CommandKind::Step, 1, 42, false);
//! assert_eq!(c.kind(), Ok(CommandKind::Step));
//! assert!(!c.has_message());
//! assert_eq!(std::mem::size_of::<Command>(), 16);
//! ```

use bytemuck::{Pod, Zeroable};

/// What a command asks a worker to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum CommandKind {
    /// Step every env of the worker with the actions in the slot.
    Step = 1,
    /// Reset every env with the seeds in the slot (and the options message, if flagged).
    Reset = 2,
    /// Close the envs and exit.
    Close = 3,
    /// Call a method or get or set an attribute of every env (the request is the message that
    /// follows; the results come back as the completion's message).
    Call = 4,
}

/// A command descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Command {
    /// A [`CommandKind`] code.
    kind: u16,
    /// Bit 0: a control message follows on the worker's socket.
    flags: u16,
    /// The data slot the command reads and writes.
    pub slot: u32,
    /// The pool's command sequence number, echoed by the completion.
    pub seq: u64,
}

/// A malformed descriptor read from a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown command kind code {kind}")]
pub struct DescriptorError {
    /// The unknown kind code.
    pub kind: u16,
}

impl Command {
    /// A command of `kind` on `slot` with sequence number `seq`; `has_message` says a control
    /// message follows on the socket.
    pub fn new(kind: CommandKind, slot: u32, seq: u64, has_message: bool) -> Command {
        Command { kind: kind as u16, flags: u16::from(has_message), slot, seq }
    }
    /// The kind, or an error for a code this build does not know.
    pub fn kind(&self) -> Result<CommandKind, DescriptorError> {
        match self.kind {
            1 => Ok(CommandKind::Step),
            2 => Ok(CommandKind::Reset),
            3 => Ok(CommandKind::Close),
            4 => Ok(CommandKind::Call),
            kind => Err(DescriptorError { kind }),
        }
    }
    /// Whether a control message follows on the worker's socket.
    pub fn has_message(&self) -> bool {
        self.flags & 1 != 0
    }
}

/// A completion descriptor: worker `worker` finished command `seq`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct Completion {
    /// The worker index.
    pub worker: u32,
    /// Bit 0: the command failed (an error message follows); bit 1: a message follows on the
    /// socket; bit 2: the payload is in the worker's info arena.
    flags: u32,
    /// The sequence number of the command this completes.
    pub seq: u64,
}

impl Completion {
    const ERROR: u32 = 1;
    const MESSAGE: u32 = 2;
    const ARENA: u32 = 4;

    /// A completion of command `seq` by `worker`. `error` implies `has_message`.
    pub fn new(worker: u32, seq: u64, error: bool, has_message: bool) -> Completion {
        let flags = if error {
            Self::ERROR | Self::MESSAGE
        } else if has_message {
            Self::MESSAGE
        } else {
            0
        };
        Completion { worker, flags, seq }
    }
    /// A successful completion of command `seq` by `worker` whose payload is in the worker's
    /// info arena ([`crate::InfoArena`]), not on the socket.
    pub fn in_arena(worker: u32, seq: u64) -> Completion {
        Completion { worker, flags: Self::ARENA, seq }
    }
    /// Whether the payload is in the worker's info arena.
    pub fn is_in_arena(&self) -> bool {
        self.flags & Self::ARENA != 0
    }
    /// Whether the command failed in the worker.
    pub fn is_error(&self) -> bool {
        self.flags & Self::ERROR != 0
    }
    /// Whether a control message follows on the worker's socket.
    pub fn has_message(&self) -> bool {
        self.flags & Self::MESSAGE != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip() {
        let c = Completion::new(3, 9, true, false);
        assert!(c.is_error() && c.has_message());
        let c = Completion::new(3, 9, false, true);
        assert!(!c.is_error() && c.has_message());
        let c = Completion::in_arena(3, 9);
        assert!(c.is_in_arena() && !c.is_error() && !c.has_message());
        assert!(!Completion::new(3, 9, true, true).is_in_arena());
        let c = Command::new(CommandKind::Reset, 1, 2, true);
        assert_eq!((c.kind(), c.has_message()), (Ok(CommandKind::Reset), true));
        let bad: Command = bytemuck::cast([7u16, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bad.kind(), Err(DescriptorError { kind: 7 }));
    }
}
