//! Pools advertise themselves in a per-user runtime directory, so `ringenv top` can find them.
//!
//! The directory is `$XDG_RUNTIME_DIR/ringenv` when that variable is set, else
//! `/tmp/ringenv-<uid>`, created with mode 0700 (only this user can list or read it). Each pool
//! writes one small file, `<main pid>-<n>.pool`, holding one line
//! `ringenv-pool pid=<main pid> fd=<segment fd>`; a monitor opens the segment through
//! `/proc/<pid>/fd/<fd>` read-only. The file is removed when the pool closes; an entry whose main
//! process died without closing (SIGKILL) is stale and removed by [`list`].
//!
//! ```
//! use ringenv_runtime::advert;
//! let dir = std::env::temp_dir().join(format!("ringenv-doc-{}", std::process::id()));
//! let ad = advert::Advert::publish_in(&dir, 7).unwrap();
//! let pools = advert::list_in(&dir);
//! assert!(pools.iter().any(|p| p.pid == std::process::id() && p.fd == 7));
//! drop(ad); // closing the pool removes its entry
//! assert!(advert::list_in(&dir).iter().all(|p| p.pid != std::process::id() || p.fd != 7));
//! # std::fs::remove_dir_all(&dir).ok();
//! ```

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The per-user directory where pools advertise themselves.
pub fn dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("ringenv"),
        _ => std::env::temp_dir().join(format!("ringenv-{}", rustix::process::getuid().as_raw())),
    }
}

/// A pool's entry in the directory; removed on drop.
#[derive(Debug)]
pub struct Advert {
    path: PathBuf,
}

impl Advert {
    /// Publishes the pool of this process whose segment descriptor is `fd`, in [`dir`].
    ///
    /// # Errors
    /// The `io::Error` of creating the directory or the file.
    pub fn publish(fd: i32) -> std::io::Result<Advert> {
        Self::publish_in(&dir(), fd)
    }

    /// Publishes in `dir` (tests and custom locations).
    ///
    /// # Errors
    /// The `io::Error` of creating the directory or the file.
    pub fn publish_in(dir: &Path, fd: i32) -> std::io::Result<Advert> {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        let pid = std::process::id();
        let path = dir.join(format!("{pid}-{}.pool", NEXT.fetch_add(1, Ordering::Relaxed)));
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        writeln!(f, "ringenv-pool pid={pid} fd={fd}")?;
        Ok(Advert { path })
    }

    /// The entry's file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Advert {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A pool found in the directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolEntry {
    /// The entry's file.
    pub path: PathBuf,
    /// Process id of the pool's main process.
    pub pid: u32,
    /// The segment's descriptor in that process.
    pub fd: i32,
}

impl PoolEntry {
    /// Where the segment can be opened: `/proc/<pid>/fd/<fd>`.
    pub fn segment_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/fd/{}", self.pid, self.fd))
    }
}

fn parse(path: &Path) -> Option<PoolEntry> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut words = text.split_whitespace();
    if words.next()? != "ringenv-pool" {
        return None;
    }
    let (mut pid, mut fd) = (None, None);
    for w in words {
        match w.split_once('=')? {
            ("pid", v) => pid = v.parse().ok(),
            ("fd", v) => fd = v.parse().ok(),
            _ => {}
        }
    }
    Some(PoolEntry { path: path.to_path_buf(), pid: pid?, fd: fd? })
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The live pools in [`dir`]; stale entries (main process gone) are removed on the way.
pub fn list() -> Vec<PoolEntry> {
    list_in(&dir())
}

/// The live pools in `dir`, removing stale entries.
pub fn list_in(dir: &Path) -> Vec<PoolEntry> {
    let Ok(read) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut pools = Vec::new();
    for entry in read.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "pool") {
            continue;
        }
        match parse(&path) {
            Some(p) if alive(p.pid) => pools.push(p),
            _ => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    pools.sort_by_key(|p| (p.pid, p.fd));
    pools
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_and_malformed_entries_are_pruned() {
        let dir = std::env::temp_dir().join(format!("ringenv-advert-test-{}", std::process::id()));
        let live = Advert::publish_in(&dir, 11).unwrap();
        // A pid that cannot exist (above pid_max) stands for a main process killed with SIGKILL.
        std::fs::write(dir.join("4194399-0.pool"), "ringenv-pool pid=4194399 fd=3\n").unwrap();
        std::fs::write(dir.join("garbage.pool"), "not a pool\n").unwrap();
        let pools = list_in(&dir);
        assert_eq!(pools.len(), 1);
        assert_eq!((pools[0].pid, pools[0].fd), (std::process::id(), 11));
        assert_eq!(pools[0].segment_path(), PathBuf::from(format!("/proc/{}/fd/11", std::process::id())));
        assert!(!dir.join("4194399-0.pool").exists() && !dir.join("garbage.pool").exists());
        let path = live.path().to_path_buf();
        drop(live);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
