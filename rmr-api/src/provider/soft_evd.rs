//! [`SoftEvd`], the software event queue the TCP backend, the multirail
//! layer and the bridge build their EVDs on, and the progress machinery
//! around it: [`Driver`]s that a waiting thread runs itself, doorbells, and
//! the spin-then-sleep policy.
//!
//! ## Progress by the waiter
//! A backend whose progress is plain socket IO (the TCP backend) registers
//! a [`Driver`] per endpoint with the endpoint's EVDs. A thread waiting on
//! such an EVD then reads and writes the sockets itself — it blocks in
//! `poll(2)` on them and handles what arrives in its own context — so a
//! completion reaches the waiter with no hand-off between threads, as a
//! raw TCP ping-pong does. The backend's own progress (the TCP backend's
//! per-IA helper) stands back while a waiter drives, and takes over when
//! nobody does, so RDMA into a passive target still lands.
//!
//! ## Many drivers
//! An EVD that many endpoints report to (one completion queue for all of
//! a process's peers) keeps their sockets in an `epoll` set once it has 32
//! or more (its own drivers and those of EVDs it drives through): a
//! waiter then drives only the endpoints with input, so a wait costs what
//! is ready, not what is connected (see `soft_evd/many.rs`).

use super::cpus::cpus_spare;
use super::driver::Driver;
use crate::error::{Error, Result};
use crate::evd::Evd;
use crate::event::Event;
use crate::settings::{Given, Knob, Setting, micros};
use rustix::event::{EventfdFlags, eventfd};
use smallvec::SmallVec;
use std::any::Any;
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

/// How long a waiter spins before it sleeps, at least: short enough that an
/// idle process costs nothing, long enough that a ping-pong between two
/// spinning peers never sleeps.
const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// The longest a waiter's spin grows to by default (`RMR_EVD_SPIN_MAX_US`;
/// see [`SoftEvd::spin_time`]). Where
/// waking a sleeping thread costs ~100 µs (a virtual CPU halted by its
/// host), a ping-pong whose two ends both sleep takes two wake-ups per round
/// trip: each end's wait then outlasts a fixed 50 µs spin, so both keep
/// sleeping, ten times slower than when both spin. A spin that grows to
/// twice the recent waits breaks that; waits longer than this (a peer
/// computing, an idle server) teach it nothing and it shrinks back.
const MAX_SPIN: Duration = Duration::from_millis(1);

