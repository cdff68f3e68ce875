//! Event dispatchers on the tcp backend's progress model: each EVD is a
//! [`SoftEvd`] (the queue, the spin-then-sleep policy, the waits) with one
//! [`CqDriver`] per libfabric CQ it owns (one per domain its endpoints
//! live in, two where a poll-set CQ is full), plus the software events
//! pushed from elsewhere (connection events from the IA's EQ thread,
//! software events, flushes).
//!
//! A thread that waits on the EVD drives the CQs itself: it reads them with
//! non-blocking `fi_cq_read` on its own thread, translates the entries and
//! queues them, so a completion reaches the waiter with no hand-off between
//! threads. When nothing is there it sleeps in `poll(2)` on the CQs' wait
//! objects after `fi_trywait` said it may (libfabric's rule: no completion
//! is missed between the last read and the sleep), beside the queue's own
//! eventfd (pushes from other threads wake it). A CQ's wait object is a
//! poll set (`FI_WAIT_POLLFD`, slept on through a mirror of it, see
//! [`crate::waitset`]) where the IA asks for one (the default on `tcp`),
//! else an fd (`FI_WAIT_FD`). A poll-set CQ carries about 16 endpoints
//! (each progress pass polls every socket in it); an EVD's next endpoints
//! in that domain go to a further CQ with an fd.
//!
//! One thread reads a CQ at a time (`reader`, only ever *tried*, never held
//! across a blocking call), so events keep the CQ's order.
//!
//! Providers whose progress happens only inside CQ calls (libfabric 1.x's
//! `tcp`: manual progress) need someone to read the CQ while nobody waits,
//! or one-sided operations at a passive target never land: each CQ then has
//! a progress thread, which stands back while a waiter drives (it naps on
//! its kick eventfd, longer while waiters keep coming back, and after a
//! long wait sleeps until the last waiter leaves and kicks it) and otherwise
//! reads the CQ and sleeps in `poll` on its wait fd. Where a CQ has no
//! usable wait fd (`fi_trywait` unsupported), waiters and the progress
//! thread read it every [`NAP`] instead.
//!
//! The `sockets` provider: its CQ fd stayed readable after `fi_cq_signal`,
//! which made the old design spin. Nothing here calls `fi_cq_signal` any
//! more (pushes from other threads ring the queue's eventfd), so its fd is
//! used like any other.

use crate::cq::Cqe;
use crate::ffi::{Cq, Domain, EventFd, Fabric};
use sleep::{Sleep, Slumber};

mod sleep;
use crate::ia::IaShared;
use rmr_api::provider::clock::now_ns;
use rmr_api::provider::{Driver, Interest, SoftEvd, WaitOn};
use rmr_api::{Evd, Event, Result};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use std::any::Any;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

/// How long the progress thread stays back after the last waiter left: a
/// thread that waits on the EVD again within it (the next round trip of a
/// ping-pong) finds the CQ to itself, with no second thread woken on its
/// CPU in between.
pub(crate) const LINGER: Duration = Duration::from_millis(1);

/// The longest a progress wait sleeps before it looks at its condition
/// again (see [`OfiEvd`]'s `progress_until`).
const READY_LOOK: Duration = Duration::from_millis(1);

/// Without a usable wait fd: how often a CQ is read while nothing moves.
pub(crate) const NAP: Duration = Duration::from_micros(200);

/// Entries read in one pass before they are translated and queued.
const BATCH: usize = 256;

