//! The client side's IA, protection zone and memory region: thin wrappers
//! over a real IA (the rail toward one bridge) whose endpoints connect
//! through the bridge.

use super::ep::BridgedEp;
use super::evd::BridgeEvd;
use super::psp::BridgePsp;
use crate::credit::CreditConfig;
use crate::wire::HDR;
use rmr_api::settings::{Given, Knob, Setting};
use rmr_api::{
    Access, Caps, EpEvds, Error, Evd, Ia, IaAttr, Lmr, MemRegion, Psp, Pz, Result, RmrContext,
};
use std::any::Any;
use std::sync::Arc;

/// Tunables of a client's bridged endpoints. `Default` is the plain
/// defaults; a `zipper:` spec opens with [`ClientConfig::from_given`] (its
/// options over the `RMR_ZIP_*` variables); [`ClientConfig::builder`]
/// builds one in code.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Largest chunk this end accepts (the bridge and the peer may lower it).
    /// `chunk`, `RMR_ZIP_CHUNK` (default 64 KiB; 1 KiB to 16 MiB).
    pub chunk: u64,
    /// Data-pool receive buffers of this end's ring. `ring`, `RMR_ZIP_RING`
    /// (default 16; 2 to 1024).
    pub ring: u16,
    /// Operations in flight per endpoint before posts return `QueueFull`.
    /// `max_dtos`, `RMR_ZIP_MAX_DTOS` (default 1024).
    pub max_dtos: usize,
}

impl Default for ClientConfig {
    /// The defaults, whatever the environment says (see
    /// [`ClientConfig::from_env`]).
    fn default() -> Self {
        ClientConfig { chunk: 64 << 10, ring: 16, max_dtos: 1024 }
    }
}

/// The knobs [`ClientConfig::from_given`] reads, in the order of
/// [`ClientConfig::settings`].
pub const CLIENT_KNOBS: [Knob; 3] = [
    Knob { option: "chunk", var: "RMR_ZIP_CHUNK", doc: "largest chunk this end accepts (bytes)" },
    Knob { option: "ring", var: "RMR_ZIP_RING", doc: "data buffers of this end's ring" },
    Knob {
        option: "max_dtos",
        var: "RMR_ZIP_MAX_DTOS",
        doc: "operations in flight per bridged endpoint",
    },
];

/// The ranges of [`CLIENT_KNOBS`].
const RANGES: [(u64, u64); 3] = [(1024, 16 << 20), (2, 1024), (1, 1 << 20)];

rmr_api::config_builder!(
    /// Builds a [`ClientConfig`] from the defaults:
    /// `ClientConfig::builder().ring(32).build()?`.
    ClientConfigBuilder for ClientConfig {
        chunk: u64,
        ring: u16,
        max_dtos: usize,
    }
);

impl ClientConfig {
    /// The defaults with the `RMR_ZIP_*` variables applied.
    ///
    /// # Errors
    /// As [`ClientConfig::from_given`].
    pub fn from_env() -> Result<ClientConfig> {
        ClientConfig::from_given(&Given::env())
    }

    /// The defaults, the `RMR_ZIP_*` variables over them and the spec's
    /// options over those.
    ///
    /// # Errors
    /// [`Error::BadSetting`] naming an option or variable whose value does
    /// not parse or is out of its range.
    pub fn from_given(g: &Given) -> Result<ClientConfig> {
        let mut c = ClientConfig::default();
        let ranged = |i: usize| {
            move |v: &str| {
                let n = rmr_api::settings::size(v)?;
                rmr_api::settings::within(RANGES[i].0, RANGES[i].1)(&n.to_string())
            }
        };
        if let Some(v) = g.get(&CLIENT_KNOBS[0], ranged(0))? {
            c.chunk = v;
        }
        if let Some(v) = g.get(&CLIENT_KNOBS[1], ranged(1))? {
            c.ring = v as u16;
        }
        if let Some(v) = g.get(&CLIENT_KNOBS[2], ranged(2))? {
            c.max_dtos = v as usize;
        }
        c.check()?;
        Ok(c)
    }