/// A software EVD: a queue with a condition variable, and optionally
/// [`Driver`]s that its waiters drive (see the module docs). Waiters spin
/// briefly, then block (an idle process does not burn a core).
pub struct SoftEvd {
    q: Mutex<VecDeque<Event>>,
    cv: Condvar,
    waiters: AtomicUsize,
    queued: AtomicUsize,
    capacity: usize,
    spin: Duration,
    pokes: AtomicU64,
    has_observers: AtomicBool,
    observers: RwLock<Vec<Weak<SoftEvd>>>,
    /// Drivers of endpoints that report here, and EVDs whose drivers are driven too.
    drivers: RwLock<Vec<Weak<dyn Driver>>>,
    through: RwLock<Vec<Weak<dyn Evd>>>,
    has_drivers: AtomicBool,
    /// The flattened, deduplicated driver list a waiter last built, with
    /// the [`DRIVERS_GEN`] it was built at (rebuilt only when some EVD's
    /// drivers changed).
    cached: Mutex<(u64, WeakDrivers)>,
    /// Waiters blocked in `poll(2)`; pushes and pokes wake them through `efd`.
    poll_waiters: AtomicUsize,
    efd: OnceLock<Option<OwnedFd>>,
    /// Helpers in [`SoftEvd::wait_poke_flushing`], woken by pokes only.
    poke_waiters: AtomicUsize,
    poke_efd: OnceLock<Option<OwnedFd>>,
    /// Takes events pushed while the queue is empty (see [`SoftEvd::set_sink`]).
    sink: OnceLock<Box<Sink>>,
    /// Recent waits, in ns (a moving average; waits beyond `max_spin`
    /// count as zero): what [`SoftEvd::spin_time`] grows to cover.
    recent_wait: AtomicU64,
    /// The longest the spin grows to ([`MAX_SPIN`], `RMR_EVD_SPIN_MAX_US`).
    max_spin: Duration,
    /// Drivers (by index, the first 64) whose last drive found nothing:
    /// a new wait skips them until `poll` reports them (a hint only; a
    /// wrong bit costs one `poll`, never an event).
    idle: AtomicU64,
    /// The `epoll` set of an EVD with many drivers ([`many::MANY`] or
    /// more, each with a stable descriptor): its waiters drive only the
    /// drivers with input. `many_on` says it is in use; `many_off` that
    /// it cannot be (a driver without a stable descriptor, or drivers of
    /// other EVDs driven through this one).
    many: OnceLock<Option<many::Many>>,
    many_on: AtomicBool,
    many_off: AtomicBool,
    /// Drivers this EVD's waiters drive (own and through; what decides
    /// the set), and the EVDs driving through this one (told when its
    /// drivers change).
    n_drivers: AtomicUsize,
    through_by: RwLock<Vec<Weak<SoftEvd>>>,
    /// The descriptor [`Evd::wait_fd`] gives event loops, and whether one
    /// armed it (see [`Evd::arm`]).
    ext_efd: OnceLock<Option<OwnedFd>>,
    ext_armed: AtomicBool,
    /// Run when an event is queued (see [`SoftEvd::on_publish`]).
    hooks: RwLock<Vec<Box<dyn Fn() + Send + Sync>>>,
    /// Per driver (the first 8, a byte each): the waits that got something
    /// through a driver since it last moved, saturating. Those at
    /// [`QUIET_WAITS`] or more are quiet: a spinning waiter's `poll` looks
    /// at them only once in [`QUIET_LOOK`] (a hint only, as `idle`).
    ages: AtomicU64,
}

impl Default for SoftEvd {
    fn default() -> Self {
        Self::new(1 << 20)
    }
}

type Drivers = SmallVec<[Arc<dyn Driver>; 4]>;

/// What [`SoftEvd::set_sink`] takes: an event and the events queued ahead
/// of it; `None` when it took it.
pub type Sink = dyn Fn(Event, &VecDeque<Event>) -> Option<Event> + Send + Sync;
type WeakDrivers = SmallVec<[Weak<dyn Driver>; 4]>;

/// Bumped whenever any EVD's drivers change (a driver added or removed, an
/// EVD driven through): waiters rebuild their cached driver lists.
static DRIVERS_GEN: AtomicU64 = AtomicU64::new(1);

/// Event waiters blocked in `poll(2)` on any [`SoftEvd`] of the process:
/// while there are none, [`SoftEvd::wake`] has no observer to wake and
/// skips looking them up (a frame held on a multirail rail, posted by a
/// spinning waiter, costs no lock).
static POLLERS: AtomicUsize = AtomicUsize::new(0);

/// A spinning waiter with several drivers puts the quiet ones (see
/// `SoftEvd::ages`) in one zero-timeout `poll` of this many: `poll(2)`
/// pays for every descriptor (here 470 ns for one socket, 525 for two),
/// and that look is on the path of every message. A multirail endpoint's
/// idle rail costs a small message's wait nothing, and a rail that wakes
/// up is seen within a few microseconds.
const QUIET_LOOK: u32 = 8;

/// Waits answered through a driver that another driver must sit out before
/// it counts as quiet: a peer that speaks every few waits (a barrier's
/// rounds, a runtime's regular partners) never does; a multirail
/// endpoint's idle rail does.
const QUIET_WAITS: u64 = 32;

