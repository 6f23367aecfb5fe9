//! Pools advertise themselves so `ringenv top` can find them, hand their segment only to their
//! own user, and leave nothing behind.
//!
//! A pool listens on a Unix socket in the *abstract* namespace named
//! `ringenv-<euid>/pool-<main pid>-<segment fd>`. An abstract name is not a file: the kernel removes
//! it the moment the socket closes, so a pool that ends, or whose main process is killed with
//! SIGKILL, leaves no entry anywhere. [`list`] reads `/proc/net/unix` for the names under this
//! user's prefix.
//!
//! Abstract names carry no permissions: any local user can bind any name, under any prefix. A name
//! is therefore only a claim, and [`connect`] checks it before anything is read:
//! 1. It connects without blocking and reads the listener's credentials (`SO_PEERCRED`, which the
//!    kernel recorded at `listen`): the user must be this process's effective user, and the process
//!    the one the name claims.
//! 2. The pool's serving thread checks the client's credentials the same way, and hands a client of
//!    the same user a read-only descriptor of the segment over the connection (`SCM_RIGHTS`).
//!    Nothing is opened by path, so a FIFO or a device behind a name cannot make a reader block.
//! 3. The descriptor must be a regular file of a memory file system (tmpfs: a memfd), owned by this
//!    user, sealed against shrinking and growing (so a mapping of it can never `SIGBUS`), and at
//!    most [`MAX_SEGMENT_BYTES`] long. Only then does [`crate::monitor`] map it, read-only, and
//!    validate its header.
//!
//! If a pool's name is already taken (any process may bind it first), the pool publishes under the
//! same name with a random suffix; a taken name never fails a pool.
//!
//! The serving thread sleeps in `poll` on the listener and a stop `eventfd`: it burns no CPU while
//! nobody looks. Dropping the [`Advert`] stops and joins it; in a process forked from the pool's,
//! where that thread does not exist, dropping only closes the child's copies of the descriptors.
//!
//! A name lives as long as any process holds its listening socket open, and a `fork` child gets
//! copies of every descriptor. So that a child (a DataLoader worker, a `multiprocessing` fork)
//! that keeps its inherited copy of a pool does not keep the parent's name alive after the parent
//! closed the pool (`ringenv top` then listed an advertisement nobody served, for the child's
//! whole life), a `pthread_atfork` child handler points each live advert's listener descriptor in
//! the child at its stop eventfd (`dup3`: async-signal-safe, needs no free descriptor), so that
//! the parent's close removes the name at once. A raw `clone` that bypasses libc runs no handler.
//!
//! No serving thread lives through a fork. A `pthread_atfork` prepare handler stops every serving
//! thread of the process (and waits for an advert being published or dropped) before the fork;
//! they start again at the pool's next call ([`resume_paused`], from `Pool`'s first check of each
//! operation), not in the fork's parent handler. So the child is forked from a process whose only
//! threads are the caller's, as with Gymnasium's `AsyncVectorEnv`: no lock can be held by a
//! serving thread at the fork, and Python 3.12 and later, which count the threads right after a
//! fork, see none of ringenv's (their `DeprecationWarning: This process ... is multi-threaded,
//! use of fork() may lead to deadlocks in the child`). The pool's own fork+exec of a worker
//! ([`exec_child`]) stops nothing: that child runs only its `pre_exec` hook and `exec`. While a
//! pool's thread is stopped, a `ringenv top` connection waits in the listener's queue until it
//! starts again.
//!
//! ```
//! use ringenv_runtime::{connect_to_pool, list_pools, Advert, ArraySpec, DType, Layout, Segment};
//! use std::os::fd::AsRawFd;
//! let layout = Layout::single(2, 1, 2, ArraySpec::new(DType::F32, &[3]),
//!                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! let segment = Segment::create(layout).unwrap();
//! let ad = Advert::publish(segment.fd().as_raw_fd()).unwrap();
//! let entry = list_pools().into_iter().find(|e| e.name == ad.name()).unwrap();
//! assert_eq!((entry.pid, entry.fd), (std::process::id(), segment.fd().as_raw_fd()));
//! // The verified, read-only segment descriptor, as `ringenv top` receives it.
//! let fd = connect_to_pool(&entry, std::time::Duration::from_secs(10)).unwrap();
//! drop(ad); // closing the pool removes its name at once
//! assert!(list_pools().iter().all(|e| e.name != entry.name));
//! ```

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::fs::{FileType, Mode, OFlags, SealFlags};
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use std::cell::{Cell, UnsafeCell};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

/// The largest segment a monitor accepts, in bytes (1 TiB): far above any real pool, and a bound
/// on what a hostile descriptor can make a monitor map.
pub const MAX_SEGMENT_BYTES: u64 = 1 << 40;

/// `statfs.f_type` of tmpfs, where memfds live (`TMPFS_MAGIC` in `<linux/magic.h>`).
const TMPFS_MAGIC: u64 = 0x0102_1994;
/// The bytes sent with the descriptor (a stream message with ancillary data needs at least one).
const HELLO: &[u8] = b"ringenv segment\n";
/// Random suffixes tried when the plain name is taken.
const SUFFIX_TRIES: usize = 8;
/// Pending connections the listener queues (each is served at once).
const BACKLOG: i32 = 16;

