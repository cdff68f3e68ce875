//! Waiting without burning the node: the one helper every poll loop of the
//! barrier goes through.
//!
//! Every wait goes through the EVD's own public progress wait
//! ([`rmr_api::Evd::progress_until`]): on the TCP backend the waiter drives
//! the endpoints' sockets itself until the flag is set, blocking in
//! `poll(2)` after a short spin, so the RDMA write lands in the waiter's
//! own context at once and an idle waiter costs nothing; other backends
//! block on their EVD's wait fd, or spin, yield and nap. On an
//! oversubscribed node (more processes than cores) the barrier's `spin`
//! setting keeps the spin short: a poller that spins steals the core from
//! the very process it waits for.

use crate::{Error, Result};
use rmr_api::{Evd, Event};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest single progress wait of a flag wait: a write that lands without
/// raising an event (placed by another thread) costs at most one.
const SLICE: Duration = Duration::from_millis(5);

/// Waits on one EVD (the one every barrier endpoint reports to).
pub(crate) struct Waiter {
    evd: Arc<dyn Evd>,
    pub(crate) timeout: Duration,
    /// How long a wait spins before blocking (`None`: the EVD's own setting).
    spin: Option<Duration>,
}

impl Waiter {
    pub(crate) fn new(evd: Arc<dyn Evd>, timeout: Duration, spin: Option<Duration>) -> Waiter {
        Waiter { evd, timeout, spin }
    }

    /// Makes progress until `done()` holds, handing every event that shows
    /// up meanwhile to `on_event`. Returns false on timeout.
    pub(crate) fn until(
        &self,
        done: &dyn Fn() -> bool,
        on_event: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<bool> {
        let deadline = Instant::now() + self.timeout;
        let mut first = true;
        loop {
            if done() {
                if first {
                    // Done at once (the peers' signals were here already):
                    // what this process just posted, and its endpoints hold
                    // for batching, goes out now, not when a progress helper
                    // next looks (the peers wait for it).
                    self.evd.progress_until(Some(Duration::ZERO), Some(Duration::ZERO), done);
                }
                return Ok(true);
            }
            first = false;
            let mut got = false;
            while let Some(e) = self.evd.dequeue() {
                on_event(e)?;
                got = true;
            }
            if got {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(done());
            }
            let left = deadline.saturating_duration_since(now).min(SLICE);
            self.evd.progress_until(Some(left), self.spin, done);
        }
    }

    /// Drives the EVD for a moment (at most `max`, less when an event
    /// arrives): what a poster facing a full send queue does instead of
    /// sleeping, so the completions that free the queue are reaped at once.
    pub(crate) fn drive_for(&self, max: Duration) {
        self.evd.progress_until(Some(max), self.spin, &|| false);
    }

    /// Makes whatever progress is ready, collecting the events.
    pub(crate) fn progress(&self, into: &mut Vec<Event>) {
        while let Some(e) = self.evd.dequeue() {
            into.push(e);
        }
    }

    /// The next event (for the send/recv barrier), or `None` on timeout.
    pub(crate) fn next_event(&self) -> Option<Event> {
        let Some(spin) = self.spin else {
            return self.evd.wait(Some(self.timeout), 1).ok();
        };
        // As `Evd::wait`, with this barrier's spin.
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(e) = self.evd.dequeue() {
                return Some(e);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if !self.evd.progress_until(Some(left), Some(spin), &|| false) {
                return self.evd.dequeue();
            }
        }
    }
}

/// The common handling of an event the barrier did not ask for: connection
/// trouble and failed DTOs are errors, the rest is ignored (an async error
/// such as a multirail layer's lost rail leaves the endpoint working). `rank_of`
/// names the peer of an endpoint.
pub(crate) fn stray(e: Event, rank_of: &dyn Fn(rmr_api::EpId) -> usize) -> Result<()> {
    match e {
        Event::Dto(c) if !c.status.is_ok() => {
            Err(Error::Link { rank: rank_of(c.ep), why: format!("{:?} {:?}", c.op, c.status) })
        }
        Event::Broken { ep, reason } => Err(Error::Link { rank: rank_of(ep), why: reason }),
        Event::Disconnected { ep } => {
            Err(Error::Link { rank: rank_of(ep), why: "disconnected".into() })
        }
        _ => Ok(()),
    }
}
