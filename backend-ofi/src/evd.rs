//! Event dispatchers on the tcp backend's progress model: each EVD is a
//! [`SoftEvd`] (the queue, the spin-then-sleep policy, the waits) with one
//! [`CqDriver`] per libfabric CQ it owns (one per domain its endpoints live
//! in), plus the software events pushed from elsewhere (connection events
//! from the IA's EQ thread, software events, flushes).
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
//! else an fd (`FI_WAIT_FD`).
//!
//! One thread reads a CQ at a time (`reader`, only ever *tried*, never held
//! across a blocking call), so events keep the CQ's order.
//!
//! Providers whose progress happens only inside CQ calls (libfabric 1.x's
//! `tcp`: manual progress) need someone to read the CQ while nobody waits,
//! or one-sided operations at a passive target never land: each CQ then has
//! a progress thread, which stands back while a waiter drives (it sleeps
//! on its kick eventfd, woken when the last waiter leaves) and otherwise
//! reads the CQ and sleeps in `poll` on its wait fd. Where a CQ has no
//! usable wait fd (`fi_trywait` unsupported), waiters and the progress
//! thread read it every [`NAP`] instead.
//!
//! The `sockets` provider: its CQ fd stayed readable after `fi_cq_signal`,
//! which made the old design spin. Nothing here calls `fi_cq_signal` any
//! more (pushes from other threads ring the queue's eventfd), so its fd is
//! used like any other.

use crate::cq::Cqe;
use crate::ffi::{Cq, CqWait, Domain, EventFd, Fabric};
use crate::ia::IaShared;
use crate::waitset::PollSet;
use rmr_api::provider::clock::now_ns;
use rmr_api::provider::{Driver, Interest, SoftEvd, WaitOn};
use rmr_api::{Evd, Event, Result};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use std::any::Any;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

/// Longest single sleep of a progress thread (its stop flag is checked at
/// least this often).
const SLICE: Duration = Duration::from_millis(50);

/// How long the progress thread stays back after the last waiter left: a
/// thread that waits on the EVD again within it (the next round trip of a
/// ping-pong) finds the CQ to itself, with no second thread woken on its
/// CPU in between.
pub(crate) const LINGER: Duration = Duration::from_millis(1);

/// Stand-back naps (of [`LINGER`]) after which the progress thread sleeps
/// until the last waiter kicks it on leaving (a long wait).
const DEEP_AFTER: u32 = 8;

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

/// What a thread waiting on a CQ sleeps on.
enum Sleep {
    /// The CQ's wait fd (`FI_WAIT_FD`).
    Fd(RawFd),
    /// A mirror of the CQ's poll set (`FI_WAIT_POLLFD`, see [`crate::waitset`]).
    Set(PollSet),
    /// Nothing (no wait object, or `fi_trywait` unsupported): naps of [`NAP`].
    Nap,
}