/// How many live adverts' listeners a fork child detaches (one per pool; a process with more
/// pools leaves the others' names to the child's exit, as before).
const FORK_SLOTS: usize = 64;
/// An empty entry of [`LISTENERS`].
const NO_LISTENER: u64 = u64::MAX;
/// The live adverts of this process, each `listener << 32 | stop` (their descriptor numbers), for
/// the fork child handler; an advert registers after it is served and unregisters before its
/// descriptors close.
static LISTENERS: [AtomicU64; FORK_SLOTS] = [const { AtomicU64::new(NO_LISTENER) }; FORK_SLOTS];
static FORK_HANDLERS: Once = Once::new();

/// A mutex locked by the fork's prepare handler and unlocked by its parent and child handlers
/// (a pthread mutex: std's is unlocked only by dropping the guard of the lock call). Held also
/// while an advert is published, dropped or resumed, so no fork happens in the middle of one (a
/// listener bound but not yet registered for the child handler, or a thread half started).
struct ForkLock(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: the pthread mutex is made to be shared between threads; it is only used through
// pthread_mutex_lock/unlock.
unsafe impl Sync for ForkLock {}

static FORK_LOCK: ForkLock = ForkLock(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));

fn lock_forks() {
    // SAFETY: a statically initialised mutex, never destroyed.
    unsafe { libc::pthread_mutex_lock(FORK_LOCK.0.get()) };
}

fn unlock_forks() {
    // SAFETY: called only by the thread that locked it (in a fork child: the copy of that thread).
    unsafe { libc::pthread_mutex_unlock(FORK_LOCK.0.get()) };
}

/// [`FORK_LOCK`] held until dropped.
struct ForkGuard;

impl ForkGuard {
    fn lock() -> ForkGuard {
        register_fork_handlers();
        lock_forks();
        ForkGuard
    }
}

impl Drop for ForkGuard {
    fn drop(&mut self) {
        unlock_forks();
    }
}

/// A served advert: what its thread needs, and the thread while it runs. In [`SERVING`].
struct Serving {
    /// [`Advert::id`].
    id: u64,
    /// The process that published it (a fork child's copy of the list holds its parent's).
    owner: u32,
    listener: RawFd,
    segment: RawFd,
    stop: RawFd,
    uid: u32,
    /// `None` while stopped for a fork (or in a fork child, where it never runs).
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Every advert of this process, changed only while [`FORK_LOCK`] is held.
static SERVING: Mutex<Vec<Serving>> = Mutex::new(Vec::new());
/// Whether a fork stopped serving threads that [`resume_paused`] has not started again.
static PAUSED: AtomicBool = AtomicBool::new(false);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Set while this thread forks a child that only execs ([`exec_child`]).
    static EXECING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `spawn`, a fork of a child that runs nothing but async-signal-safe calls and `exec`
/// (`std::process::Command::spawn`), without stopping the serving threads for its fork.
pub(crate) fn exec_child<T>(spawn: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            EXECING.with(|e| e.set(false)); // also if `spawn` panics
        }
    }
    EXECING.with(|e| e.set(true));
    let _reset = Reset;
    spawn()
}

fn register_fork_handlers() {
    // SAFETY: the handlers below keep to what each point of a fork allows (see each); registering
    // has no precondition.
    FORK_HANDLERS.call_once(|| unsafe {
        libc::pthread_atfork(Some(stop_before_fork), Some(unlock_forks_in_parent), Some(detach_listeners_in_child));
    });
}

/// The fork's prepare handler: waits for any advert being published, dropped or resumed (by
/// taking [`FORK_LOCK`], which the parent and child handlers release), then stops every serving
/// thread of this process and joins it. Nothing is stopped for [`exec_child`]'s forks.
/// glibc runs prepare handlers before it takes its own locks (malloc's among them), so the joined
/// threads can still exit normally.
extern "C" fn stop_before_fork() {
    lock_forks();
    if EXECING.with(Cell::get) {
        return;
    }
    let pid = std::process::id();
    let mut serving = SERVING.lock().unwrap_or_else(PoisonError::into_inner);
    for s in serving.iter_mut().filter(|s| s.owner == pid) {
        let Some(thread) = s.thread.take() else { continue };
        // SAFETY: `stop` stays open while its entry is listed (entries are removed before their
        // descriptors close, under FORK_LOCK, which this handler holds).
        let stop = unsafe { BorrowedFd::borrow_raw(s.stop) };
        if rustix::io::write(stop, &1u64.to_ne_bytes()).is_ok() {
            let _ = thread.join();
            let mut count = [0u8; 8];
            let _ = rustix::io::read(stop, &mut count); // back to 0: the thread can run again
            PAUSED.store(true, Ordering::SeqCst);
        } else {
            s.thread = Some(thread); // it cannot be told to stop: it keeps running
        }
    }
}

extern "C" fn unlock_forks_in_parent() {
    unlock_forks();
}

/// Starts again the serving threads a fork stopped, if any; a relaxed load otherwise. Called by
/// the pool at each operation (`Pool::usable`). A thread that cannot be started is tried again at
/// the next call.
pub fn resume_paused() {
    if !PAUSED.load(Ordering::Relaxed) {
        return;
    }
    let _forks = ForkGuard::lock();
    PAUSED.store(false, Ordering::SeqCst);
    let pid = std::process::id();
    let mut serving = SERVING.lock().unwrap_or_else(PoisonError::into_inner);
    for s in serving.iter_mut().filter(|s| s.owner == pid && s.thread.is_none()) {
        match spawn_server(s.listener, s.segment, s.stop, s.uid) {
            Ok(thread) => s.thread = Some(thread),
            Err(_) => PAUSED.store(true, Ordering::SeqCst),
        }
    }
}

