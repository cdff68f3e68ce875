//! The multirail IA as the object factory: [`Ia`] for [`MrIa`] makes the
//! protection zones, EVDs, endpoints and service points of the modules
//! before it, which is why it comes last in the reading order.

use crate::ep::MrEp;
use crate::evd::MrEvd;
use crate::objects::{MrIa, MrPz};
use crate::psp::MrPsp;
use rmr_api::{EpEvds, Error, Evd, Ia, IaAttr, Psp, Pz, Result};
use std::any::Any;
use std::sync::Arc;

impl Ia for MrIa {
    fn attr(&self) -> &IaAttr {
        &self.attr
    }

    fn create_pz(&self) -> Result<Arc<dyn Pz>> {
        let rails = self.rails.iter().map(|r| r.create_pz()).collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(MrPz { id: rmr_api::provider::fresh_id(), rails }))
    }

    fn create_evd(&self) -> Result<Arc<dyn Evd>> {
        Ok(Arc::new(MrEvd::default()))
    }

    fn create_ep(&self, pz: &Arc<dyn Pz>, evds: &EpEvds) -> Result<Arc<dyn rmr_api::Ep>> {
        let pz = pz
            .as_any()
            .downcast_ref::<MrPz>()
            .ok_or_else(|| Error::invalid("PZ is not a multirail PZ"))?;
        if pz.rails.len() != self.rails.len() {
            return Err(Error::invalid("PZ of another multirail IA"));
        }
        for e in [&evds.request, &evds.recv, &evds.conn] {
            if e.as_any().downcast_ref::<MrEvd>().is_none() {
                return Err(Error::invalid("multirail EPs need EVDs created by a multirail IA"));
            }
        }
        MrEp::create(self, pz, evds)
    }

    fn create_psp(&self, service: u16, evd: &Arc<dyn Evd>) -> Result<Arc<dyn Psp>> {
        if evd.as_any().downcast_ref::<MrEvd>().is_none() {
            return Err(Error::invalid("multirail PSPs need an EVD created by a multirail IA"));
        }
        Ok(Arc::new(MrPsp::listen(self, service, evd.clone())?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
