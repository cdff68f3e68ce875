//! # rmr — one RDMA API over verbs, libfabric and TCP, on every rail at once
//!
//! The crate an application depends on. It re-exports the application API
//! of [`rmr_api`] and pulls in the transports chosen with Cargo features;
//! every enabled transport is registered on the first [`open`], so
//! `rmr::open("tcp:127.0.0.1")` just works.
//!
//! ```toml
//! [dependencies]
//! rmr = { path = "…/rmr" }                      # tcp only
//! # rmr = { path = "…/rmr", features = ["ofi", "multirail"] }
//! ```
//!
//! ## The object model (uDAPL's)
//!
//! ```text
//!   open("tcp:10.0.0.1") ──► Ia  (interface adapter: one rail, one NIC port or address)
//!                             ├── Pz   protection zone ──► Lmr (registered memory + access rights)
//!                             │                                └─ rmr_context(): what a peer needs to target it
//!                             ├── Evd  event dispatcher: DTO completions, connection events
//!                             ├── Ep   endpoint: a reliable connection in one Pz, reporting to Evds
//!                             │          post_send / post_recv / post_rdma_write / post_rdma_read / atomics
//!                             └── Psp  public service point (listen(), accept) ──► connection requests
//! ```
//!
//! Memory a peer may write is a [`MemRegion`]: the library's own (page
//! aligned, optionally huge pages) or one the application gives it
//! ([`MemRegion::from_vec`], [`MemRegion::from_boxed`]); the region owns
//! its bytes for as long as any registration or transfer can touch them,
//! and applications read and write it by copying ([`MemRegion::read`],
//! [`MemRegion::write`]: atomic copies, so a thread reading while a peer's
//! write lands sees each word old or new, never undefined behaviour),
//! never through a Rust reference a peer could write under.
//!
//! ## Ordering
//! Every backend and the multirail layer keep uDAPL's two rules:
//! receives complete in the order their sends were posted, and an RDMA
//! write posted before a send is visible at the target before the
//! matching receive completes. A bad key, an out-of-bounds or unauthorised
//! access, or memory of another protection zone is an error completion at
//! the initiator and leaves the target untouched; a dead peer is a
//! [`Event::Broken`] in bounded time.
//!
//! ## A first program
//! A server and a client in one process; the client RDMA-writes into the
//! server's memory and tells it with a send (also `examples/first.rs`):
//!
//! ```
#![doc = include_str!("../examples/first.rs")]
//! ```
//!
//! ## Thread safety
//! Every object is `Send + Sync`, shared as `Arc<dyn …>`. Several threads
//! may post on one EP; DTOs one thread posts keep their order. Each event
//! of an EVD goes to one waiter.
//!
//! ## Resource cleanup
//! Children hold their parents: an LMR keeps its PZ and its memory alive,
//! an EP its PZ and EVDs, an in-flight DTO its memory. Dropping the last
//! handle of an EP disconnects it; [`Lmr::deregister`] revokes remote
//! access at once.
//!
//! ## Cargo features
//! - `tcp` (default): the embedded TCP transport, `tcp:<local IP>`.
//! - `shm`: processes of one node, `shm:[<name>]`: shared-memory rings,
//!   RDMA by cross-memory attach (Linux).
//! - `ofi`: libfabric, `ofi:<provider>:<IP>` (libfabric ≥ 1.17).
//! - `verbs`: InfiniBand/RoCE, `verbs:<device>[:<port>]` (rdma-core; a
//!   machine without a device gets a typed `NoDevice` error at `open`).
//! - `multirail`: one endpoint over several rails,
//!   `multirail:<rail>,<rail>[;engine=…;policy=…]`, and [`multirail`].
//! - `boot`: rank, size and address exchange for N processes, [`boot`];
//!   `pmix` adds PMIx launchers. With `shm` too, `rmr::node::Fabric`
//!   reaches the ranks of this node over shared memory and the others
//!   over the network.
//! - `coll`: the RDMA barrier, [`coll`].
//! - `zipper`: endpoints across two clusters through bridges, [`zipper`].
//! - `tokio`: async completions and connections, `rmr::aio` (an EVD's
//!   events as `.await`, cancellation-safe; async `connect`/`accept`).
//!
//! Backend authors implement the traits with [`provider`], the toolkit
//! (software EVD, drivers, raw IO, the conformance suite) that
//! applications never need.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub use rmr_api::{
    Access, Caps, CompareSwap, ConnRequest, Cookie, DtoCompletion, DtoFlags, DtoOp, Ep, EpAttr,
    EpEvds, EpId, EpState, Error, Evd, Event, Ia, IaAttr, Listener, Lmr, MAX_RAIL_KEYS, MemRegion,
    Psp, Pz, REGION_ALIGN, RemoteAddr, Result, RmrContext, Sge, Status, sge_total,
};