/// Starts the thread serving `listener` (see [`serve_loop`]).
fn spawn_server(
    listener: RawFd,
    segment: RawFd,
    stop: RawFd,
    uid: u32,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("ringenv-advert".into()).stack_size(64 * 1024).spawn(move || {
        // SAFETY: the three descriptors stay open while the advert is listed in SERVING, and its
        // `Drop` stops and joins this thread before they are closed (or leaks them when it cannot
        // stop it).
        let (l, s, st) = unsafe {
            (BorrowedFd::borrow_raw(listener), BorrowedFd::borrow_raw(segment), BorrowedFd::borrow_raw(stop))
        };
        serve_loop(l, s, st, uid);
    })
}

/// The `pthread_atfork` child handler: each registered listener number now refers to its
/// advert's stop eventfd instead of the socket, so the child holds no reference to the socket,
/// and its advert's `Drop` closes the number as before; then [`FORK_LOCK`] is released.
/// Async-signal-safe: atomics, `dup3` and the unlock of a mutex this thread holds.
extern "C" fn detach_listeners_in_child() {
    for slot in &LISTENERS {
        let packed = slot.swap(NO_LISTENER, Ordering::SeqCst);
        if packed != NO_LISTENER {
            let (listener, stop) = ((packed >> 32) as i32, packed as u32 as i32);
            // SAFETY: both numbers were open at the fork (registered ones close only after they
            // are unregistered); dup3 replaces `listener`'s reference atomically.
            unsafe { libc::dup3(stop, listener, libc::O_CLOEXEC) };
        }
    }
    unlock_forks();
}

/// Registers `listener` and `stop` for [`detach_listeners_in_child`]: the slot taken, if any free.
fn register_for_fork(listener: RawFd, stop: RawFd) -> Option<usize> {
    register_fork_handlers();
    let packed = (listener as u32 as u64) << 32 | stop as u32 as u64;
    LISTENERS
        .iter()
        .position(|slot| slot.compare_exchange(NO_LISTENER, packed, Ordering::SeqCst, Ordering::SeqCst).is_ok())
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn prefix_of(uid: u32) -> String {
    format!("ringenv-{uid}/pool-")
}

/// A pool's advertisement; its name disappears when this is dropped or the process dies.
#[derive(Debug)]
pub struct Advert {
    name: String,
    /// The listener, the read-only segment descriptor handed out and the stop eventfd; `None` only
    /// when they had to be leaked (see `Drop`).
    fds: Option<ServedFds>,
    /// Its entry in [`SERVING`], which holds the serving thread.
    id: u64,
    /// The process that published it (a forked child has another id).
    owner: u32,
    /// Its entry in [`LISTENERS`] (`None`: every slot was taken).
    fork_slot: Option<usize>,
}

/// What the serving thread borrows: kept open here until it is joined.
#[derive(Debug)]
struct ServedFds {
    /// The listening socket: its name lives as long as it is open.
    #[allow(dead_code)] // only held open; the thread uses its raw number
    listener: OwnedFd,
    /// The descriptor handed to clients.
    #[allow(dead_code)] // only held open; the thread uses its raw number
    segment: OwnedFd,
    /// Written once to stop the thread.
    stop: OwnedFd,
}

impl Advert {
    /// Advertises the pool of this process whose segment descriptor is `fd`; clients of this user
    /// get a read-only descriptor of it (reopened through `/proc/self/fd/<fd>`).
    ///
    /// # Errors
    /// The `io::Error` of reopening the segment, creating the socket or the serving thread, or
    /// `AddrInUse` when the name and every random suffix tried are taken.
    pub fn publish(fd: RawFd) -> std::io::Result<Advert> {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let segment = rustix::fs::open(format!("/proc/self/fd/{fd}"), flags, Mode::empty())?;
        Self::serve(fd, segment)
    }

    /// Advertises `segment` under the name of descriptor number `label`, handing it out as it is.
    /// [`Advert::publish`] passes a read-only reopening of the pool's segment; tests pass anything.
    #[doc(hidden)]
    pub fn serve(label: RawFd, segment: OwnedFd) -> std::io::Result<Advert> {
        let _forks = ForkGuard::lock(); // no fork before the listener is registered for the child
        let owner = std::process::id();
        let (listener, name) = bind_listener(&format!("{}{owner}-{label}", prefix_of(euid())))?;
        let stop = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        let raw = (listener.as_raw_fd(), segment.as_raw_fd(), stop.as_raw_fd());
        let uid = euid();
        let thread = spawn_server(raw.0, raw.1, raw.2, uid)?;
        let fork_slot = register_for_fork(raw.0, raw.2);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let entry = Serving { id, owner, listener: raw.0, segment: raw.1, stop: raw.2, uid, thread: Some(thread) };
        SERVING.lock().unwrap_or_else(PoisonError::into_inner).push(entry);
        let fds = Some(ServedFds { listener, segment, stop });
        Ok(Advert { name, fds, id, owner, fork_slot })
    }

    /// Whether its serving thread runs (`false` from a fork until the next [`resume_paused`]).
    #[doc(hidden)]
    pub fn is_serving(&self) -> bool {
        let _forks = ForkGuard::lock();
        let serving = SERVING.lock().unwrap_or_else(PoisonError::into_inner);
        serving.iter().any(|s| s.id == self.id && s.owner == std::process::id() && s.thread.is_some())
    }

    /// The abstract socket name (without the leading NUL byte).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Advert {
    fn drop(&mut self) {
        let _forks = ForkGuard::lock();
        let entry = {
            let mut serving = SERVING.lock().unwrap_or_else(PoisonError::into_inner);
            serving.iter().position(|s| s.id == self.id).map(|i| serving.swap_remove(i))
        };
        let Some(mut entry) = entry else { return };
        if std::process::id() != self.owner {
            // A forked child: a serving thread exists only in the parent (one the fork could not
            // stop is still listed here), and the eventfd is shared with it. Signal nothing; the
            // fields' drop closes this process's copies.
            if let Some(thread) = entry.thread.take() {
                std::mem::forget(thread);
            }
            return;
        }
        if let Some(slot) = self.fork_slot.take() {
            LISTENERS[slot].store(NO_LISTENER, Ordering::SeqCst);
        }
        let Some(thread) = entry.thread.take() else { return }; // stopped by a fork: nothing runs
        let stopped = self.fds.as_ref().is_some_and(|f| rustix::io::write(&f.stop, &1u64.to_ne_bytes()).is_ok());
        if stopped {
            let _ = thread.join();
        } else {
            // The thread cannot be told to stop: leave it its descriptors rather than close them
            // under it (a reused number would be served instead).
            std::mem::forget(self.fds.take());
            std::mem::forget(thread);
        }
    }
}

/// Binds and listens on `base`, or `base-<random hex>` while the name is taken.
fn bind_listener(base: &str) -> std::io::Result<(OwnedFd, String)> {
    for attempt in 0..=SUFFIX_TRIES {
        let name = if attempt == 0 { base.to_string() } else { format!("{base}-{:016x}", random_u64()) };
        let socket = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )?;
        let addr = SocketAddrUnix::new_abstract_name(name.as_bytes())?;
        match rustix::net::bind(&socket, &addr) {
            Ok(()) => {
                rustix::net::listen(&socket, BACKLOG)?;
                return Ok((socket, name));
            }
            Err(Errno::ADDRINUSE) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("the abstract socket name {base} and {SUFFIX_TRIES} random suffixes of it are taken"),
    ))
}

