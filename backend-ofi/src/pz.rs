//! Protection zones: one libfabric domain each, so a key of one zone is
//! unknown to the endpoints of another (the provider refuses the access).

use crate::ffi::Domain;
use crate::ia::IaShared;
use crate::lmr::{LmrInner, OfiLmr};
use rmr_api::{Access, Lmr, MemRegion, Pz, Result};
use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::Ordering;

pub(crate) struct PzShared {
    pub(crate) id: u64,
    pub(crate) ia: Arc<IaShared>,
    pub(crate) domain: Arc<Domain>,
    is_default: bool,
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
        }))
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
        let inner = LmrInner::register(&self.sh, region, offset, len, access)?;
        Ok(Arc::new(OfiLmr { inner: Arc::new(inner) }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
