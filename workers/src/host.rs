//! What a worker hosts: the envs of its env-id range, stepped or reset as one group per command.
//!
//! The [`EnvHost`] trait is the seam between the worker loop and the envs: [`crate::RustEnvs`]
//! hosts envs implementing [`crate::Env`]; the Python bindings host Python envs through PyO3.
//! Both follow Gymnasium's next-step autoreset, kept by [`Autoreset`]: the step after an episode
//! ends resets that env instead of stepping it, and reports reward 0, not terminated, not
//! truncated.
//!
//! ```
//! use ringenv_worker::host::Autoreset;
//! let mut a = Autoreset::new(2);
//! assert!(!a.take(0));
//! a.record(0, true, false);
//! assert!(a.take(0));   // the next step of env 0 is a reset
//! assert!(!a.take(0));  // and only that one
//! ```

use ringenv_runtime::{Array, CommandKind, DType, RemoteError, SlotRef, SlotView};

/// The envs of one worker, driven by the worker loop (or, for a pool's inline share, by the main
/// process; `Send` so that the main process's pool object may move between threads).
pub trait EnvHost: Send {
    /// Resets every hosted env, env `i` with the seed in row `i` of the slot's seed arrays and the
    /// options payload, if any; writes observations (reward 0, flags 0). Returns an optional
    /// payload for the main process (for example non-empty infos).
    ///
    /// # Errors
    /// The first env error, as a [`RemoteError`] naming the env.
    fn reset(
        &mut self,
        view: &mut SlotView<'_>,
        slot: usize,
        options: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError>;
    /// Steps every hosted env with its rows of the slot's action leaves, or with the actions
    /// in `actions` (an opaque payload, for action spaces without a fixed layout), or autoresets
    /// it, and writes its rows of obs, reward, terminated and truncated.
    ///
    /// # Errors
    /// The first env error, as a [`RemoteError`] naming the env.
    fn step(
        &mut self,
        view: &mut SlotView<'_>,
        slot: usize,
        actions: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError>;
    /// Runs a call request (an opaque payload: call a method, get or set an attribute) on every
    /// hosted env and returns the results as a payload. Hosts without such requests refuse them.
    ///
    /// # Errors
    /// The first env error, or `NotImplementedError` from a host that has no calls.
    fn call(&mut self, request: &[u8]) -> Result<Option<Vec<u8>>, RemoteError> {
        let _ = request;
        Err(RemoteError {
            kind: "NotImplementedError".into(),
            message: "this worker's envs take no call, get_attr or set_attr requests".into(),
            ..Default::default()
        })
    }
    /// Closes the envs (the worker exits afterwards).
    fn close(&mut self) {}
    /// Runs a `Step`, `Reset` or `Call` command on slot `slot` with its message, if any: the one
    /// dispatch of a worker's loop and of the main process's inline share.
    ///
    /// # Errors
    /// The command's env error; a `ProtocolError` for a `Call` without its request or a `Close`
    /// (which a host's owner handles itself).
    fn run(
        &mut self,
        kind: CommandKind,
        view: &mut SlotView<'_>,
        slot: usize,
        message: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        let refuse = |message: String| Err(RemoteError { kind: "ProtocolError".into(), message, ..Default::default() });
        match (kind, message) {
            (CommandKind::Step, _) => self.step(view, slot, message),
            (CommandKind::Reset, _) => self.reset(view, slot, message),
            (CommandKind::Call, Some(request)) => self.call(request),
            (CommandKind::Call, None) => refuse("a Call command arrived without its request message".into()),
            (CommandKind::Close, _) => refuse("a host does not run a Close command".into()),
        }
    }
}

/// Gymnasium's next-step autoreset bookkeeping for a group of envs.
#[derive(Clone, Debug)]
pub struct Autoreset {
    pending: Vec<bool>,
}

impl Autoreset {
    /// `n` envs, none due for a reset.
    pub fn new(n: usize) -> Autoreset {
        Autoreset { pending: vec![false; n] }
    }
    /// Whether env `k`'s next step is a reset; clears the mark.
    pub fn take(&mut self, k: usize) -> bool {
        std::mem::take(&mut self.pending[k])
    }
    /// Records the end of env `k`'s step.
    pub fn record(&mut self, k: usize, terminated: bool, truncated: bool) {
        self.pending[k] = terminated || truncated;
    }
    /// Clears every mark (after an explicit reset).
    pub fn clear(&mut self) {
        self.pending.fill(false);
    }
}

/// The seed of env `env` in a reset slot: `Some` when its flag is set.
pub fn seed_of(view: &SlotRef<'_>, env: usize) -> Option<u64> {
    view.seed(env)
}

/// Writes env `env`'s reward (in the segment's reward dtype), terminated and truncated.
pub fn write_step(view: &mut SlotView<'_>, env: usize, reward: f64, terminated: bool, truncated: bool) {
    let r = view.rows_mut(Array::Reward, env..env + 1);
    match view_reward_dtype(r.len()) {
        DType::F64 => r.copy_from_slice(&reward.to_ne_bytes()),
        _ => r.copy_from_slice(&(reward as f32).to_ne_bytes()),
    }
    view.rows_mut(Array::Terminated, env..env + 1)[0] = u8::from(terminated);
    view.rows_mut(Array::Truncated, env..env + 1)[0] = u8::from(truncated);
}

fn view_reward_dtype(row_bytes: usize) -> DType {
    if row_bytes == 8 {
        DType::F64
    } else {
        DType::F32
    }
}
