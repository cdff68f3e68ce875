//! Event dispatchers: the trait, and [`SoftEvd`], the software queue that the
//! TCP backend and the multirail layer use.

use crate::{Error, Event, Result};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// An event dispatcher (uDAPL's EVD): a queue of [`Event`]s.
pub trait Evd: Send + Sync {
    /// Waits until at least `threshold` events are queued (1 if 0), then
    /// dequeues the oldest one. `None` waits forever.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the threshold was not reached in time (no
    /// event is lost: they stay queued).
    fn wait(&self, timeout: Option<Duration>, threshold: usize) -> Result<Event>;
    /// Dequeues the oldest event without blocking.
    fn dequeue(&self) -> Option<Event>;
    /// Number of queued events.
    fn len(&self) -> usize;
    /// True when nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Posts a software event carrying `value`.
    ///
    /// # Errors
    /// [`Error::QueueFull`] when the EVD is at capacity.
    fn post_software(&self, value: u64) -> Result<()>;
    /// A file descriptor that turns readable when this EVD may have events to
    /// dequeue (or progress to make through [`Evd::dequeue`]): how a layer
    /// above (multirail, a bridge) blocks on EVDs of different backends at
    /// once with `poll(2)`. The protocol is libfabric's `fi_trywait`: call
    /// [`Evd::arm`]; if it returns true, block in `poll` on the fd; then
    /// dequeue until `None`. `None` (the default) means the EVD has no such
    /// fd and the caller must poll it with short sleeps.
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Prepares [`Evd::wait_fd`] for blocking: returns false when events
    /// are (or may be) ready now, so the caller must dequeue instead of
    /// blocking. The default, for EVDs without a wait fd, is false.
    fn arm(&self) -> bool {
        false
    }
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

/// How long a waiter spins before it sleeps: short enough that an idle
/// process costs nothing, long enough that a ping-pong never sleeps.
const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// A software EVD: a mutex-protected queue with a condition variable.
/// Waiters spin briefly, then block (an idle process does not burn a core).
pub struct SoftEvd {
    q: Mutex<VecDeque<Event>>,
    cv: Condvar,
    waiters: AtomicUsize,
    queued: AtomicUsize,
    capacity: usize,
    spin: Duration,
    pokes: AtomicU64,
    has_observers: AtomicBool,
    observers: Mutex<Vec<Weak<SoftEvd>>>,
}

impl Default for SoftEvd {
    fn default() -> Self {
        Self::new(1 << 20)
    }
}

impl SoftEvd {
    /// An EVD holding at most `capacity` events.
    pub fn new(capacity: usize) -> Self {
        let spin = std::env::var("RMR_EVD_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_micros)
            .unwrap_or(DEFAULT_SPIN);
        SoftEvd {
            q: Mutex::new(VecDeque::with_capacity(256)),
            cv: Condvar::new(),
            waiters: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            capacity,
            spin,
            pokes: AtomicU64::new(0),
            has_observers: AtomicBool::new(false),
            observers: Mutex::new(Vec::new()),
        }
    }

    /// Makes `by` be poked (see [`SoftEvd::wait_or_poke`]) whenever an event
    /// is pushed here. A layer that owns several EVDs (multirail) lets one
    /// waiter sleep on its own EVD yet wake the moment any of them fills.
    pub fn observe(&self, by: &Arc<SoftEvd>) {
        let mut o = self.observers.lock().unwrap_or_else(|p| p.into_inner());
        o.retain(|w| w.strong_count() > 0);
        if !o.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(by))) {
            o.push(Arc::downgrade(by));
        }
        self.has_observers.store(true, Ordering::Release);
    }

