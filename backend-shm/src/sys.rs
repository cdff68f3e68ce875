//! The backend's contact with the kernel that needs `unsafe`: shared
//! mappings of a memfd, and cross-memory attach (`process_vm_readv`,
//! `process_vm_writev`). Everything else goes through rustix's safe calls.

use rustix::fd::{AsFd, OwnedFd};
use rustix::mm::{MapFlags, ProtFlags};
use std::io;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, Weak};

/// Every shared file this process has mapped, by (device, inode): a file
/// both of whose ends live in this process (two IAs of one process) is
/// mapped once, so that both ends' atomics are on the same addresses (which
/// is also what a race detector needs to see them as one).
static MAPPED: Mutex<Vec<(FileId, Weak<Mapping>)>> = Mutex::new(Vec::new());

/// A file's device and inode.
type FileId = (u64, u64);

fn file_id(fd: &impl AsFd) -> io::Result<(u64, u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino, st.st_size as u64))
}

/// A peer's file is fit to map `len` bytes of: at least that long, and
/// sealed against shrinking (or truncating it later would make every
/// access here fault, SIGBUS). Returns its device, inode and length.
fn checked_file(fd: &impl AsFd, len: usize) -> io::Result<(u64, u64, u64)> {
    let (dev, ino, size) = file_id(fd)?;
    if size < len as u64 || len == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "shared file too short"));
    }
    let seals = rustix::fs::fcntl_get_seals(fd).unwrap_or(rustix::fs::SealFlags::empty());
    if !seals.contains(rustix::fs::SealFlags::SHRINK) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "shared file not sealed against shrinking",
        ));
    }
    Ok((dev, ino, size))
}

/// Whether this process maps `(dev, ino)` as a ring or region table.
fn is_ours(dev: u64, ino: u64) -> bool {
    MAPPED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|(id, w)| *id == (dev, ino) && w.strong_count() > 0)
}

/// A shared mapping of a whole memfd: rings or a region table.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    write: bool,
    /// One of this process's own region tables: never a ring, whatever a
    /// peer sends.
    table: bool,
}

// SAFETY: the mapping is plain shared memory; every access through it is
// atomic or a raw copy whose synchronisation the ring protocol gives.
unsafe impl Send for Mapping {}
// SAFETY: as for Send.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A new memfd of `len` zero bytes, mapped read-write; returns the fd
    /// too (to send to the peer).
    ///
    /// The file is sealed at that size (it can neither shrink nor grow, nor
    /// be unsealed): a peer that maps it cannot make this side's accesses
    /// fault by truncating it. A `table` is sealed against writes too once
    /// this side mapped it (`F_SEAL_FUTURE_WRITE`, Linux 5.1 and later): a
    /// peer that reopens its read-only descriptor for writing (through
    /// `/proc`) still cannot map it writable or write it.
    pub(crate) fn create(
        name: &str,
        len: usize,
        table: bool,
    ) -> io::Result<(Arc<Mapping>, OwnedFd)> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        rustix::fs::ftruncate(&fd, len as u64)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW)?;
        let (dev, ino, _) = file_id(&fd)?;
        let m = Mapping::fresh(&fd, len, true, table)?;
        MAPPED.lock().unwrap_or_else(|e| e.into_inner()).push(((dev, ino), Arc::downgrade(&m)));
        if table && let Err(e) = rustix::fs::fcntl_add_seals(&fd, SealFlags::FUTURE_WRITE) {
            // Before Linux 5.1: peers still get a read-only descriptor.
            tracing::info!(target: "rmr::shm", error = %e, "region table not sealed against writes (F_SEAL_FUTURE_WRITE)");
        }
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SEAL)?;
        Ok((m, fd))
    }

    /// A read-only descriptor of the same file (what a peer gets of a
    /// table it must not write).
    pub(crate) fn read_only(fd: &OwnedFd) -> io::Result<OwnedFd> {
        let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(fd));
        Ok(rustix::fs::open(
            path.as_str(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?)
    }

    /// Maps `len` bytes of a received memfd; read-only unless `write`.
    ///
    /// # Errors
    /// The file is shorter than `len` (a peer that lies about it), or mmap fails.
    pub(crate) fn map(fd: impl AsFd, len: usize, write: bool) -> io::Result<Arc<Mapping>> {
        let (dev, ino, _) = checked_file(&fd, len)?;
        let mut known = MAPPED.lock().unwrap_or_else(|e| e.into_inner());
        known.retain(|(_, w)| w.strong_count() > 0);
        if let Some(m) =
            known.iter().find(|(id, _)| *id == (dev, ino)).and_then(|(_, w)| w.upgrade())
        {
            if write && m.table {
                // A peer sent this side's own region table (a descriptor it
                // was given read-only) as ring memory: writing ring indices
                // into it would garble what other peers check against.
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a peer sent one of this process's own region tables as its ring",
                ));
            }
            if m.len >= len && (m.write || !write) {
                return Ok(m);
            }
        }
        let m = Mapping::fresh(&fd, len, write, false)?;
        known.push(((dev, ino), Arc::downgrade(&m)));
        Ok(m)
    }

    /// A mapping of `len` bytes of `fd` of its own (not shared through the
    /// registry), once `fd` passed [`checked_file`].
    fn fresh(fd: impl AsFd, len: usize, write: bool, table: bool) -> io::Result<Arc<Mapping>> {
        let prot = if write { ProtFlags::READ | ProtFlags::WRITE } else { ProtFlags::READ };
        // SAFETY: a fresh mapping chosen by the kernel (null hint), of a
        // file at least `len` bytes long that cannot shrink (sealed, checked
        // by the caller); nothing else refers to it yet.
        let p =
            unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0)? };
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Arc::new(Mapping { ptr, len, write, table }))
    }

    /// The first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range, and every user of it holds
        // the Mapping (rings and tables keep it in an Arc).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// One local piece of a cross-memory transfer: `len` bytes at `ptr` in