/// The knobs of every software EVD of the process (environment only).
pub const SPIN_KNOBS: [Knob; 2] = [
    Knob {
        option: "",
        var: "RMR_EVD_SPIN_US",
        doc: "how long an EVD waiter spins before it sleeps (us)",
    },
    Knob { option: "", var: "RMR_EVD_SPIN_MAX_US", doc: "the longest that spin grows to (us)" },
];

/// The spin and its cap, from the environment.
fn spin_config() -> Result<(Duration, Duration)> {
    let g = Given::env();
    Ok((
        g.get(&SPIN_KNOBS[0], micros)?.unwrap_or(DEFAULT_SPIN),
        g.get(&SPIN_KNOBS[1], micros)?.unwrap_or(MAX_SPIN),
    ))
}

/// The software EVDs' settings in effect, checked: a backend's `open`
/// calls this, so a bad `RMR_EVD_SPIN_US` fails there.
///
/// # Errors
/// [`crate::Error::BadSetting`] naming the variable.
pub fn spin_settings() -> Result<Vec<Setting>> {
    let (spin, max) = spin_config()?;
    Ok(Given::env()
        .listed(&SPIN_KNOBS, [spin.as_micros().to_string(), max.as_micros().to_string()]))
}

impl SoftEvd {
    /// An EVD holding at most `capacity` software events.
    pub fn new(capacity: usize) -> Self {
        // Checked at the backend's open ([`spin_settings`]).
        let (spin, max_spin) = spin_config().unwrap_or((DEFAULT_SPIN, MAX_SPIN));
        SoftEvd {
            q: Mutex::new(VecDeque::with_capacity(256)),
            cv: Condvar::new(),
            waiters: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            idle: AtomicU64::new(0),
            ages: AtomicU64::new(0),
            recent_wait: AtomicU64::new(0),
            max_spin,
            capacity,
            spin,
            pokes: AtomicU64::new(0),
            has_observers: AtomicBool::new(false),
            observers: RwLock::new(Vec::new()),
            drivers: RwLock::new(Vec::new()),
            through: RwLock::new(Vec::new()),
            has_drivers: AtomicBool::new(false),
            cached: Mutex::new((0, SmallVec::new())),
            poll_waiters: AtomicUsize::new(0),
            efd: OnceLock::new(),
            poke_waiters: AtomicUsize::new(0),
            poke_efd: OnceLock::new(),
            sink: OnceLock::new(),
            many: OnceLock::new(),
            many_on: AtomicBool::new(false),
            many_off: AtomicBool::new(false),
            n_drivers: AtomicUsize::new(0),
            through_by: RwLock::new(Vec::new()),
            hooks: RwLock::new(Vec::new()),
            ext_efd: OnceLock::new(),
            ext_armed: AtomicBool::new(false),
        }
    }

    /// How long a waiter spins (driving) before it blocks: `RMR_EVD_SPIN_US`
    /// (50 µs; 0 never spins), grown to twice the recent waits this EVD saw
    /// (see [`SoftEvd::note_wait`]), at most `RMR_EVD_SPIN_MAX_US` (1 ms; at
    /// most the base: no growth), while no thread waits for a CPU. A
    /// ping-pong keeps spinning however slowly its peer wakes; a process
    /// whose waits are long, or whose node is oversubscribed, spins no more
    /// than the base. Spinning still stops at once when the machine's CPUs
    /// are all taken (see [`cpus_idle`](crate::provider::cpus_idle)).
    pub fn spin_time(&self) -> Duration {
        self.spin_with(cpus_spare())
    }

    /// [`SoftEvd::spin_time`] when the machine has (`spare`) or has not a
    /// CPU for every runnable thread: only then does the spin grow.
    fn spin_with(&self, spare: bool) -> Duration {
        if self.spin.is_zero() || !spare {
            return self.spin;
        }
        let grown = Duration::from_nanos(self.recent_wait.load(Ordering::Relaxed) * 2);
        self.spin.max(grown.min(self.max_spin))
    }

