//! The multirail IA's data, protection zone and memory region: one of each
//! per rail underneath, the same memory registered on every rail. (The
//! IA's object factory, which makes EVDs, EPs and PSPs, is in
//! the `ia` module, above them all.)

use crate::config::MrConfig;
use crate::header::MR_HDR;
use rmr_api::{Access, Caps, Error, Ia, IaAttr, Lmr, MemRegion, Pz, Result, RmrContext};
use std::any::Any;
use std::sync::Arc;

/// One logical IA over several rail IAs (of any backends).
pub struct MrIa {
    pub(crate) rails: Vec<Arc<dyn Ia>>,
    pub(crate) cfg: MrConfig,
    pub(crate) attr: IaAttr,
    /// Per rail, the `pinned` engine's rail thread that all the IA's
    /// endpoints share (the endpoint module's `RailLine`, held weakly here:
    /// it ends with the last endpoint that uses it).
    pub(crate) lines: std::sync::Mutex<Vec<std::sync::Weak<dyn Any + Send + Sync>>>,
    /// Lost rails connected again: the endpoints that wait for one and the
    /// accepted ones a peer's rejoin may name (the endpoint module's
    /// `Rejoins`, made when first needed).
    pub(crate) rejoins: std::sync::OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl MrIa {
    /// Joins `rails` (at least one, at most [`rmr_api::MAX_RAIL_KEYS`]) into one IA.
    /// Open each rail within [`rmr_api::provider::with_rail_share`]`(n, ..)`,
    /// as the `multirail:` provider does, so that per-connection defaults
    /// (the tcp backend's near send buffer) are sized for the rails together.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no rails or too many.
    pub fn new(rails: Vec<Arc<dyn Ia>>, cfg: MrConfig) -> Result<Arc<MrIa>> {
        cfg.check()?;
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
        let lines = std::sync::Mutex::new(Vec::new());
        let rejoins = std::sync::OnceLock::new();
        Ok(Arc::new(MrIa { rails, cfg, attr, lines, rejoins }))
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
        Ok(Arc::new(MrLmr { inner: self.register_inner(region, offset, len, access)? }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl MrPz {
    /// [`Pz::register`] on every rail, as the crate's own record.
    pub(crate) fn register_inner(
        &self,
        region: &Arc<MemRegion>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Arc<MrLmrInner>> {
        let rails = self
            .rails
            .iter()
            .map(|p| p.register(region, offset, len, access))
            .collect::<Result<Vec<_>>>()?;
        let keys: Vec<u64> = rails.iter().map(|l| l.rmr_context().key()).collect();
        let ctx = RmrContext::with_keys(&keys, rails[0].rmr_context().addr, len)?;
        Ok(Arc::new(MrLmrInner {
            rails,
            region: region.clone(),
            offset,
            len,
            access,
            pz_id: self.id,
            ctx,
        }))
    }
}

pub(crate) struct MrLmrInner {
    pub(crate) rails: Vec<Arc<dyn Lmr>>,
    region: Arc<MemRegion>,
    offset: u64,
    pub(crate) len: u64,
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
