//! # backend-ofi — rmr over libfabric
//!
//! The rmr-api on libfabric `FI_EP_MSG` endpoints, with any provider that
//! offers them: `tcp` and `sockets` everywhere, `verbs`, `efa`, `cxi` on
//! real fabrics. An IA is a fabric plus an event queue for connection events;
//! a PZ is a libfabric domain (so a key of one zone means nothing to the
//! endpoints of another); an LMR is an `fi_mr_reg` registration; an EVD owns
//! a completion queue; a PSP is a passive endpoint; an EP is an `fid_ep`.
//!
//! ## Quick start
//! ```no_run
//! use rmr_api::{Access, Cookie, DtoFlags, EpEvds, Event, MemRegion, Sge};
//! use std::time::Duration;
//!
//! # fn main() -> rmr_api::Result<()> {
//! backend_ofi::register();
//! let ia = rmr_api::open("ofi:tcp:127.0.0.1")?;
//! let (evd, pz) = (ia.create_evd()?, ia.create_pz()?);
//! let psp = ia.create_psp(0, &evd)?;
//!
//! // Passive side: accept in a thread.
//! let (ia2, pz2, evd2) = (ia.clone(), pz.clone(), evd.clone());
//! let target = MemRegion::new(4096);
//! let tlmr = pz.register_all(&target, Access::REMOTE_WRITE | Access::LOCAL_WRITE)?;
//! let ctx = tlmr.rmr_context();
//! let server = std::thread::spawn(move || -> rmr_api::Result<_> {
//!     let sevd = ia2.create_evd()?;
//!     let sep = ia2.create_ep(&pz2, &EpEvds::single(&sevd))?;
//!     match evd2.wait(Some(Duration::from_secs(5)), 1)? {
//!         Event::ConnectionRequest(cr) => cr.accept(&sep, b"welcome")?,
//!         e => panic!("{e:?}"),
//!     }
//!     Ok(sep)
//! });
//!
//! // Active side: connect and RDMA-write.
//! let cevd = ia.create_evd()?;
//! let ep = ia.create_ep(&pz, &EpEvds::single(&cevd))?;
//! let reply = ep.connect(&psp.address(), psp.service(), b"hi", Duration::from_secs(5))?;
//! assert_eq!(reply, b"welcome");
//! let src = MemRegion::from_bytes(b"hello, rdma");
//! let slmr = pz.register_all(&src, Access::empty())?;
//! ep.post_rdma_write(&[Sge::whole(&*slmr)], ctx.at(0), Cookie(7), DtoFlags::empty())?;
//! loop {
//!     if let Event::Dto(c) = cevd.wait(Some(Duration::from_secs(5)), 1)? {
//!         assert_eq!(c.cookie.0, 7);
//!         c.result()?;
//!         break;
//!     }
//! }
//! assert_eq!(target.to_vec(0, 11)?, b"hello, rdma");
//! # let _sep = server.join().unwrap()?;
//! # Ok(()) }
//! ```
//!
//! ## Spec
//! `ofi:<provider>:<local IP>` (`ofi:tcp:198.18.0.1`, `ofi:sockets:127.0.0.1`,
//! `ofi:verbs:10.0.0.1`); `ofi:<local IP>` takes the best provider
//! `fi_getinfo` offers for that address; `ofi:` the best for any address.
//!
//! ## Thread safety
//! Every object is `Send + Sync`; domains are opened `FI_THREAD_SAFE`. Posts
//! on one EP are serialised (their order is the wire order). A thread waiting
//! on an EVD reads its CQs itself (one reader at a time, so events keep the
//! CQ's order) and sleeps on their wait objects (a poll set on `tcp`,
//! else an fd) after `fi_trywait`; see
//! [`OfiEvd`]. Each IA runs one thread
//! waiting on its event queue that handles connection events; the provider
//! may run progress threads of its own (`FI_PROGRESS_AUTO`).
//!
//! ## Resource cleanup
//! Children keep their parents alive (`Arc`), and libfabric objects are
//! closed children first: an EP before its CQs, EQ and domain, an MR before
//! its domain, a domain before its fabric. Dropping an EP disconnects it
//! (outstanding DTOs complete as `Flushed`); dropping an LMR closes its
//! registration (the key stops working at once); dropping a PSP closes its
//! passive endpoint; the IA's EQ thread ends once the IA and everything
//! made from it are gone.
//!
//! ## Cargo features
//! None. The crate needs libfabric >= 1.17 headers and library at build time
//! (found with pkg-config; see `ofi-sys`), and a provider at run time.
//!
//! ## Runtime parameters
//! [`OfiConfig`], from the spec's options
//! (`ofi:tcp:127.0.0.1;cq_size=4096`) over `RMR_OFI_DELIVERY_COMPLETE`,
//! `RMR_OFI_BOUNCE_MAX`, `RMR_OFI_CQ_SIZE`, `RMR_OFI_TX_SIZE`,
//! `RMR_OFI_RX_SIZE`, `RMR_OFI_CM_DATA`, `RMR_OFI_PROGRESS_THREAD`,
//! `RMR_OFI_CORK_MAX` and `RMR_OFI_POLL_SET` ([`KNOBS`]), plus `RMR_EVD_SPIN_US` and libfabric's own `FI_*`
//! variables. A value that does not parse makes `open` fail with
//! `Error::BadSetting` naming it; `rmr-bench info 'ofi:tcp:127.0.0.1'`
//! lists them with their sources. Diagnostics
//! (connection-manager events, failed DTOs, failed closes) are `tracing`
//! events of target `rmr::ofi` (`RUST_LOG=rmr::ofi=debug` in the binaries).
#![deny(missing_docs)]
#![warn(unreachable_pub)]
// bindgen types libfabric's flag constants as u32 or u64 depending on the
// header version (1.17 vs 2.x); the backend casts them all to u64.
#![allow(clippy::unnecessary_cast)]