    /// Records how long a wait on this EVD took, to size later spins (see
    /// [`SoftEvd::spin_time`]). Waits longer than the longest spin count as
    /// zero: spinning would not have caught them. A layer that waits on
    /// this EVD through its own loop (a multirail EVD) reports its waits
    /// here; the EVD's own waits report themselves.
    pub fn note_wait(&self, waited: Duration) {
        let sample = if waited > self.max_spin { 0 } else { waited.as_nanos() as u64 };
        let old = self.recent_wait.load(Ordering::Relaxed);
        // Weight 1/4 to the newest: a few slow round trips are enough to grow
        // the spin past them; one long wait alone does not undo it.
        self.recent_wait.store((3 * old + sample) / 4, Ordering::Relaxed);
    }

    /// Registers a driver: waiters on this EVD will drive it. Held weakly;
    /// remove it with [`SoftEvd::remove_driver`] when its endpoint ends.
    pub fn add_driver(&self, d: &Arc<dyn Driver>) {
        let mut v = self.drivers.write().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0);
        if !v.iter().any(|w| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(d))) {
            v.push(Arc::downgrade(d));
        }
        self.has_drivers.store(true, Ordering::Release);
        DRIVERS_GEN.fetch_add(1, Ordering::SeqCst);
        drop(v);
        self.many_track(std::slice::from_ref(d));
        for e in self.through_by() {
            e.many_track(std::slice::from_ref(d));
        }
        // A waiter already blocked must learn about the new descriptor, and
        // so must those of EVDs that drive through this one.
        self.wake_pollers();
        for e in self.through_by() {
            e.wake_pollers();
        }
    }

    /// Unregisters a driver (by identity).
    pub fn remove_driver(&self, d: &dyn Driver) {
        let mut v = self.drivers.write().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0 && !std::ptr::addr_eq(w.as_ptr(), d as *const _));
        DRIVERS_GEN.fetch_add(1, Ordering::SeqCst);
        drop(v);
        self.many_untrack(d);
        for e in self.through_by() {
            e.many_untrack(d);
        }
    }

    /// `new` became drivers of this EVD (its own, or of an EVD it drives
    /// through): with [`many::MANY`] drivers or more, its waiters use the
    /// `epoll` set, made now (with every driver) or given `new`. Called
    /// with no lock of this EVD held.
    fn many_track(&self, new: &[Arc<dyn Driver>]) {
        let n = self.n_drivers.fetch_add(new.len(), Ordering::AcqRel) + new.len();
        if self.many_off.load(Ordering::Acquire) {
            return;
        }
        let ok = match self.many.get() {
            Some(Some(m)) => new.iter().all(|d| m.add(d)),
            Some(None) => false,
            None if n >= many::MANY => {
                let Some(efd) = self.efd() else { return };
                let m = self.many.get_or_init(|| many::Many::new(efd));
                match m {
                    Some(m) => {
                        let ok = self.build_drivers().iter().all(|d| m.add(d));
                        self.many_on.store(ok, Ordering::Release);
                        ok
                    }
                    None => false,
                }
            }
            None => true,
        };
        if !ok {
            self.many_on.store(false, Ordering::Release);
            self.many_off.store(true, Ordering::Release);
        }
    }

    /// `d` is no longer a driver of this EVD (see [`SoftEvd::many_track`]).
    fn many_untrack(&self, d: &dyn Driver) {
        let _ =
            self.n_drivers.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if let Some(Some(m)) = self.many.get() {
            m.remove(d);
        }
    }

    /// The EVDs driving through this one (see [`SoftEvd::drive_through`]).
    fn through_by(&self) -> Vec<Arc<SoftEvd>> {
        let v = self.through_by.read().unwrap_or_else(|p| p.into_inner());
        v.iter().filter_map(Weak::upgrade).collect()
    }

    /// Makes waiters on this EVD also drive every driver of `other` (one
    /// level deep; nothing for an EVD that is not a [`SoftEvd`]): a layer
    /// that harvests several EVDs (multirail) blocks on their endpoints'
    /// sockets directly instead of waiting for a hand-off.
    pub fn drive_through(self: &Arc<Self>, other: &Arc<dyn Evd>) {
        let Some(o) = other.as_any().downcast_ref::<SoftEvd>() else {
            return;
        };
        let mut v = self.through.write().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0);
        if v.iter().any(|w| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(other))) {
            return;
        }
        v.push(Arc::downgrade(other));
        self.has_drivers.store(true, Ordering::Release);
        DRIVERS_GEN.fetch_add(1, Ordering::SeqCst);
        drop(v);
        {
            let mut b = o.through_by.write().unwrap_or_else(|p| p.into_inner());
            b.retain(|w| w.strong_count() > 0);
            b.push(Arc::downgrade(self));
        }
        let mut theirs = Drivers::new();
        o.own_drivers(&mut theirs);
        self.many_track(&theirs);
    }

    /// The drivers registered on this EVD itself (not those of EVDs it
    /// drives through), as strong handles: for a layer that owns the
    /// endpoints behind this EVD (multirail's rails) and flushes them
    /// directly, without looking the list up on every wait.
    pub fn own_driver_handles(&self) -> Vec<Arc<dyn Driver>> {
        let mut out = Drivers::new();
        self.own_drivers(&mut out);
        out.into_vec()
    }

    fn own_drivers(&self, out: &mut Drivers) {
        let v = self.drivers.read().unwrap_or_else(|p| p.into_inner());
        out.extend(v.iter().filter_map(Weak::upgrade));
    }

    /// The drivers a waiter here drives: this EVD's own and those of the
    /// EVDs it drives through, each once. Built once and kept (weakly) until
    /// some EVD's drivers change: a wait does not walk the lists each time.
    fn drivers(&self) -> Drivers {
        if !self.has_drivers.load(Ordering::Acquire) {
            return Drivers::new();
        }
        let g = DRIVERS_GEN.load(Ordering::Acquire);
        let mut c = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if c.0 == g {
            return crate::provider::small_vec(c.1.iter().filter_map(Weak::upgrade));
        }
        let out = self.build_drivers();
        *c = (g, out.iter().map(Arc::downgrade).collect());
        out
    }

    fn build_drivers(&self) -> Drivers {
        let mut out = Drivers::new();
        self.own_drivers(&mut out);
        let t = self.through.read().unwrap_or_else(|p| p.into_inner());
        for e in t.iter().filter_map(Weak::upgrade) {
            let Some(e) = e.as_any().downcast_ref::<SoftEvd>() else { continue };
            let before = out.len();
            e.own_drivers(&mut out);
            // The same endpoint may report to several of these EVDs.
            let mut i = before;
            while i < out.len() {
                if out[..i].iter().any(|d| Arc::ptr_eq(d, &out[i])) {
                    out.remove(i);
                } else {
                    i += 1;
                }
            }
        }
        out
    }

    fn fd_of(cell: &OnceLock<Option<OwnedFd>>) -> Option<BorrowedFd<'_>> {
        cell.get_or_init(|| eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC).ok())
            .as_ref()
            .map(|f| f.as_fd())
    }

    fn efd(&self) -> Option<BorrowedFd<'_>> {
        Self::fd_of(&self.efd)
    }

    fn wake_pollers(&self) {
        if self.poll_waiters.load(Ordering::SeqCst) > 0 {
            if let Some(fd) = self.efd() {
                let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
            }
        }
    }

    /// Whether any event waiter of the process is blocked in `poll(2)` on
    /// a [`SoftEvd`] now: while none is, [`SoftEvd::wake`] has nobody to
    /// wake, and a caller may skip finding the EVDs to wake. (A waiter
    /// announces itself before it reads its drivers' interest, so a caller
    /// that changed that interest before asking either sees the waiter or
    /// the waiter sees the change.)
    pub fn any_poller() -> bool {
        POLLERS.load(Ordering::SeqCst) > 0
    }

    /// Wakes waiters blocked in `poll(2)` without an event, so that they
    /// look at their drivers again (a driver's interest changed).
    pub fn wake(&self) {
        self.wake_pollers();
        // Waiters of EVDs that drive through this one (see `drive_through`,
        // paired with `observe`) poll these drivers too.
        // (A poller announces itself in POLLERS before it reads its drivers'
        // interest, and the caller changed that interest before this load:
        // either it is seen here or it sees the change.)
        if self.has_observers.load(Ordering::Acquire) && POLLERS.load(Ordering::SeqCst) > 0 {
            let o = self.observers.read().unwrap_or_else(|p| p.into_inner());
            for e in o.iter().filter_map(Weak::upgrade) {
                e.wake_pollers();
            }
        }
    }

    /// Makes `by` be poked (see [`SoftEvd::wait_or_poke`]) whenever an event
    /// is pushed here. A layer that owns several EVDs (multirail) lets one
    /// waiter sleep on its own EVD yet wake the moment any of them fills.
    pub fn observe(&self, by: &Arc<SoftEvd>) {
        let mut o = self.observers.write().unwrap_or_else(|p| p.into_inner());
        o.retain(|w| w.strong_count() > 0);
        if !o.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(by))) {
            o.push(Arc::downgrade(by));
        }
        self.has_observers.store(true, Ordering::Release);
    }
}

