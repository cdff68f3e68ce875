//! Protection zones: one libfabric domain each, so a key of one zone is
//! unknown to the endpoints of another (the provider refuses the access).

use crate::ffi::Domain;
use crate::ia::IaShared;
use crate::lmr::{LmrInner, OfiLmr};
use rmr_api::{Access, Lmr, MemRegion, Pz, Result, Status};
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

pub(crate) struct PzShared {
    pub(crate) id: u64,
    pub(crate) ia: Arc<IaShared>,
    pub(crate) domain: Arc<Domain>,
    is_default: bool,
    /// The zone's registrations by key: what a write that rode in a
    /// message is checked against (see [`crate::eager`]).
    keys: Mutex<HashMap<u64, Weak<LmrInner>>>,
}

impl PzShared {
    /// The IA's first live zone uses its default domain (where EVD CQs
    /// live); later zones open domains of their own.
    pub(crate) fn new(ia: &Arc<IaShared>) -> Result<Arc<PzShared>> {
        let is_default = !ia.default_taken.swap(true, Ordering::AcqRel);
        let domain = if is_default {
            ia.default_domain.clone()
        } else {
            Domain::open(&ia.fabric, &ia.info)?
        };
        Ok(Arc::new(PzShared {
            id: rmr_api::provider::fresh_id(),
            ia: ia.clone(),
            domain,
            is_default,
            keys: Mutex::new(HashMap::new()),
        }))
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Weak<LmrInner>>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets a registration's key (it was deregistered).
    pub(crate) fn forget(&self, key: u64, lmr: &LmrInner) {
        let mut k = self.keys();
        if k.get(&key).is_some_and(|w| std::ptr::eq(w.as_ptr(), lmr)) {
            k.remove(&key);
        }
    }

    /// Where a write of `len` bytes to `addr` under `key`, arrived in a
    /// message, lands: the registration and the offset in its region (see
    /// [`LmrInner::place`]), after the checks
    /// the provider makes of a real RDMA write (a registration of this
    /// zone with that key, still registered, granting remote writes, the
    /// whole range inside it).
    pub(crate) fn eager_target(
        &self,
        key: u64,
        addr: u64,
        len: u64,
    ) -> std::result::Result<(Arc<LmrInner>, u64), Status> {
        let lmr = self.keys().get(&key).and_then(Weak::upgrade).ok_or(Status::BadKey)?;
        if lmr.len == 0 || !lmr.access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC) {
            return Err(Status::RemoteAccess);
        }
        let base = if self.ia.feat.virt_addr { lmr.region.addr() + lmr.offset } else { 0 };
        let inside =
            addr.checked_sub(base).filter(|o| o.checked_add(len).is_some_and(|e| e <= lmr.len));
        let Some(o) = inside else { return Err(Status::OutOfBounds) };
        Ok((lmr.clone(), lmr.offset + o))
    }
}

impl Drop for PzShared {
    fn drop(&mut self) {
        if self.is_default {
            self.ia.default_taken.store(false, Ordering::Release);
        }
    }
}

/// A protection zone of the libfabric backend (one `fid_domain`).
pub struct OfiPz {
    pub(crate) sh: Arc<PzShared>,
}

impl Pz for OfiPz {
    fn id(&self) -> u64 {
        self.sh.id
    }

    fn register(
        &self,
        region: &Arc<MemRegion>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Arc<dyn Lmr>> {
        region.check(offset, len)?;
        let inner = Arc::new(LmrInner::register(&self.sh, region, offset, len, access)?);
        self.sh.keys().insert(inner.key, Arc::downgrade(&inner));
        Ok(Arc::new(OfiLmr { inner }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
