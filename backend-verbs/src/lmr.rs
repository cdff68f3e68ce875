//! Local memory regions: one `ibv_mr` each, with the LMR's rights.

use crate::ia::IaCore;
use crate::pz::PzCore;
use crate::sys::mr::Mr;
use crate::wr::mr_access;
use rmr_api::{Access, Lmr, MemRegion, Result, RmrContext};
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A registered region of the verbs backend. Its RMR context carries the
/// rkey; local SGEs use the lkey. Dropping it deregisters.
pub struct VerbsLmr {
    pz: Arc<PzCore>,
    region: Arc<MemRegion>,
    offset: u64,
    len: u64,
    access: Access,
    lkey: u32,
    rkey: u32,
    registered: AtomicBool,
    mr: Mutex<Option<Mr>>,
}

impl VerbsLmr {
    pub(crate) fn register(
        pz: &Arc<PzCore>,
        region: &Arc<MemRegion>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<VerbsLmr> {
        let mr = Mr::register(&pz.pd, region, offset, len, mr_access(access))?;
        Ok(VerbsLmr {
            pz: pz.clone(),
            region: region.clone(),
            offset,
            len,
            access,
            lkey: mr.lkey(),
            rkey: mr.rkey(),
            registered: AtomicBool::new(true),
            mr: Mutex::new(Some(mr)),
        })
    }

    /// The local key, for an LMR registered through `ia` and still registered.
    pub(crate) fn lkey_for(l: &dyn Lmr, ia: &Arc<IaCore>) -> Option<u32> {
        let v = l.as_any().downcast_ref::<VerbsLmr>()?;
        (Arc::ptr_eq(&v.pz.ia, ia) && v.registered.load(Ordering::Acquire)).then_some(v.lkey)
    }
}

impl Lmr for VerbsLmr {
    fn region(&self) -> &Arc<MemRegion> {
        &self.region
    }
    fn offset(&self) -> u64 {
        self.offset
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn access(&self) -> Access {
        self.access
    }
    fn pz_id(&self) -> u64 {
        self.pz.id
    }
    fn rmr_context(&self) -> RmrContext {
        RmrContext::new(u64::from(self.rkey), self.region.addr() + self.offset, self.len)
    }
    fn is_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }
    fn deregister(&self) -> Result<()> {
        self.registered.store(false, Ordering::Release);
        // ibv_dereg_mr: the HCA refuses the rkey and lkey from now on.
        drop(self.mr.lock().unwrap_or_else(|e| e.into_inner()).take());
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
