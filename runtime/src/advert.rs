//! Pools advertise themselves so `ringenv top` can find them, and leave nothing behind.
//!
//! A pool binds a listening Unix socket in the *abstract* namespace, named
//! `ringenv-<uid>/pool-<main pid>-<segment fd>`. An abstract name is not a file: the kernel removes
//! it the moment the socket closes, so a pool that ends, or whose main process is killed with
//! SIGKILL, leaves no entry anywhere (a directory of files would keep a stale one). The `<uid>`
//! prefix scopes the names per user; [`list`] reads `/proc/net/unix` for this user's names, and a
//! monitor then opens the segment through `/proc/<pid>/fd/<fd>` read-only, which the kernel allows
//! only to the pool's own user. The socket never accepts a connection; it exists only for its
//! name.
//!
//! ```
//! use ringenv_runtime::{list_pools, Advert};
//! let ad = Advert::publish(7).unwrap();
//! assert!(list_pools().iter().any(|p| p.pid == std::process::id() && p.fd == 7));
//! drop(ad); // closing the pool removes its name at once
//! assert!(list_pools().iter().all(|p| p.pid != std::process::id() || p.fd != 7));
//! ```

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::PathBuf;

fn prefix() -> String {
    format!("ringenv-{}/pool-", rustix::process::getuid().as_raw())
}

/// A pool's advertisement; its name disappears when this is dropped or the process dies.
#[derive(Debug)]
pub struct Advert {
    _socket: UnixListener,
    name: String,
}

impl Advert {
    /// Advertises the pool of this process whose segment descriptor is `fd`.
    ///
    /// # Errors
    /// The `io::Error` of binding the abstract socket (for example `AddrInUse` if this process
    /// already advertises that descriptor).
    pub fn publish(fd: i32) -> std::io::Result<Advert> {
        let name = format!("{}{}-{fd}", prefix(), std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
        Ok(Advert { _socket: UnixListener::bind_addr(&addr)?, name })
    }

    /// The abstract socket name (without the leading NUL byte).
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A pool found by [`list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolEntry {
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

fn parse_names(proc_net_unix: &str, prefix: &str) -> Vec<PoolEntry> {
    let mut pools: Vec<PoolEntry> = proc_net_unix
        .lines()
        .filter_map(|line| line.split_whitespace().last())
        .filter_map(|path| path.strip_prefix('@')?.strip_prefix(prefix))
        .filter_map(|rest| {
            let (pid, fd) = rest.split_once('-')?;
            Some(PoolEntry { pid: pid.parse().ok()?, fd: fd.parse().ok()? })
        })
        .collect();
    pools.sort_by_key(|p| (p.pid, p.fd));
    pools.dedup();
    pools
}

/// This user's live pools (in this network namespace), read from `/proc/net/unix`.
pub fn list() -> Vec<PoolEntry> {
    std::fs::read_to_string("/proc/net/unix").map(|t| parse_names(&t, &prefix())).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_this_user_are_parsed_and_others_ignored() {
        let text = "\
Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 100 @ringenv-1000/pool-42-7
0000000000000000: 00000002 00000000 00010000 0001 01 101 @ringenv-1001/pool-43-8
0000000000000000: 00000002 00000000 00010000 0001 01 102 /run/some.sock
0000000000000000: 00000002 00000000 00010000 0001 01 103 @ringenv-1000/pool-bad
0000000000000000: 00000003 00000000 00000000 0001 03 104
";
        assert_eq!(parse_names(text, "ringenv-1000/pool-"), vec![PoolEntry { pid: 42, fd: 7 }]);
        assert_eq!(PoolEntry { pid: 42, fd: 7 }.segment_path(), PathBuf::from("/proc/42/fd/7"));
    }

    #[test]
    fn an_advert_is_listed_while_alive_and_unique() {
        let ad = Advert::publish(1234).unwrap();
        assert!(ad.name().ends_with(&format!("{}-1234", std::process::id())));
        assert!(list().contains(&PoolEntry { pid: std::process::id(), fd: 1234 }));
        assert!(Advert::publish(1234).is_err(), "one name per pool");
        drop(ad);
        assert!(!list().contains(&PoolEntry { pid: std::process::id(), fd: 1234 }));
    }
}
