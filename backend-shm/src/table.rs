//! The region table an IA publishes in shared memory, read-only to its
//! peers: what the initiator of a cross-memory RDMA write or read checks
//! (key, bounds, rights, protection zone) before it touches the target's
//! memory, so that the target's CPU takes no part and the errors are those
//! every backend gives.
//!
//! An entry is eight words: key, address, length, rights, PZ, and for a
//! region in a shared file ([`rmr_api::MemRegion::shared`]) the file's
//! descriptor number in the owner, its inode and the entry's offset in
//! it (a peer then maps the file and copies, see `crate::sys::Files`). The key
//! names its slot (`key = random << 32 | slot + 1`), so a lookup is one
//! entry, not a search. The owner writes an entry with its key word zero
//! and stores the key last; a reader takes the entry only when the key
//! word reads the same before and after the other words (a seqlock).

use crate::sys::{FileRef, Mapping};
use rmr_api::{Access, Status};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering, fence};

/// Slots in a table: regions an IA may have registered at once.
pub(crate) const SLOTS: usize = 1 << 16;

/// Bytes of one entry.
const ENTRY: usize = 64;

/// The bytes of a table's mapping.
pub(crate) const TABLE_BYTES: usize = SLOTS * ENTRY;

/// A table's entry as its owner wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) key: u64,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
    pub(crate) pz: u64,
    /// The shared file the region lies in, if any.
    pub(crate) file: Option<FileRef>,
}

impl Entry {
    /// The target-side checks of an access of `len` bytes at `addr` needing
    /// `need`, from an EP of protection zone `pz`, in the order the other
    /// backends make them.
    pub(crate) fn check(&self, pz: u64, need: Access, addr: u64, len: u64) -> Result<(), Status> {
        let t = rmr_api::provider::RemoteTarget {
            registered: true,
            pz_id: self.pz,
            access: self.access,
            base: self.addr,
            len: self.len,
        };
        t.check(pz, need, addr, len).map(|_| ())
    }
}

fn words(map: &Mapping, slot: usize) -> [&AtomicU64; 8] {
    let base = map.ptr().wrapping_add(slot * ENTRY).cast::<u64>();
    // SAFETY: slot < SLOTS, so the entry lies inside the mapping (checked at
    // mapping time); the words are 8-aligned and only accessed atomically.
    std::array::from_fn(|i| unsafe { AtomicU64::from_ptr(base.wrapping_add(i)) })
}

/// The owner's side: the IA's table, written on registration.
pub(crate) struct Table {
    map: Arc<Mapping>,
    fd: OwnedFd,
    free: Mutex<Vec<usize>>,
}

impl Table {
    /// An empty table in a new memfd.
    pub(crate) fn new() -> std::io::Result<Table> {
        let (map, rw) = Mapping::create("rmr-shm-regions", TABLE_BYTES, true)?;
        // Peers get a read-only descriptor: they can map it, never write it.
        let fd = Mapping::read_only(&rw)?;
        Ok(Table { map, fd, free: Mutex::new((0..SLOTS).rev().collect()) })
    }

    /// A read-only descriptor of the table, for peers.
    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Publishes a region; returns its key.
    pub(crate) fn insert(
        &self,
        addr: u64,
        len: u64,
        access: Access,
        pz: u64,
        file: Option<FileRef>,
    ) -> rmr_api::Result<u64> {
        let slot = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop().ok_or_else(|| {
            rmr_api::Error::invalid(format!("more than {SLOTS} regions registered on one shm IA"))
        })?;
        let high = loop {
            let r = getrandom::u32().map_err(|e| {
                rmr_api::Error::io("getrandom", std::io::Error::other(e.to_string()))
            })?;
            if r != 0 {
                break r;
            }
        };
        let key = u64::from(high) << 32 | (slot as u64 + 1);
        let w = words(&self.map, slot);
        w[0].store(0, Ordering::SeqCst);
        fence(Ordering::Release);
        w[1].store(addr, Ordering::Relaxed);
        w[2].store(len, Ordering::Relaxed);
        w[3].store(u64::from(access.bits()), Ordering::Relaxed);
        w[4].store(pz, Ordering::Relaxed);
        let f = file.unwrap_or(FileRef { fd: -1, ino: 0, off: 0 });
        w[5].store((i64::from(f.fd) + 1) as u64, Ordering::Relaxed);
        w[6].store(f.ino, Ordering::Relaxed);
        w[7].store(f.off, Ordering::Relaxed);
        w[0].store(key, Ordering::Release);
        Ok(key)
    }

    /// Rewrites the entry of `key` (tests of a peer that lies in its table).
    pub(crate) fn overwrite(&self, key: u64, addr: u64, len: u64) {
        if let Some(slot) = slot_of(key) {
            let w = words(&self.map, slot);
            w[1].store(addr, Ordering::SeqCst);
            w[2].store(len, Ordering::SeqCst);
        }
    }

