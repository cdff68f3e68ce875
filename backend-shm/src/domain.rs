//! What one IA's objects share ([`IaShared`]): its settings, its region
//! table (published to peers, [`crate::table`]) and the regions behind it,
//! [`ShmPz`] and [`ShmLmr`], and the progress helper.

use crate::config::ShmConfig;
use crate::helper::Helper;
use crate::sys::FileRef;
use crate::table::{SLOTS, Table};
use rmr_api::provider::SoftEvd;
use rmr_api::{Access, Error, Evd, IaAttr, Lmr, MemRegion, Pz, Result, RmrContext};
use std::any::Any;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// A registered region as the target side of the rings sees it.
pub(crate) use rmr_api::provider::LmrRecord as LmrInner;

/// A connection this side let go of, as a deregistration sees it: its
/// peer may still be in the middle of a cross-memory access to this IA's
/// memory.
pub(crate) trait Departed: Send + Sync {
    /// Waits until the peer is in no cross-memory access (or `until`);
    /// false at the deadline.
    fn quiesce(&self, until: std::time::Instant) -> bool;
    /// The peer hung up and no access of its runs: it can start none.
    fn finished(&self) -> bool;
}

/// A connection as a deregistration sees it: a peer that may be in the
/// middle of a cross-memory access to this IA's memory.
pub(crate) trait Peer: Send + Sync {
    /// Waits until the peer has no cross-memory access in flight here;
    /// false when it still has one at `until`.
    fn quiesce(&self, until: std::time::Instant) -> bool;
}

/// Connections this side let go of, whose peers have not hung up yet, that
/// an IA keeps watching (see [`IaShared::depart`]).
pub(crate) const MAX_DEPARTED: usize = 64;

/// How long a deregistration waits for peers' cross-memory accesses.
const QUIESCE: std::time::Duration = std::time::Duration::from_secs(2);

pub(crate) struct IaShared {
    pub(crate) attr: IaAttr,
    /// The namespace of this IA's service points (`shm:<name>`).
    pub(crate) name: String,
    pub(crate) cfg: ShmConfig,
    /// What peers check their cross-memory accesses against.
    pub(crate) table: Table,
    /// The regions behind the table's slots (for the ring path).
    regions: RwLock<Vec<Option<Arc<LmrInner>>>>,
    pub(crate) helper: Helper,
    /// The connections peers may write this IA's memory through.
    peers: std::sync::Mutex<Vec<std::sync::Weak<dyn Peer>>>,
    /// Connections this side let go of whose peer may still be inside a
    /// cross-memory access to this IA's memory (see [`IaShared::depart`]).
    departed: std::sync::Mutex<Vec<Arc<dyn Departed>>>,
}

