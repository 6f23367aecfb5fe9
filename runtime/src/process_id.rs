//! The id of the calling process, cached (a pool checks it on every operation, and `getpid` is a
//! system call). A `pthread_atfork` child handler clears the cache, so `fork()` through libc is
//! seen; a raw `clone` that bypasses libc is not.
//!
//! ```
//! assert_eq!(ringenv_runtime::current_pid(), std::process::id());
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

/// The cached id; 0 (no process has it) until the first call, and again in a fork child.
static PID: AtomicU32 = AtomicU32::new(0);
static FORGET_IN_CHILD: Once = Once::new();

extern "C" fn forget_in_child() {
    PID.store(0, Ordering::Relaxed);
}

/// This process's id, as `std::process::id()`, without a system call after the first.
pub fn current_pid() -> u32 {
    let pid = PID.load(Ordering::Relaxed);
    if pid != 0 {
        return pid;
    }
    // SAFETY: `forget_in_child` only stores to an atomic, which is async-signal-safe, as a fork
    // child handler must be; registering a handler has no other precondition.
    FORGET_IN_CHILD.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(forget_in_child));
    });
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    pid
}

/// Held by every unit test that forks a child which runs on without `exec`: the tests of one
/// binary run in parallel threads. Serialised, no test's result depends on how the threads are
/// scheduled.
#[cfg(all(test, not(loom), not(miri)))]
pub(crate) fn fork_test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(all(test, not(loom), not(miri)))]
mod tests {
    use super::*;

    #[test]
    fn a_fork_child_sees_its_own_id() {
        let _forks = fork_test_lock();
        assert_eq!(current_pid(), std::process::id());
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only calls current_pid (an atomic load, getpid, an atomic store: no
        // lock, no allocation), write and _exit, all async-signal-safe.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let ok = u8::from(current_pid() == std::process::id());
            // SAFETY: writes one byte from a live local to the pipe's write end, then exits.
            unsafe {
                libc::write(fds[1], (&ok as *const u8).cast(), 1);
                libc::_exit(0);
            }
        }
        let mut byte = 0u8;
        // SAFETY: closes our copy of the write end; reads one byte into a live local; waits for
        // our own child.
        let read = unsafe {
            libc::close(fds[1]);
            let n = libc::read(fds[0], (&mut byte as *mut u8).cast(), 1);
            libc::close(fds[0]);
            libc::waitpid(child, std::ptr::null_mut(), 0);
            n
        };
        assert_eq!(read, 1);
        assert_eq!(byte, 1, "the child read its parent's cached id");
        assert_eq!(current_pid(), std::process::id());
    }
}