/// The provider toolkit, for backend authors (see [`rmr_api::provider`]).
pub use rmr_api::provider;

/// One logical endpoint over several rails (feature `multirail`).
#[cfg(feature = "multirail")]
pub use multirail;

/// How N processes find each other: PMIx or a TCP rendezvous (feature `boot`).
#[cfg(feature = "boot")]
pub use rmr_boot as boot;

/// Collectives over any IA: the RDMA barrier (feature `coll`).
#[cfg(feature = "coll")]
pub use rmr_coll as coll;

/// Endpoints across two clusters through zipper bridges (feature `zipper`).
#[cfg(feature = "zipper")]
pub use zipper_bridge as zipper;

#[cfg(feature = "tokio")]
pub mod aio;

#[cfg(all(feature = "boot", feature = "shm"))]
pub mod node;

use std::sync::Arc;

/// Registers every transport enabled in this build (once per process;
/// [`open`] and [`providers`] call it, so applications never need to).
pub fn register_backends() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(feature = "tcp")]
        backend_tcp::register();
        #[cfg(feature = "shm")]
        backend_shm::register();
        #[cfg(feature = "ofi")]
        backend_ofi::register();
        #[cfg(feature = "verbs")]
        backend_verbs::register();
        #[cfg(feature = "multirail")]
        multirail::register();
        #[cfg(feature = "zipper")]
        zipper_bridge::register();
    });
}

/// Opens an IA (one rail) from a spec string: `tcp:127.0.0.1`,
/// `ofi:tcp:198.18.0.1`, `verbs:mlx5_0:1`,
/// `multirail:tcp:198.18.0.1,tcp:198.18.1.1`.
///
/// # Errors
/// [`Error::UnknownProvider`] (naming the transports this build has) when
/// the spec names one that was not enabled; [`Error::BadSpec`] for a
/// malformed spec; [`Error::NoDevice`] when the transport cannot run on
/// this machine (saying what is missing).
///
/// # Example
/// ```
/// let ia = rmr::open("tcp:127.0.0.1")?;
/// assert_eq!(ia.attr().provider, "tcp");
/// assert!(matches!(rmr::open("nonesuch:x"), Err(rmr::Error::UnknownProvider { .. })));
/// # Ok::<(), rmr::Error>(())
/// ```
pub fn open(spec: &str) -> Result<Arc<dyn Ia>> {
    register_backends();
    rmr_api::open(spec)
}

/// Names of the transports this build has.
pub fn providers() -> Vec<&'static str> {
    register_backends();
    rmr_api::providers()
}

/// The README's code, compiled and run as doc-tests so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    /// The README shows examples/first.rs verbatim (both run as doc-tests).
    #[test]
    fn readme_shows_the_first_program_verbatim() {
        let readme = include_str!("../../README.md");
        let first = include_str!("../examples/first.rs");
        assert!(readme.contains(first), "README.md's first program differs from examples/first.rs");
    }
}
