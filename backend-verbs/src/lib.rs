//! # backend-verbs — rmr over InfiniBand and RoCE
//!
//! The rmr-api over libibverbs and librdmacm (through `rdma-sys`): rdma_cm
//! for addressing and connections (IP addresses, like the other backends),
//! RC queue pairs, one CQ with a completion channel behind each EVD,
//! `ibv_reg_mr` with the LMR's rights, unsignalled WRs for `SUPPRESS`,
//! inline sends, RDMA write with immediate and the IB atomics.
//!
//! ## Quick start
//! ```no_run
//! use rmr_api::{Access, Cookie, DtoFlags, EpEvds, Event, MemRegion, Sge};
//! use std::time::Duration;
//!
//! // `peer`: the region the other side registered and sent over (its RMR context).
//! # fn write_to(peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
//! backend_verbs::register();
//! // A device port (`verbs:mlx5_0:1`) or an address on one (`verbs:198.18.0.1`).
//! let ia = rmr_api::open("verbs:mlx5_0:1")?;
//! let (evd, pz) = (ia.create_evd()?, ia.create_pz()?);
//! let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
//! ep.connect("198.18.0.2", 4791, b"hello", Duration::from_secs(5))?;
//! let buf = MemRegion::from_bytes(b"hello, rdma");
//! let lmr = pz.register_all(&buf, Access::empty())?;
//! ep.post_rdma_write(&[Sge::whole(&*lmr)], peer.at(0), Cookie(7), DtoFlags::empty())?;
//! if let Event::Dto(c) = evd.wait(Some(Duration::from_secs(5)), 1)? {
//!     c.result()?;
//! }
//! # Ok(()) }
//! ```
//! Where the machine has no RDMA device or no kernel verbs, `open` returns
//! [`rmr_api::Error::NoDevice`] saying what is missing.
//!
//! ## Spec
//! `verbs:<device>[:<port>]` (port 1 by default) or `verbs:<ip>`. rdma_cm
//! needs an IP address on the port (IPoIB, or the RoCE netdev); several
//! ports or HCAs are several IAs, so multirail runs over them unchanged.
//!
//! ## Layout
//! Pure logic, unit-tested without hardware: [`spec`] (specs, parameters,
//! link speed), [`wr`] (LMR triplets and flags to work requests, access
//! flags), [`queue`] (send/receive queue bookkeeping, signalling),
//! [`completion`] (work completion status to [`rmr_api::Status`]),
//! [`qp_state`] (the RC QP state table), [`cm_event`] (rdma_cm events to
//! endpoint steps and rmr events), [`private_data`] (the connection header).
//! The FFI lives in `sys/`, one file per verbs object; the rmr objects
//! (`ia`, `pz`, `lmr`, `evd`, `psp`, `ep`) are safe code over it.
//!
//! ## Thread safety
//! Every object is `Send + Sync`. Each IA runs one thread that dispatches
//! rdma_cm and device async events. Posts on one EP are serialised by its
//! queue lock; EVDs may be waited on by several threads.
//!
//! ## Resource cleanup
//! Children hold their parents (`Arc`): an LMR its PZ (`ibv_pd`), an EP its
//! PZ and EVDs (CQs), all of them the IA (device context). Dropping an EP
//! disconnects it and destroys its QP; dropping an LMR deregisters it
//! (`ibv_dereg_mr`), after which the HCA refuses its keys.
//!
//! ## Cargo features
//! None. The crate always builds against the system rdma-core headers.
#![deny(missing_docs)]
#![warn(unreachable_pub)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

#[forbid(unsafe_code)]
pub mod cm_event;
#[forbid(unsafe_code)]
pub mod completion;
#[forbid(unsafe_code)]
#[doc(hidden)]
pub mod fuzzing;
#[forbid(unsafe_code)]
pub mod private_data;
#[forbid(unsafe_code)]
pub mod qp_state;
#[forbid(unsafe_code)]
pub mod queue;
#[forbid(unsafe_code)]
pub mod spec;
#[forbid(unsafe_code)]
pub mod wr;

#[forbid(unsafe_code)]
mod ep;
#[forbid(unsafe_code)]
mod evd;
#[forbid(unsafe_code)]
mod ia;
#[forbid(unsafe_code)]
mod lmr;
#[forbid(unsafe_code)]
mod psp;
#[forbid(unsafe_code)]
mod pz;
mod sys;

pub use ep::VerbsEp;
pub use evd::VerbsEvd;
pub use ia::VerbsIa;
pub use lmr::VerbsLmr;
pub use psp::VerbsPsp;
pub use pz::VerbsPz;
pub use spec::{KNOBS, Spec, VerbsConfig, VerbsConfigBuilder};

use rmr_api::provider::Provider;
use rmr_api::{Ia, Result};
use std::sync::Arc;

/// The `verbs` provider.
pub struct VerbsProvider;

impl Provider for VerbsProvider {
    fn name(&self) -> &'static str {
        "verbs"
    }

    fn describe(&self) -> &'static str {
        "InfiniBand/RoCE through libibverbs and librdmacm (needs an RDMA device)"
    }

    fn open(&self, rest: &str) -> Result<Arc<dyn Ia>> {
        let (addr, given) = rmr_api::settings::Given::split("verbs", rest, &KNOBS)?;
        let spec = Spec::parse(addr)?;
        Ok(Arc::new(VerbsIa::open(&spec, VerbsConfig::from_given(&given)?)?))
    }

    fn settings(&self, rest: &str) -> Result<Vec<rmr_api::settings::Setting>> {
        let (_, given) = rmr_api::settings::Given::split("verbs", rest, &KNOBS)?;
        VerbsConfig::settings(&given)
    }
}

/// Registers the `verbs` provider with [`rmr_api::provider::register`].
pub fn register() {
    rmr_api::provider::register(Arc::new(VerbsProvider));
}

/// Names of the RDMA devices present.
///
/// # Errors
/// [`rmr_api::Error::NoDevice`] saying what is missing (kernel verbs, any device).
pub fn devices() -> Result<Vec<String>> {
    sys::device::device_names()
}

/// Specs (`verbs:<ip>`) of every local address that rdma_cm binds to an
/// RDMA device port: what a test or a multirail setup can open here.
///
/// # Errors
/// [`rmr_api::Error::NoDevice`] when there is no device, no rdma_cm, or no
/// device port with an IP address.
pub fn discover() -> Result<Vec<String>> {
    let _ = devices()?;
    let chan = sys::cm::EventChannel::create()?;
    let mut ips: Vec<_> = sys::device::local_ips()
        .into_iter()
        .filter(|ip| !ip.is_loopback())
        .filter(|&ip| sys::cm::device_of(&chan, ip).is_some())
        .collect();
    ips.sort_by_key(|ip| ip.is_ipv6());
    if ips.is_empty() {
        return Err(rmr_api::Error::NoDevice {
            what: "RDMA devices exist but no port has an IP address for rdma_cm".into(),
        });
    }
    Ok(ips.into_iter().map(|ip| format!("verbs:{ip}")).collect())
}