impl IaShared {
    pub(crate) fn new(name: String, cfg: ShmConfig, attr: IaAttr) -> Result<IaShared> {
        let table = Table::new().map_err(|e| Error::io("create the shm region table", e))?;
        Ok(IaShared {
            attr,
            name,
            helper: Helper::new(cfg.watch),
            cfg,
            table,
            regions: RwLock::new(Vec::new()),
            peers: std::sync::Mutex::new(Vec::new()),
            departed: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The region of `key`, if registered on this IA.
    pub(crate) fn lookup(&self, key: u64) -> Option<Arc<LmrInner>> {
        let slot = (key & 0xffff_ffff).checked_sub(1)? as usize;
        let r = self.regions.read().unwrap_or_else(|e| e.into_inner());
        r.get(slot)?.as_ref().filter(|l| l.key == key).cloned()
    }

    fn insert(&self, inner: LmrInner) -> Arc<LmrInner> {
        let slot = (inner.key & 0xffff_ffff) as usize - 1;
        let inner = Arc::new(inner);
        let mut r = self.regions.write().unwrap_or_else(|e| e.into_inner());
        if r.len() <= slot {
            r.resize(slot + 1, None);
        }
        debug_assert!(slot < SLOTS);
        r[slot] = Some(inner.clone());
        inner
    }

    /// Takes a connection into account for deregistrations.
    pub(crate) fn add_peer(&self, p: std::sync::Weak<dyn Peer>) {
        let mut v = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(p);
    }

    /// Keeps what a connection this side let go of needs to tell when its
    /// peer is out of every cross-memory access: an honest application
    /// may drop its endpoint, deregister and free a buffer while the
    /// peer's large write into it still runs. Departures whose peer hung
    /// up and has no access running are dropped here.
    ///
    /// At most [`MAX_DEPARTED`] are kept (a peer that keeps its endpoints
    /// long after this side dropped them would otherwise grow the list, a
    /// ring mapping and a descriptor each, and the look at each): past
    /// that the oldest is let go, and a deregistration no longer waits for
    /// its peer.
    pub(crate) fn depart(&self, d: Arc<dyn Departed>) {
        let mut v = self.departed.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|d| !d.finished());
        if v.len() >= MAX_DEPARTED {
            v.remove(0);
            tracing::debug!(target: "rmr::shm", kept = MAX_DEPARTED, "a departed connection's peer still holds it; no longer waited for");
        }
        v.push(d);
    }

    /// Withdraws a region: from the table first, then waits until no peer
    /// is inside a cross-memory access (one that passed its table lookup
    /// before the withdrawal may still be writing), through a live
    /// connection or one this side let go of. False when one still is
    /// after [`QUIESCE`].
    fn remove(&self, key: u64) -> bool {
        let slot = (key & 0xffff_ffff) as usize - 1;
        let mut r = self.regions.write().unwrap_or_else(|e| e.into_inner());
        if r.get(slot).and_then(|l| l.as_ref()).is_some_and(|l| l.key == key) {
            r[slot] = None;
        }
        drop(r);
        self.table.remove(key);
        let peers: Vec<_> = self
            .peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|w| w.upgrade())
            .collect();
        let departed: Vec<_> = {
            let mut v = self.departed.lock().unwrap_or_else(|e| e.into_inner());
            v.retain(|d| !d.finished());
            v.clone()
        };
        let until = std::time::Instant::now() + QUIESCE;
        peers.iter().all(|p| p.quiesce(until)) && departed.iter().all(|d| d.quiesce(until))
    }
}

impl Drop for IaShared {
    fn drop(&mut self) {
        self.helper.stop();
    }
}

/// The EVD as the software queue every shm EVD is.
pub(crate) fn soft(evd: &Arc<dyn Evd>) -> Result<&SoftEvd> {
    evd.as_any()
        .downcast_ref::<SoftEvd>()
        .ok_or_else(|| Error::invalid("the shm backend needs EVDs created by an shm IA"))
}

/// A protection zone of the shm backend.
pub struct ShmPz {
    pub(crate) id: u64,
    pub(crate) ia: Arc<IaShared>,
}

impl Pz for ShmPz {
    fn id(&self) -> u64 {
        self.id
    }

    fn register(
        &self,
        region: &Arc<MemRegion>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Arc<dyn Lmr>> {
        region.check(offset, len)?;
        let addr = region.addr() + offset;
        // A shared region's peers may map its file (the region starts at
        // the file's first byte).
        let file = match region.shared_file() {
            Some(fd) => {
                let st = rustix::fs::fstat(fd)
                    .map_err(|e| Error::io("fstat a shared region's file", e.into()))?;
                Some(FileRef { fd: fd.as_raw_fd(), ino: st.st_ino, off: offset })
            }
            None => None,
        };
        let key = self.ia.table.insert(addr, len, access, self.id, file)?;
        let inner = self.ia.insert(LmrInner {
            key,
            region: region.clone(),
            offset,
            len,
            access,
            pz_id: self.id,
            registered: AtomicBool::new(true),
        });
        Ok(Arc::new(ShmLmr { inner, ia: self.ia.clone() }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A registered region of the shm backend. Dropping it deregisters.
pub struct ShmLmr {
    inner: Arc<LmrInner>,
    ia: Arc<IaShared>,
}

impl ShmLmr {
    /// What a post reads from this LMR, field by field (see
    /// [`rmr_api::provider::check_and_place`]).
    pub(crate) fn facts(&self) -> rmr_api::provider::LmrFacts<'_> {
        self.inner.facts()
    }
}

impl Lmr for ShmLmr {
    fn region(&self) -> &Arc<MemRegion> {
        &self.inner.region
    }
    fn offset(&self) -> u64 {
        self.inner.offset
    }
    fn len(&self) -> u64 {
        self.inner.len
    }
    fn access(&self) -> Access {
        self.inner.access
    }
    fn pz_id(&self) -> u64 {
        self.inner.pz_id
    }
    fn rmr_context(&self) -> RmrContext {
        RmrContext::new(
            self.inner.key,
            self.inner.region.addr() + self.inner.offset,
            self.inner.len,
        )
    }
    fn is_registered(&self) -> bool {
        self.inner.registered.load(Ordering::Acquire)
    }
    fn deregister(&self) -> Result<()> {
        if self.inner.registered.swap(false, Ordering::AcqRel) && !self.ia.remove(self.inner.key) {
            // A peer stays inside a cross-memory access to this region:
            // the memory is kept (leaked) rather than freed under it.
            tracing::warn!(target: "rmr::shm", key = self.inner.key, "a peer's cross-memory access outlasted deregistration; the region's memory is kept");
            std::mem::forget(self.inner.region.clone());
        }
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for ShmLmr {
    fn drop(&mut self) {
        let _ = self.deregister();
    }
}
