//! Waiting without burning the node: the one helper every poll loop of the
//! barrier goes through.
//!
//! On an oversubscribed node (more processes than cores) a poller that
//! spins steals the core from the very process it waits for. So every
//! wait here spins briefly, then yields, then sleeps with a growing
//! backoff. A wait on an EVD of the TCP backend ([`rmr_api::SoftEvd`])
//! instead *drives* the endpoints (their sockets) until the flag is set,
//! blocking in `poll(2)` on them after a short spin: the RDMA write lands
//! in the waiter's own context, at once, and an idle waiter costs nothing.
//! Other EVDs (libfabric, verbs, multirail) make progress in
//! [`rmr_api::Evd::dequeue`], which the backoff loop calls.

use crate::{Error, Result};
use rmr_api::{Evd, Event, SoftEvd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Spin, then yield, then sleep 2^k µs (up to 256 µs).
#[derive(Default)]
pub(crate) struct Backoff {
    n: u32,
}

const SPINS: u32 = 64;
/// Longest single block in `poll(2)` of a flag wait.
const SLICE: Duration = Duration::from_millis(5);
const YIELDS: u32 = 64;

impl Backoff {
    pub(crate) fn snooze(&mut self) {
        if self.n < SPINS {
            std::hint::spin_loop();
        } else if self.n < SPINS + YIELDS {
            std::thread::yield_now();
        } else {
            let k = (self.n - SPINS - YIELDS).min(8);
            std::thread::sleep(Duration::from_micros(1 << k));
        }
        self.n = self.n.saturating_add(1);
    }
}

/// Waits on one EVD (the one every barrier endpoint reports to).
pub(crate) struct Waiter {
    evd: Arc<dyn Evd>,
    pub(crate) timeout: Duration,
    /// How long a TCP-backend wait spins before blocking in `poll(2)`
    /// (`None`: the EVD's own setting).
    spin: Option<Duration>,
}

impl Waiter {
    pub(crate) fn new(evd: Arc<dyn Evd>, timeout: Duration, spin: Option<Duration>) -> Waiter {
        Waiter { evd, timeout, spin }
    }

    fn soft(&self) -> Option<&SoftEvd> {
        self.evd.as_any().downcast_ref::<SoftEvd>()
    }

    /// Makes progress until `done()` holds, handing every event that shows
    /// up meanwhile to `on_event`. Returns false on timeout.
    pub(crate) fn until(
        &self,
        done: &dyn Fn() -> bool,
        on_event: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<bool> {
        let deadline = Instant::now() + self.timeout;
        let mut b = Backoff::default();
        loop {
            if done() {
                return Ok(true);
            }
            let mut got = false;
            while let Some(e) = self.evd.dequeue() {
                on_event(e)?;
                got = true;
            }
            if got {
                continue;
            }
            if let Some(s) = self.soft() {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(done());
                }
                // In slices: a write that lands without waking this waiter
                // (placed by another thread, raising no event) costs at most one.
                let left = deadline.saturating_duration_since(now).min(SLICE);
                let ready = || done() || !s.is_empty();
                let _ = match self.spin {
                    Some(spin) => s.drive_until_spin(Some(left), spin, &ready),
                    None => s.drive_until(Some(left), &ready),
                };
            } else {
                if Instant::now() >= deadline {
                    return Ok(done());
                }
                b.snooze();
            }
        }
    }

    /// Makes whatever progress is ready, collecting the events.
    pub(crate) fn progress(&self, into: &mut Vec<Event>) {
        while let Some(e) = self.evd.dequeue() {
            into.push(e);
        }
    }

    /// The next event (for the send/recv barrier), or `None` on timeout.
    pub(crate) fn next_event(&self) -> Option<Event> {
        if let Some(s) = self.soft() {
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
                if !s.drive_until_spin(Some(left), spin, &|| !s.is_empty()) {
                    return self.evd.dequeue();
                }
            }
        }
        let deadline = Instant::now() + self.timeout;
        let mut b = Backoff::default();
        loop {
            if let Some(e) = self.evd.dequeue() {
                return Some(e);
            }
            if Instant::now() >= deadline {
                return None;
            }
            b.snooze();
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