    /// Checks the values (what a builder's `build` and the constructors
    /// taking a config as given call).
    pub(crate) fn check(&self) -> Result<()> {
        let values = [self.chunk, self.ring.into(), self.max_dtos as u64];
        for ((k, (lo, hi)), v) in CLIENT_KNOBS.iter().zip(RANGES).zip(values) {
            rmr_api::settings::check_within(k.option, v, lo, hi)?;
        }
        Ok(())
    }

    /// Every setting a `zipper:` IA opens with under `g`, its value and
    /// where it came from (what `rmr-bench info` prints).
    ///
    /// # Errors
    /// As [`ClientConfig::from_given`].
    pub fn settings(g: &Given) -> Result<Vec<Setting>> {
        let c = ClientConfig::from_given(g)?;
        Ok(g.listed(
            &CLIENT_KNOBS,
            [c.chunk.to_string(), c.ring.to_string(), c.max_dtos.to_string()],
        ))
    }
}

impl ClientConfig {
    pub(crate) fn credit(&self) -> CreditConfig {
        CreditConfig::for_ring(self.ring)
    }
}

/// An IA whose endpoints reach peers on the other side of one bridge.
///
/// It wraps the real IA of the local rail that leads to the bridge; memory
/// registered in its PZs is registered on that rail, so a bridge can
/// RDMA-write into it and a multirail layer over several `BridgeIa`s
/// (one per bridge) stripes over the bridges.
pub struct BridgeIa {
    pub(crate) inner: Arc<dyn Ia>,
    pub(crate) bridge: Option<(String, u16)>,
    pub(crate) cfg: ClientConfig,
    attr: IaAttr,
}

impl BridgeIa {
    /// Wraps `inner`; `bridge` is the bridge's address and service on this
    /// side (needed to connect; a listening-only IA may have none).
    pub fn new(
        inner: Arc<dyn Ia>,
        bridge: Option<(String, u16)>,
        cfg: ClientConfig,
    ) -> Arc<BridgeIa> {
        let a = inner.attr();
        let attr = IaAttr {
            provider: "zipper".into(),
            address: a.address.clone(),
            max_msg_size: a.max_msg_size,
            max_sges: a.max_sges.saturating_sub(1).max(1),
            max_dtos: cfg.max_dtos,
            max_private_data: a.max_private_data.saturating_sub(crate::handshake::FIXED + 64),
            caps: Caps::RDMA_READ,
            link_speed_bps: a.link_speed_bps,
        };
        Arc::new(BridgeIa { inner, bridge, cfg, attr })
    }

    /// The real IA underneath.
    pub fn inner(&self) -> &Arc<dyn Ia> {
        &self.inner
    }

    /// The bridge this IA connects through.
    pub fn bridge(&self) -> Option<&(String, u16)> {
        self.bridge.as_ref()
    }

    /// Bytes of ring memory one endpoint of this IA takes.
    pub fn ring_bytes(&self) -> u64 {
        (HDR as u64 + self.cfg.chunk) * self.cfg.credit().total() as u64
    }
}

impl Ia for BridgeIa {
    fn attr(&self) -> &IaAttr {
        &self.attr
    }

    fn create_pz(&self) -> Result<Arc<dyn Pz>> {
        Ok(Arc::new(BridgePz { id: rmr_api::provider::fresh_id(), inner: self.inner.create_pz()? }))
    }

    fn create_evd(&self) -> Result<Arc<dyn Evd>> {
        Ok(Arc::new(BridgeEvd::default()))
    }

    fn create_ep(&self, pz: &Arc<dyn Pz>, evds: &EpEvds) -> Result<Arc<dyn rmr_api::Ep>> {
        let pz = pz
            .as_any()
            .downcast_ref::<BridgePz>()
            .ok_or_else(|| Error::invalid("a bridged EP needs a PZ of a zipper IA"))?;
        for e in [&evds.request, &evds.recv, &evds.conn] {
            if e.as_any().downcast_ref::<BridgeEvd>().is_none() {
                return Err(Error::invalid("bridged EPs need EVDs created by a zipper IA"));
            }
        }
        BridgedEp::create(self, pz, evds)
    }