/// 64 unpredictable bits: std's `RandomState` keys come from the OS's random source.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

/// The serving thread: hands `segment` to each client of user `uid`, until `stop` is readable.
fn serve_loop(listener: BorrowedFd<'_>, segment: BorrowedFd<'_>, stop: BorrowedFd<'_>, uid: u32) {
    loop {
        let mut fds = [PollFd::new(&listener, PollFlags::IN), PollFd::new(&stop, PollFlags::IN)];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(_) => return,
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        // Bounded: the listener queues at most BACKLOG connections.
        for _ in 0..=BACKLOG {
            match rustix::net::accept_with(listener, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK) {
                Ok(conn) => hand_over(&conn, segment, uid),
                Err(Errno::AGAIN) => break,
                Err(Errno::INTR | Errno::CONNABORTED) => continue,
                Err(_) => {
                    // Out of descriptors or memory: retry later rather than spin on a readable
                    // listener.
                    std::thread::sleep(Duration::from_millis(100));
                    break;
                }
            }
        }
    }
}

/// Sends `segment` over `conn` if the client is of user `uid`; otherwise closes it unanswered.
fn hand_over(conn: &OwnedFd, segment: BorrowedFd<'_>, uid: u32) {
    match peer_credentials(conn.as_fd()) {
        Ok(peer) if peer.uid == uid => {}
        _ => return,
    }
    let fds = [segment];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if control.push(SendAncillaryMessage::ScmRights(&fds)) {
        // A fresh connection's send buffer is empty: this never blocks, and DONTWAIT makes sure.
        let _ =
            rustix::net::sendmsg(conn, &[IoSlice::new(HELLO)], &mut control, SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
    }
}

/// A socket peer's credentials, as `SO_PEERCRED` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Process id of the peer (0 when it is not visible in this pid namespace).
    pub pid: u32,
    /// Effective user id of the peer.
    pub uid: u32,
}

/// `getsockopt(SO_PEERCRED)`, read as plain integers: a peer in another pid namespace reports pid
/// 0, which rustix's `UCred` (a non-zero pid) cannot hold.
fn peer_credentials(socket: BorrowedFd<'_>) -> std::io::Result<Peer> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable `ucred` of `len` bytes, the size SO_PEERCRED writes; the
    // descriptor is borrowed for the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Peer { pid: cred.pid as u32, uid: cred.uid })
}

