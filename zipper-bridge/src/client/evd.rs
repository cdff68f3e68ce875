//! The client side's EVD. A waiter harvests the real endpoints' events of
//! every bridged endpoint that reports here and turns them into user
//! events itself; while it blocks, it drives the real endpoints' sockets
//! (`drive_through`) and wakes the moment one of their EVDs fills
//! (`observe`), so a completion reaches it with no hand-off between threads.
//! An event loop sleeps on its descriptor instead ([`Evd::wait_fd`] +
//! [`Evd::arm`]): the real endpoints' EVDs poke it.

use super::ep::Core;
use rmr_api::provider::SoftEvd;
use rmr_api::{Error, Evd, Event, Result};
use smallvec::SmallVec;
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// An EVD of the `zipper` provider.
#[derive(Default)]
pub struct BridgeEvd {
    pub(crate) q: Arc<SoftEvd>,
    cores: Mutex<Vec<Weak<Core>>>,
    has_cores: AtomicBool,
    /// Some real EVD underneath cannot wake us: waiters poll it.
    blind: AtomicBool,
}

impl BridgeEvd {
    pub(crate) fn attach(&self, core: &Arc<Core>) {
        let mut c = self.cores.lock().unwrap_or_else(|e| e.into_inner());
        c.retain(|w| w.strong_count() > 0);
        if !c.iter().any(|w| w.as_ptr() == Arc::as_ptr(core)) {
            c.push(Arc::downgrade(core));
            let inner = core.inner_evd();
            match inner.as_any().downcast_ref::<SoftEvd>() {
                Some(s) => s.observe(&self.q),
                None => self.blind.store(true, Ordering::Release),
            }
            self.q.drive_through(inner);
        }
        self.has_cores.store(true, Ordering::Release);
    }

    pub(crate) fn push(&self, ev: Event) {
        self.q.push(ev);
    }

    /// Harvests every attached endpoint once (driving their sockets too
    /// with `drive`); true when anything happened.
    fn progress(&self, drive: bool) -> bool {
        if !self.has_cores.load(Ordering::Acquire) {
            return false;
        }
        let cores: SmallVec<[Arc<Core>; 4]> = {
            let c = self.cores.lock().unwrap_or_else(|e| e.into_inner());
            c.iter().filter_map(Weak::upgrade).collect()
        };
        let mut moved = false;
        for c in cores {
            moved |= c.poll_with(drive);
        }
        moved
    }
}

impl Evd for BridgeEvd {
    fn wait(&self, timeout: Option<Duration>, threshold: usize) -> Result<Event> {
        let threshold = threshold.max(1);
        if !self.has_cores.load(Ordering::Acquire) {
            return self.q.wait(timeout, threshold);
        }
        self.as_waiter(|| self.wait_driving(timeout, threshold))
    }

    fn dequeue(&self) -> Option<Event> {
        if self.q.is_empty() {
            self.progress(true);
        }
        self.q.dequeue()
    }

    /// Drives the real endpoints' sockets (as [`Evd::wait`] does) until
    /// `ready()` holds or an event is queued here: an RDMA write a peer aims
    /// at this process (a barrier's flag) lands in this thread's own
    /// context, not when the real backend's helper next looks.
    fn progress_until(
        &self,
        timeout: Option<Duration>,
        spin: Option<Duration>,
        ready: &dyn Fn() -> bool,
    ) -> bool {
        if !self.has_cores.load(Ordering::Acquire) {
            return self.q.progress_until(timeout, spin, ready);
        }
        // Real events become this EVD's (queued, not dequeued).
        let blind = self.blind.load(Ordering::Acquire);
        self.as_waiter(|| {
            self.q.progress_over(timeout, spin, ready, blind, || self.progress(false))
        })
    }

    fn len(&self) -> usize {
        self.q.len()
    }

    fn post_software(&self, value: u64) -> Result<()> {
        self.q.post_software(value)
    }

    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.q.wait_fd()
    }

    fn arm(&self) -> bool {
        // A real EVD underneath that cannot wake us: the caller must poll.
        // Else armed first (the real endpoints' sockets go to their
        // backend's own progress), then the endpoints harvested.
        self.q.arm_over(self.blind.load(Ordering::Acquire), || self.progress(false))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl BridgeEvd {
    /// Runs `f` as a waiter of every attached endpoint (they see a thread
    /// driving them, see `Core::enter`).
    fn as_waiter<R>(&self, f: impl FnOnce() -> R) -> R {
        let cores: SmallVec<[Arc<Core>; 4]> = {
            let c = self.cores.lock().unwrap_or_else(|e| e.into_inner());
            c.iter().filter_map(Weak::upgrade).collect()
        };
        /// Leaves what it entered, also when `f` unwinds.
        struct Entered<'a>(&'a [Arc<Core>]);
        impl Drop for Entered<'_> {
            fn drop(&mut self) {
                for c in self.0 {
                    c.leave();
                }
            }
        }
        for c in &cores {
            c.enter();
        }
        let _entered = Entered(&cores);
        f()
    }

    fn wait_driving(&self, timeout: Option<Duration>, threshold: usize) -> Result<Event> {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        // Spin (driving the sockets, yielding the CPU) as long as a plain
        // EVD's waiter would before it blocks: a reply that comes within
        // it costs no wake-up.
        // Spin only when a CPU is free (as plain EVD waiters do).
        let spin = if rmr_api::provider::cpus_idle() {
            self.q.spin_time()
        } else {
            std::time::Duration::ZERO
        };
        // Whether this wait drove the sockets yet: one whose time is up at
        // once (a poll) still drives them once.
        let mut drove = false;
        loop {
            if self.q.len() >= threshold {
                if let Some(e) = self.q.dequeue() {
                    return Ok(e);
                }
            }
            let seen = self.q.poke_gen();
            // The wait below drives the sockets; this only harvests.
            if self.progress(false) || self.q.len() >= threshold {
                continue;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) && drove {
                return Err(Error::Timeout);
            }
            drove = true;
            let nap = if self.blind.load(Ordering::Acquire) {
                Some(left.unwrap_or(Duration::from_millis(1)).min(Duration::from_millis(1)))
            } else {
                left
            };
            let spin_left = spin.saturating_sub(start.elapsed());
            match self.q.wait_or_poke_spin(nap, threshold, seen, spin_left) {
                Ok(Some(e)) => return Ok(e),
                Ok(None) | Err(Error::Timeout) => {}
                Err(e) => return Err(e),
            }
        }
    }
}