/// this process (inside a registered `MemRegion` the DTO holds).
#[derive(Clone, Copy)]
pub(crate) struct Piece {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

/// Which way a cross-memory transfer goes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dir {
    /// Local pieces into the peer's range.
    Write,
    /// The peer's range into local pieces.
    Read,
}

/// Moves `total` bytes between the local `pieces` and `[addr, addr+total)`
/// in process `pid`, looping over partial transfers.
///
/// # Errors
/// The kernel's: `EFAULT` (the peer's range is not mapped), `EPERM`
/// (ptrace policy), `ESRCH` (the peer is gone).
pub(crate) fn cross(
    pid: i32,
    dir: Dir,
    pieces: &[Piece],
    addr: u64,
    total: usize,
) -> io::Result<()> {
    let mut done = 0usize;
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(pieces.len());
    while done < total {
        // The local pieces from byte `done` on.
        iov.clear();
        let mut skip = done;
        for p in pieces {
            if skip >= p.len {
                skip -= p.len;
                continue;
            }
            iov.push(libc::iovec {
                iov_base: p.ptr.wrapping_add(skip).cast(),
                iov_len: p.len - skip,
            });
            skip = 0;
        }
        let remote = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: total - done,
        };
        // SAFETY: the local iovecs lie inside registered regions the caller
        // keeps alive for the call (checked against their LMRs' bounds);
        // the remote range is the peer's, which the kernel checks; no Rust
        // reference to either range exists.
        let n = unsafe {
            match dir {
                Dir::Write => {
                    libc::process_vm_writev(pid, iov.as_ptr(), iov.len() as _, &remote, 1, 0)
                }
                Dir::Read => {
                    libc::process_vm_readv(pid, iov.as_ptr(), iov.len() as _, &remote, 1, 0)
                }
            }
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "cross-memory transfer moved nothing",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Where a region lies in a shared file of its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileRef {
    /// The descriptor number in the owner's process.
    pub(crate) fd: i32,
    /// The file's inode (checked after the descriptor is fetched).
    pub(crate) ino: u64,
    /// The offset of the entry's address in the file.
    pub(crate) off: u64,
}

/// How many of a peer's shared files a connection keeps mapped.
const FILES_KEPT: usize = 32;

/// The largest peer file mapped (address space, not memory: a sparse file
/// costs nothing until written).
const FILE_MAX: u64 = 1 << 40;

/// The filesystem type of memfds (tmpfs; hugetlbfs memfds are refused:
/// a page that cannot be allocated there is a SIGBUS, not an error).
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// A peer's shared files ([`rmr_api::MemRegion::shared`]) this side has
/// mapped, so that an RDMA write or read of such a region is one copy.
///
/// A file's descriptor is fetched from the peer with `pidfd_getfd` (the
/// same ptrace permission as cross-memory attach, through a pidfd opened
/// when the connection starts) and accepted only when it is the inode the
/// peer's table names, a memfd (tmpfs) sealed against shrinking, opened
/// for reading and writing, at most [`FILE_MAX`] long, and not one of this
/// process's rings or region tables. Each file gets a mapping of its own.
/// The mapping keeps the file alive: a copy after the peer freed the
/// region lands in the orphaned file, never in memory the peer reused. The
/// [`FILES_KEPT`] files mapped last stay mapped, until the connection ends.
#[derive(Default)]
pub(crate) struct Files {
    pidfd: Option<OwnedFd>,
    maps: std::collections::VecDeque<(u64, Arc<Mapping>)>,
    /// Inodes that could not be mapped (the peer's table is wrong about
    /// them): not fetched again.
    bad: std::collections::VecDeque<u64>,
    /// Why fetching descriptors does not work to this peer, once it failed.
    refused: Option<String>,
}

impl Files {
    /// Opens the pidfd of the peer (when the connection starts, so that a
    /// later fetch cannot reach a process that reused its pid).
    pub(crate) fn attach(&mut self, pid: i32) {
        use rustix::process::{Pid, PidfdFlags, pidfd_open};
        match Pid::from_raw(pid).map(|p| pidfd_open(p, PidfdFlags::empty())) {
            Some(Ok(fd)) => self.pidfd = Some(fd),
            Some(Err(e)) => self.refused = Some(format!("pidfd_open: {e}")),
            None => self.refused = Some("the peer's pid is unknown".into()),
        }
    }

    /// The mapping of the peer's file `f` (fetched and mapped on first
    /// use), or why there is none.
    pub(crate) fn get(&mut self, f: FileRef) -> Result<Arc<Mapping>, String> {
        if let Some((_, m)) = self.maps.iter().find(|(ino, _)| *ino == f.ino) {
            return Ok(m.clone());
        }
        if let Some(why) = &self.refused {
            return Err(why.clone());
        }
        if self.bad.contains(&f.ino) {
            return Err("the peer's shared file was refused before".into());
        }
        let Some(pidfd) = &self.pidfd else { return Err("no pidfd of the peer".into()) };
        let fd = match rustix::process::pidfd_getfd(
            pidfd,
            f.fd,
            rustix::process::PidfdGetfdFlags::empty(),
        ) {
            Ok(fd) => fd,
            Err(e) if matches!(e, rustix::io::Errno::PERM | rustix::io::Errno::NOSYS) => {
                let why = format!("pidfd_getfd is refused ({e})");
                self.refused = Some(why.clone());
                return Err(why);
            }
            Err(e) => return Err(self.refuse(f.ino, format!("pidfd_getfd: {e}"))),
        };
        let m = Files::accept(&fd, f.ino).map_err(|e| self.refuse(f.ino, e.to_string()))?;
        if self.maps.len() == FILES_KEPT {
            self.maps.pop_front();
        }
        self.maps.push_back((f.ino, m.clone()));
        Ok(m)
    }

    fn refuse(&mut self, ino: u64, why: String) -> String {
        if self.bad.len() == FILES_KEPT {
            self.bad.pop_front();
        }
        self.bad.push_back(ino);
        format!("the peer's shared file cannot be mapped: {why}")
    }

    /// Maps a fetched descriptor once it passes the checks of [`Files`].
    fn accept(fd: &OwnedFd, want_ino: u64) -> io::Result<Arc<Mapping>> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        let (dev, ino, size) = file_id(fd)?;
        if ino != want_ino {
            return Err(bad("the descriptor is not the file the region table names"));
        }
        if rustix::fs::fstatfs(fd)?.f_type as u64 != TMPFS_MAGIC {
            return Err(bad("not a memfd on tmpfs"));
        }
        if !rustix::fs::fcntl_getfl(fd)?.contains(rustix::fs::OFlags::RDWR) {
            return Err(bad("not open for reading and writing"));
        }
        if size > FILE_MAX {
            return Err(bad("larger than 1 TiB"));
        }
        if is_ours(dev, ino) {
            return Err(bad("one of this process's rings or region tables"));
        }
        checked_file(fd, size as usize)?;
        Mapping::fresh(fd, size as usize, true, false)
    }

    /// What the EP's notes say: how many files are mapped, or why none can be.
    pub(crate) fn note(&self) -> String {
        match &self.refused {
            Some(why) => format!("none: {why}"),
            None => self.maps.len().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_region_table_is_never_mapped_as_a_ring_nor_written_by_a_peer() {
        let (m, fd) = Mapping::create("t", 4096, true).unwrap();
        let ro = Mapping::read_only(&fd).unwrap();
        // Sent back as ring memory (mapped read-write), from either
        // descriptor: refused.
        assert!(Mapping::map(&fd, 4096, true).is_err());
        assert!(Mapping::map(&ro, 4096, true).is_err());
        // Read-only (another IA of this process reading it as a peer's
        // table): the one mapping.
        assert!(Arc::ptr_eq(&Mapping::map(&ro, 4096, false).unwrap(), &m));
        // Reopened for writing through /proc, as a peer could: neither a
        // writable mapping nor a write.
        let path = format!("/proc/self/fd/{}", ro.as_raw_fd());
        let rw =
            rustix::fs::open(path.as_str(), rustix::fs::OFlags::RDWR, rustix::fs::Mode::empty())
                .unwrap();
        assert!(Mapping::fresh(&rw, 4096, true, false).is_err(), "a writable mapping");
        assert!(rustix::io::write(&rw, b"x").is_err(), "a write");
        // This side's own mapping still writes.
        // SAFETY: `m` maps 4096 bytes read-write and lives to the end.
        let back = unsafe {
            m.ptr().write(7);
            m.ptr().read()
        };
        assert_eq!(back, 7);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn ring_memory_stays_writable_for_both_ends() {
        let (m, fd) = Mapping::create("r", 4096, false).unwrap();
        // The other end of a ring inside this process: the same mapping.
        assert!(Arc::ptr_eq(&Mapping::map(&fd, 4096, true).unwrap(), &m));
    }
}
