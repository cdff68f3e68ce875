//! The multirail EVD. With the `pinned` engine, rail threads fill it and a
//! waiter simply blocks. With `inline` and `fork-join` there are no helper
//! threads: a waiter polls every rail EVD of the EPs that report here (the
//! uDAPL multirail paper's non-threaded approach), backing off to short
//! sleeps when nothing moves.

use rmr_api::provider::SoftEvd;
use rmr_api::{Error, Evd, Event, Result};
use smallvec::SmallVec;
use std::any::Any;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

type Cores = SmallVec<[Arc<dyn Polled>; 4]>;

/// What a multirail EVD polls: the rails of an endpoint that reports to
/// it. The endpoint's core implements it (the `ep` module, which comes after
/// this module: the EVD knows endpoints only through this trait).
pub(crate) trait Polled: Send + Sync {
    /// The endpoint's rail EVDs (their doorbells and socket drivers).
    fn rail_evds(&self) -> SmallVec<[Arc<dyn Evd>; 4]>;
    /// Pushes out frames the rails hold for batching; true if any went.
    fn flush_rails(&self) -> bool;
    /// Harvests every rail once: (anything happened, the event handed back
    /// for `take`, the queue of the waiter's own EVD, if the harvest made
    /// one while it was empty).
    fn poll_rails_taking(&self, take: Option<&SoftEvd>) -> (bool, Option<Event>);
    /// Runs `hook` whenever the endpoint has something to harvest (an
    /// event queued on one of its rail EVDs, a failed post).
    fn watch(&self, hook: Arc<dyn Fn() + Send + Sync>);
}

/// From this many endpoints on, a waiter on a multirail EVD looks only at
/// the endpoints that have something to harvest ([`ReadyCores`]), and
/// drives their sockets through the EVD's `epoll` set.
const MANY: usize = 32;

/// Endpoints in marking order, and their addresses (each once).
type Marked = (Vec<Weak<dyn Polled>>, std::collections::HashSet<usize>);

/// The endpoints of an EVD that have something to harvest, each once.
#[derive(Default)]
struct ReadyCores {
    q: Mutex<Marked>,
    /// The EVD has [`MANY`] endpoints (with fewer, waiters poll them all
    /// and nothing is marked).
    on: AtomicBool,
}

impl ReadyCores {
    fn mark(&self, c: &Weak<dyn Polled>) {
        if !self.on.load(Ordering::Acquire) {
            return;
        }
        let k = c.as_ptr() as *const () as usize;
        let mut g = self.q.lock().unwrap_or_else(|e| e.into_inner());
        if g.1.insert(k) {
            g.0.push(c.clone());
        }
    }

    fn take(&self) -> Vec<Weak<dyn Polled>> {
        let mut g = self.q.lock().unwrap_or_else(|e| e.into_inner());
        if g.0.is_empty() {
            return Vec::new();
        }
        g.1.clear();
        std::mem::take(&mut g.0)
    }
}

thread_local! {
    /// The queue of the multirail EVD this thread waits on for one event,
    /// while it drives the rails' sockets in that wait (null otherwise).
    static WAITING_ON: Cell<*const SoftEvd> = const { Cell::new(std::ptr::null()) };
    /// A receive's completion handed to that wait by [`hand_over`].
    static HANDED: Cell<Option<Event>> = const { Cell::new(None) };
}

/// Hands `ev`, bound for `q`, straight to the calling thread's wait if that
/// wait is for one event of `q` and `q` holds nothing (so `ev` is its
/// oldest): no queueing and dequeueing, a poke to end the wait's spin.
/// Returns the event when it cannot (the caller queues it). For a rail
/// EVD's sink, which runs in whichever thread drives the rail's socket:
/// in a small-message ping-pong, the waiter itself.
pub(crate) fn hand_over(q: &SoftEvd, ev: Event) -> Option<Event> {
    if !std::ptr::eq(WAITING_ON.get(), q) || !q.is_empty() {
        return Some(ev);
    }
    match HANDED.take() {
        Some(held) => {
            HANDED.set(Some(held));
            Some(ev)
        }
        None => {
            HANDED.set(Some(ev));
            q.poke();
            None
        }
    }
}

/// Marks the calling thread as waiting on `q` for [`hand_over`] while it
/// lives; an event handed over and not taken (a wait left by a panic) is
/// queued when it ends.
struct HandOverTarget<'a> {
    q: &'a SoftEvd,
}

impl<'a> HandOverTarget<'a> {
    fn new(q: &'a SoftEvd) -> Self {
        WAITING_ON.set(q);
        HandOverTarget { q }
    }
    /// The event handed over since, if any.
    fn take(&self) -> Option<Event> {
        HANDED.take()
    }
}

