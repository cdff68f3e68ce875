//! Event dispatchers: a CQ with its completion channel, plus a queue for
//! connection and software events. Waiters poll the CQ briefly, then arm it
//! (`ibv_req_notify_cq`) and block in `poll(2)` on one epoll fd that holds
//! the channel fd and an eventfd for software events — no spinning when idle.

use crate::completion::Wc;
use crate::ep::{EpCore, dispatch_wc};
use crate::ia::IaCore;
use crate::sys::cq::Cq;
use crate::sys::fd::{Epoll, EventFd, poll_in};
use rmr_api::{Error, Evd, Event, Result};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// Most software events an EVD holds.
const SOFT_CAPACITY: usize = 1 << 20;

struct Inner {
    q: VecDeque<Event>,
    /// CQ entries promised to attached QPs.
    reserved: i64,
}

/// An EVD of the verbs backend.
pub struct VerbsEvd {
    pub(crate) ia: Arc<IaCore>,
    pub(crate) cq: Cq,
    inner: Mutex<Inner>,
    wake: EventFd,
    epoll: Epoll,
    waiters: AtomicUsize,
    me: Weak<VerbsEvd>,
}

/// Work found while polling that must run without the EVD lock.
pub(crate) type Breaks = Vec<(Arc<EpCore>, String)>;

impl VerbsEvd {
    pub(crate) fn create(ia: Arc<IaCore>) -> Result<Arc<VerbsEvd>> {
        let cq = Cq::create(ia.ctx, ia.cfg.cq_depth.min(ia.limits.max_cqe.max(64) as u32) as i32)?;
        let wake = EventFd::new()?;
        let epoll = Epoll::watching(&[cq.fd(), wake.raw()])?;
        Ok(Arc::new_cyclic(|me| VerbsEvd {
            ia,
            cq,
            inner: Mutex::new(Inner { q: VecDeque::new(), reserved: 0 }),
            wake,
            epoll,
            waiters: AtomicUsize::new(0),
            me: me.clone(),
        }))
    }

    /// A strong handle to this EVD.
    pub(crate) fn arc(&self) -> Option<Arc<VerbsEvd>> {
        self.me.upgrade()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Promises `n` more CQ entries to a QP (grows the CQ when needed).
    ///
    /// # Errors
    /// `Error::Backend` when the CQ cannot grow that far.
    pub(crate) fn reserve(&self, n: i64) -> Result<()> {
        let mut g = self.lock();
        let want = g.reserved + n;
        if want > i64::from(self.cq.capacity()) {
            let max = i64::from(self.ia.limits.max_cqe.max(1));
            if want > max {
                return Err(Error::invalid(format!(
                    "EVD would need {want} CQ entries; the device allows {max}"
                )));
            }
            self.cq.resize((want * 2).min(max) as i32)?;
        }
        g.reserved = want;
        Ok(())
    }

    /// Returns entries promised by [`VerbsEvd::reserve`].
    pub(crate) fn release(&self, n: i64) {
        self.lock().reserved -= n;
    }

    /// Appends an event (connection events) and wakes waiters.
    pub(crate) fn push(&self, ev: Event) {
        rmr_api::provider::trace_event(&ev);
        self.lock().q.push_back(ev);
        self.wake.notify();
    }

    /// Moves every completion in the CQ into the queue.
    fn progress_locked(&self, g: &mut Inner, breaks: &mut Breaks) {
        let mut wcs: Vec<Wc> = Vec::new();
        loop {
            wcs.clear();
            let n = self.cq.poll(&mut wcs);
            for wc in &wcs {
                dispatch_wc(self.ia.ctx, wc, &mut g.q, breaks);
            }
            if n < 32 {
                break;
            }
        }
    }

    fn finish(breaks: Breaks) {
        for (ep, why) in breaks {
            ep.fail(why);
        }
    }

    /// Polls the CQ once (an endpoint waiting for its own internal WR).
    pub(crate) fn progress(&self) {
        let mut breaks = Vec::new();
        {
            let mut g = self.lock();
            self.progress_locked(&mut g, &mut breaks);
        }
        Self::finish(breaks);
    }

    fn take(&self, threshold: usize) -> Option<Event> {
        let mut breaks = Vec::new();
        let ev = {
            let mut g = self.lock();
            self.progress_locked(&mut g, &mut breaks);
            let ev = if g.q.len() >= threshold { g.q.pop_front() } else { None };
            if ev.is_some() && !g.q.is_empty() && self.waiters.load(Ordering::Acquire) > 0 {
                // Others are blocked and events remain: pass the wake-up on.
                self.wake.notify();
            }
            ev
        };
        Self::finish(breaks);
        ev
    }

    /// Arms for blocking; false when `threshold` events are already here.
    fn arm_for(&self, threshold: usize) -> bool {
        let mut breaks = Vec::new();
        let ready = {
            let mut g = self.lock();
            self.cq.consume_events();
            self.wake.drain();
            self.cq.arm();
            // Completions that arrived before the arm raise no event: poll once more.
            self.progress_locked(&mut g, &mut breaks);
            g.q.len() >= threshold
        };
        Self::finish(breaks);
        !ready
    }
}

impl Evd for VerbsEvd {
    fn wait(&self, timeout: Option<Duration>, threshold: usize) -> Result<Event> {
        let threshold = threshold.max(1);
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let spin_until = start + self.ia.cfg.spin;
        loop {
            if let Some(ev) = self.take(threshold) {
                return Ok(ev);
            }
            let now = Instant::now();
            if now < spin_until {
                std::hint::spin_loop();
                continue;
            }
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::Timeout);
            }
            if !self.arm_for(threshold) {
                continue;
            }
            self.waiters.fetch_add(1, Ordering::AcqRel);
            poll_in(&[self.epoll.raw()], deadline.map(|d| d.saturating_duration_since(now)));
            self.waiters.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn dequeue(&self) -> Option<Event> {
        self.take(1)
    }

    fn len(&self) -> usize {
        let mut breaks = Vec::new();
        let n = {
            let mut g = self.lock();
            self.progress_locked(&mut g, &mut breaks);
            g.q.len()
        };
        Self::finish(breaks);
        n
    }

    fn post_software(&self, value: u64) -> Result<()> {
        {
            let mut g = self.lock();
            if g.q.len() >= SOFT_CAPACITY {
                return Err(Error::QueueFull);
            }
            g.q.push_back(Event::Software(value));
        }
        self.wake.notify();
        Ok(())
    }

    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(self.epoll.borrow())
    }

    fn arm(&self) -> bool {
        self.arm_for(1)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