/// Sleeps in `poll(2)` until one of `fds` is readable or `timeout` passes.
fn poll_in(fds: &[BorrowedFd<'_>], timeout: Duration) {
    let mut p: smallvec::SmallVec<[PollFd<'_>; 4]> =
        fds.iter().map(|f| PollFd::from_borrowed_fd(*f, PollFlags::IN)).collect();
    let ts = Timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
    let _ = poll(&mut p, Some(&ts));
}

/// What the thread reading a CQ works with.
struct Reader {
    /// Entries read and not yet translated.
    buf: Vec<Cqe>,
    /// The endpoints whose completions this CQ carries, by slot, each with
    /// the generation its tokens carry (a slot reused by a later endpoint
    /// gets the next one: a stale completion of the old one is dropped).
    eps: Vec<(u8, Weak<crate::ep::EpShared>)>,
}

/// Endpoints one CQ can carry (the slot is 16 bits of a token's 24-bit index).
const MAX_SLOTS: usize = 1 << 16;

/// Test hooks (not part of the API).
#[doc(hidden)]
pub mod hooks {
    /// Runs in a waiter after `fi_trywait` allowed it to sleep on a CQ's
    /// fd and before it does: a test makes a completion arrive in exactly
    /// that window (the race `fi_trywait` exists for).
    pub static AFTER_TRYWAIT: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>> =
        std::sync::OnceLock::new();
}

/// Runs [`hooks::AFTER_TRYWAIT`], if a test set one; always true.
fn after_trywait() -> bool {
    if let Some(h) = hooks::AFTER_TRYWAIT.get() {
        h();
    }
    true
}

/// One libfabric CQ of an EVD, as a [`Driver`] its waiters run.
pub(crate) struct CqDriver {
    cq: Arc<Cq>,
    fabric: Arc<Fabric>,
    /// What a thread sleeps on when the CQ is idle.
    sleep: Sleep,
    /// Entries read and not yet translated, and the endpoints the CQ's
    /// tokens name; held only while reading (or attaching an endpoint).
    reader: Mutex<Reader>,
    /// The EVD the CQ's completions go to.
    evd: Weak<EvdShared>,
    /// Waiters driving this CQ now (the progress thread stands back).
    active: AtomicUsize,
    /// Wakes the progress thread (a waiter arrived or left, or stop).
    kick: EventFd,
    /// The progress thread is asleep in `poll` on the CQ's fd.
    bg_polling: AtomicBool,
    /// When the last waiter left ([`now_ns`]).
    left_at: std::sync::atomic::AtomicU64,
    /// The progress thread sleeps until the last waiter kicks it.
    deep: AtomicBool,
    pump_started: AtomicBool,
    stop: AtomicBool,
    /// The progress thread's passes so far (each wake-up, and each read in
    /// a row while it drives; the `ofi.progress` note).
    passes: std::sync::atomic::AtomicU64,
}

impl CqDriver {
    /// The CQ (bound to endpoints at set-up).
    pub(crate) fn cq(&self) -> &Arc<Cq> {
        &self.cq
    }

    /// Lets completions of `ep` on this CQ reach it: returns the index its
    /// tokens carry (slot and generation; never 0).
    ///
    /// # Errors
    /// [`rmr_api::Error::QueueFull`] when the CQ already carries
    /// [`MAX_SLOTS`] live endpoints.
    pub(crate) fn attach(&self, ep: Weak<crate::ep::EpShared>) -> Result<u32> {
        let mut r = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let slot = match r.eps.iter().position(|(_, w)| w.strong_count() == 0) {
            Some(i) => i,
            None if r.eps.len() < MAX_SLOTS => {
                r.eps.push((0, Weak::new()));
                r.eps.len() - 1
            }
            None => return Err(rmr_api::Error::QueueFull),
        };
        let g = &mut r.eps[slot];
        g.0 = if g.0 == u8::MAX { 1 } else { g.0 + 1 };
        g.1 = ep;
        Ok((slot as u32) << 8 | u32::from(g.0))
    }

    /// Completions of `ep`'s earlier attachments (an earlier opening) reach
    /// it no more: their slots are freed (a slot's next user has another
    /// generation, so their tokens match nothing).
    pub(crate) fn detach(&self, ep: &Weak<crate::ep::EpShared>) {
        let mut r = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        for e in r.eps.iter_mut().filter(|(_, w)| w.ptr_eq(ep)) {
            e.1 = Weak::new();
        }
    }

    /// Reads what the CQ holds (without blocking) and queues the events;
    /// `None` when another thread is reading it right now.
    fn read_if_free(&self) -> Option<bool> {
        let guard = self.reader.try_lock().ok()?;
        Some(self.read_locked(guard))
    }

    fn read_locked(&self, mut guard: MutexGuard<'_, Reader>) -> bool {
        let Some(evd) = self.evd.upgrade() else { return false };
        let mut moved = false;
        let mut broken = Vec::new();
        let Reader { buf, eps } = &mut *guard;
        loop {
            match self.cq.read(buf) {
                Ok(n) if n > 0 => {
                    moved = true;
                    // A short read emptied the CQ: reading again would only
                    // cost the provider another progress pass (a syscall or
                    // two) on the latency path. What arrived since is read
                    // by the next poll, and `fi_trywait` refuses a sleep
                    // while the CQ holds anything.
                    if n < crate::cq::CQ_READ_MAX || buf.len() >= BATCH {
                        break;
                    }
                }
                Ok(_) => break,
                Err(e) => {
                    evd.push(Event::AsyncError { ep: None, what: e.to_string() });
                    break;
                }
            }
        }
        evd.process(buf, eps, &mut broken);
        drop(guard);
        // Outside the reader lock: a teardown drains the CQs itself.
        for (ep, why) in broken {
            ep.teardown(Some(why));
        }
        moved
    }

    /// Whether a waiter drives this CQ now.
    pub(crate) fn waited_on(&self) -> bool {
        self.active.load(Ordering::SeqCst) > 0
    }

    /// Whether the CQ's progress thread runs (started, not stopped).
    pub(crate) fn pumping(&self) -> bool {
        self.pump_started.load(Ordering::Acquire) && !self.stop.load(Ordering::Acquire)
    }

    /// The `ofi.progress` note: the progress thread's passes so far, or
    /// `off` where the CQ has none (or it stopped).
    pub(crate) fn progress_note(&self) -> String {
        if !self.pumping() {
            return "off".into();
        }
        format!("{} passes", self.passes.load(Ordering::Relaxed))
    }

    /// Whether the last waiter left less than [`LINGER`] ago.
    pub(crate) fn left_lately(&self) -> bool {
        now_ns().saturating_sub(self.left_at.load(Ordering::SeqCst)) < LINGER.as_nanos() as u64
    }

    /// Wakes the progress thread if it sleeps on the CQ (it then uncorks;
    /// see `crate::cork`).
    pub(crate) fn kick_if_sleeping(&self) {
        if self.bg_polling.load(Ordering::SeqCst) {
            self.kick.signal();
        }
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.kick.signal();
    }
}

impl Driver for CqDriver {
    fn drive(&self) -> bool {
        // A write this process corked goes before the wait goes on (see
        // `crate::cork`).
        if crate::cork::any() {
            crate::cork::uncork_all(crate::cork::By::Waiter);
        }
        self.read_if_free() == Some(true)
    }

    fn flush(&self) -> bool {
        let any = crate::cork::any();
        if any {
            crate::cork::uncork_all(crate::cork::By::Waiter);
        }
        any
    }

    fn wait_on(&self) -> WaitOn<'_> {
        match self.slumber() {
            // Nothing left in the CQ and no progress pending: sleep on its fd.
            Slumber::On(fd) => {
                WaitOn { fd: Some((fd, Interest { read: true, write: false })), deadline: None }
            }
            // Entries or progress pending: drive again at once.
            Slumber::Busy => WaitOn { fd: None, deadline: Some(Instant::now()) },
            Slumber::Nap => WaitOn { fd: None, deadline: Some(Instant::now() + NAP) },
        }
    }

    /// While a waiter spins, reading the CQ is the look (`fi_trywait` is
    /// for a waiter about to sleep).
    fn look_on(&self) -> WaitOn<'_> {
        WaitOn { fd: None, deadline: Some(Instant::now()) }
    }

    fn enter(&self) {
        self.active.fetch_add(1, Ordering::SeqCst);
        // A waiter may sleep without a drive first (its drivers were idle):
        // what a post corked goes now (pairs with the corker's look at
        // `active` after publishing, see `crate::cork`).
        if crate::cork::any() {
            crate::cork::uncork_all(crate::cork::By::Waiter);
        }
        if self.bg_polling.load(Ordering::SeqCst) {
            // The progress thread sleeps on the CQ's fd: it would race this
            // waiter for every completion. Send it to stand back.
            self.kick.signal();
        }
    }

    fn leave(&self) {
        self.left_at.store(now_ns(), Ordering::SeqCst);
        if self.active.fetch_sub(1, Ordering::SeqCst) == 1 && self.deep.load(Ordering::SeqCst) {
            // The progress thread sleeps until told: nobody drives now.
            self.kick.signal();
        }
    }
}

