//! # multirail — one rmr-api endpoint over every rail
//!
//! A [`MrIa`] joins N rail IAs (any backends) into one IA; its endpoints
//! stripe RDMA writes and reads over all rails, keep uDAPL's ordering rules
//! across them, report one completion per user DTO, and survive the loss of
//! a rail. Because a multirail endpoint *is* an rmr-api endpoint, anything
//! that runs over one rail runs over many.
//!
//! ## Map
//! The modules in reading order (each uses only those above it):
//! - `bind`: pins a rail thread to a core near its NIC (hwloc).
//! - [`planner`]: sans-IO striping policies and the rails' rate estimates.
//! - `config`: [`Engine`] and [`MrConfig`], the settings an IA opens with.
//! - `evd`: [`MrEvd`], the user's EVD; a waiter harvests the rails of the
//!   endpoints that report to it (it knows them only as `Polled`).
//! - `header`: the per-rail connection header (session, rail, count), and
//!   the signed headers of a rejoin and of a control-rail notice.
//! - `objects`: [`MrIa`]'s data, [`MrPz`] and [`MrLmr`]: one per rail
//!   underneath.
//! - `ep`: [`MrEp`], in files by concern: `state` (requests, stripes, the
//!   core), `post` (check, plan, record, fence), `silent` (the silent-write
//!   rules and probes), `issue` (work onto rails, events to the user),
//!   `progress` (harvesting rail EVDs), `complete` (stripes into one
//!   completion per DTO, in order), `failover` (a lost rail), `handover`
//!   (messages exactly once across a lost control rail), `engine`
//!   (connecting the rails; the pinned rail threads), `rejoin` (a lost
//!   rail connected again).
//! - `psp`: [`MrPsp`], a connector's rail connections as one request.
//! - `ia`: the IA as the factory of everything above.
//!
//! Data flows: post (`ep::post`) → plan ([`planner`]) → rails (`ep::issue`,
//! the engines) → completions (`ep::progress`, `ep::complete`) → user
//! events ([`MrEvd`]).
//!
//! ## Quick start
//! ```
//! use rmr_api::Ia;
//! # fn main() -> rmr_api::Result<()> {
//! backend_tcp::register();
//! multirail::register();
//! // Two TCP rails on loopback, pinned engine, even striping.
//! let ia = rmr_api::open("multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned;policy=even")?;
//! assert_eq!(ia.attr().provider, "multirail");
//! # Ok(()) }
//! ```
//!
//! ## Pieces
//! - [`planner`]: the sans-IO striping planner (policies `single`,
//!   `round-robin`, `even`, `weighted`, `adaptive` = HSAL's BSS).
//! - Engines ([`Engine`]): `inline` (the caller posts every stripe and
//!   polls every rail's EVD), `fork-join` (a rayon scope posts the stripes
//!   of a DTO in parallel), `pinned` (one persistent thread per rail of the
//!   IA, shared by all its endpoints, fed by one channel, bound to a core
//!   with hwloc; it ends with the IA's last endpoint). Whatever the engine, a DTO
//!   that goes whole to one rail (every DTO below the stripe threshold, and
//!   every ordered one) is posted by the caller itself when that rail has
//!   no queued work; with `pinned`, so is a probe, a DTO a fence releases
//!   beside other work or a stripe of at most 64 KiB, which the caller
//!   copies faster than a sleeping rail thread wakes; larger stripes go to
//!   the rail threads (`attr().notes`: `handed_off` counts the work rail
//!   threads posted). A thread waiting for one event on a multirail EVD
//!   takes it straight from the rail completions it harvests. A receive
//!   that completes on a rail while no receive, error or connection event
//!   is queued there and no harvest runs becomes the user's event in the
//!   thread that read it off the rail's socket (no hand-off through the
//!   rail's EVD; `attr().notes`: `recv_direct`).
//! - The completion filter: stripes' completions become one completion per
//!   user DTO, in posting order; SUPPRESS is respected; stripe times feed
//!   the adaptive weights. A send or a write of up to 1 KiB that the user
//!   suppressed is suppressed on its rail too (no completion or
//!   acknowledgement of its own, as on one rail) once that rail has carried
//!   an RDMA write, and completes with the next completion of its rail;
//!   when a fence, a full window or a finished DTO behind it needs it
//!   sooner, a zero-length write to where the rail's last write went makes
//!   the rail report (`attr().notes`: `silent`, `probes`).
//! - Ordering: two-sided traffic uses the control rail (the lowest live
//!   rail) and waits until every stripe posted before it completed. A fence
//!   (or a poster facing a full window) probes the rails it waits on with an
//!   [`rmr_api::DtoFlags::URGENT`] zero-length write, so that a peer that
//!   delays its acknowledgements (the TCP backend) answers at once; without
//!   rail threads, the blocked poster drives the rails' sockets itself while
//!   it waits. A DTO the user posts URGENT goes URGENT on the rail
//!   (or rails) that carry it.
//! - Failover: a broken rail's unfinished stripes are re-issued on the
//!   survivors and an [`rmr_api::Event::RailDown`] names the lost rail (the
//!   last rail's loss is `Broken`).
//! - Messages exactly once: a send (or write with immediate data) whose
//!   completion died with the control rail may have arrived. Before any
//!   ordered DTO goes on the new control rail, the two ends exchange how
//!   many messages their receives have taken (each live rail but the
//!   control rail holds one receive of the endpoint's own for this); a
//!   message the peer counted completes, the rest go again, in order. An
//!   end that had not seen the loss learns of it from that count and
//!   follows (`attr().notes`: `handover`). Atomics lost that way are
//!   performed again (the peer keeps no count of them).
//! - Rails that heal: the side that connected keeps trying to connect a
//!   lost rail again in the background (one thread per IA, shared by its
//!   endpoints; backoff 100 ms doubling to 2 s, for as long as the endpoint
//!   is connected), through the peer's PSP, proving a key the accepting
//!   side handed out when the endpoint was connected (a process that did
//!   not see that answer cannot take the slot; replays are refused). Once both ends have swapped
//!   the new rail endpoint in, the rail carries stripes again (the adaptive
//!   policy learns its rate again) and [`rmr_api::Event::RailUp`] tells the
//!   user. The control rail (sends, receives, atomics) moves only when it
//!   fails, never back to a rail that returns, and the connecting side
//!   tells the other end where it moved, so both ends use one control rail.
//!   [`MrEp::stats`] counts losses, returns and attempts. The accepting
//!   side's PSP must stay open for rejoins; `rejoin=0` / `RMR_MR_REJOIN=0`
//!   turns it off. An orderly disconnect ends the control rail first: the
//!   peer takes that rail's `Disconnected` as the endpoint's end, and
//!   another rail's alone as that rail's loss (so an end that replaces or
//!   gives up one rail does not close the endpoint).
//!
//! ## Thread safety
//! Everything is `Send + Sync`; posts from several threads are serialised
//! per EP. With `inline`/`fork-join`, progress happens only inside waits and
//! dequeues on the EP's EVDs, as in the paper's non-threaded design.
//!
//! ## Resource cleanup
//! Dropping a multirail EP disconnects every rail and stops its rail threads.
//!
//! ## Runtime parameters
//! `RMR_MR_ENGINE`, `RMR_MR_POLICY`, `RMR_MR_THRESHOLD` (bytes, `K`/`M`
//! suffixes), `RMR_MR_ALIGN`, `RMR_MR_BIND` (`0` disables hwloc binding),
//! `RMR_MR_DIRECT` (`auto`, `all` or a size: the stripes a pinned caller
//! posts itself, see [`MrConfig::direct`]) set the defaults of a
//! `multirail:` spec; its options (`engine=`, `policy=`, `threshold=`,
//! `align=`, `bind=`, `direct=`, [`KNOBS`]) override them
//! ([`MrConfig::from_given`]). A value that does not parse makes `open`
//! fail with `Error::BadSetting` naming it; `rmr-bench info` lists them
//! with their sources; [`MrConfig::builder`] builds a config in code.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod bind;
mod config;
mod ep;
mod evd;
mod header;
mod ia;
mod objects;
pub mod planner;
mod psp;