/// Every error completion and every broken connection as a `tracing`
/// event (target `rmr`): what a user looks at when something goes wrong.
/// A successful completion costs one comparison. [`SoftEvd::push`] calls
/// it; a backend with an EVD of its own calls it for each event it queues.
pub fn trace_event(ev: &Event) {
    match ev {
        Event::Dto(c) if !c.status.is_ok() => tracing::debug!(
            target: "rmr",
            ep = c.ep.0,
            cookie = c.cookie.0,
            op = ?c.op,
            status = ?c.status,
            "error completion"
        ),
        Event::Broken { ep, reason } => {
            tracing::warn!(target: "rmr", ep = ep.0, reason = %reason, "connection broken");
        }
        Event::RailDown { ep, rail, reason } => {
            tracing::warn!(target: "rmr", ep = ep.0, rail, reason = %reason, "rail down");
        }
        Event::RailUp { ep, rail } => {
            tracing::info!(target: "rmr", ep = ep.0, rail, "rail up");
        }
        Event::AsyncError { ep, what } => {
            tracing::warn!(target: "rmr", ep = ?ep.map(|e| e.0), what = %what, "asynchronous error");
        }
        _ => {}
    }
}

impl SoftEvd {
    fn notify_observers(&self) {
        if !self.has_observers.load(Ordering::Acquire) {
            return;
        }
        for h in self.hooks.read().unwrap_or_else(|p| p.into_inner()).iter() {
            h();
        }
        let o = self.observers.read().unwrap_or_else(|p| p.into_inner());
        for e in o.iter().filter_map(Weak::upgrade) {
            e.poke();
        }
    }