    /// Rewrites the file offset of `key`'s entry and adds `ino_delta` to
    /// its inode (tests of a peer that lies in its table).
    pub(crate) fn overwrite_file(&self, key: u64, off: u64, ino_delta: u64) {
        if let Some(slot) = slot_of(key) {
            let w = words(&self.map, slot);
            w[6].fetch_add(ino_delta, Ordering::SeqCst);
            w[7].store(off, Ordering::SeqCst);
        }
    }

    /// Makes the entry of `key` name descriptor `fd` with inode `ino` at
    /// offset 0 (tests of a peer that lies in its table).
    pub(crate) fn overwrite_fd(&self, key: u64, fd: i32, ino: u64) {
        if let Some(slot) = slot_of(key) {
            let w = words(&self.map, slot);
            w[5].store((i64::from(fd) + 1) as u64, Ordering::SeqCst);
            w[6].store(ino, Ordering::SeqCst);
            w[7].store(0, Ordering::SeqCst);
        }
    }

    /// A digest of every word of the table (tests: was it written?).
    pub(crate) fn digest(&self) -> u64 {
        (0..TABLE_BYTES / 8).fold(0xcbf2_9ce4_8422_2325u64, |h, i| {
            // SAFETY: word `i` lies inside the mapping (TABLE_BYTES long),
            // 8-aligned, and is only accessed atomically.
            let w = unsafe { AtomicU64::from_ptr(self.map.ptr().cast::<u64>().add(i)) };
            (h ^ w.load(Ordering::Relaxed)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// Withdraws a region: from now on peers find no entry for its key.
    pub(crate) fn remove(&self, key: u64) {
        if let Some(slot) = slot_of(key) {
            let w = words(&self.map, slot);
            if w[0].compare_exchange(key, 0, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                self.free.lock().unwrap_or_else(|e| e.into_inner()).push(slot);
            }
        }
    }
}

fn slot_of(key: u64) -> Option<usize> {
    let s = (key & 0xffff_ffff) as usize;
    (1..=SLOTS).contains(&s).then(|| s - 1)
}

/// A peer's table, mapped read-only.
pub(crate) struct PeerTable {
    map: Arc<Mapping>,
}

impl PeerTable {
    /// Maps the table memfd a peer sent.
    pub(crate) fn map(fd: &OwnedFd) -> std::io::Result<PeerTable> {
        Ok(PeerTable { map: Mapping::map(fd, TABLE_BYTES, false)? })
    }

    /// The entry of `key`, if the peer has it registered now.
    pub(crate) fn lookup(&self, key: u64) -> Option<Entry> {
        let slot = slot_of(key)?;
        let w = words(&self.map, slot);
        // Dekker with the owner's withdrawal (which then reads the
        // initiator's in-flight count): a SeqCst fence between the count's
        // increment and this load. The load itself is Relaxed: the table
        // is mapped read-only, where only Relaxed and Acquire atomic loads
        // are promised never to be made as read-modify-writes.
        fence(Ordering::SeqCst);
        if w[0].load(Ordering::Relaxed) != key {
            return None;
        }
        let (addr, len, access, pz) = (
            w[1].load(Ordering::Relaxed),
            w[2].load(Ordering::Relaxed),
            w[3].load(Ordering::Relaxed),
            w[4].load(Ordering::Relaxed),
        );
        let (fd, ino, off) = (
            w[5].load(Ordering::Relaxed),
            w[6].load(Ordering::Relaxed),
            w[7].load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        if w[0].load(Ordering::Relaxed) != key {
            return None;
        }
        let file =
            (1..=i32::MAX as u64).contains(&fd).then(|| FileRef { fd: (fd - 1) as i32, ino, off });
        Some(Entry { key, addr, len, access: Access::from_bits_truncate(access as u32), pz, file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_sees_what_is_registered_and_nothing_else() {
        let t = Table::new().unwrap();
        let k = t.insert(0x1000, 64, Access::REMOTE_WRITE, 7, None).unwrap();
        let f = FileRef { fd: 9, ino: 77, off: 4096 };
        let k2 = t.insert(0x2000, 64, Access::REMOTE_READ, 7, Some(f)).unwrap();
        let p = PeerTable::map(t.fd()).unwrap();
        let e = p.lookup(k).unwrap();
        assert_eq!((e.addr, e.len, e.pz, e.file), (0x1000, 64, 7, None));
        assert_eq!(p.lookup(k2).unwrap().file, Some(f));
        assert_eq!(e.check(7, Access::REMOTE_WRITE, 0x1000, 64), Ok(()));
        assert_eq!(e.check(7, Access::REMOTE_WRITE, 0x1001, 64), Err(Status::OutOfBounds));
        assert_eq!(e.check(7, Access::REMOTE_WRITE, 0xfff, 1), Err(Status::OutOfBounds));
        assert_eq!(e.check(7, Access::REMOTE_READ, 0x1000, 8), Err(Status::RemoteAccess));
        assert_eq!(e.check(8, Access::REMOTE_WRITE, 0x1000, 8), Err(Status::Protection));
        assert!(p.lookup(k ^ 1 << 40).is_none(), "a forged key");
        assert!(p.lookup(0).is_none());
        t.remove(k);
        assert!(p.lookup(k).is_none());
    }
}
