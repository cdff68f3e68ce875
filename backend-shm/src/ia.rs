//! [`ShmIa`], the shm interface adapter: a namespace of service points on
//! this node, the factory of everything else.

use crate::config::ShmConfig;
use crate::domain::{IaShared, ShmPz, soft};
use crate::ep::{MAX_PRIVATE, ShmEp};
use crate::psp::ShmPsp;
use rmr_api::provider::SoftEvd;
use rmr_api::{Caps, Ep, EpEvds, Error, Evd, Ia, IaAttr, Psp, Pz, Result};
use std::any::Any;
use std::sync::Arc;

/// The largest message or RDMA transfer.
pub const MAX_MSG: u64 = 1 << 30;

/// An interface adapter of the shm backend: processes of this node that
/// open an IA of the same name reach each other's service points.
pub struct ShmIa {
    pub(crate) sh: Arc<IaShared>,
}

impl ShmIa {
    /// An IA in namespace `name` with `cfg` (checked).
    ///
    /// # Errors
    /// A bad setting, or the region table cannot be made.
    pub fn with_config(name: &str, cfg: ShmConfig) -> Result<ShmIa> {
        cfg.check()?;
        if name.is_empty() || name.contains('/') || name.len() > 64 {
            return Err(Error::invalid(format!("shm name {name:?}: 1 to 64 characters, no '/'")));
        }
        let attr = IaAttr {
            provider: "shm".into(),
            address: name.into(),
            max_msg_size: MAX_MSG,
            max_sges: 8,
            max_dtos: cfg.max_dtos,
            max_private_data: MAX_PRIVATE,
            caps: Caps::RDMA_READ | Caps::WRITE_IMM | Caps::ATOMICS | Caps::OVERRUN_AT_SENDER,
            link_speed_bps: None,
        };
        Ok(ShmIa { sh: Arc::new(IaShared::new(name.into(), cfg, attr)?) })
    }
}

impl Ia for ShmIa {
    fn attr(&self) -> &IaAttr {
        &self.sh.attr
    }

    fn create_pz(&self) -> Result<Arc<dyn Pz>> {
        Ok(Arc::new(ShmPz { id: rmr_api::provider::fresh_id(), ia: self.sh.clone() }))
    }

    fn create_evd(&self) -> Result<Arc<dyn Evd>> {
        Ok(Arc::new(SoftEvd::default()))
    }

    fn create_ep(&self, pz: &Arc<dyn Pz>, evds: &EpEvds) -> Result<Arc<dyn Ep>> {
        let pz = pz
            .as_any()
            .downcast_ref::<ShmPz>()
            .ok_or_else(|| Error::invalid("PZ of another provider"))?;
        if !Arc::ptr_eq(&pz.ia, &self.sh) {
            return Err(Error::invalid("PZ of another IA"));
        }
        soft(&evds.request)?;
        soft(&evds.recv)?;
        soft(&evds.conn)?;
        Ok(ShmEp::create(self.sh.clone(), pz.id, evds.clone()))
    }

    fn create_psp(&self, service: u16, evd: &Arc<dyn Evd>) -> Result<Arc<dyn Psp>> {
        soft(evd)?;
        Ok(Arc::new(ShmPsp::listen(self.sh.clone(), service, evd.clone())?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