    /// Runs `hook` whenever an event is queued here (after it is queued,
    /// before the EVDs that [`SoftEvd::observe`] this one are poked): a
    /// layer over many such EVDs (multirail's EVD over its endpoints' rail
    /// EVDs) notes which of them has events, so that a waiter looks at
    /// those only. The hook must not block (try-locks or short locks only)
    /// and must not push here.
    pub fn on_publish(&self, hook: Box<dyn Fn() + Send + Sync>) {
        self.hooks.write().unwrap_or_else(|p| p.into_inner()).push(hook);
        self.has_observers.store(true, Ordering::Release);
    }

    /// Lets `sink` take the events pushed here: it is called with the event
    /// and the events queued ahead of it, under this EVD's queue lock, and
    /// returns `None` when it took it (or `Some(event)` to queue it as
    /// usual, behind those). Taking an event overtakes the ones queued: the
    /// sink takes only events whose order against them does not matter to
    /// it. For a layer whose own queue is fed from this one (multirail): an
    /// event it can translate at once goes straight to its queue, with no
    /// hand-off through this one. The sink must not block (try-locks only)
    /// and must not push here. One sink per EVD; returns false if one was
    /// set.
    pub fn set_sink(&self, sink: Box<Sink>) -> bool {
        self.sink.set(sink).is_ok()
    }

