//! The multirail IA, protection zone and memory region: one of each per
//! rail underneath, the same memory registered on every rail.

use crate::MrConfig;
use crate::ep::MrEp;
use crate::evd::MrEvd;
use crate::psp::MrPsp;
use rmr_api::{
    Access, Caps, EpEvds, Error, Evd, Ia, IaAttr, Lmr, MemRegion, Psp, Pz, Result, RmrContext,
};
use std::any::Any;
use std::sync::Arc;

/// Bytes of each rail's connection private data the multirail header takes.
pub(crate) const MR_HDR: usize = 14;

/// One logical IA over several rail IAs (of any backends).
pub struct MrIa {
    pub(crate) rails: Vec<Arc<dyn Ia>>,
    pub(crate) cfg: MrConfig,
    attr: IaAttr,
}

impl MrIa {
    /// Joins `rails` (at least one, at most [`rmr_api::MAX_RAIL_KEYS`]) into one IA.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no rails or too many.
    pub fn new(rails: Vec<Arc<dyn Ia>>, cfg: MrConfig) -> Result<Arc<MrIa>> {
        if rails.is_empty() || rails.len() > rmr_api::MAX_RAIL_KEYS {
            return Err(Error::invalid(format!(
                "{} rails (1..={})",
                rails.len(),
                rmr_api::MAX_RAIL_KEYS
            )));
        }
        let a: Vec<&IaAttr> = rails.iter().map(|r| r.attr()).collect();
        let mut caps = Caps::RDMA_READ | Caps::WRITE_IMM | Caps::ATOMICS | Caps::OVERRUN_AT_SENDER;
        for x in &a {
            caps = Caps::from_bits_truncate(caps.bits() & x.caps.bits());
        }
        let attr = IaAttr {
            provider: "multirail".into(),
            address: a.iter().map(|x| x.address.as_str()).collect::<Vec<_>>().join(","),
            max_msg_size: a.iter().map(|x| x.max_msg_size).min().unwrap_or(0),
            max_sges: a.iter().map(|x| x.max_sges).min().unwrap_or(1),
            max_dtos: a.iter().map(|x| x.max_dtos).min().unwrap_or(1),
            max_private_data: a
                .iter()
                .map(|x| x.max_private_data)
                .min()
                .unwrap_or(0)
                .saturating_sub(MR_HDR),
            caps,
            link_speed_bps: a.iter().map(|x| x.link_speed_bps).sum(),
        };
        Ok(Arc::new(MrIa { rails, cfg, attr }))
    }

    /// The rail IAs.
    pub fn rails(&self) -> &[Arc<dyn Ia>] {
        &self.rails
    }

    /// The configuration.
    pub fn config(&self) -> &MrConfig {
        &self.cfg
    }
}

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

/// A protection zone spanning every rail.
pub struct MrPz {
    pub(crate) id: u64,
    pub(crate) rails: Vec<Arc<dyn Pz>>,
}

impl Pz for MrPz {
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
        let rails = self
            .rails
            .iter()
            .map(|p| p.register(region, offset, len, access))
            .collect::<Result<Vec<_>>>()?;
        let keys: Vec<u64> = rails.iter().map(|l| l.rmr_context().key()).collect();
        let ctx = RmrContext::with_keys(&keys, rails[0].rmr_context().addr, len)?;
        Ok(Arc::new(MrLmr {
            inner: Arc::new(MrLmrInner {
                rails,
                region: region.clone(),
                offset,
                len,
                access,
                pz_id: self.id,
                ctx,
            }),
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

pub(crate) struct MrLmrInner {
    pub(crate) rails: Vec<Arc<dyn Lmr>>,
    region: Arc<MemRegion>,
    offset: u64,
    len: u64,
    access: Access,
    pz_id: u64,
    ctx: RmrContext,
}

/// The same memory registered on every rail; its RMR context carries one key per rail.
pub struct MrLmr {
    pub(crate) inner: Arc<MrLmrInner>,
}

impl Lmr for MrLmr {
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
        self.inner.ctx
    }
    fn is_registered(&self) -> bool {
        self.inner.rails.iter().all(|l| l.is_registered())
    }
    fn deregister(&self) -> Result<()> {
        let mut res = Ok(());
        for l in &self.inner.rails {
            if let Err(e) = l.deregister() {
                res = Err(e);
            }
        }
        res
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