impl Drop for HandOverTarget<'_> {
    fn drop(&mut self) {
        WAITING_ON.set(std::ptr::null());
        if let Some(ev) = HANDED.take() {
            self.q.push_front(ev);
        }
    }
}

/// An EVD of the multirail provider.
#[derive(Default)]
pub struct MrEvd {
    pub(crate) q: Arc<SoftEvd>,
    polled: Mutex<Vec<Weak<dyn Polled>>>,
    has_polled: AtomicBool,
    /// Some attached rail EVD cannot poke us: waiters must poll.
    blind: AtomicBool,
    /// Application threads inside [`Evd::wait`] (they harvest the rails).
    waiters: AtomicUsize,
    /// Bumped whenever `polled` changes (a waiter keeps its list until then).
    polled_gen: AtomicUsize,
    /// With [`MANY`] endpoints or more: those with something to harvest.
    ready: Arc<ReadyCores>,
    n_polled: AtomicUsize,
}

impl MrEvd {
    /// Whether an application thread is waiting here now.
    pub(crate) fn waiting(&self) -> bool {
        self.waiters.load(Ordering::SeqCst) > 0
    }

    pub(crate) fn attach_polled(&self, core: &Arc<dyn Polled>) {
        let mut p = self.polled.lock().unwrap_or_else(|e| e.into_inner());
        p.retain(|w| w.strong_count() > 0);
        if !p.iter().any(|w| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(core))) {
            p.push(Arc::downgrade(core));
            if self.n_polled.fetch_add(1, Ordering::AcqRel) + 1 >= MANY
                && !self.ready.on.swap(true, Ordering::AcqRel)
            {
                // From now on marked as they fill; until now none was:
                // all of them, once.
                for w in p.iter() {
                    self.ready.mark(w);
                }
            }
            let (wr, wc) = (Arc::downgrade(&self.ready), Arc::downgrade(core));
            core.watch(Arc::new(move || {
                if let Some(r) = wr.upgrade() {
                    r.mark(&wc);
                }
            }));
            // What its rails hold already.
            self.ready.mark(&Arc::downgrade(core));
            for evd in &core.rail_evds() {
                match evd.as_any().downcast_ref::<SoftEvd>() {
                    Some(s) => {
                        s.observe(&self.q);
                    }
                    None => self.blind.store(true, Ordering::Release),
                }
                // A waiter here drives the rail endpoints' sockets itself.
                self.q.drive_through(evd);
            }
        }
        self.polled_gen.fetch_add(1, Ordering::AcqRel);
        self.has_polled.store(true, Ordering::Release);
    }

    /// The wait; `started` is when it first found nothing to take, left
    /// `None` where the queue's own wait times itself, and `ended` about
    /// when its last sleep ended (no clock read of its own on the way out).
    fn wait_inner(
        &self,
        timeout: Option<Duration>,
        threshold: usize,
        started: &mut Option<Instant>,
        ended: &mut Option<Instant>,
    ) -> Result<Event> {
        let threshold = threshold.max(1);
        if !self.has_polled.load(Ordering::Acquire) {
            return self.q.wait(timeout, threshold);
        }
        if self.n_polled.load(Ordering::Acquire) >= MANY && !self.blind.load(Ordering::Acquire) {
            return self.wait_many(timeout, threshold, started, ended);
        }
        // The endpoints reporting here, looked up again only when they change.
        let (mut seen_gen, mut cores) = self.cores();
        // Frames the rails hold for batching (the user's last posts) go out
        // first: the peer's answer, and so this wait, depend on them.
        for c in &cores {
            c.flush_rails();
        }
        // The clock is read only once there is something to wait for.
        let mut idle = 0u32;
        // Whether this wait drove the rails' sockets yet.
        let mut drove = false;
        loop {
            if self.polled_gen.load(Ordering::Acquire) != seen_gen {
                (seen_gen, cores) = self.cores();
            }
            if self.q.len() >= threshold {
                if let Some(e) = self.q.dequeue() {
                    return Ok(e);
                }
            }
            let seen = self.q.poke_gen();
            // A waiter for one event takes it straight from the harvest.
            let (moved, taken) = self.progress_on(&cores, threshold == 1);
            if let Some(e) = taken {
                return Ok(e);
            }
            if moved {
                idle = 0;
                continue;
            }
            // One clock read per idle turn (a VM may make them dear).
            let now = Instant::now();
            let waited = now.saturating_duration_since(*started.get_or_insert(now));
            let blind = self.blind.load(Ordering::Acquire);
            if timeout.is_some_and(|t| waited >= t) && (drove || blind) {
                return Err(Error::Timeout);
            }
            idle += 1;
            let left = timeout.map(|t| t.saturating_sub(waited));
            if !blind {
                drove = true;
                // Every rail EVD pokes us: drive the rails' sockets (spinning as
                // long as a single-rail waiter would, then blocking) until an
                // event or a poke.
                match self.sleep(now, left, threshold, seen, waited, ended)? {
                    Some(e) => return Ok(e),
                    None => {
                        idle = 0;
                        continue;
                    }
                }
            }
            // Some rail EVD cannot wake us (a bridge's, libfabric's): poll,
            // yielding, then in short naps (also under `pinned`: its rail
            // threads, one per rail for all endpoints, look only now and then).
            if idle < 4000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// [`MrEvd::wait_inner`] with many endpoints: each turn harvests only
    /// the endpoints marked ready, and the wait drives only the sockets
    /// with input (the queue's `epoll` set over every rail endpoint).
    fn wait_many(
        &self,
        timeout: Option<Duration>,
        threshold: usize,
        started: &mut Option<Instant>,
        ended: &mut Option<Instant>,
    ) -> Result<Event> {
        // Whether this wait drove the rails' sockets yet.
        let mut drove = false;
        loop {
            if self.q.len() >= threshold {
                if let Some(e) = self.q.dequeue() {
                    return Ok(e);
                }
            }
            let seen = self.q.poke_gen();
            let (mut moved, mut taken) = (false, None);
            for c in self.ready.take().iter().filter_map(Weak::upgrade) {
                let t = (threshold == 1 && taken.is_none()).then_some(&*self.q);
                let (m, e) = c.poll_rails_taking(t);
                moved |= m;
                taken = taken.or(e);
            }
            if let Some(e) = taken {
                return Ok(e);
            }
            if moved {
                continue;
            }
            let now = Instant::now();
            let waited = now.saturating_duration_since(*started.get_or_insert(now));
            if timeout.is_some_and(|t| waited >= t) && drove {
                return Err(Error::Timeout);
            }
            drove = true;
            let left = timeout.map(|t| t.saturating_sub(waited));
            if let Some(e) = self.sleep(now, left, threshold, seen, waited, ended)? {
                return Ok(e);
            }
        }
    }

    /// Drives the rails' sockets (spinning as long as a single-rail waiter
    /// would, less what this wait already took, then blocking) until an
    /// event, a poke after `seen` (`None`), or `left` passes, all counted
    /// from `now` (the caller's clock reading); about when it ended goes
    /// to `ended`.
    fn sleep(
        &self,
        now: Instant,
        left: Option<Duration>,
        threshold: usize,
        seen: u64,
        waited: Duration,
        ended: &mut Option<Instant>,
    ) -> Result<Option<Event>> {
        let spin = self.q.spin_time().saturating_sub(waited);
        // A receive the rails' sink translates in this thread comes
        // straight here (see `hand_over`), older than anything queued.
        let target = (threshold == 1).then(|| HandOverTarget::new(&self.q));
        let (r, took) = self.q.wait_or_poke_spin_from(now, left, threshold, seen, spin);
        *ended = Some(now + took);
        if let Some(h) = target.as_ref().and_then(HandOverTarget::take) {
            if let Ok(Some(e)) = r {
                self.q.push_front(e);
            }
            return Ok(Some(h));
        }
        r
    }

    /// Polls every attached EP's rails once. Returns (anything happened,
    /// with `take` the oldest event for this EVD if the harvest made one
    /// while it was empty — handed over instead of queued).
    fn progress(&self, take: bool) -> (bool, Option<Event>) {
        if !self.has_polled.load(Ordering::Acquire) {
            return (false, None);
        }
        if self.ready.on.load(Ordering::Acquire) {
            // Many endpoints: only those with something to harvest.
            let ready: Cores = self.ready.take().iter().filter_map(Weak::upgrade).collect();
            return self.progress_on(&ready, take);
        }
        self.progress_on(&self.cores().1, take)
    }

    /// The endpoints that report here, with the `polled` generation read first.
    fn cores(&self) -> (usize, Cores) {
        let g = self.polled_gen.load(Ordering::Acquire);
        let p = self.polled.lock().unwrap_or_else(|e| e.into_inner());
        (g, rmr_api::provider::small_vec(p.iter().filter_map(Weak::upgrade)))
    }

    /// [`MrEvd::progress`] over `cores`.
    fn progress_on(&self, cores: &[Arc<dyn Polled>], take: bool) -> (bool, Option<Event>) {
        let (mut any, mut taken) = (false, None);
        for c in cores {
            let t = (take && taken.is_none()).then_some(&*self.q);
            let (moved, e) = c.poll_rails_taking(t);
            any |= moved;
            taken = taken.or(e);
        }
        (any, taken)
    }
}

/// A thread counted among an EVD's waiters while this lives (also when
/// the wait unwinds).
struct CountedWaiter<'a>(&'a AtomicUsize);