    /// Appends an event (backends call this; events are never dropped:
    /// the capacity only bounds software events).
    pub fn push(&self, ev: Event) {
        crate::stages::stamp(crate::stages::Stage::Push);
        trace_event(&ev);
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        let ev = match self.sink.get() {
            Some(sink) => match sink(ev, &q) {
                None => return,
                Some(ev) => ev,
            },
            _ => ev,
        };
        q.push_back(ev);
        self.published(q);
    }

    /// Puts `ev` back at the head of the queue: an event taken from it
    /// that an older one, handed to the taker by other means, must precede
    /// (see the multirail EVD's hand-over of a receive to its waiter).
    pub fn push_front(&self, ev: Event) {
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        q.push_front(ev);
        self.published(q);
    }

    /// An event was queued in `q` (this EVD's locked queue): publishes the
    /// new length, unlocks, and wakes waiters and observers.
    fn published(&self, q: std::sync::MutexGuard<'_, VecDeque<Event>>) {
        self.queued.store(q.len(), Ordering::SeqCst);
        drop(q);
        self.wake_all();
        self.wake_armed();
        self.notify_observers();
    }

    /// Wakes an event loop sleeping on [`Evd::wait_fd`] after
    /// [`Evd::arm`] (one write per arming).
    pub(super) fn wake_armed(&self) {
        if self.ext_armed.load(Ordering::SeqCst) && self.ext_armed.swap(false, Ordering::SeqCst) {
            if let Some(fd) = Self::fd_of(&self.ext_efd) {
                let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
            }
        }
    }

    fn pop(&self, threshold: usize) -> Option<Event> {
        // Too few events: no lock (a waiter woken by a poke looks here first).
        if self.queued.load(Ordering::Acquire) < threshold.max(1) {
            return None;
        }
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() < threshold.max(1) {
            return None;
        }
        let e = q.pop_front();
        self.queued.store(q.len(), Ordering::SeqCst);
        e
    }

    /// Drives this EVD's endpoints until `done()` holds (true) or `timeout`
    /// passes (false), blocking in `poll(2)` on their sockets in between; no
    /// event is dequeued. This is how a process that waits for an RDMA
    /// write to land in its own memory (a barrier flag, a mailbox) makes the
    /// write land at once instead of after a hand-off from the endpoint's
    /// progress thread: `done` checks the memory. On an EVD without drivers
    /// it waits for events with the same bound.
    pub fn drive_until(&self, timeout: Option<Duration>, done: &dyn Fn() -> bool) -> bool {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let ok = self.block_until(deadline, self.spin_time(), done);
        self.note_wait(if ok { start.elapsed() } else { Duration::MAX });
        ok
    }

    /// Dequeues the oldest event without driving anything (for a layer that
    /// drives this EVD's endpoints by other means, see
    /// [`SoftEvd::drive_through`]).
    pub fn try_pop(&self) -> Option<Event> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.pop(1)
    }

    /// [`SoftEvd::drive_until`] with a spin of the caller's choosing instead
    /// of the EVD's (`RMR_EVD_SPIN_US`): a process on an oversubscribed node
    /// should block at once rather than spin on a core its peers need.
    pub fn drive_until_spin(
        &self,
        timeout: Option<Duration>,
        spin: Duration,
        done: &dyn Fn() -> bool,
    ) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.block_until(deadline, spin, done)
    }

    /// Rings the doorbell of every endpoint reporting here: sends the
    /// frames they hold for batching (or queue behind a full socket) now,
    /// without reading and without blocking. For a thread that posts on
    /// these endpoints but waits on another EVD (a forwarder posting to the
    /// far side, a rail thread): without it a held frame waits for this
    /// EVD's waiter or the endpoint's progress thread — a hand-off between
    /// threads. Returns whether anything went.
    pub fn flush_writes(&self) -> bool {
        let mut moved = false;
        for d in &self.drivers() {
            moved |= d.flush();
        }
        moved
    }

    /// Drives every driver once, without blocking (what a dequeue on an
    /// empty queue does). Returns whether anything moved.
    pub fn drive_once(&self) -> bool {
        if let Some(m) = self.many() {
            return self.many_drive_once(m);
        }
        let drivers = self.drivers();
        let mut moved = false;
        for d in &drivers {
            d.enter();
            moved |= d.drive();
            d.leave();
        }
        moved
    }
}

