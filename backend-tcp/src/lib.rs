//! # backend-tcp — rmr over plain TCP
//!
//! The embedded default transport: every rmr-api object over Rust's std
//! networking, no system library needed. Each endpoint is one TCP stream
//! carrying a framed protocol ([`wire`]); RDMA payloads are placed straight
//! from the socket into registered memory after the key, rights, protection
//! zone and bounds have been checked, and sent with one `writev` of header
//! plus the registered memory itself (no staging copy on either side).
//!
//! ## Map
//! The modules in reading order (each uses only those above it):
//! - `config`: [`TcpConfig`], the IA's settings.
//! - `engine`: the IA's progress engine: one `epoll` set over all its
//!   endpoints' sockets and at most one helper thread.
//! - `domain`: what one IA's objects share, [`TcpPz`], [`TcpLmr`] and the
//!   key table every remote access is checked against.
//! - [`wire`]: the frame format.
//! - `tx`: the sender's queue of frames and registered-memory segments.
//! - `ep`: [`TcpEp`], in files by concern: `rx` (the frame parser's
//!   state), `shared` (the state every thread works on), `connect`, `send`
//!   (requests into frames), `window` (acknowledgements, the receive
//!   stall), `reader` (what arriving frames do: into registered memory
//!   after the checks, responses, acks), `progress` (the driver a waiter
//!   runs, the EP as the progress engine sees it), `teardown`.
//! - `psp`: [`TcpPsp`], listening and the handshake.
//! - `ia`: [`TcpIa`], the factory of everything above.
//!
//! Data flows: post (`ep`) → frame ([`wire`]) → queue (`tx`) → socket →
//! the peer's reader (`ep::rx`, `ep::reader`) checks the key (`domain`) → its memory →
//! a completion on each side's EVD.
//!
//! ## Quick start
//! ```
//! use rmr_api::{Access, Cookie, DtoFlags, EpEvds, Event, MemRegion, Sge};
//! use std::time::Duration;
//!
//! # fn main() -> rmr_api::Result<()> {
//! backend_tcp::register();
//! let ia = rmr_api::open("tcp:127.0.0.1")?;
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
//! let reply = ep.connect("127.0.0.1", psp.service(), b"hi", Duration::from_secs(5))?;
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
//! `tcp:<local IP>`: the IA binds its endpoints and service points to that
//! address, so several IAs on one host are separate rails.
//!
//! ## Thread safety and progress
//! Posts from several threads are serialised per EP; a post writes its
//! frame straight into the non-blocking socket and queues only what the
//! kernel does not take at once. Progress is made by whoever waits: a
//! thread blocked on one of the EP's EVDs polls the EP's socket itself and
//! handles what arrives in its own context (no hand-off between threads, so
//! a write+notify costs what a raw TCP ping-pong costs). For the progress
//! nobody waits on, each IA has one progress engine: an `epoll` set over
//! the sockets of all its connected endpoints and one helper thread
//! (`rmr-tcp-<address>`), however many endpoints the IA has. The helper
//! stands back from an endpoint while an application thread drives it and
//! takes it over 200 µs after the last one left (it looks every 2 ms,
//! `watch_ms`, or is told by the leaving waiter after a long wait), so
//! RDMA into a passive target lands even when its owner never waits.
//! (The helper's timers wait in whole milliseconds
//! ([`rmr_api::provider::clock::helper_grain`]): a look due in 200 µs comes
//! about a millisecond later, so a thread that computes for less than
//! that between its waits answers reads aimed at it in its next wait, or
//! in a zero-timeout poll of its EVD, which looks at its endpoints once
//! and drives those with input.)
//! After a takeover it looks more often for a while: a thread that
//! computes between its waits tells it as it leaves a wait, and it takes
//! the endpoint over at once, so RDMA reads and atomics aimed at a
//! computing process are answered in about 0.1 ms (the helper runs in
//! short scheduler slices, so it preempts the computing thread on a
//! shared CPU; `examples/busy_target.rs`). An idle endpoint
//! costs no thread and no wake-up; the helper ends 100 ms after the IA's
//! last endpoint. Acknowledgements a peer asks for are delayed briefly
//! so that a reply carries them. Small frames are held for batching until
//! the next frame or drive; a thread that posts inside
//! [`rmr_api::provider::with_deferred_doorbell`] sends its batch itself
//! ([`rmr_api::provider::SoftEvd::flush_writes`]) and wakes nobody for it (a forwarder
//! posting to endpoints another thread waits on); drivers send such a batch
//! only once it is 500 µs overdue. A peer that sends requests but does not
//! read their responses is pushed back by TCP itself: past three windows of
//! queued frames the endpoint stops reading until its queue drains.
//!
//! ## Resource cleanup
//! Dropping an EP disconnects it; dropping an LMR deregisters it; dropping
//! a PSP stops listening. Threads end when their connection ends.
//!
//! ## Runtime parameters
//! Read when a `tcp:` spec opens ([`TcpConfig::from_given`]), each from
//! the spec's option (`tcp:127.0.0.1;batch=0;stall_timeout_ms=5000`) or
//! else its variable: a value that does not parse makes `open` fail with
//! `rmr_api::Error::BadSetting` naming it, never a silent default;
//! `rmr-bench info 'tcp:127.0.0.1;batch=0'` lists them with their sources
//! ([`KNOBS`] pairs each option with its variable).
//! [`TcpIa::with_config`] takes a config as given
//! ([`TcpConfig::builder`]).
//! - `RMR_TCP_RNR_TIMEOUT_MS` (5000): how long a send waits at the target
//!   for a posted receive before the connection breaks (receiver not ready).
//! - `RMR_TCP_USER_TIMEOUT_MS` (4000): TCP_USER_TIMEOUT and keepalive
//!   budget — how fast a dead peer or a cut link breaks the EP.
//! - `RMR_TCP_SOCKBUF` (unset: kernel autotuning): force socket buffer sizes.
//! - `RMR_TCP_NEAR_SNDBUF` (512 KiB, 512 KiB / N for one of N multirail
//!   rails, at least 128 KiB; 0: never) and `RMR_TCP_NEAR` (`host`, the
//!   default; `rtt`; `off`): the send buffer of a connection to a peer on
//!   this host (with `rtt`, also to one whose round trip at connect was at
//!   most [`NEAR_RTT`]), instead of the kernel's autotuning: a transfer
//!   the CPUs limit keeps its bytes in the caches (see
//!   [`TcpConfig::near_sndbuf`], which also says what it costs on a fast
//!   fabric). The EP's `sndbuf` note tells what a connection got and why.
//! - `RMR_TCP_MAX_DTOS`, `RMR_TCP_MAX_RECVS` (4096 each): outstanding
//!   send-side DTOs and posted receives per EP.
//! - `RMR_TCP_STALL_TIMEOUT_MS` (30000): how long frames may wait for a
//!   peer that takes nothing (no byte leaves, none arrives) before the EP
//!   ends: a peer that stopped reading but still acknowledges TCP. Its
//!   DTOs complete with `Status::Broken`, posts return
//!   [`rmr_api::Error::PeerStalled`]; a slow reader is not cut (0: never).
//! - `RMR_TCP_ACK_DELAY_US` (50): how long a requested acknowledgement may
//!   wait for an outgoing frame to ride on (0: at once). A DTO posted with
//!   [`rmr_api::DtoFlags::URGENT`] is acknowledged at once whatever this says
//!   (the multirail layer's fence probes use it).
//! - `RMR_EVD_SPIN_US` (50): how long an EVD waiter spins at least (driving,
//!   and yielding the CPU between looks) before it blocks in `poll(2)`; the
//!   spin grows to twice the EVD's recent waits while no thread waits for a
//!   CPU, so that a ping-pong keeps spinning where a sleeping thread wakes
//!   slowly (0: never spin). See [`rmr_api::provider::SoftEvd::spin_time`].
//! - `RMR_EVD_SPIN_MAX_US` (1000): the longest that spin grows to (at most
//!   `RMR_EVD_SPIN_US`: it never grows).
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod config;
mod domain;
mod engine;
mod ep;
mod ia;
mod psp;
mod tx;
pub mod wire;
mod zerocopy;

