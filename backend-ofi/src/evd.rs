//! Event dispatchers: a libfabric CQ (one per domain the EVD's endpoints
//! live in) for DTO completions, plus a software queue for everything else
//! (connection events from the IA's EQ thread, software events, flushes).
//!
//! Whoever waits or dequeues drives the CQ: one thread at a time reads it
//! (under `reader`), translates entries into events and queues them, so
//! events keep the CQ's order. A waiter blocks in `fi_cq_sread` in slices;
//! events queued from elsewhere wake it with `fi_cq_signal`.

use crate::ffi::{Cq, Cqe, Domain, EventFd, Fabric};
use crate::ia::IaShared;
use rmr_api::{Error, Evd, Event, Result};
use std::any::Any;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Longest single blocking slice in the CQ (a waiter re-checks its queue
/// and deadline at least this often).
const SLICE: Duration = Duration::from_millis(50);

pub(crate) struct EvdShared {
    pub(crate) fabric: Arc<Fabric>,
    q: Mutex<VecDeque<Event>>,
    cv: Condvar,
    queued: AtomicUsize,
    waiters: AtomicUsize,
    cqs: RwLock<Vec<Arc<Cq>>>,
    reader: Mutex<Vec<Cqe>>,
    wait_fd: Option<RawFd>,
    capacity: usize,
    spin: Duration,
    cq_size: usize,
    fd_ok: bool,
    /// Signalled on every queued event: the wait fd of a pumped EVD.
    efd: EventFd,
    /// Whether a pump thread reads the CQs (providers that progress only
    /// inside CQ calls, like tcp in libfabric 1.x, need one for one-sided
    /// operations to land while the target application is busy elsewhere).
    pump: AtomicBool,
    pump_started: AtomicBool,
    pub(crate) stop: AtomicBool,
}

impl EvdShared {
    fn new(ia: &Arc<IaShared>) -> Result<EvdShared> {
        let size = ia.feat.cq_size;
        let pump = ia.feat.pump;
        // Prefer a CQ with an fd wait object (for Evd::wait_fd); fall back to any.
        let (cq, fd) = match Cq::open(&ia.default_domain, size, true) {
            Ok(cq) => {
                let fd = cq.wait_fd();
                let ok = fd.is_some() && ia.fabric.trywait(&cq) != -(ofi_sys::FI_ENOSYS as i32);
                (cq, if ok { fd } else { None })
            }
            Err(_) => (Cq::open(&ia.default_domain, size, false)?, None),
        };
        let spin = std::env::var("RMR_EVD_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_micros)
            .unwrap_or(Duration::from_micros(50));
        Ok(EvdShared {
            fabric: ia.fabric.clone(),
            q: Mutex::new(VecDeque::with_capacity(256)),
            cv: Condvar::new(),
            queued: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            cqs: RwLock::new(vec![cq]),
            reader: Mutex::new(Vec::with_capacity(64)),
            // sockets: its CQ fd stays readable after fi_cq_signal, whatever
            // fi_trywait says; such EVDs switch to a pump and the eventfd.
            wait_fd: if pump || ia.feat.prov == "sockets" { None } else { fd },
            capacity: 1 << 20,
            spin,
            cq_size: size,
            fd_ok: fd.is_some() && !pump,
            efd: EventFd::new()?,
            pump: AtomicBool::new(pump),
            pump_started: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        })
    }

    /// Starts the pump thread (once), when the EVD has one.
    pub(crate) fn start_pump(self: &Arc<Self>) {
        if !self.pump.load(Ordering::Acquire) || self.pump_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("rmr-ofi-pump".into())
            .stack_size(256 << 10)
            .spawn(move || {
                while !me.stop.load(Ordering::Acquire) {
                    let single = me.cqs.read().unwrap_or_else(|e| e.into_inner()).len() == 1;
                    if !me.progress_blocking(if single { SLICE } else { Duration::ZERO }) || !single
                    {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            });
        if spawned.is_err() {
            self.pump_started.store(false, Ordering::Release);
        }
    }

    /// The CQ of this EVD in `domain`, opened on first use.
    pub(crate) fn cq_for(&self, domain: &Arc<Domain>) -> Result<Arc<Cq>> {
        {
            let cqs = self.cqs.read().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = cqs.iter().find(|c| Arc::ptr_eq(c.domain(), domain)) {
                return Ok(c.clone());
            }
        }
        let mut cqs = self.cqs.write().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cqs.iter().find(|c| Arc::ptr_eq(c.domain(), domain)) {
            return Ok(c.clone());
        }
        let c = Cq::open(domain, self.cq_size, false)?;
        cqs.push(c.clone());
        Ok(c)
    }

    fn push_locked(&self, q: &mut VecDeque<Event>, ev: Event) {
        q.push_back(ev);
        self.queued.store(q.len(), Ordering::Release);
    }

    /// Queues an event from outside the CQ path and wakes waiters (also one
    /// blocked in fi_cq_sread or in poll on the wait fd).
    pub(crate) fn push(&self, ev: Event) {
        {
            let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
            self.push_locked(&mut q, ev);
        }
        self.cv.notify_all();
        if self.pump.load(Ordering::Acquire) {
            self.efd.signal();
        }
        if self.waiters.load(Ordering::Acquire) > 0 || self.fd_ok {
            for c in self.cqs.read().unwrap_or_else(|e| e.into_inner()).iter() {
                c.signal();
            }
        }
    }

    /// Translates CQ entries into events, in order.
    fn process(&self, buf: &mut Vec<Cqe>) {
        if buf.is_empty() {
            return;
        }
        let mut evs = Vec::with_capacity(buf.len());
        let mut broken = Vec::new();
        for c in buf.drain(..) {
            if let Some((ev, teardown)) = crate::dto::on_cqe(&c) {
                if let Some(ev) = ev {
                    evs.push(ev);
                }
                if let Some(t) = teardown {
                    broken.push(t);
                }
            }
        }
        if !evs.is_empty() {
            let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
            for ev in evs {
                self.push_locked(&mut q, ev);
            }
            drop(q);
            self.cv.notify_all();
            if self.pump.load(Ordering::Acquire) {
                self.efd.signal();
            }
        }
        for (ep, why) in broken {
            ep.teardown(Some(why));
        }
    }

    /// Drives the CQs once. `block` > 0 lets the reader block in
    /// fi_cq_sread that long when there is a single CQ. Returns false when
    /// another thread is reading them right now.
    pub(crate) fn progress(&self, block: Duration) -> bool {
        let Ok(buf) = self.reader.try_lock() else {
            return false;
        };
        self.read_cqs(buf, block);
        true
    }

    /// Like `progress`, but waits for the reader lock (the pump).
    fn progress_blocking(&self, block: Duration) -> bool {
        let buf = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        self.read_cqs(buf, block);
        true
    }

    fn read_cqs(&self, mut buf: std::sync::MutexGuard<'_, Vec<Cqe>>, block: Duration) {
        let cqs: Vec<Arc<Cq>> = self.cqs.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut got = false;
        for (i, cq) in cqs.iter().enumerate() {
            loop {
                let t = if i == 0 && !got && cqs.len() == 1 && !block.is_zero() {
                    block.as_millis().clamp(1, i32::MAX as u128) as i32
                } else {
                    0
                };
                match cq.read(&mut buf, t) {
                    Ok(true) => {
                        got = true;
                        if buf.len() >= 256 {
                            self.process(&mut buf);
                        }
                    }
                    Ok(false) => break,
                    Err(e) => {
                        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
                        self.push_locked(
                            &mut q,
                            Event::AsyncError { ep: None, what: e.to_string() },
                        );
                        break;
                    }
                }
            }
        }
        self.process(&mut buf);
    }

    /// Like `progress`, waiting briefly for the reader lock (teardown uses it
    /// to collect completions before flushing).
    pub(crate) fn drain_soon(&self) {
        for _ in 0..20 {
            if self.progress(Duration::ZERO) {
                return;
            }
            for c in self.cqs.read().unwrap_or_else(|e| e.into_inner()).iter() {
                c.signal();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn pop(&self, threshold: usize) -> Option<Event> {
        if self.queued.load(Ordering::Acquire) < threshold {
            return None;
        }
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() < threshold {
            return None;
        }
        let e = q.pop_front();
        self.queued.store(q.len(), Ordering::Release);
        e
    }

    fn wait(&self, timeout: Option<Duration>, threshold: usize) -> Result<Event> {
        let threshold = threshold.max(1);
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        // Spin phase: poll the CQ while the answer is microseconds away.
        while start.elapsed() < self.spin {
            if let Some(e) = self.pop(threshold) {
                return Ok(e);
            }
            self.progress(Duration::ZERO);
        }
        let single = self.cqs.read().unwrap_or_else(|e| e.into_inner()).len() == 1;
        loop {
            if let Some(e) = self.pop(threshold) {
                return Ok(e);
            }
            let left = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(Error::Timeout);
                    }
                    d - now
                }
                None => SLICE,
            };
            let slice = left.min(SLICE);
            self.waiters.fetch_add(1, Ordering::AcqRel);
            let mine = !self.pump.load(Ordering::Acquire)
                && self.progress(if single { slice } else { Duration::ZERO });
            if !mine || !single {
                // Someone else reads the CQ (or there are several): sleep on the queue.
                let q = self.q.lock().unwrap_or_else(|e| e.into_inner());
                if q.len() < threshold {
                    let nap = if mine { slice.min(Duration::from_millis(1)) } else { slice };
                    drop(self.cv.wait_timeout(q, nap).unwrap_or_else(|e| e.into_inner()));
                }
            }
            self.waiters.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// An event dispatcher of the libfabric backend.
pub struct OfiEvd {
    pub(crate) sh: Arc<EvdShared>,
}

impl OfiEvd {
    pub(crate) fn new(ia: &Arc<IaShared>) -> Result<OfiEvd> {
        Ok(OfiEvd { sh: Arc::new(EvdShared::new(ia)?) })
    }
}

impl Evd for OfiEvd {
    fn wait(&self, timeout: Option<Duration>, threshold: usize) -> Result<Event> {
        self.sh.wait(timeout, threshold)
    }

    fn dequeue(&self) -> Option<Event> {
        if let Some(e) = self.sh.pop(1) {
            return Some(e);
        }
        self.sh.progress(Duration::ZERO);
        self.sh.pop(1)
    }

    fn len(&self) -> usize {
        self.sh.progress(Duration::ZERO);
        self.sh.queued.load(Ordering::Acquire)
    }

    fn post_software(&self, value: u64) -> Result<()> {
        if self.sh.queued.load(Ordering::Acquire) >= self.sh.capacity {
            return Err(Error::QueueFull);
        }
        self.sh.push(Event::Software(value));
        Ok(())
    }

    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        if let Some(fd) = self.sh.wait_fd {
            return Some(crate::ffi::borrow_owned_by(fd, &*self.sh));
        }
        // No usable CQ fd: a pump thread reads the CQ and rings our eventfd.
        self.sh.pump.store(true, Ordering::Release);
        self.sh.start_pump();
        Some(self.sh.efd.borrow())
    }

    fn arm(&self) -> bool {
        let sh = &self.sh;
        if sh.pump.load(Ordering::Acquire) {
            // The pump signals the fd after queueing: reset, then re-check.
            sh.efd.reset();
            return sh.queued.load(Ordering::Acquire) == 0;
        }
        if sh.wait_fd.is_none() || sh.queued.load(Ordering::Acquire) > 0 {
            return false;
        }
        let cqs = sh.cqs.read().unwrap_or_else(|e| e.into_inner());
        if cqs.len() != 1 {
            return false; // a CQ in another domain is not covered by the fd
        }
        // fi_trywait resets the fd; an event queued after this check signals it again.
        sh.fabric.trywait(&cqs[0]) == 0 && sh.queued.load(Ordering::Acquire) == 0
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for OfiEvd {
    fn drop(&mut self) {
        self.sh.stop.store(true, Ordering::Release);
        for c in self.sh.cqs.read().unwrap_or_else(|e| e.into_inner()).iter() {
            c.signal();
        }
    }
}