/// Why an advertised name was not accepted as a pool of this user.
#[derive(Debug)]
pub enum AdvertError {
    /// Nothing listens under the name (the pool ended), or it is no stream listener: `connect`'s
    /// error.
    Unreachable(std::io::Error),
    /// The listener's queue is full: it accepts no connections.
    Busy,
    /// The listener belongs to another user.
    ForeignUser {
        /// The listener's effective user id.
        uid: u32,
        /// This process's effective user id.
        ours: u32,
    },
    /// The listener is not the process the name claims.
    WrongProcess {
        /// The process id in the name.
        claimed: u32,
        /// The listener's process id (0 when it is in another pid namespace).
        actual: u32,
    },
    /// No descriptor arrived within the timeout: the pool's serving thread is busy, or stopped
    /// by a fork of its process until the pool's next call.
    NoReply {
        /// The timeout waited.
        timeout: Duration,
    },
    /// The peer closed the connection without sending exactly one descriptor.
    NoDescriptor,
    /// The descriptor is not a regular file: names what it is.
    NotRegular {
        /// `"FIFO"`, `"socket"`, `"character device"`, `"directory"`, ...
        kind: &'static str,
    },
    /// The file belongs to another user.
    NotOwned {
        /// The file's owner.
        uid: u32,
        /// This process's effective user id.
        ours: u32,
    },
    /// The file is not in memory (tmpfs), so not a memfd.
    NotMemfd {
        /// The file system's `statfs.f_type`.
        fs_type: u64,
    },
    /// The file is not sealed against shrinking and growing.
    NotSealed {
        /// The seals found (`F_GET_SEALS`).
        seals: u32,
    },
    /// The file is larger than [`MAX_SEGMENT_BYTES`].
    TooLarge {
        /// Its size in bytes.
        bytes: u64,
    },
    /// A system call failed: names it.
    Os(&'static str, std::io::Error),
}

impl std::fmt::Display for AdvertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdvertError::Unreachable(e) => write!(f, "cannot connect: {e}"),
            AdvertError::Busy => write!(f, "the listener accepts no connections (its queue is full)"),
            AdvertError::ForeignUser { uid, ours } => {
                write!(f, "the listener belongs to user {uid}, not to this user ({ours})")
            }
            AdvertError::WrongProcess { claimed, actual } => {
                write!(f, "the name claims process {claimed} but the listener is process {actual}")
            }
            AdvertError::NoReply { timeout } => {
                write!(
                    f,
                    "no segment descriptor within {:.1} s (a pool whose process forked since its last call \
                     answers again from its next call)",
                    timeout.as_secs_f64()
                )
            }
            AdvertError::NoDescriptor => write!(f, "the listener sent no segment descriptor"),
            AdvertError::NotRegular { kind } => write!(f, "the descriptor is a {kind}, not a memfd"),
            AdvertError::NotOwned { uid, ours } => {
                write!(f, "the descriptor's file belongs to user {uid}, not to this user ({ours})")
            }
            AdvertError::NotMemfd { fs_type } => {
                write!(f, "the descriptor's file is on file system type {fs_type:#x}, not a memfd (tmpfs)")
            }
            AdvertError::NotSealed { seals } => {
                write!(f, "the descriptor's file is not sealed against resizing (seals {seals:#x})")
            }
            AdvertError::TooLarge { bytes } => {
                write!(f, "the segment is {bytes} bytes, more than the {MAX_SEGMENT_BYTES} a monitor maps")
            }
            AdvertError::Os(call, e) => write!(f, "{call} failed: {e}"),
        }
    }
}

impl std::error::Error for AdvertError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AdvertError::Unreachable(e) | AdvertError::Os(_, e) => Some(e),
            _ => None,
        }
    }
}

fn os(call: &'static str) -> impl FnOnce(Errno) -> AdvertError {
    move |e| AdvertError::Os(call, e.into())
}

/// Accepts a listener whose credentials are `peer` for a name that claims process `claimed`, in a
/// process of effective user `ours`.
///
/// # Errors
/// [`AdvertError::ForeignUser`] or [`AdvertError::WrongProcess`].
pub fn check_peer(peer: Peer, claimed: u32, ours: u32) -> Result<(), AdvertError> {
    if peer.uid != ours {
        return Err(AdvertError::ForeignUser { uid: peer.uid, ours });
    }
    if peer.pid != claimed {
        return Err(AdvertError::WrongProcess { claimed, actual: peer.pid });
    }
    Ok(())
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "file of unknown type",
    }
}

/// Accepts `fd` as a pool segment of user `ours`: a regular tmpfs file (a memfd) owned by that
/// user, sealed against shrinking and growing, at most [`MAX_SEGMENT_BYTES`] long. Returns its size
/// in bytes. Reads nothing from the file.
///
/// # Errors
/// [`AdvertError::NotRegular`], [`AdvertError::NotOwned`], [`AdvertError::NotMemfd`],
/// [`AdvertError::NotSealed`], [`AdvertError::TooLarge`], or [`AdvertError::Os`] naming `fstat`.
pub fn check_segment_fd(fd: BorrowedFd<'_>, ours: u32) -> Result<u64, AdvertError> {
    let st = rustix::fs::fstat(fd).map_err(os("fstat"))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::RegularFile {
        return Err(AdvertError::NotRegular { kind: kind_name(kind) });
    }
    if st.st_uid != ours {
        return Err(AdvertError::NotOwned { uid: st.st_uid, ours });
    }
    let fs_type = rustix::fs::fstatfs(fd).map_err(os("fstatfs"))?.f_type as u64;
    if fs_type != TMPFS_MAGIC {
        return Err(AdvertError::NotMemfd { fs_type });
    }
    // A file that does not support sealing answers EINVAL: no seals.
    let seals = rustix::fs::fcntl_get_seals(fd).unwrap_or(SealFlags::empty());
    if !seals.contains(SealFlags::GROW | SealFlags::SHRINK) {
        return Err(AdvertError::NotSealed { seals: seals.bits() });
    }
    let bytes = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    if bytes > MAX_SEGMENT_BYTES {
        return Err(AdvertError::TooLarge { bytes });
    }
    Ok(bytes)
}

