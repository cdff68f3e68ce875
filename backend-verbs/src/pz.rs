//! Protection zones: one `ibv_pd` each.

use crate::ia::IaCore;
use crate::lmr::VerbsLmr;
use crate::sys::pd::Pd;
use rmr_api::{Access, Lmr, MemRegion, Pz, Result};
use std::any::Any;
use std::sync::Arc;

/// The shared state of a PZ (LMRs and EPs hold it).
pub(crate) struct PzCore {
    pub(crate) id: u64,
    pub(crate) pd: Pd,
    pub(crate) ia: Arc<IaCore>,
}

/// A protection zone of the verbs backend: an `ibv_pd`. The HCA enforces it:
/// a QP of one PD cannot use memory registered in another, locally or remotely.
pub struct VerbsPz {
    pub(crate) core: Arc<PzCore>,
}

impl VerbsPz {
    pub(crate) fn new(ia: Arc<IaCore>) -> Result<VerbsPz> {
        let pd = Pd::alloc(ia.ctx)?;
        Ok(VerbsPz { core: Arc::new(PzCore { id: rmr_api::provider::fresh_id(), pd, ia }) })
    }
}

impl Pz for VerbsPz {
    fn id(&self) -> u64 {
        self.core.id
    }

    fn register(
        &self,
        region: &Arc<MemRegion>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Arc<dyn Lmr>> {
        Ok(Arc::new(VerbsLmr::register(&self.core, region, offset, len, access)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