mod config;
mod cork;
mod cq;
mod dto;
mod eager;
mod ep;
mod eq;
mod evd;
mod fault;
mod ffi;
mod hold;
mod ia;
mod lmr;
mod msg;
mod order;
mod psp;
mod pz;
mod recv;
mod rma;
mod sockaddr;
mod waitset;

pub use config::{KNOBS, OfiConfig, OfiConfigBuilder};
pub use ep::OfiEp;
#[doc(hidden)]
#[doc(hidden)]
pub mod hostile;
pub use evd::OfiEvd;
#[doc(hidden)]
pub use evd::hooks;
pub use ia::OfiIa;
pub use lmr::OfiLmr;
pub use psp::OfiPsp;
pub use pz::OfiPz;

/// The raw bindings, as an escape hatch.
pub use ofi_sys as sys;

use rmr_api::provider::Provider;
use rmr_api::{Ia, Result};
use std::sync::Arc;

/// The `ofi` provider.
pub struct OfiProvider;

impl Provider for OfiProvider {
    fn name(&self) -> &'static str {
        "ofi"
    }

    fn describe(&self) -> &'static str {
        "libfabric FI_EP_MSG endpoints (tcp, sockets, verbs, efa, cxi providers)"
    }

    fn open(&self, rest: &str) -> Result<Arc<dyn Ia>> {
        Ok(Arc::new(OfiIa::open(rest)?))
    }

    fn settings(&self, rest: &str) -> Result<Vec<rmr_api::settings::Setting>> {
        let (_, given) = rmr_api::settings::Given::split("ofi", rest, &KNOBS)?;
        OfiConfig::settings(&given)
    }
}

/// Registers the `ofi` provider with [`rmr_api::provider::register`].
pub fn register() {
    rmr_api::provider::register(Arc::new(OfiProvider));
}

/// The libfabric version of the library loaded at run time, as `(major, minor)`.
pub fn libfabric_version() -> (u32, u32) {
    // SAFETY: fi_version has no preconditions.
    let v = unsafe { ofi_sys::fi_version() };
    (v >> 16, v & 0xffff)
}