/// The state of one EVD, shared by the user's handle, its endpoints and
/// service points.
pub(crate) struct EvdShared {
    pub(crate) fabric: Arc<Fabric>,
    /// The queue, its waits and its drivers.
    pub(crate) q: Arc<SoftEvd>,
    /// One per domain the EVD's endpoints live in, and a second in a domain
    /// whose poll-set CQ is full (looked up only when an endpoint is set up).
    cqs: RwLock<Vec<Arc<CqDriver>>>,
    cq_size: usize,
    /// CQs need a progress thread (manual progress).
    pump: bool,
    /// CQs wait on a poll set (`FI_WAIT_POLLFD`) where the provider has one.
    poll_set: bool,
    /// An application asked for the wait fd: every push rings `efd`, and
    /// every CQ has a progress thread (nobody drives while it polls).
    observed: AtomicBool,
    efd: EventFd,
}

impl EvdShared {
    fn new(ia: &Arc<IaShared>) -> Result<Arc<EvdShared>> {
        let sh = Arc::new(EvdShared {
            fabric: ia.fabric.clone(),
            q: Arc::new(SoftEvd::default()),
            cqs: RwLock::new(Vec::new()),
            cq_size: ia.feat.cq_size,
            pump: ia.feat.pump,
            poll_set: ia.feat.poll_set,
            observed: AtomicBool::new(false),
            efd: EventFd::new()?,
        });
        sh.add_cq(&ia.default_domain, true)?;
        Ok(sh)
    }