pub use bind::bind_thread_to_core;
pub use config::{Engine, KNOBS, MrConfig, MrConfigBuilder, parse_size};
pub use ep::{MrEp, MrStats};
pub use evd::MrEvd;
pub use objects::{MrIa, MrLmr, MrPz};
pub use planner::{Planner, Policy, Stripe};
pub use psp::MrPsp;

use rmr_api::provider::Provider;
use rmr_api::settings::Given;
use rmr_api::{Error, Ia, Result};
use std::sync::Arc;

/// The `multirail` provider: `multirail:<rail spec>,<rail spec>[;key=value...]`.
pub struct MultiRailProvider;

impl Provider for MultiRailProvider {
    fn name(&self) -> &'static str {
        "multirail"
    }

    fn describe(&self) -> &'static str {
        "one logical IA over several rails of any backends"
    }

    fn open(&self, rest: &str) -> Result<Arc<dyn Ia>> {
        let bad = |why: String| Error::BadSpec { spec: format!("multirail:{rest}"), why };
        let (rails_part, given) = Given::split("multirail", rest, &config::KNOBS)?;
        let cfg = MrConfig::from_given(&given)?;
        let specs: Vec<&str> = rails_part.split(',').filter(|s| !s.is_empty()).collect();
        // The rails share the node: each sizes its per-connection defaults
        // for its share (rmr_api::provider::with_rail_share).
        let rails = specs
            .iter()
            .map(|s| rmr_api::provider::with_rail_share(specs.len(), || rmr_api::open(s)))
            .collect::<Result<Vec<_>>>()?;
        if rails.is_empty() {
            return Err(bad("no rails; e.g. multirail:tcp:127.0.0.1,tcp:127.0.0.2".into()));
        }
        Ok(MrIa::new(rails, cfg)?)
    }

    fn settings(&self, rest: &str) -> Result<Vec<rmr_api::settings::Setting>> {
        let (_, given) = Given::split("multirail", rest, &config::KNOBS)?;
        MrConfig::settings(&given)
    }
}

/// Registers the `multirail` provider.
pub fn register() {
    rmr_api::provider::register(Arc::new(MultiRailProvider));
}