impl<'a> CountedWaiter<'a> {
    fn new(n: &'a AtomicUsize) -> CountedWaiter<'a> {
        n.fetch_add(1, Ordering::SeqCst);
        CountedWaiter(n)
    }
}

impl Drop for CountedWaiter<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Evd for MrEvd {
    fn wait(&self, timeout: Option<Duration>, threshold: usize) -> Result<Event> {
        let counted = CountedWaiter::new(&self.waiters);
        let (mut started, mut ended) = (None, None);
        let r = self.wait_inner(timeout, threshold, &mut started, &mut ended);
        drop(counted);
        // What this wait took sizes the next ones' spin (a timeout teaches
        // that spinning would not have caught it). It ended about when its
        // last sleep did (one pass later, or a fresh reading if it slept).
        if let Some(s) = started {
            let took = match (&r, ended) {
                (Err(_), _) => Duration::MAX,
                (Ok(_), Some(e)) => e.saturating_duration_since(s),
                (Ok(_), None) => s.elapsed(),
            };
            self.q.note_wait(took);
        }
        r
    }

    fn dequeue(&self) -> Option<Event> {
        let _ = self.progress(false);
        self.q.dequeue()
    }

    /// Drives the rails' sockets (as [`Evd::wait`] does) until `ready()`
    /// holds or an event is queued here: an RDMA write a peer aims at this
    /// process (a barrier's flag) lands in this thread's own context, not
    /// when a rail's progress helper next looks. Frames the rails hold for
    /// batching go out first.
    fn progress_until(
        &self,
        timeout: Option<Duration>,
        spin: Option<Duration>,
        ready: &dyn Fn() -> bool,
    ) -> bool {
        if !self.has_polled.load(Ordering::Acquire) {
            return self.q.progress_until(timeout, spin, ready);
        }
        // A waiter here: rail threads leave the harvest to this thread.
        let _counted = CountedWaiter::new(&self.waiters);
        // Rail events become this EVD's (queued, not dequeued).
        let blind = self.blind.load(Ordering::Acquire);
        self.q.progress_over(timeout, spin, ready, blind, || self.progress(false).0)
    }