impl Evd for SoftEvd {
    fn wait(&self, timeout: Option<Duration>, threshold: usize) -> Result<Event> {
        let threshold = threshold.max(1);
        // No clock read for a wait without a timeout: the core wait reads it
        // once it finds nothing to do (an event its first passes take in
        // costs none).
        let start = timeout.map(|_| Instant::now());
        let deadline = timeout.zip(start).map(|(t, s)| s + t);
        let (mut took, mut from) = (Duration::ZERO, start);
        loop {
            let done = || self.queued.load(Ordering::SeqCst) >= threshold;
            let (ok, t) = self.block_until_timed(deadline, self.spin_time(), &done, from.take());
            took += t;
            if let Some(e) = self.pop(threshold) {
                self.note_wait(took);
                return Ok(e);
            }
            if !ok {
                self.note_wait(Duration::MAX);
                return Err(Error::Timeout);
            }
        }
    }

    fn dequeue(&self) -> Option<Event> {
        if self.queued.load(Ordering::Acquire) == 0 && !self.drive_once() {
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

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        Self::fd_of(&self.ext_efd)
    }

    fn progress_until(
        &self,
        timeout: Option<Duration>,
        spin: Option<Duration>,
        ready: &dyn Fn() -> bool,
    ) -> bool {
        let ready = || ready() || self.queued.load(Ordering::SeqCst) > 0;
        match spin {
            Some(spin) => self.drive_until_spin(timeout, spin, &ready),
            None => self.drive_until(timeout, &ready),
        }
    }

    fn arm(&self) -> bool {
        // fi_trywait's rule: announce the sleeper first (a push from now on
        // writes the descriptor), then look; the descriptor is drained here,
        // so a wake-up that was consumed does not stay readable.
        let Some(fd) = Self::fd_of(&self.ext_efd) else { return false };
        let mut b = [0u8; 8];
        let _ = rustix::io::read(fd, &mut b);
        self.ext_armed.store(true, Ordering::SeqCst);
        if self.queued.load(Ordering::SeqCst) > 0 {
            return false;
        }
        // Nobody drives the endpoints while the caller sleeps: their
        // backends' own progress (the TCP backend's per-IA helper) takes
        // them over now, not after it notices the last waiter left.
        if self.has_drivers.load(Ordering::Acquire) {
            for d in &self.drivers() {
                d.release();
            }
        }
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl SoftEvd {
    /// [`Evd::arm`] for an EVD layered over other EVDs whose events this
    /// queue receives only when `harvest` moves them (multirail's rails, a
    /// bridged endpoint's real one): arms first, so an event reaching an
    /// underlying EVD meanwhile pokes this queue and writes the
    /// descriptor, then harvests. False (the caller must look again) when
    /// `blind` (an underlying EVD cannot poke this one), when `harvest`
    /// moved anything or when events are queued.
    pub fn arm_over(&self, blind: bool, harvest: impl FnOnce() -> bool) -> bool {
        if blind {
            return false;
        }
        let armed = self.arm();
        let moved = harvest();
        armed && !moved && self.is_empty()
    }
}

mod block;
mod many;

#[cfg(all(test, not(miri)))] // eventfd, poll(2) and clocks: not under Miri
mod tests;