    fn drivers(&self) -> Vec<Arc<CqDriver>> {
        self.cqs.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Opens a CQ in `domain` (with an fd wait object where the provider has
    /// one) and makes it one of the EVD's drivers.
    fn add_cq(self: &Arc<Self>, domain: &Arc<Domain>, first: bool) -> Result<Arc<CqDriver>> {
        // A poll set for the domain's first CQ only (see `CqDriver::has_room`).
        let (cq, sleep) = self.open_cq(domain, self.poll_set && first)?;
        let d = Arc::new(CqDriver {
            cq,
            fabric: self.fabric.clone(),
            sleep,
            reader: Mutex::new(Reader { buf: Vec::with_capacity(64), eps: Vec::new() }),
            evd: Arc::downgrade(self),
            active: AtomicUsize::new(0),
            kick: EventFd::new()?,
            bg_polling: AtomicBool::new(false),
            left_at: std::sync::atomic::AtomicU64::new(0),
            deep: AtomicBool::new(false),
            pump_started: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            passes: std::sync::atomic::AtomicU64::new(0),
        });
        let as_driver: Arc<dyn Driver> = d.clone();
        self.q.add_driver(&as_driver);
        self.cqs.write().unwrap_or_else(|e| e.into_inner()).push(d.clone());
        if self.observed.load(Ordering::Acquire) {
            d.start_pump();
        }
        Ok(d)
    }

    /// A connection of this EVD's endpoints is up: its socket joins the
    /// CQs' poll sets at their next progress pass, so whoever sleeps on
    /// them looks again (see [`crate::waitset`]).
    pub(crate) fn wake_sleepers(&self) {
        let mut any = false;
        for d in self.drivers() {
            any |= d.set_changed();
        }
        if any {
            self.q.wake();
        }
    }

    /// Starts the CQs' progress threads, where the provider needs them.
    pub(crate) fn start_pump(&self) {
        if self.pump {
            for d in self.drivers() {
                d.start_pump();
            }
        }
    }

    /// A CQ driver of this EVD in `domain` with room for another endpoint
    /// (see `CqDriver::has_room`), its CQ opened when there is none.
    pub(crate) fn cq_for(self: &Arc<Self>, domain: &Arc<Domain>) -> Result<Arc<CqDriver>> {
        let fits = |d: &Arc<CqDriver>| Arc::ptr_eq(d.cq.domain(), domain) && d.has_room();
        if let Some(d) = self.drivers().into_iter().find(fits) {
            return Ok(d);
        }
        let _one_at_a_time = OPENING.lock().unwrap_or_else(|e| e.into_inner());
        let drivers = self.drivers();
        if let Some(d) = drivers.iter().find(|d| fits(d)) {
            return Ok(d.clone());
        }
        let first = !drivers.iter().any(|d| Arc::ptr_eq(d.cq.domain(), domain));
        let d = self.add_cq(domain, first)?;
        if self.pump {
            d.start_pump();
        }
        Ok(d)
    }

    /// What a waiter sleeps on at this EVD's first CQ in `domain` (the
    /// `ofi.cq_wait` note of an endpoint not yet bound to one); `none`
    /// before that CQ exists.
    pub(crate) fn sleep_note(&self, domain: &Arc<Domain>) -> String {
        let d = self.drivers().into_iter().find(|d| Arc::ptr_eq(d.cq.domain(), domain));
        d.map_or_else(|| "none".into(), |d| d.sleep_note())
    }

    /// Queues an event from outside the CQ path (waiters wake through the
    /// queue; an observed EVD's fd is rung too).
    pub(crate) fn push(&self, ev: Event) {
        self.q.push(ev);
        if self.observed.load(Ordering::Acquire) {
            self.efd.signal();
        }
    }

    /// Translates CQ entries into events, in order, and queues them; the
    /// endpoints whose CQ entries broke them are left in `broken`.
    fn process(
        &self,
        buf: &mut Vec<Cqe>,
        eps: &[(u8, Weak<crate::ep::EpShared>)],
        broken: &mut Vec<crate::dto::Breaks>,
    ) {
        if buf.is_empty() {
            return;
        }
        let mut any = false;
        for c in buf.drain(..) {
            // The token's index: slot << 8 | generation (0: not ours).
            let idx = (c.token >> 40) as usize;
            let ep = match eps.get(idx >> 8) {
                Some((g, w)) if idx != 0 && usize::from(*g) == idx & 0xff => w.upgrade(),
                _ => None,
            };
            let Some(ep) = ep else { continue };
            if let Some((ev, teardown)) = crate::dto::on_cqe(&c, ep) {
                if let Some(ev) = ev {
                    self.q.push(ev);
                    any = true;
                }
                if let Some(t) = teardown {
                    broken.push(t);
                }
            }
        }
        if any && self.observed.load(Ordering::Acquire) {
            self.efd.signal();
        }
    }

    /// Reads every CQ once; with `block` > 0 and nothing there, sleeps on
    /// the CQs' fds (or naps) up to that long and reads again. Returns
    /// whether anything was read.
    pub(crate) fn progress(&self, block: Duration) -> bool {
        let drivers = self.drivers();
        let mut moved = false;
        for d in &drivers {
            moved |= d.drive();
        }
        if moved || block.is_zero() {
            return moved;
        }
        let fds: Vec<BorrowedFd<'_>> = drivers
            .iter()
            .map_while(|d| match d.slumber() {
                Slumber::On(fd) => Some(fd),
                _ => None,
            })
            .collect();
        if fds.len() == drivers.len() {
            poll_in(&fds, block);
        } else {
            std::thread::sleep(block.min(NAP));
        }
        drivers.iter().fold(false, |m, d| d.drive() | m)
    }

    /// Reads every CQ, waiting briefly for a reader that is busy (teardown
    /// collects completions before it flushes).
    pub(crate) fn drain_soon(&self) {
        for d in self.drivers() {
            for _ in 0..20 {
                if d.read_if_free().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    fn stop_pumps(&self) {
        for d in self.drivers() {
            d.stop();
        }
    }
}

/// Serialises opening a CQ (two endpoints of one EVD set up at once must
/// not open two).
static OPENING: Mutex<()> = Mutex::new(());

/// An event dispatcher of the libfabric backend: a [`SoftEvd`] driven
/// through the EVD's libfabric CQs (see the module docs).
pub struct OfiEvd {
    pub(crate) sh: Arc<EvdShared>,
}

impl OfiEvd {
    pub(crate) fn new(ia: &Arc<IaShared>) -> Result<OfiEvd> {
        Ok(OfiEvd { sh: EvdShared::new(ia)? })
    }

    /// The software queue underneath (its spin setting, its drivers).
    pub fn soft_evd(&self) -> &Arc<SoftEvd> {
        &self.sh.q
    }
}

impl Evd for OfiEvd {
    fn wait(&self, timeout: Option<Duration>, threshold: usize) -> Result<Event> {
        self.sh.q.wait(timeout, threshold)
    }

    fn dequeue(&self) -> Option<Event> {
        self.sh.q.dequeue()
    }

    fn len(&self) -> usize {
        self.sh.progress(Duration::ZERO);
        self.sh.q.len()
    }

    fn post_software(&self, value: u64) -> Result<()> {
        self.sh.q.post_software(value)?;
        if self.sh.observed.load(Ordering::Acquire) {
            self.sh.efd.signal();
        }
        Ok(())
    }

    fn progress_until(
        &self,
        timeout: Option<Duration>,
        spin: Option<Duration>,
        ready: &dyn Fn() -> bool,
    ) -> bool {
        // Manual progress (`tcp`): the waiter's own CQ reads place what
        // arrives, and the CQ's fd (the provider's sockets) wakes it.
        if self.sh.pump {
            return self.sh.q.progress_until(timeout, spin, ready);
        }
        // A write that a provider's own progress thread places (`sockets`)
        // raises nothing on the CQ's fd: `ready` is looked at again at
        // least every [`READY_LOOK`] (spinning only in the first slice).
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut spin = spin;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let slice = left.map_or(READY_LOOK, |l| l.min(READY_LOOK));
            if self.sh.q.progress_until(Some(slice), spin, ready) {
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            spin = Some(Duration::ZERO);
        }
    }

    /// An eventfd this EVD rings on every event it queues. Asking for it
    /// starts a progress thread per CQ (nobody drives the CQs while the
    /// application sleeps in its own event loop).
    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        if !self.sh.observed.swap(true, Ordering::AcqRel) {
            for d in self.sh.drivers() {
                d.start_pump();
            }
        }
        Some(self.sh.efd.borrow())
    }

    fn arm(&self) -> bool {
        let sh = &self.sh;
        if !sh.observed.load(Ordering::Acquire) {
            return false;
        }
        // Every push rings the fd after queueing: reset, then re-check.
        sh.efd.reset();
        sh.q.len() == 0
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for OfiEvd {
    fn drop(&mut self) {
        self.sh.stop_pumps();
    }
}