/// Connects to the pool advertised as `entry`, checks the listener's credentials, receives its
/// segment descriptor (waiting at most `timeout`) and checks it with [`check_segment_fd`]. Never
/// blocks past `timeout`, and opens nothing by path.
///
/// # Errors
/// An [`AdvertError`] naming the first check that failed.
pub fn connect(entry: &PoolEntry, timeout: Duration) -> Result<OwnedFd, AdvertError> {
    let ours = euid();
    let socket = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(os("socket"))?;
    let addr = SocketAddrUnix::new_abstract_name(entry.name.as_bytes()).map_err(os("connect"))?;
    match rustix::net::connect(&socket, &addr) {
        Ok(()) => {}
        Err(Errno::AGAIN) => return Err(AdvertError::Busy),
        Err(e) => return Err(AdvertError::Unreachable(e.into())),
    }
    let peer = peer_credentials(socket.as_fd()).map_err(|e| AdvertError::Os("getsockopt(SO_PEERCRED)", e))?;
    check_peer(peer, entry.pid, ours)?;
    let fd = receive_fd(&socket, timeout)?;
    check_segment_fd(fd.as_fd(), ours)?;
    Ok(fd)
}

/// Waits up to `timeout` for one message on `socket` and takes the one descriptor it carries.
fn receive_fd(socket: &OwnedFd, timeout: Duration) -> Result<OwnedFd, AdvertError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ts = Timespec::try_from(left).unwrap_or(Timespec { tv_sec: i64::MAX, tv_nsec: 0 });
        let mut fds = [PollFd::new(socket, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) => return Err(AdvertError::NoReply { timeout }),
            Ok(_) => break,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(AdvertError::Os("poll", e.into())),
        }
    }
    let mut byte = [0u8; HELLO.len()];
    // Room for more descriptors than expected, so that extra ones arrive (and are closed) rather
    // than being cut.
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [IoSliceMut::new(&mut byte)];
    let flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT;
    rustix::net::recvmsg(socket, &mut iov, &mut control, flags).map_err(os("recvmsg"))?;
    let mut received: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            received.extend(fds);
        }
    }
    match received.len() {
        1 => Ok(received.remove(0)),
        _ => Err(AdvertError::NoDescriptor),
    }
}

/// An advertised pool found by [`list`]: a claim, until [`connect`] verifies it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PoolEntry {
    /// Process id of the pool's main process, as the name claims it.
    pub pid: u32,
    /// The segment's descriptor in that process, as the name claims it.
    pub fd: i32,
    /// The abstract socket name (without the leading NUL byte).
    pub name: String,
}

/// Parses `<pid>-<fd>` or `<pid>-<fd>-<hex suffix>` (what follows the prefix).
fn parse_rest(rest: &str) -> Option<(u32, i32)> {
    let mut parts = rest.split('-');
    let digits = |s: &str| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
    let (pid, fd) = (parts.next()?, parts.next()?);
    if !digits(pid) || !digits(fd) {
        return None;
    }
    if let Some(suffix) = parts.next() {
        if suffix.is_empty() || suffix.len() > 16 || !suffix.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
    }
    if parts.next().is_some() {
        return None;
    }
    Some((pid.parse().ok()?, fd.parse().ok()?))
}

fn parse_names(proc_net_unix: &str, prefix: &str) -> Vec<PoolEntry> {
    let mut pools: Vec<PoolEntry> = proc_net_unix
        .lines()
        .filter_map(|line| line.split_whitespace().last())
        .filter_map(|path| {
            let name = path.strip_prefix('@')?;
            let (pid, fd) = parse_rest(name.strip_prefix(prefix)?)?;
            Some(PoolEntry { pid, fd, name: name.to_string() })
        })
        .collect();
    pools.sort();
    pools.dedup();
    pools
}