/// Where a thread that found a CQ idle goes next.
enum Slumber<'a> {
    /// Sleep on this descriptor (`fi_trywait` allowed it).
    On(BorrowedFd<'a>),
    /// Entries or progress are pending: read the CQ again at once.
    Busy,
    /// Nap for [`NAP`] (nothing to sleep on).
    Nap,
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

    /// Starts the progress thread (once).
    fn start_pump(self: &Arc<Self>) {
        if self.pump_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("rmr-ofi-progress".into())
            .stack_size(256 << 10)
            .spawn(move || {
                // Its work comes in bursts of microseconds, often on a CPU
                // an application thread computes on.
                rmr_api::provider::short_slices();
                me.pump()
            });
        if spawned.is_err() {
            self.pump_started.store(false, Ordering::Release);
        }
    }

    /// The progress thread: reads the CQ while no waiter does, sleeping in
    /// `poll` on its wait fd (after `fi_trywait`) and on the kick eventfd;
    /// never holds the reader lock while it sleeps.
    fn pump(&self) {
        let mut standing = 0u32;
        while !self.stop.load(Ordering::Acquire) {
            // Each wake-up sends what a lone write left corked.
            if crate::cork::any() {
                crate::cork::uncork_all(crate::cork::By::Progress);
            }
            if self.active.load(Ordering::SeqCst) > 0 {
                // A waiter drives: stand back. Short naps first (the waiter
                // may leave for good); after a while, sleep until the last
                // waiter kicks on leaving (announced first, then re-checked).
                standing = standing.saturating_add(1);
                if standing > DEEP_AFTER {
                    self.deep.store(true, Ordering::SeqCst);
                    if self.active.load(Ordering::SeqCst) > 0 {
                        poll_in(&[self.kick.borrow()], SLICE);
                    }
                } else {
                    poll_in(&[self.kick.borrow()], LINGER);
                }
                self.kick.reset();
                continue;
            }
            standing = 0;
            self.deep.store(false, Ordering::SeqCst);
            let since =
                Duration::from_nanos(now_ns().saturating_sub(self.left_at.load(Ordering::SeqCst)));
            if since < LINGER {
                // The last waiter just left: it (or the next) is likely back
                // at once.
                poll_in(&[self.kick.borrow()], LINGER - since);
                self.kick.reset();
                continue;
            }
            if self.read_if_free() == Some(true) {
                continue;
            }
            // Announced before the look at the CQ (`fi_trywait`, and the
            // poll set mirrored after it): a connection that joins the set
            // later kicks this thread (`EvdShared::wake_sleepers`).
            self.bg_polling.store(true, Ordering::SeqCst);
            match self.slumber() {
                Slumber::Busy => {
                    // Progress is pending inside the provider: read again.
                    self.bg_polling.store(false, Ordering::SeqCst);
                    std::thread::yield_now();
                }
                Slumber::On(cq_fd) => {
                    // A write corked before this thread announced its
                    // sleep goes now (one corked after it kicks it awake).
                    if crate::cork::any() {
                        crate::cork::uncork_all(crate::cork::By::Progress);
                    }
                    if self.active.load(Ordering::SeqCst) == 0 {
                        poll_in(&[cq_fd, self.kick.borrow()], SLICE);
                    }
                    self.bg_polling.store(false, Ordering::SeqCst);
                    self.kick.reset();
                }
                Slumber::Nap => {
                    self.bg_polling.store(false, Ordering::SeqCst);
                    if crate::cork::any() {
                        crate::cork::uncork_all(crate::cork::By::Progress);
                    }
                    poll_in(&[self.kick.borrow()], NAP);
                    self.kick.reset();
                }
            }
        }
    }

    /// After a read found the CQ idle: where to go next. Asks `fi_trywait`
    /// and, on a poll set, brings its mirror up to date.
    fn slumber(&self) -> Slumber<'_> {
        match &self.sleep {
            Sleep::Nap => Slumber::Nap,
            Sleep::Fd(fd) => {
                if self.fabric.trywait(&self.cq) != 0 || !after_trywait() {
                    return Slumber::Busy;
                }
                Slumber::On(crate::ffi::borrow_owned_by(*fd, self))
            }
            Sleep::Set(set) => {
                // No progress pass while the set is copied (see
                // `Cq::poll_set`): every read of the CQ holds the reader.
                let Ok(_reading) = self.reader.try_lock() else { return Slumber::Busy };
                if self.fabric.trywait(&self.cq) != 0 || !after_trywait() {
                    return Slumber::Busy;
                }
                if set.sync(&self.cq) { Slumber::On(set.fd()) } else { Slumber::Nap }
            }
        }
    }

    /// A connection joined the CQ (its socket enters a poll set at the next
    /// progress pass): the progress thread, if it sleeps on the CQ, looks
    /// again (see [`crate::waitset`]). Whether the CQ has a poll set.
    fn set_changed(&self) -> bool {
        let set = matches!(self.sleep, Sleep::Set(_));
        if set {
            self.kick_if_sleeping();
        }
        set
    }

    /// Whether a waiter drives this CQ now.
    pub(crate) fn waited_on(&self) -> bool {
        self.active.load(Ordering::SeqCst) > 0
    }

    /// Whether the CQ's progress thread runs (started, not stopped).
    pub(crate) fn pumping(&self) -> bool {
        self.pump_started.load(Ordering::Acquire) && !self.stop.load(Ordering::Acquire)
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
    /// One per domain the EVD's endpoints live in (looked up only when an
    /// endpoint is set up).
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
        sh.add_cq(&ia.default_domain)?;
        Ok(sh)
    }

    fn drivers(&self) -> Vec<Arc<CqDriver>> {
        self.cqs.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Opens a CQ in `domain` (with an fd wait object where the provider has
    /// one) and makes it one of the EVD's drivers.
    fn add_cq(self: &Arc<Self>, domain: &Arc<Domain>) -> Result<Arc<CqDriver>> {
        let (cq, sleep) = self.open_cq(domain)?;
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
        });
        let as_driver: Arc<dyn Driver> = d.clone();
        self.q.add_driver(&as_driver);
        self.cqs.write().unwrap_or_else(|e| e.into_inner()).push(d.clone());
        if self.observed.load(Ordering::Acquire) {
            d.start_pump();
        }
        Ok(d)
    }

    /// Opens a CQ in `domain` with what its waiters will sleep on: a poll
    /// set where the IA asks for one and the provider has it, else the
    /// provider's wait fd, else nothing (naps).
    fn open_cq(&self, domain: &Arc<Domain>) -> Result<(Arc<Cq>, Sleep)> {
        let usable = |cq: &Cq| self.fabric.trywait(cq) != -(ofi_sys::FI_ENOSYS as i32);
        if self.poll_set {
            if let Ok(cq) = Cq::open(domain, self.cq_size, CqWait::PollSet) {
                if let Ok(set) = PollSet::new() {
                    // Usable when a look after `fi_trywait` finds the CQ's
                    // own signal in the set (libfabric's 1.17 `tcp`; its
                    // successor's passes never process the CQ's set).
                    if usable(&cq) && set.sync(&cq) && set.watched() > 0 {
                        return Ok((cq, Sleep::Set(set)));
                    }
                }
            }
        }
        Ok(match Cq::open(domain, self.cq_size, CqWait::Fd) {
            Ok(cq) => {
                let fd = cq.wait_fd().filter(|_| usable(&cq));
                (cq, fd.map_or(Sleep::Nap, Sleep::Fd))
            }
            Err(_) => (Cq::open(domain, self.cq_size, CqWait::None)?, Sleep::Nap),
        })
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

    /// What a waiter sleeps on at this EVD's CQ in `domain` (the
    /// `ofi.cq_wait` note): `poll set` (with the looks at it that failed,
    /// if any), `fd` or `naps`; `none` before the CQ exists.
    pub(crate) fn sleep_note(&self, domain: &Arc<Domain>) -> String {
        let d = self.drivers().into_iter().find(|d| Arc::ptr_eq(d.cq.domain(), domain));
        match d.as_deref().map(|d| &d.sleep) {
            Some(Sleep::Set(s)) if s.failures() > 0 => {
                format!("poll set ({} looks at it failed: naps)", s.failures())
            }
            Some(Sleep::Set(_)) => "poll set".into(),
            Some(Sleep::Fd(_)) => "fd".into(),
            Some(Sleep::Nap) => "naps".into(),
            None => "none".into(),
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

    /// The CQ driver of this EVD in `domain`, its CQ opened on first use.
    pub(crate) fn cq_for(self: &Arc<Self>, domain: &Arc<Domain>) -> Result<Arc<CqDriver>> {
        if let Some(d) = self.drivers().into_iter().find(|d| Arc::ptr_eq(d.cq.domain(), domain)) {
            return Ok(d);
        }
        let _one_at_a_time = OPENING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = self.drivers().into_iter().find(|d| Arc::ptr_eq(d.cq.domain(), domain)) {
            return Ok(d);
        }
        let d = self.add_cq(domain)?;
        if self.pump {
            d.start_pump();
        }
        Ok(d)
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

/// Serialises opening a CQ for a new domain (two endpoints of one EVD set
/// up at once must not open two).
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
