//! # zipper-bridge — two clusters joined by forwarding nodes
//!
//! A *zipper node* owns a link into cluster A and one into cluster B and
//! runs `rmr-bridge`, which forwards send/recv and RDMA write/read between
//! them. Processes name each other by global rank (cluster A's first, then
//! B's — the Leiden Zipper's numbering); inside a cluster they talk
//! directly, across clusters through a bridge, and over several bridges at
//! once through the multirail layer.
//!
//! ## Quick start
//! ```no_run
//! use rmr_api::{Access, Cookie, DtoFlags, Event, MemRegion, Sge};
//! use std::time::Duration;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // world.toml names the clusters, each rank's addresses and each bridge.
//! let desc = zipper_bridge::WorldDesc::load("world.toml")?;
//! let cfg = zipper_bridge::JoinConfig::from_env()?; // RMR_ZIP_*, RMR_MR_*
//! let world = zipper_bridge::World::join(desc, 0, cfg)?;
//! let peer = world.ep(3)?; // rank 3 lives in cluster B: through the bridge(s)
//! let buf = MemRegion::from_bytes(b"hello, cluster B");
//! let lmr = peer.pz.register_all(&buf, Access::empty())?;
//! peer.ep.post_send(&[Sge::whole(&*lmr)], Cookie(1), DtoFlags::empty())?;
//! if let Event::Dto(c) = peer.evd.wait(Some(Duration::from_secs(5)), 1)? {
//!     c.result()?; // the send has been delivered on the far side
//! }
//! world.barrier()?; // every rank of both clusters
//! # Ok(()) }
//! ```
//! and on each zipper node:
//! ```text
//! rmr-bridge --a tcp:198.18.10.2 --b tcp:198.18.20.1 --port 7700
//! ```
//!
//! ## Pieces
//! - [`WorldDesc`]: the TOML world description (clusters, ranks, bridges),
//!   checked with errors that name the line.
//! - [`World`]: joined by rank, gives an endpoint to any rank ([`World::ep`])
//!   and a barrier across both clusters ([`World::barrier`]).
//! - [`BridgeIa`]: an `rmr-api` IA whose endpoints ([`BridgedEp`]) connect
//!   through one bridge; `MrIa::new(vec![bridge_ia_0, bridge_ia_1], cfg)`
//!   stripes over two bridges. Also a provider:
//!   `zipper:<rail spec>@<bridge address>:<port>`.
//! - [`Bridge`]: the forwarder (the `rmr-bridge` binary is a thin CLI over it).
//! - Sans-IO cores: [`credit`] (credit-based flow control) and [`chunk`]
//!   (chunking, acknowledgement tracking), and the wire header [`wire`].
//!
//! ## Thread safety
//! Every object is `Send + Sync`. A bridged endpoint makes progress inside
//! waits and dequeues on its EVDs (as the multirail `inline` engine does):
//! the waiting thread drives the real socket itself.
//!
//! ## Resource cleanup
//! Dropping a bridged endpoint disconnects it; the bridge then closes the
//! peer's side. Dropping a [`World`] closes its listeners and endpoints.
//!
//! ## Cargo features
//! None.
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod barrier;
pub mod bridge;
pub mod chunk;
mod client;
pub mod credit;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod handshake;
mod join;
mod ring;
mod trace;
pub mod wire;
mod world;

pub use barrier::Barrier;
pub use bridge::{AllowNet, Bridge, BridgeConfig, BridgeConfigBuilder, NOT_ADMITTED};
pub use client::ep::BridgedEp;
pub use client::evd::BridgeEvd;
pub use client::ia::{
    BridgeIa, BridgeLmr, BridgePz, CLIENT_KNOBS, ClientConfig, ClientConfigBuilder, ZipperProvider,
};
pub use client::psp::BridgePsp;
pub use error::{Result, ZipperError};
pub use join::{BridgeRail, JoinConfig, Peer, World, bridge_rails};
pub use world::{BridgeDesc, Cluster, ProcessDesc, WorldDesc};

/// Registers the `zipper` provider (and the `tcp` and `multirail` ones it builds on).
pub fn register() {
    backend_tcp::register();
    multirail::register();
    rmr_api::provider::register(std::sync::Arc::new(ZipperProvider));
}