    fn len(&self) -> usize {
        self.q.len()
    }

    fn post_software(&self, value: u64) -> Result<()> {
        self.q.post_software(value)
    }

    /// One descriptor over every rail: the queue's, written when an event
    /// is queued here or on any endpoint's rail EVD once armed.
    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.q.wait_fd()
    }

    fn arm(&self) -> bool {
        // A rail EVD that cannot wake us (a bridge's, libfabric's): the
        // caller must poll. Else armed first, then the rails harvested.
        self.q.arm_over(self.blind.load(Ordering::Acquire), || self.progress(false).0)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(e: Option<Event>) -> Option<u64> {
        match e {
            Some(Event::Software(v)) => Some(v),
            None => None,
            Some(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_receive_is_handed_only_to_this_threads_wait_on_its_empty_queue() {
        let q = SoftEvd::new(16);
        let other = SoftEvd::new(16);
        // Nobody waits: queued by the caller.
        assert_eq!(value(hand_over(&q, Event::Software(1))), Some(1));
        let w = HandOverTarget::new(&q);
        // Bound for another queue: not this wait's.
        assert_eq!(value(hand_over(&other, Event::Software(2))), Some(2));
        // Another thread's sink: not this thread's wait.
        let e = std::thread::scope(|s| s.spawn(|| hand_over(&q, Event::Software(3))).join());
        assert_eq!(value(e.unwrap()), Some(3));
        // This wait, an empty queue: handed over, the wait poked.
        let pokes = q.poke_gen();
        assert_eq!(value(hand_over(&q, Event::Software(4))), None);
        assert_eq!(q.poke_gen(), pokes + 1, "the wait's spin ends");
        // One at a time: the next is queued behind.
        assert_eq!(value(hand_over(&q, Event::Software(5))), Some(5));
        assert_eq!(value(w.take()), Some(4));
        // A queue with events: the new one must follow them.
        q.push(Event::Software(6));
        assert_eq!(value(hand_over(&q, Event::Software(7))), Some(7));
        drop(w);
        assert_eq!(value(hand_over(&q, Event::Software(8))), Some(8), "the wait ended");
    }

    #[test]
    fn an_event_handed_to_a_wait_that_left_is_queued_first() {
        let q = SoftEvd::new(16);
        {
            let _w = HandOverTarget::new(&q);
            assert_eq!(value(hand_over(&q, Event::Software(1))), None);
            // Pushed later by another thread.
            q.push(Event::Software(2));
        }
        assert_eq!(value(q.try_pop()), Some(1), "the older, handed-over event first");
        assert_eq!(value(q.try_pop()), Some(2));
        assert_eq!(value(q.try_pop()), None);
    }
}