    /// Waits until at least one event is queued, or a poke after generation
    /// `seen` (see [`SoftEvd::poke_gen`]), or `timeout`, without dequeuing:
    /// for a consumer that must dequeue under a lock of its own to keep events
    /// in order. Spins for `spin` first. Returns whether events are queued.
    pub fn wait_ready(&self, seen: u64, spin: Duration, timeout: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < spin {
            if self.queued.load(Ordering::Acquire) > 0 || self.pokes.load(Ordering::Acquire) != seen
            {
                return self.queued.load(Ordering::Acquire) > 0;
            }
            std::hint::spin_loop();
        }
        let deadline = start + timeout;
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        self.waiters.fetch_add(1, Ordering::AcqRel);
        while q.is_empty() && self.pokes.load(Ordering::Acquire) == seen {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            q = self.cv.wait_timeout(q, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
        self.waiters.fetch_sub(1, Ordering::AcqRel);
        !q.is_empty()
    }

    /// Wakes this EVD's waiters in [`SoftEvd::wait_or_poke`] without an event.
    pub fn poke(&self) {
        self.pokes.fetch_add(1, Ordering::AcqRel);
        if self.waiters.load(Ordering::Acquire) > 0 {
            let _g = self.q.lock().unwrap_or_else(|p| p.into_inner());
            self.cv.notify_all();
        }
    }

    /// The poke generation: read it *before* checking other sources, then
    /// pass it to [`SoftEvd::wait_or_poke`] so that no poke is missed.
    pub fn poke_gen(&self) -> u64 {
        self.pokes.load(Ordering::Acquire)
    }

    /// Like [`Evd::wait`], but also returns `Ok(None)` once poked after
    /// generation `seen` (from [`SoftEvd::poke_gen`]).
    ///
    /// # Errors
    /// [`Error::Timeout`].
    pub fn wait_or_poke(
        &self,
        timeout: Option<Duration>,
        threshold: usize,
        seen: u64,
    ) -> Result<Option<Event>> {
        let threshold = threshold.max(1);
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let res = loop {
            if q.len() >= threshold {
                let e = q.pop_front().expect("non-empty");
                self.queued.store(q.len(), Ordering::Release);
                break Ok(Some(e));
            }
            if self.pokes.load(Ordering::Acquire) != seen {
                break Ok(None);
            }
            match deadline {
                None => q = self.cv.wait(q).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break Err(Error::Timeout);
                    }
                    q = self.cv.wait_timeout(q, d - now).unwrap_or_else(|p| p.into_inner()).0;
                }
            }
        };
        self.waiters.fetch_sub(1, Ordering::AcqRel);
        res
    }

    fn notify_observers(&self) {
        if !self.has_observers.load(Ordering::Acquire) {
            return;
        }
        let o: Vec<Arc<SoftEvd>> = {
            let o = self.observers.lock().unwrap_or_else(|p| p.into_inner());
            o.iter().filter_map(Weak::upgrade).collect()
        };
        for e in o {
            e.poke();
        }
    }

    /// Appends an event (backends call this; events are never dropped:
    /// the capacity only bounds software events).
    pub fn push(&self, ev: Event) {
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back(ev);
        self.queued.store(q.len(), Ordering::Release);
        drop(q);
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.cv.notify_all();
        }
        self.notify_observers();
    }

    fn pop(&self, threshold: usize) -> Option<Event> {
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() < threshold.max(1) {
            return None;
        }
        let e = q.pop_front();
        self.queued.store(q.len(), Ordering::Release);
        e
    }
}

impl Evd for SoftEvd {
    fn wait(&self, timeout: Option<Duration>, threshold: usize) -> Result<Event> {
        let threshold = threshold.max(1);
        let start = Instant::now();
        // Spin phase: no syscalls while the answer is microseconds away.
        while start.elapsed() < self.spin {
            if self.queued.load(Ordering::Acquire) >= threshold {
                if let Some(e) = self.pop(threshold) {
                    return Ok(e);
                }
            }
            std::hint::spin_loop();
        }
        let deadline = timeout.map(|t| start + t);
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let res = loop {
            if q.len() >= threshold {
                let e = q.pop_front().expect("non-empty");
                self.queued.store(q.len(), Ordering::Release);
                break Ok(e);
            }
            match deadline {
                None => q = self.cv.wait(q).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break Err(Error::Timeout);
                    }
                    q = self.cv.wait_timeout(q, d - now).unwrap_or_else(|p| p.into_inner()).0;
                }
            }
        };
        self.waiters.fetch_sub(1, Ordering::AcqRel);
        res
    }

    fn dequeue(&self) -> Option<Event> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.pop(1)
    }

    fn len(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    fn post_software(&self, value: u64) -> Result<()> {
        if self.len() >= self.capacity {
            return Err(Error::QueueFull);
        }
        self.push(Event::Software(value));
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_and_timeout() {
        let e = SoftEvd::new(4);
        assert!(matches!(e.wait(Some(Duration::from_millis(5)), 1), Err(Error::Timeout)));
        e.post_software(1).unwrap();
        assert!(matches!(e.wait(Some(Duration::from_millis(5)), 2), Err(Error::Timeout)));
        e.post_software(2).unwrap();
        assert!(matches!(e.wait(None, 2), Ok(Event::Software(1))));
        assert!(matches!(e.dequeue(), Some(Event::Software(2))));
        for i in 0..4 {
            e.post_software(i).unwrap();
        }
        assert!(matches!(e.post_software(9), Err(Error::QueueFull)));
    }
}