    fn create_psp(&self, service: u16, evd: &Arc<dyn Evd>) -> Result<Arc<dyn Psp>> {
        if evd.as_any().downcast_ref::<BridgeEvd>().is_none() {
            return Err(Error::invalid("zipper PSPs need an EVD created by a zipper IA"));
        }
        Ok(Arc::new(BridgePsp::listen(self, service, evd.clone())?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A protection zone on the rail toward the bridge.
pub struct BridgePz {
    pub(crate) id: u64,
    pub(crate) inner: Arc<dyn Pz>,
}

impl Pz for BridgePz {
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
        let inner = self.inner.register(region, offset, len, access)?;
        Ok(Arc::new(BridgeLmr { inner, pz_id: self.id }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Memory registered on the rail toward the bridge; its RMR context is the
/// rail's own, which the bridge uses to reach it.
pub struct BridgeLmr {
    pub(crate) inner: Arc<dyn Lmr>,
    pz_id: u64,
}

impl Lmr for BridgeLmr {
    fn region(&self) -> &Arc<MemRegion> {
        self.inner.region()
    }
    fn offset(&self) -> u64 {
        self.inner.offset()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn access(&self) -> Access {
        self.inner.access()
    }
    fn pz_id(&self) -> u64 {
        self.pz_id
    }
    fn rmr_context(&self) -> RmrContext {
        self.inner.rmr_context()
    }
    fn is_registered(&self) -> bool {
        self.inner.is_registered()
    }
    fn deregister(&self) -> Result<()> {
        self.inner.deregister()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The `zipper` provider:
/// `zipper:<rail spec>@<bridge address>:<bridge port>[;option=value...]`,
/// e.g. `zipper:tcp:198.18.10.1@198.18.10.2:7700;ring=32` (`@...` may be
/// left out for an IA that only listens; options from [`CLIENT_KNOBS`]).
/// The rail spec keeps its own options before the `@`
/// (`zipper:multirail:tcp:a,tcp:b;engine=inline@bridge:7700;ring=32`).
pub struct ZipperProvider;

impl rmr_api::provider::Provider for ZipperProvider {
    fn name(&self) -> &'static str {
        "zipper"
    }

    fn describe(&self) -> &'static str {
        "endpoints through a zipper bridge into another cluster"
    }

    fn open(&self, rest: &str) -> Result<Arc<dyn Ia>> {
        let (rail, bridge, cfg) = parse_spec(rest)?;
        let inner = rmr_api::open(rail)?;
        Ok(BridgeIa::new(inner, bridge, cfg))
    }

    fn settings(&self, rest: &str) -> Result<Vec<Setting>> {
        ClientConfig::settings(&split(rest)?.1)
    }
}

/// Takes a `zipper:` spec's own options off: those after the first `;`
/// that follows the bridge's address (`@...`), so that the rail before it
/// may carry options of its own; without an `@`, those after the first `;`.
fn split(rest: &str) -> Result<(&str, Given)> {
    Given::split_after("zipper", rest, rest.rfind('@').unwrap_or(0), &CLIENT_KNOBS)
}

/// A bridge's address and service.
type BridgeAddr = Option<(String, u16)>;

/// Parses the part of a spec after `zipper:`:
/// `<rail spec>[@<bridge address>:<port>][;option=value...]`.
fn parse_spec(rest: &str) -> Result<(&str, BridgeAddr, ClientConfig)> {
    let bad = |why: &str| Error::BadSpec { spec: format!("zipper:{rest}"), why: why.into() };
    let (head, given) = split(rest)?;
    let (rail, bridge) = match head.rsplit_once('@') {
        Some((r, b)) => {
            let (addr, port) =
                b.rsplit_once(':').ok_or_else(|| bad("expected `@<bridge address>:<port>`"))?;
            let port = port.parse().map_err(|_| bad("bad bridge port"))?;
            (r, Some((addr.to_string(), port)))
        }
        None => (head, None),
    };
    Ok((rail, bridge, ClientConfig::from_given(&given)?))
}
