//! Handing an endpoint over to the IA's progress helper when the threads
//! that drive it leave to compute, and back when they return.
//!
//! A backend with progress by the waiter ([`Driver`](super::Driver)) keeps
//! a helper thread that drives the endpoints no application thread drives:
//! it answers RDMA reads and atomics aimed at this process while the
//! application computes. The helper stands back while a thread drives an
//! endpoint and looks now and then whether it has left. A thread that
//! computes between its waits leaves for milliseconds each time; a read
//! aimed at it meanwhile waits until the helper's next look. So after the
//! helper took an endpoint over, it looks at it again [`FAST_LOOKS`] times
//! at a quick pace (the backend's: 200 us asked of timers that wait in
//! whole milliseconds, [`helper_grain`](super::clock::helper_grain), so
//! about 1 ms) while threads drive it
//! once more, and a wait that lasts from one quick look to the next is
//! left to tell the helper itself as it ends ([`Handover::leave`]): the
//! helper then takes over at once.
//!
//! A thread that polls in waits (a ping-pong, or a rank waiting for
//! messages in waits of a millisecond) would be handed over and kicked back
//! at every wait, each costing the helper a wake-up: two quick returns in a
//! row after a takeover ([`Handover::returned`]) end the quick looks until
//! a thread stays away again.
//!
//! Without quick looks the helper still looks at the pace of its watch: a
//! wait found going on at two such looks [`LONG_WAIT_NS`] apart (longer
//! after each quick return it caused, see [`Handover::long_wait_ns`]), or
//! found long by the backend's own watch ([`Handover::mark_deep`]), tells
//! the helper as it ends. So the first compute phase after a run of short
//! waits is taken over as its long wait ends, not a watch later.
//!
//! [`Handover`] is that state for one endpoint, the same in every backend;
//! each backend says what a driver, a wait and a takeover are for it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// After the IA's helper took an endpoint over from application threads
/// (they compute between waits), it looks at the endpoint up to this many
/// more times at the backend's quick pace while they drive it again,
/// rather than at its slower watch: so that it takes over again soon after
/// they next leave. Looks that find new waits use them up (a ping-pong's
/// threads are never away from one look to the next), and so may a
/// backend's looks that find work it cannot finish ([`Handover::spend`]).
/// A new endpoint starts with them: its threads' habits are not known yet.
pub const FAST_LOOKS: u32 = 8;

/// With no quick looks left, a wait that the helper's looks found going
/// on (the same wait, driven) at least this long apart, in nanoseconds, is
/// long: its thread tells the helper as it ends, as after a quick look.
/// The default watch's period (2 ms): a thread that polls in waits of a
/// millisecond is never told, while the first compute phase after a run
/// of such waits is taken over as its long wait ends rather than at the
/// next look of the watch. Doubled for each quick return in a row beyond
/// the first ([`Handover::long_wait_ns`]): a thread that waits a few
/// milliseconds at a time and comes straight back is told a few times,
/// not at every wait.
pub const LONG_WAIT_NS: u64 = 2_000_000;

/// What the helper's look at an endpoint it stands back from found
/// ([`Handover::look`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuickLook {
    /// No quick looks left: look at the pace of the helper's watch.
    Off,
    /// Waits began since the last look (the threads are back): look again
    /// at the quick pace. One quick look is used up.
    Soon,
    /// One wait has lasted since the last look and still does: its thread
    /// tells the helper as it leaves ([`Handover::leave`]), so the helper
    /// need not look at the quick pace until then.
    Hold,
    /// Nobody drives the endpoint now, and no wait began since the last
    /// look: the helper may take it over.
    Left,
}

/// One endpoint's handover state: shared by the threads that drive it
/// (entering and leaving waits) and the IA's helper (looking, taking over).
#[derive(Debug)]
pub struct Handover {
    /// The thread driving now tells the helper as it leaves: its wait has
    /// lasted from one quick look to the next, or long at the watch's pace.
    deep: AtomicBool,
    /// Quick looks left, and the wait count at the last look (or the one
    /// the backend's watch marked, [`Handover::mark_deep`]; the helper's).
    looks: AtomicU32,
    seen: AtomicU64,
    /// When a look without quick looks first found the wait count `seen`
    /// (on the [`now_ns`](super::clock::now_ns) scale; 0: not known).
    seen_at: AtomicU64,
    /// A thread came back after a takeover quickly (`came_back`) or after
    /// a while (`stayed_away`), not yet counted by the helper.
    came_back: AtomicBool,
    stayed_away: AtomicBool,
    /// Quick returns in a row (the helper's).
    quick_returns: AtomicU32,
    /// The wait count at the last takeover (the helper's).
    taken: AtomicU64,
}