pub use config::{
    KNOBS, NEAR_RTT, NEAR_SNDBUF, NEAR_SNDBUF_MIN, Near, TcpConfig, TcpConfigBuilder,
};
pub use domain::{TcpLmr, TcpPz};
pub use ep::TcpEp;
pub use ia::TcpIa;
pub use psp::TcpPsp;

use rmr_api::provider::Provider;
use rmr_api::settings::Given;
use rmr_api::{Error, Ia, Result};
use std::sync::Arc;

/// The `tcp` provider.
pub struct TcpProvider;

impl Provider for TcpProvider {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn describe(&self) -> &'static str {
        "plain TCP streams (embedded default, runs anywhere)"
    }

    fn open(&self, rest: &str) -> Result<Arc<dyn Ia>> {
        let (ip, cfg) = parse_spec(rest)?;
        Ok(Arc::new(TcpIa::with_config(ip, cfg)?))
    }

    fn settings(&self, rest: &str) -> Result<Vec<rmr_api::settings::Setting>> {
        let (_, given) = Given::split("tcp", rest, &config::KNOBS)?;
        TcpConfig::settings(&given)
    }
}

/// Parses the part of a spec after `tcp:`: `<local IP>[;option=value...]`.
fn parse_spec(rest: &str) -> Result<(std::net::IpAddr, TcpConfig)> {
    let (addr, given) = Given::split("tcp", rest, &config::KNOBS)?;
    let ip = addr.parse().map_err(|_| Error::BadSpec {
        spec: format!("tcp:{rest}"),
        why: "expected `tcp:<local IP address>[;option=value...]`, e.g. `tcp:127.0.0.1`".into(),
    })?;
    Ok((ip, TcpConfig::from_given(&given)?))
}

/// Registers the `tcp` provider with [`rmr_api::provider::register`].
pub fn register() {
    rmr_api::provider::register(Arc::new(TcpProvider));
}