/// The pools advertised under this user's prefix (in this network namespace), read from
/// `/proc/net/unix`. Any user can bind such a name: verify an entry with [`connect`].
pub fn list() -> Vec<PoolEntry> {
    std::fs::read_to_string("/proc/net/unix").map(|t| parse_names(&t, &prefix_of(euid()))).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::UnixListener;

    fn entry(pid: u32, fd: i32, name: &str) -> PoolEntry {
        PoolEntry { pid, fd, name: name.into() }
    }

    fn sealed_memfd(bytes: u64, seals: SealFlags) -> OwnedFd {
        let fd =
            rustix::fs::memfd_create("test", rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING)
                .unwrap();
        rustix::fs::ftruncate(&fd, bytes).unwrap();
        rustix::fs::fcntl_add_seals(&fd, seals).unwrap();
        fd
    }

    fn mine(ad: &Advert) -> PoolEntry {
        list().into_iter().find(|e| e.name == ad.name()).expect("advertised")
    }

    const LONG: Duration = Duration::from_secs(30); // a safety net: every reply comes at once

    #[test]
    fn names_of_this_user_are_parsed_and_others_ignored() {
        let text = "\
Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 100 @ringenv-1000/pool-42-7
0000000000000000: 00000002 00000000 00010000 0001 01 100 @ringenv-1000/pool-42-7-00ff00ff00ff00ff
0000000000000000: 00000002 00000000 00010000 0001 01 101 @ringenv-1001/pool-43-8
0000000000000000: 00000002 00000000 00010000 0001 01 102 /run/some.sock
0000000000000000: 00000002 00000000 00010000 0001 01 103 @ringenv-1000/pool-bad
0000000000000000: 00000002 00000000 00010000 0001 01 103 @ringenv-1000/pool-1-2-3-4
0000000000000000: 00000002 00000000 00010000 0001 01 103 @ringenv-1000/pool-1-2-[x]
0000000000000000: 00000002 00000000 00010000 0001 01 103 @ringenv-1000/pool-99999999999-2
0000000000000000: 00000003 00000000 00000000 0001 03 104
";
        assert_eq!(
            parse_names(text, "ringenv-1000/pool-"),
            vec![entry(42, 7, "ringenv-1000/pool-42-7"), entry(42, 7, "ringenv-1000/pool-42-7-00ff00ff00ff00ff")]
        );
    }

    #[test]
    fn an_advert_is_listed_while_alive_and_hands_over_a_read_only_sealed_segment() {
        let _forks = crate::process_id::fork_test_lock(); // a fork elsewhere would stop its thread
        let memfd = sealed_memfd(8192, SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL);
        let ad = Advert::publish(memfd.as_raw_fd()).unwrap();
        let e = mine(&ad);
        assert_eq!((e.pid, e.fd), (std::process::id(), memfd.as_raw_fd()));
        let got = connect(&e, LONG).unwrap();
        assert_eq!(check_segment_fd(got.as_fd(), euid()).unwrap(), 8192);
        let mode = rustix::fs::fcntl_getfl(&got).unwrap() & OFlags::ACCMODE;
        assert_eq!(mode, OFlags::RDONLY, "a monitor gets a read-only descriptor");
        drop(ad);
        assert!(!list().contains(&e));
        assert!(matches!(connect(&e, LONG), Err(AdvertError::Unreachable(_))));
    }

    #[test]
    fn a_taken_name_makes_the_pool_publish_under_a_suffix() {
        let _forks = crate::process_id::fork_test_lock(); // a fork elsewhere would stop its thread
        let memfd = sealed_memfd(4096, SealFlags::GROW | SealFlags::SHRINK);
        let plain = format!("{}{}-{}", prefix_of(euid()), std::process::id(), memfd.as_raw_fd());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(plain.as_bytes()).unwrap();
        // A squatter that never answers (here in this very process, so it passes the pid check).
        let _squat = UnixListener::bind_addr(&addr).unwrap();
        let ad = Advert::publish(memfd.as_raw_fd()).expect("a taken name does not fail the pool");
        assert!(ad.name().starts_with(&format!("{plain}-")) && ad.name().len() == plain.len() + 17, "{}", ad.name());
        let entries: Vec<_> =
            list().into_iter().filter(|e| e.fd == memfd.as_raw_fd() && e.pid == std::process::id()).collect();
        assert!(entries.iter().any(|e| e.name == plain) && entries.iter().any(|e| e.name == ad.name()));
        // The squatter never sends a descriptor: refused without blocking past the timeout.
        let squat = entries.iter().find(|e| e.name == plain).unwrap();
        assert!(matches!(connect(squat, Duration::ZERO), Err(AdvertError::NoReply { .. })));
        assert!(connect(&mine(&ad), LONG).is_ok());
    }

    #[test]
    fn a_name_claiming_another_process_is_refused_before_anything_is_read() {
        let name = format!("{}1-5", prefix_of(euid()));
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let Ok(_listener) = UnixListener::bind_addr(&addr) else { return }; // taken by a parallel run
        let e = list().into_iter().find(|e| e.name == name).unwrap();
        assert_eq!((e.pid, e.fd), (1, 5));
        match connect(&e, LONG) {
            Err(AdvertError::WrongProcess { claimed: 1, actual }) => assert_eq!(actual, std::process::id()),
            other => panic!("expected WrongProcess, got {other:?}"),
        }
    }

    #[test]
    fn peer_credentials_are_checked_for_user_then_process() {
        let me = Peer { pid: 42, uid: 1000 };
        assert!(check_peer(me, 42, 1000).is_ok());
        let e = check_peer(Peer { pid: 42, uid: 65534 }, 42, 1000).unwrap_err();
        assert!(matches!(e, AdvertError::ForeignUser { uid: 65534, ours: 1000 }), "{e:?}");
        assert!(e.to_string().contains("user 65534"), "{e}");
        // Root's monitor refuses another user's listener too.
        assert!(matches!(check_peer(Peer { pid: 42, uid: 1000 }, 42, 0), Err(AdvertError::ForeignUser { .. })));
        let e = check_peer(Peer { pid: 0, uid: 1000 }, 42, 1000).unwrap_err();
        assert!(matches!(e, AdvertError::WrongProcess { claimed: 42, actual: 0 }), "{e:?}");
    }

    fn served(fd: OwnedFd) -> (Advert, PoolEntry) {
        let ad = Advert::serve(9999, fd).unwrap();
        let e = mine(&ad);
        (ad, e)
    }

    #[test]
    fn a_fifo_a_socket_a_file_or_an_unsealed_memfd_is_refused_without_blocking() {
        let _forks = crate::process_id::fork_test_lock(); // a fork elsewhere would stop its thread
        let dir = std::env::temp_dir().join(format!("ringenv-advert-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let fifo = dir.join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        // The read end only, with no writer: opening this FIFO by path for reading would block.
        let fifo_fd =
            rustix::fs::open(&fifo, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let (sock, _) =
            rustix::net::socketpair(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None).unwrap();
        let unsealed = rustix::fs::memfd_create("test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&unsealed, 8192).unwrap();
        let shrink_only = sealed_memfd(8192, SealFlags::SHRINK);
        let devnull = rustix::fs::open("/dev/null", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let dirfd =
            rustix::fs::open(&dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let cases: Vec<(OwnedFd, &str)> = vec![
            (fifo_fd, "FIFO"),
            (sock, "socket"),
            (devnull, "character device"),
            (dirfd, "directory"),
            (unsealed, "not sealed"),
            (shrink_only, "not sealed"),
        ];
        for (fd, why) in cases {
            let (_ad, e) = served(fd);
            let err = connect(&e, LONG).expect_err(why);
            assert!(err.to_string().contains(why), "{why}: {err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_oversized_segment_is_refused_before_it_is_mapped() {
        let _forks = crate::process_id::fork_test_lock(); // a fork elsewhere would stop its thread
        let (_ad, e) = served(sealed_memfd(MAX_SEGMENT_BYTES + 4096, SealFlags::GROW | SealFlags::SHRINK));
        assert!(matches!(connect(&e, LONG), Err(AdvertError::TooLarge { bytes }) if bytes == MAX_SEGMENT_BYTES + 4096));
    }

    /// A published advert of a 4 KiB sealed memfd (kept open with it) and its listed entry.
    fn published() -> (OwnedFd, Advert, PoolEntry) {
        let memfd = sealed_memfd(4096, SealFlags::GROW | SealFlags::SHRINK);
        let ad = Advert::publish(memfd.as_raw_fd()).unwrap();
        let e = mine(&ad);
        (memfd, ad, e)
    }

    /// Forks a child that exits at once; returns its exit status.
    fn fork_and_wait() -> i32 {
        // SAFETY: the child calls only _exit; the parent waits for its own child.
        match unsafe { libc::fork() } {
            0 => unsafe { libc::_exit(0) },
            child => {
                assert!(child > 0, "fork failed");
                let mut status = -1;
                // SAFETY: waits for our own child; `status` is a valid out-pointer.
                assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
                status
            }
        }
    }

    #[test]
    fn a_fork_stops_the_serving_thread_until_the_next_resume_and_a_fork_exec_stops_nothing() {
        let _forks = crate::process_id::fork_test_lock();
        let (_memfd, ad, e) = published();
        assert!(ad.is_serving());
        // A worker's start: fork then exec at once (std's spawn with a pre_exec hook forks).
        let mut cmd = std::process::Command::new("true");
        // SAFETY: the hook does nothing.
        unsafe { std::os::unix::process::CommandExt::pre_exec(&mut cmd, || Ok(())) };
        let status = exec_child(|| cmd.spawn()).unwrap().wait().unwrap();
        assert!(status.success());
        assert!(ad.is_serving(), "the fork of a child that execs stopped the serving thread");
        assert_eq!(fork_and_wait(), 0);
        assert!(!ad.is_serving(), "the thread lived through a plain fork");
        resume_paused();
        assert!(ad.is_serving(), "the next call did not start the thread again");
        assert_eq!(check_segment_fd(connect(&e, LONG).unwrap().as_fd(), euid()).unwrap(), 4096);
        assert_eq!(fork_and_wait(), 0);
        drop(ad); // while stopped: nothing to join, the name goes at once
        assert!(!list().contains(&e));
        resume_paused(); // nothing left to start
    }

    #[test]
    fn dropping_an_advert_in_a_forked_child_leaves_the_parents_advert_serving() {
        let _forks = crate::process_id::fork_test_lock();
        let (_memfd, ad, e) = published();
        // SAFETY: the child only drops the advert (no allocation-free guarantee needed beyond what
        // Drop does: a getpid and closes) and exits with _exit.
        match unsafe { libc::fork() } {
            0 => {
                drop(ad);
                // SAFETY: ends the child without running the parent's atexit handlers or tests.
                unsafe { libc::_exit(0) }
            }
            child => {
                assert!(child > 0);
                let mut status = 0;
                // SAFETY: waits for our own child.
                assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
                assert_eq!(status, 0);
            }
        }
        resume_paused(); // the parent's next call
        assert!(connect(&e, LONG).is_ok(), "the parent still serves after the child dropped its copy");
    }

    #[test]
    fn a_forked_child_holding_its_copy_does_not_keep_the_name_after_the_parent_drops_it() {
        let _forks = crate::process_id::fork_test_lock();
        let (_memfd, ad, e) = published();
        let name = e.name;
        let (mut pipe, mut ready) = ([0i32; 2], [0i32; 2]);
        // SAFETY: each array has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        assert_eq!(unsafe { libc::pipe(ready.as_mut_ptr()) }, 0);
        // SAFETY: the child keeps `ad` (never dropped), says it runs (its fork handlers done), blocks
        // in read until the parent closes the pipe's write end, then _exits: async-signal-safe
        // calls only.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let mut byte = 0u8;
            // SAFETY: closes the child's write ends' copies it does not use, writes and reads a
            // live local byte, exits.
            unsafe {
                libc::close(pipe[1]);
                libc::write(ready[1], (&byte as *const u8).cast(), 1);
                libc::read(pipe[0], (&mut byte as *mut u8).cast(), 1);
                libc::_exit(0);
            }
        }
        // SAFETY: the parent's read end of `pipe` and write end of `ready` are not used; waits
        // (reading a live local byte) until the child ran past the fork, child handler included.
        // Before, the parent could look before the child had run at all, while the child's copy of
        // the listener still kept the name: a failure that depended on scheduling (seen under load).
        let mut byte = 0u8;
        unsafe {
            libc::close(pipe[0]);
            libc::close(ready[1]);
            assert_eq!(libc::read(ready[0], (&mut byte as *mut u8).cast(), 1), 1);
            libc::close(ready[0]);
        }
        assert!(list().iter().any(|e| e.name == name), "listed while the parent serves");
        drop(ad);
        let listed = list().iter().any(|e| e.name == name);
        // SAFETY: closing the write end lets the child's read return; waits for our own child.
        let mut status = -1;
        unsafe {
            libc::close(pipe[1]);
            assert_eq!(libc::waitpid(child, &mut status, 0), child);
        }
        assert_eq!(status, 0);
        assert!(!listed, "{name} stayed listed while a forked child held its copy of the advert");
    }
}
