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
use std::sync::{Arc, Mutex};
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
    /// A failure that came with what a wait was waiting for (see
    /// [`Waiter::until`]): the next wait that is not done at once reports it.
    deferred: Mutex<Option<Error>>,
}

impl Waiter {
    pub(crate) fn new(evd: Arc<dyn Evd>, timeout: Duration, spin: Option<Duration>) -> Waiter {
        Waiter { evd, timeout, spin, deferred: Mutex::new(None) }
    }

    /// Makes progress until `done()` holds, handing every event that shows
    /// up meanwhile to `on_event`. Returns false on timeout.
    ///
    /// An event `on_event` fails on ends the wait with that failure, unless
    /// `done()` holds by then: a progress helper may have taken in the
    /// awaited flag and the failure together (a peer that signalled this
    /// barrier, passed it and left) between this thread's look at the flag
    /// and its look at the events. The wait then ends well, and the failure
    /// is reported by the next wait that is not done at once.
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
            if let Some(e) = self.deferred.lock().unwrap_or_else(|p| p.into_inner()).take() {
                return Err(e);
            }
            let mut got = false;
            while let Some(e) = self.evd.dequeue() {
                if let Err(err) = on_event(e) {
                    if done() {
                        *self.deferred.lock().unwrap_or_else(|p| p.into_inner()) = Some(err);
                        return Ok(true);
                    }
                    return Err(err);
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use rmr_api::provider::SoftEvd;
    use std::cell::Cell;

    #[test]
    fn a_failure_that_comes_with_the_flag_is_kept_for_the_next_wait() {
        let evd: Arc<dyn Evd> = Arc::new(SoftEvd::new(16));
        let w = Waiter::new(evd.clone(), Duration::from_secs(5), Some(Duration::ZERO));
        let mut fail = |e: Event| Err(Error::Link { rank: 1, why: format!("{e:?}") });
        // The flag lands (with the failure's event) between the wait's look
        // at the flag and its look at the events.
        evd.post_software(7).unwrap();
        let looks = Cell::new(0);
        let lands = || {
            looks.set(looks.get() + 1);
            looks.get() > 1
        };
        assert!(w.until(&lands, &mut fail).unwrap(), "the flag came: the wait ends well");
        // A wait done at once keeps it; the next that is not reports it.
        assert!(w.until(&|| true, &mut fail).unwrap());
        match w.until(&|| false, &mut fail) {
            Err(Error::Link { rank: 1, why }) => assert!(why.contains("Software(7)"), "{why}"),
            r => panic!("the kept failure: {r:?}"),
        }
        // Reported once; without the flag a failure ends the wait at once.
        evd.post_software(8).unwrap();
        assert!(matches!(w.until(&|| false, &mut fail), Err(Error::Link { .. })));
    }
}
