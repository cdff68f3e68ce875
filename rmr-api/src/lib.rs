//! # rmr-api — one RDMA API over verbs, libfabric and TCP
//!
//! uDAPL's object model with Rust's manners. A *provider* (backend) opens an
//! **IA** (one rail) from a spec string; memory is registered in a **PZ** as
//! an **LMR**, whose [`RmrContext`] a peer uses to target it; an **EP** is a
//! reliable connection made through a **PSP**; completions and connection
//! events arrive on an **EVD**.
//!
//! ## Map
//! The modules in reading order (each uses only those above it):
//! - `types`: plain values: access rights, DTO flags, cookies, operations
//!   and their status, attributes.
//! - `error`: [`Error`], what every call returns on failure.
//! - `memory`: [`MemRegion`], memory a NIC, a transport thread or a peer
//!   may write at any time (no Rust reference to its bytes).
//! - `remote`: [`RmrContext`] and [`RemoteAddr`], what a peer needs to
//!   target a registered region.
//! - `lmr`: [`Pz`], [`Lmr`] and [`Sge`]: registering memory, naming it in
//!   a DTO.
//! - `ep`: [`Ep`] and [`Psp`]: connections and the DTOs posted on them.
//! - `event`: [`Event`], [`DtoCompletion`], [`ConnRequest`]: what an EVD
//!   delivers.
//! - `evd`: [`Evd`], the queue applications wait on.
//! - `ia`: [`Ia`], the factory of every object above; [`Listener`].
//! - `registry`: [`open`] a spec with a registered provider.
//! - [`stages`]: round-trip timelines for latency work (a feature).
//! - [`provider`]: the toolkit backends are built from (the software EVD,
//!   drivers, raw IO, checks, the conformance suite).
//!
//! Data flows: an application posts on an EP, from LMR memory to a remote
//! place; the backend moves the bytes and the peer's checks admit them;
//! completions come back as events on an EVD.
//!
//! ## Quick start
//!
//! Code written against the traits runs on every backend and on a
//! multirail endpoint unchanged. With a backend registered (for example
//! `backend_tcp::register()`):
//!
//! ```no_run
//! use rmr_api::{Access, Cookie, DtoFlags, EpEvds, Event, MemRegion, Sge};
//! use std::time::Duration;
//!
//! // `peer`: the region the other side registered and sent over (its RMR context).
//! # fn write_to(peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
//! let ia = rmr_api::open("tcp:127.0.0.1")?;
//! let evd = ia.create_evd()?;
//! let pz = ia.create_pz()?;
//! let buf = MemRegion::new(1 << 20);
//! let lmr = pz.register_all(&buf, Access::LOCAL_WRITE)?;
//! let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
//! ep.connect("127.0.0.1", 4791, b"hello", Duration::from_secs(5))?;
//! // Write 1 MiB into the peer's region, then tell it with a send.
//! ep.post_rdma_write(&[Sge::whole(&*lmr)], peer.at(0), Cookie(1), DtoFlags::SUPPRESS)?;
//! ep.post_send(&[Sge::new(&*lmr, 0, 8)], Cookie(2), DtoFlags::empty())?;
//! match evd.wait(Some(Duration::from_secs(5)), 1)? {
//!     Event::Dto(c) => c.result()?,
//!     other => println!("{other:?}"),
//! }
//! # Ok(()) }
//! ```
//!
//! ## Thread safety
//! Every object is `Send + Sync` and is shared as `Arc<dyn …>`. Several
//! threads may post on one EP at once; DTOs posted by one thread keep their
//! order. EVDs may be waited on by several threads (each event goes to one).
//!
//! ## Resource cleanup
//! Children hold their parents (`Arc`): an LMR keeps its PZ and memory alive,
//! an EP its PZ and EVDs, an in-flight DTO its memory. Dropping the last
//! handle of an EP disconnects it. [`Lmr::deregister`] revokes remote access
//! at once, even while other handles exist.
//!
//! ## Cargo features
//! - `conformance`: the backend conformance suite (`rmr_api::conformance`), for
//!   backend tests only.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod ep;
mod error;
mod evd;
mod event;
mod ia;
mod lmr;
mod memory;
pub mod provider;
mod registry;
mod remote;
pub mod settings;
pub mod stages;
mod types;
mod words;

pub use ep::{Ep, Psp};
pub use error::{Error, Result};
pub use evd::Evd;
pub use event::{ConnRequest, ConnRequestOps, DtoCompletion, Event};
pub use ia::{EpEvds, Ia, Listener};
pub use lmr::{Lmr, Pz, Sge, sge_total};
pub use memory::{MemRegion, REGION_ALIGN};
pub use registry::{open, providers, settings_for};
pub use remote::{MAX_RAIL_KEYS, RemoteAddr, RmrContext};
pub use types::{
    Access, Caps, CompareSwap, Cookie, DtoFlags, DtoOp, EpAttr, EpId, EpState, IaAttr, Status,
};