impl Default for Handover {
    fn default() -> Handover {
        Handover::new()
    }
}

impl Handover {
    /// A new endpoint's state: with its quick looks (see [`FAST_LOOKS`]).
    pub const fn new() -> Handover {
        Handover {
            deep: AtomicBool::new(false),
            looks: AtomicU32::new(FAST_LOOKS),
            seen: AtomicU64::new(u64::MAX),
            seen_at: AtomicU64::new(0),
            came_back: AtomicBool::new(false),
            stayed_away: AtomicBool::new(false),
            quick_returns: AtomicU32::new(0),
            taken: AtomicU64::new(u64::MAX),
        }
    }

    /// The helper looks at an endpoint it does not drive. `drivers` reads
    /// the endpoint's count of waits begun and whether a thread drives it
    /// now; it is read again after the helper asks a driver to tell it as
    /// it leaves, in case it left meanwhile.
    pub fn look(&self, drivers: impl Fn() -> (u64, bool)) -> QuickLook {
        self.look_timed(drivers, super::clock::now_ns)
    }

    /// [`Handover::look`] with the clock given (`now`, read only when no
    /// quick looks are left).
    fn look_timed(&self, drivers: impl Fn() -> (u64, bool), now: impl Fn() -> u64) -> QuickLook {
        if self.stayed_away.swap(false, Ordering::Relaxed) {
            self.quick_returns.store(0, Ordering::Relaxed);
        }
        if self.came_back.swap(false, Ordering::Relaxed) {
            let r = self.quick_returns.load(Ordering::Relaxed).saturating_add(1);
            self.quick_returns.store(r, Ordering::Relaxed);
            if r >= 2 {
                // It polls in waits rather than computing between them.
                self.looks.store(0, Ordering::Relaxed);
            }
        }
        let looks = self.looks.load(Ordering::Relaxed);
        if looks == 0 {
            self.watch_look(&drivers, now());
            return QuickLook::Off;
        }
        // A flag left from an earlier wait must not hand a later one over
        // (a quick look sets it again if the wait is still the same).
        if self.deep.load(Ordering::SeqCst) {
            self.deep.store(false, Ordering::SeqCst);
        }
        let (waits, driving) = drivers();
        self.seen_at.store(0, Ordering::Relaxed);
        if self.seen.swap(waits, Ordering::Relaxed) != waits {
            // Waits began since the last look: the threads are back (a
            // ping-pong's are never away from one look to the next).
            self.looks.store(looks - 1, Ordering::Relaxed);
            return QuickLook::Soon;
        }
        if !driving {
            return QuickLook::Left;
        }
        // The same wait as at the last look: its thread tells the helper
        // as it leaves, unless it left already (Dekker with `leave`).
        self.deep.store(true, Ordering::SeqCst);
        if drivers().1 { QuickLook::Hold } else { QuickLook::Left }
    }

    /// A look at the watch's pace (no quick looks left, [`QuickLook::Off`]):
    /// a wait found going on at two such looks at least
    /// [`Handover::long_wait_ns`] apart tells the helper as it ends
    /// ([`Handover::leave`]), unless its thread left already (Dekker with
    /// `leave`, as a quick look's).
    fn watch_look(&self, drivers: &impl Fn() -> (u64, bool), now: u64) {
        let (waits, driving) = drivers();
        let since = self.seen_at.load(Ordering::Relaxed);
        if self.seen.swap(waits, Ordering::Relaxed) != waits || since == 0 {
            // A new wait (or the first look): a flag is an earlier wait's.
            self.seen_at.store(now.max(1), Ordering::Relaxed);
            if self.deep.load(Ordering::SeqCst) {
                self.deep.store(false, Ordering::SeqCst);
            }
            return;
        }
        // The same wait: long by now, or found so by the backend's own
        // watch ([`Handover::mark_deep`]), which a look keeps.
        let long =
            now.saturating_sub(since) >= self.long_wait_ns() || self.deep.load(Ordering::SeqCst);
        if !driving {
            self.deep.store(false, Ordering::SeqCst);
        } else if long {
            self.deep.store(true, Ordering::SeqCst);
            self.keep_if_same(waits, drivers);
        }
    }

    /// After setting `deep` for wait `waits`: drops it again unless that
    /// wait still goes on (Dekker with `leave`): a thread gone meanwhile
    /// is left to the backend's own look, and a new wait is not the long
    /// one. Returns whether it was kept.
    fn keep_if_same(&self, waits: u64, drivers: &impl Fn() -> (u64, bool)) -> bool {
        let (now_waits, driving) = drivers();
        if now_waits != waits || !driving {
            self.deep.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// How long, in nanoseconds, a wait must be found going on at the
    /// watch's pace to tell the helper as it ends: [`LONG_WAIT_NS`],
    /// doubled for each quick return in a row beyond the first (at most
    /// 32 times; a thread that stays away starts it again).
    pub fn long_wait_ns(&self) -> u64 {
        let returns = self.quick_returns.load(Ordering::Relaxed);
        LONG_WAIT_NS << returns.saturating_sub(1).min(5)
    }

    /// Uses up one quick look, if any is left (a look that found a message
    /// waiting for a receive, which the helper looks at again soon while
    /// quick looks last). Returns whether one was.
    pub fn spend(&self) -> bool {
        let looks = self.looks.load(Ordering::Relaxed);
        if looks > 0 {
            self.looks.store(looks - 1, Ordering::Relaxed);
        }
        looks > 0
    }

    /// The helper took the endpoint over (it drives it now); `waits` is
    /// its count of waits begun now. What the threads left behind is
    /// forgotten, and if threads drove the endpoint since the last
    /// takeover (a new one, not the same one looked at again), its quick
    /// looks start again, unless its threads' last two returns were quick
    /// (they poll in waits) and none has stayed away since. Returns whether
    /// it was a new one.
    pub fn took_over(&self, waits: u64) -> bool {
        if self.stayed_away.swap(false, Ordering::Relaxed) {
            self.quick_returns.store(0, Ordering::Relaxed);
        }
        self.came_back.store(false, Ordering::Relaxed);
        self.deep.store(false, Ordering::SeqCst);
        if self.taken.swap(waits, Ordering::Relaxed) == waits {
            return false;
        }
        let polls = self.quick_returns.load(Ordering::Relaxed) >= 2;
        self.looks.store(if polls { 0 } else { FAST_LOOKS }, Ordering::Relaxed);
        self.seen.store(waits, Ordering::Relaxed);
        self.seen_at.store(0, Ordering::Relaxed);
        true
    }

    /// A thread began driving the endpoint while the helper had it: `quick`
    /// if it came back within the backend's quick period (it polls, rather
    /// than computing between its waits).
    pub fn returned(&self, quick: bool) {
        if quick {
            self.came_back.store(true, Ordering::Relaxed);
        } else {
            self.stayed_away.store(true, Ordering::Relaxed);
        }
    }

    /// Asks the thread driving now, in the wait that is the endpoint's
    /// `waits`-th, to tell the helper as it leaves (the helper stops
    /// watching it): a backend's own watch found that wait long (for at
    /// least [`Handover::long_wait_ns`]). Looks without quick looks keep
    /// the flag while the wait lasts.
    ///
    /// `drivers` is read after the flag is set, as in
    /// [`Handover::look`]: returns false (flag dropped) when the thread
    /// left meanwhile (the helper takes the endpoint over itself) or a new
    /// wait began.
    pub fn mark_deep(&self, waits: u64, drivers: impl Fn() -> (u64, bool)) -> bool {
        let other = self.seen.swap(waits, Ordering::Relaxed) != waits;
        if other || self.seen_at.load(Ordering::Relaxed) == 0 {
            self.seen_at.store(super::clock::now_ns().max(1), Ordering::Relaxed);
        }
        self.deep.store(true, Ordering::SeqCst);
        self.keep_if_same(waits, &drivers)
    }

    /// Whether the driving thread is asked to tell the helper as it leaves.
    pub fn is_deep(&self) -> bool {
        self.deep.load(Ordering::SeqCst)
    }

    /// The endpoint's last driver leaves: returns whether it must tell the
    /// helper (its wait was long: it likely computes now), consuming the
    /// request. The caller wakes the helper and then calls
    /// [`yield_to_helper`](super::yield_to_helper).
    #[inline]
    pub fn leave(&self) -> bool {
        // Loaded before it is swapped: a locked swap on every leave would
        // cost a ping-pong's waits what the flag is rarely set for.
        self.deep.load(Ordering::SeqCst) && self.deep.swap(false, Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// An endpoint's wait count and whether a thread drives it.
    struct Ep {
        waits: Cell<u64>,
        driving: Cell<bool>,
    }

    impl Ep {
        fn new() -> Ep {
            Ep { waits: Cell::new(0), driving: Cell::new(false) }
        }
        fn enter(&self) {
            self.waits.set(self.waits.get() + 1);
            self.driving.set(true);
        }
        fn now(&self) -> (u64, bool) {
            (self.waits.get(), self.driving.get())
        }
    }

    #[test]
    fn a_long_wait_is_told_to_hand_over_once_and_a_ping_pong_never() {
        let (h, ep) = (Handover::new(), Ep::new());
        // A ping-pong: a new wait at every look.
        for _ in 0..3 {
            ep.enter();
            assert_eq!(h.look(|| ep.now()), QuickLook::Soon);
            ep.driving.set(false);
            assert!(!h.leave(), "a short wait does not hand over");
        }
        // One wait spans two looks: its leave tells the helper, once.
        ep.enter();
        assert_eq!(h.look(|| ep.now()), QuickLook::Soon);
        assert_eq!(h.look(|| ep.now()), QuickLook::Hold);
        assert!(h.is_deep());
        ep.driving.set(false);
        assert!(h.leave(), "the long wait's leave tells the helper");
        assert!(!h.leave(), "consumed");
        // A flag the leave did not consume is cleared at the next look.
        ep.enter();
        h.deep.store(true, Ordering::SeqCst);
        assert_eq!(h.look(|| ep.now()), QuickLook::Soon);
        assert!(!h.leave(), "cleared by the look that found a new wait");
    }

    #[test]
    fn with_no_quick_looks_left_a_wait_seen_at_looks_a_long_wait_apart_hands_over_as_it_ends() {
        let (h, ep) = (Handover::new(), Ep::new());
        let at = |t: u64| h.look_timed(|| ep.now(), || t);
        // Two quick returns after takeovers: the quick looks end.
        for _ in 0..2 {
            h.took_over(ep.waits.get());
            ep.enter();
            h.returned(true);
            ep.driving.set(false);
            at(0);
        }
        ep.enter();
        assert_eq!(at(1_000_000), QuickLook::Off);
        assert_eq!(h.looks.load(Ordering::Relaxed), 0, "the guard ended the quick looks");
        // Two quick returns in a row: a long wait is twice the base.
        let long = h.long_wait_ns();
        assert_eq!(long, 2 * LONG_WAIT_NS);
        // The same wait, looked at again soon (a look for another endpoint):
        // not long yet.
        assert_eq!(at(1_000_000 + long / 2), QuickLook::Off);
        assert!(!h.is_deep());
        // Still the same wait a long wait after it was first seen: its
        // leave tells the helper.
        assert_eq!(at(1_000_000 + long), QuickLook::Off);
        assert!(h.is_deep());
        ep.driving.set(false);
        assert!(h.leave(), "the long wait's leave tells the helper");
        // Each quick return after such a takeover doubles it (at most 32
        // times the base); a thread that stays away starts again.
        for k in 0..8u32 {
            h.took_over(ep.waits.get());
            h.returned(true);
            at(0);
            assert_eq!(h.long_wait_ns(), LONG_WAIT_NS << (2 + k).min(5));
        }
        h.took_over(ep.waits.get());
        h.returned(false);
        at(0);
        assert_eq!(h.long_wait_ns(), LONG_WAIT_NS);
        // Waits of a millisecond one after the other never do.
        let mut t = 10_000_000;
        for _ in 0..10 {
            ep.enter();
            assert_eq!(at(t), QuickLook::Off);
            t += LONG_WAIT_NS / 2;
            ep.driving.set(false);
            assert!(!h.leave(), "a short wait does not hand over");
        }
        // A backend's own watch found the wait long: looks keep its flag
        // while that wait lasts, and drop it once a new one began.
        ep.enter();
        assert!(h.mark_deep(ep.waits.get(), || ep.now()));
        assert_eq!(at(t), QuickLook::Off);
        assert!(h.is_deep(), "kept: the same wait");
        ep.driving.set(false);
        assert!(h.leave());
        ep.enter();
        assert!(!h.mark_deep(ep.waits.get() - 1, || ep.now()), "not the wait going on");
        assert!(!h.is_deep());
        h.deep.store(true, Ordering::SeqCst);
        assert_eq!(at(t + 1), QuickLook::Off);
        assert!(!h.is_deep(), "an earlier wait's flag is dropped");
        ep.driving.set(false);
        assert!(!h.mark_deep(ep.waits.get(), || ep.now()), "the thread left");
        assert!(!h.is_deep());
        // A thread gone between the look's two reads is left to the
        // backend's own look (no flag for a later wait).
        ep.enter();
        assert_eq!(at(t), QuickLook::Off);
        let reads = Cell::new(0);
        let r = h.look_timed(
            || {
                reads.set(reads.get() + 1);
                (ep.waits.get(), reads.get() == 1)
            },
            || t + LONG_WAIT_NS,
        );
        assert_eq!(r, QuickLook::Off);
        assert!(!h.is_deep());
    }

    #[test]
    fn a_driver_that_leaves_between_the_two_reads_is_left_to_the_helper() {
        let (h, ep) = (Handover::new(), Ep::new());
        ep.enter();
        assert_eq!(h.look(|| ep.now()), QuickLook::Soon);
        let reads = Cell::new(0);
        let r = h.look(|| {
            reads.set(reads.get() + 1);
            // Still driving at the first read, gone at the second.
            (ep.waits.get(), reads.get() == 1)
        });
        assert_eq!(r, QuickLook::Left);
    }

    #[test]
    fn quick_looks_run_out_and_start_again_at_a_new_takeover() {
        let (h, ep) = (Handover::new(), Ep::new());
        for _ in 0..FAST_LOOKS {
            ep.enter();
            assert_eq!(h.look(|| ep.now()), QuickLook::Soon);
        }
        ep.enter();
        assert_eq!(h.look(|| ep.now()), QuickLook::Off, "all used up");
        ep.driving.set(false);
        assert!(h.took_over(ep.waits.get()), "a new takeover");
        assert_eq!(h.look(|| ep.now()), QuickLook::Left, "nobody came back: none used");
        // The same takeover looked at again (the helper drives the
        // endpoint, finds work it cannot finish, and looks again soon)
        // gives no new quick looks: they run out.
        for _ in 0..FAST_LOOKS {
            assert!(!h.took_over(ep.waits.get()));
            assert!(h.spend());
        }
        assert!(!h.took_over(ep.waits.get()));
        assert!(!h.spend(), "none left");
        assert_eq!(h.look(|| ep.now()), QuickLook::Off);
        ep.enter();
        ep.driving.set(false);
        assert!(h.took_over(ep.waits.get()), "a thread drove it since: a new one");
        assert_eq!(h.look(|| ep.now()), QuickLook::Left);
    }

    #[test]
    fn a_thread_that_left_after_a_short_wait_is_looked_at_again_before_a_takeover() {
        let (h, ep) = (Handover::new(), Ep::new());
        h.took_over(0);
        ep.enter();
        ep.driving.set(false);
        assert_eq!(h.look(|| ep.now()), QuickLook::Soon, "a wait began: it may be back soon");
        assert_eq!(h.look(|| ep.now()), QuickLook::Left, "still away");
    }

    #[test]
    fn two_quick_returns_in_a_row_end_the_quick_looks_and_staying_away_resets_them() {
        let (h, ep) = (Handover::new(), Ep::new());
        h.took_over(0);
        ep.enter();
        h.returned(true);
        assert_eq!(h.look(|| ep.now()), QuickLook::Soon, "one quick return is not a habit");
        h.took_over(ep.waits.get());
        ep.enter();
        h.returned(true);
        assert_eq!(h.look(|| ep.now()), QuickLook::Off, "two in a row");
        // A takeover gives no quick looks back while the habit is known.
        h.took_over(ep.waits.get());
        ep.enter();
        h.returned(true);
        assert_eq!(h.look(|| ep.now()), QuickLook::Off);
        h.took_over(ep.waits.get());
        ep.enter();
        assert_eq!(h.look(|| ep.now()), QuickLook::Off, "a return of unknown length");
        // A thread that stayed away (it computed) starts the count over,
        // and the next takeover gives the quick looks back.
        h.took_over(ep.waits.get());
        ep.enter();
        h.returned(false);
        assert_eq!(h.look(|| ep.now()), QuickLook::Off);
        h.took_over(ep.waits.get());
        ep.enter();
        assert_eq!(h.look(|| ep.now()), QuickLook::Soon);
        h.took_over(ep.waits.get());
        ep.enter();
        h.returned(true);
        assert_eq!(h.look(|| ep.now()), QuickLook::Soon, "one quick return after staying away");
    }

    #[test]
    fn a_takeover_forgets_a_quick_return_the_helper_had_not_counted() {
        let (h, ep) = (Handover::new(), Ep::new());
        h.returned(true);
        h.took_over(0);
        ep.enter();
        h.returned(true);
        assert_eq!(h.look(|| ep.now()), QuickLook::Soon, "only the return after the takeover");
    }
}
