//! How a waiter on a [`SoftEvd`] blocks: it drives the EVD's [`Driver`]s
//! itself (polling their sockets in one `poll(2)`), spins as long as the
//! spin policy says, and sleeps on the EVD's eventfd or condition variable
//! when nothing moves; the doorbell and poke waits the multirail layer uses.

use super::SoftEvd;
use super::{DRIVERS_GEN, Drivers, POLLERS, QUIET_LOOK, QUIET_WAITS};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::provider::Driver;
use crate::provider::cpus::cpus_idle;
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use smallvec::SmallVec;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl SoftEvd {
    /// The core wait: until `done()` holds (true) or the deadline passes
    /// (false). Drives the drivers, spins for `spin`, then blocks — in
    /// `poll(2)` on the drivers' descriptors when there are drivers, on the
    /// condition variable otherwise.
    pub(super) fn block_until(
        &self,
        deadline: Option<Instant>,
        spin: Duration,
        done: &dyn Fn() -> bool,
    ) -> bool {
        self.block_until_timed(deadline, spin, done, None).0
    }

    /// [`SoftEvd::block_until`] from `start` (when the caller began its
    /// wait, if it read the clock), returning also about how long it took.
    /// Without `start`, a wait on drivers reads the clock first when a pass
    /// finds nothing to do (the wait's start, one pass late): a wait whose
    /// event its passes take in without ever finding themselves idle (one
    /// pass, or many that each moved data) took no waiting, which is what
    /// the spin it sizes cares about, and with one driver reads no clock at
    /// all (with several, one reading as they are left). (An EVD with no
    /// drivers, or with many, reads it at once.) The
    /// end, with one driver, is the wait's last clock reading when it
    /// neither slept nor moved data for more than one pass since (a
    /// spinning look and the pass that took the event in early: all that
    /// sizing the spin needs, and no clock read on the way from the event
    /// to the application), else a fresh one. (A pass that blocks on a lock
    /// for long is not seen: the spin it may grow stays within its cap.)
    pub(super) fn block_until_timed(
        &self,
        deadline: Option<Instant>,
        spin: Duration,
        done: &dyn Fn() -> bool,
        start: Option<Instant>,
    ) -> (bool, Duration) {
        if let Some(m) = self.many() {
            let start = start.unwrap_or_else(Instant::now);
            return (self.many_block_until(m, deadline, spin, done), start.elapsed());
        }
        let mut seen_gen = DRIVERS_GEN.load(Ordering::SeqCst);
        let mut drivers = self.drivers();
        if drivers.is_empty() {
            let start = start.unwrap_or_else(Instant::now);
            return (self.cv_block_until(deadline, spin, done), start.elapsed());
        }
        for d in &drivers {
            d.enter();
        }
        let spin = if spin.is_zero() || cpus_idle() { spin } else { Duration::ZERO };
        // When the wait began (read at its first idle pass unless given),
        // the last clock reading, whether the waiter slept since the wait
        // began, and the passes that moved something since that reading.
        let mut start = start;
        let (mut last, mut slept, mut busy) = (start, false, 0u32);
        // Several drivers: the ones idle at the end of the last wait are
        // left to `poll` (no read on a socket that had nothing).
        let mut several = drivers.len() > 1;
        let idle = if several { self.idle.load(Ordering::Relaxed) } else { 0 };
        let mut ready = if idle == 0 {
            Ready::All
        } else {
            Ready::Some(Set::of(drivers.len(), |i| i >= 64 || idle & 1 << i == 0))
        };
        // Drivers that moved in this wait, and zero-timeout looks so far;
        // the quiet ones, as the last waits left them.
        let mut quiet = if several { self.quiet() } else { 0 };
        let mut moved_any = 0u64;
        let mut looks = 0u32;
        // Drivers whose input a load of shared memory tells (a ring) are
        // looked at in a tight loop for a while before each yield: a system
        // call costs more than the message it waits for (once per wait).
        let mut tight = drivers.iter().map(|d| d.spin_looks()).min().unwrap_or(0);
        // Whether a pass drove the drivers (each drive sends what they hold).
        let mut drove = false;
        let res = 'wait: loop {
            if done() {
                if !drove {
                    // Done before any drive (the event was queued already):
                    // frames this thread posted and the drivers hold for
                    // batching go now, not when a helper next looks.
                    for d in &drivers {
                        d.flush();
                    }
                }
                break true;
            }
            drove = true;
            // After a pass, only the drivers that moved are driven again at
            // once; the others when `poll` reports them (no read on an idle
            // socket per pass).
            let mut moved = false;
            let mut which = Set::none(drivers.len());
            for (i, d) in drivers.iter().enumerate() {
                if ready.has(i) {
                    let m = d.drive();
                    if m {
                        which.insert(i);
                    }
                    moved |= m;
                    if several && i < 64 {
                        if m {
                            moved_any |= 1 << i;
                        }
                        // Written only when it changes (no locked
                        // instruction per drive).
                        let bit = 1u64 << i;
                        let was_idle = self.idle.load(Ordering::Relaxed) & bit != 0;
                        if m && was_idle {
                            self.idle.fetch_and(!bit, Ordering::Relaxed);
                        } else if !m && !was_idle {
                            self.idle.fetch_or(bit, Ordering::Relaxed);
                        }
                    }
                    // What this driver did may be what the waiter waits for:
                    // it returns now, not after a read on every other socket.
                    if m && several && done() {
                        break 'wait true;
                    }
                }
            }
            if moved {
                ready = Ready::Some(which);
                busy += 1;
                continue;
            }
            if DRIVERS_GEN.load(Ordering::SeqCst) != seen_gen {
                // A driver came or went (a backend's new completion queue;
                // its `add_driver` wakes this waiter, or the poll below sees
                // the change after announcing itself): the wait goes on
                // over the new list. (The generation is the process's: most
                // changes are other EVDs', and leave this list as it was.)
                seen_gen = DRIVERS_GEN.load(Ordering::SeqCst);
                let fresh = self.drivers();
                let same = |a: &Arc<dyn Driver>, b: &Arc<dyn Driver>| {
                    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
                };
                let unchanged = fresh.len() == drivers.len()
                    && fresh.iter().zip(&drivers).all(|(a, b)| same(a, b));
                // (None left: the old list stays, as it was entered.)
                if !unchanged && !fresh.is_empty() {
                    for d in fresh.iter().filter(|d| !drivers.iter().any(|o| same(o, d))) {
                        d.enter();
                    }
                    for d in drivers.iter().filter(|d| !fresh.iter().any(|n| same(n, d))) {
                        d.leave();
                    }
                    // What was learnt of the old list is told by its indices.
                    if several && moved_any != 0 {
                        self.note_moved(moved_any, drivers.len());
                    }
                    drivers = fresh;
                    (several, quiet, moved_any) = (drivers.len() > 1, 0, 0);
                    tight = drivers.iter().map(|d| d.spin_looks()).min().unwrap_or(0);
                    ready = Ready::All;
                    continue;
                }
            }
            let now = Instant::now();
            let start = *start.get_or_insert(now);
            (last, busy) = (Some(now), 0);
            if deadline.is_some_and(|d| now >= d) {
                if looks == 0 && !matches!(ready, Ready::All) {
                    // A wait that ends before its first look (a zero
                    // timeout) still looks once at the drivers the pass
                    // left out (idle at the last wait): what came to them
                    // meanwhile is taken in, as a poll of the EVD promises.
                    looks = 1;
                    // (No deadline passed on: only the drivers' own timers
                    // count as due, so an idle look drives nothing.)
                    ready = self.poll_once(&drivers, None, done, false, true, 0, Some((now, 0)));
                    continue;
                }
                break false;
            }
            // Spinning, one `poll` with a zero timeout tells which drivers
            // have input (one system call for any number of endpoints);
            // after that, block in it.
            let spinning = now.duration_since(start) < spin;
            if spinning
                && tight > 0
                && (0..tight).any(|_| {
                    std::hint::spin_loop();
                    done() || drivers.iter().any(|d| d.has_input())
                })
            {
                ready = Ready::All;
                continue;
            }
            if spinning {
                // Spin politely: a thread this one just woke (the peer of a
                // ping-pong, a forwarder) may be queued on this very CPU —
                // wake-ups go to the waker's CPU — and would otherwise wait
                // out the whole spin. With nothing else runnable the yield
                // returns at once, so an uncontended spin is unchanged.
                std::thread::yield_now();
                crate::stages::stamp(crate::stages::Stage::Yielded);
            }
            let skip = if spinning && looks % QUIET_LOOK != 0 { quiet } else { 0 };
            looks = looks.wrapping_add(1);
            slept |= !spinning;
            // With the generation: a driver added after the check above,
            // before this waiter announced itself, woke nobody.
            let at = Some((now, seen_gen));
            ready = self.poll_once(&drivers, deadline, done, false, spinning, skip, at);
        };
        // Only a wait that got something through a driver counts (one that
        // found its event queued by someone else says nothing about them).
        if several && moved_any != 0 {
            self.note_moved(moved_any, drivers.len());
        }
        if several {
            // One clock read for all of them (tens of nanoseconds each, on
            // the way from the event to the application).
            let left = Instant::now();
            for d in &drivers {
                d.leave_at(left);
            }
            (res, start.map_or(Duration::ZERO, |s| left.saturating_duration_since(s)))
        } else {
            for d in &drivers {
                d.leave();
            }
            // A ping-pong's wait ends one moving pass after its last clock
            // reading; a wait that slept, or moved data for several passes,
            // reads the clock again. One that never found itself idle took
            // no waiting.
            let took = match (start, last) {
                (Some(s), Some(l)) => {
                    let end = if slept || busy > 1 { Instant::now() } else { l };
                    end.saturating_duration_since(s)
                }
                _ => Duration::ZERO,
            };
            (res, took)
        }
    }

    /// A wait got something through the drivers in `moved` (by index) of
    /// `n`: the others age by one such wait (see `SoftEvd::ages`).
    pub(super) fn note_moved(&self, moved: u64, n: usize) {
        let old = self.ages.load(Ordering::Relaxed);
        let mut ages = 0u64;
        for i in 0..n.min(8) {
            let age = if moved & 1 << i != 0 { 0 } else { (old >> (8 * i) & 0xff).min(254) + 1 };
            ages |= age << (8 * i);
        }
        // Written only when they change (no store per wait once settled).
        if ages != old {
            self.ages.store(ages, Ordering::Relaxed);
        }
    }

    /// The quiet drivers, by index (see `SoftEvd::ages`).
    pub(super) fn quiet(&self) -> u64 {
        let ages = self.ages.load(Ordering::Relaxed);
        (0..8).filter(|i| ages >> (8 * i) & 0xff >= QUIET_WAITS).fold(0, |q, i| q | 1 << i)
    }

    /// [`Evd::progress_until`](crate::Evd::progress_until) for an EVD
    /// layered over other EVDs (see [`SoftEvd::arm_over`]) whose endpoints
    /// this queue drives through ([`SoftEvd::drive_through`]): sends what
    /// the endpoints hold for batching, then harvests (`harvest`, true when
    /// it moved anything), and while nothing is there drives the endpoints'
    /// sockets in this thread until `ready()`, an event here or a poke from
    /// an underlying EVD, for at most `timeout`. An RDMA write a peer aims
    /// at this process (a barrier's flag) so lands in the waiting thread's
    /// own context. With `blind` (an underlying EVD cannot poke this one)
    /// it polls instead: yielding while `spin` lasts, then in naps that
    /// grow to 256 us.
    pub fn progress_over(
        &self,
        timeout: Option<Duration>,
        spin: Option<Duration>,
        ready: &dyn Fn() -> bool,
        blind: bool,
        mut harvest: impl FnMut() -> bool,
    ) -> bool {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let spin = spin.unwrap_or_else(|| self.spin_time());
        self.flush_writes();
        let mut naps = 0u32;
        loop {
            let seen = self.poke_gen();
            let moved = harvest();
            let queued = || self.queued.load(Ordering::SeqCst) > 0;
            if ready() || queued() {
                return true;
            }
            if moved {
                naps = 0;
                continue;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return false;
            }
            let left = deadline.map(|d| d - now);
            if !blind {
                let spin = spin.saturating_sub(now - start);
                let done = || ready() || queued() || self.poke_gen() != seen;
                self.drive_until_spin(left, spin, &done);
                continue;
            }
            if now - start < spin {
                std::thread::yield_now();
                continue;
            }
            let nap = Duration::from_micros(1 << (naps.min(8) + 1).min(8));
            std::thread::sleep(left.map_or(nap, |l| l.min(nap)));
            naps = naps.saturating_add(1);
        }
    }

    /// Blocks once in `poll(2)` on the drivers and the wake-up descriptor
    /// (with `writes_only`, on the drivers that have frames to send; with
    /// `nowait`, only looks; the drivers in `skip`, by index, not at all
    /// unless that would leave no descriptor). `at`, if the caller just
    /// read the clock: that reading, which times how long a blocking poll
    /// may sleep until the drivers' next deadline (no reading of its own;
    /// a look, `nowait`, reads a fresh one to tell whether a deadline is
    /// due), and the driver generation `drivers` was taken at (0: none),
    /// a change of which ends the wait as `done()` does. Returns which
    /// drivers to drive next.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn poll_once(
        &self,
        drivers: &Drivers,
        deadline: Option<Instant>,
        done: &dyn Fn() -> bool,
        writes_only: bool,
        nowait: bool,
        skip: u64,
        at: Option<(Instant, u64)>,
    ) -> Ready {
        let now = at.map(|a| a.0);
        let list_gen = at.map_or(0, |a| a.1);
        // Its driver list is out of date (see `block_until_timed`).
        let done = || done() || (list_gen != 0 && DRIVERS_GEN.load(Ordering::SeqCst) != list_gen);
        // Event waiters wake on pushes and pokes; a flushing helper on pokes only.
        let (waiters, efd) = if nowait {
            (None, None)
        } else if writes_only {
            (Some(&self.poke_waiters), Self::fd_of(&self.poke_efd))
        } else {
            (Some(&self.poll_waiters), self.efd())
        };
        let counted = waiters.is_some() && !writes_only;
        if counted {
            POLLERS.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(w) = waiters {
            w.fetch_add(1, Ordering::SeqCst);
            // Re-check after announcing ourselves: a push in between wrote the eventfd.
            if done() {
                w.fetch_sub(1, Ordering::SeqCst);
                if counted {
                    POLLERS.fetch_sub(1, Ordering::SeqCst);
                }
                return Ready::All;
            }
        }
        let mut fds: SmallVec<[PollFd<'_>; 8]> = SmallVec::new();
        let mut owner: SmallVec<[usize; 8]> = SmallVec::new();
        if let Some(e) = efd {
            fds.push(PollFd::from_borrowed_fd(e, PollFlags::IN));
            owner.push(usize::MAX);
        }
        let mut until = deadline;
        // Skipped only while another driver's descriptor is looked at.
        let skip = if skip != 0 && (0..drivers.len()).all(|i| i < 64 && skip & 1 << i != 0) {
            0
        } else {
            skip
        };
        for (i, d) in drivers.iter().enumerate() {
            let w = if nowait { d.look_on() } else { d.wait_on() };
            let skipped = i < 64 && skip & 1 << i != 0;
            if let Some((fd, int)) = w.fd.filter(|(_, i)| !skipped && (i.write || !writes_only)) {
                let mut f = PollFlags::empty();
                if int.read && !writes_only {
                    f |= PollFlags::IN;
                }
                if int.write {
                    f |= PollFlags::OUT;
                }
                fds.push(PollFd::from_borrowed_fd(fd, f));
                owner.push(i);
            }
            // A flushing helper leaves the drivers' timers to their waiters and
            // progress threads (it does not drive what it does not poll).
            if let Some(dl) = w.deadline.filter(|_| !writes_only) {
                until = Some(until.map_or(dl, |u| u.min(dl)));
            }
        }
        let left = if nowait {
            Some(Duration::ZERO)
        } else {
            // Without an eventfd (exhausted descriptors) fall back to short naps.
            let cap = if efd.is_none() { Some(Duration::from_micros(200)) } else { None };
            let left = until.map(|u| u.saturating_duration_since(now.unwrap_or_else(Instant::now)));
            match (left, cap) {
                (Some(l), Some(c)) => Some(l.min(c)),
                (l, c) => l.or(c),
            }
        };
        let ts =
            left.map(|l| Timespec { tv_sec: l.as_secs() as _, tv_nsec: l.subsec_nanos() as _ });
        // A driver's look before a sleep may itself make progress that
        // queues no event (libfabric's `fi_trywait` runs a progress pass,
        // which may place an RDMA write a `progress_until` waits for): the
        // condition is looked at once more (this waiter announced itself
        // before the look, so what comes later wakes it).
        // (The fence orders the drivers' announcements in their looks, a
        // peer's "ring me" flag, before the look at the condition.)
        let again = !nowait && waiters.is_some() && {
            std::sync::atomic::fence(Ordering::SeqCst);
            done()
        };
        // A look with nothing to look at needs no system call.
        let n = if (nowait && fds.is_empty()) || again {
            0
        } else {
            poll(&mut fds, ts.as_ref()).unwrap_or(0)
        };
        crate::stages::stamp(if n > 0 {
            crate::stages::Stage::PollReady
        } else {
            crate::stages::Stage::PollDone
        });
        let mut ready = Ready::All;
        let mut woke = false;
        if n > 0 {
            let mut which = Set::none(drivers.len());
            for (f, &o) in fds.iter().zip(&owner) {
                if f.revents().is_empty() {
                    continue;
                }
                if o == usize::MAX {
                    woke = true;
                } else {
                    which.insert(o);
                }
            }
            // A wake-up (push, poke, changed interest) means: look at everything.
            if !woke {
                ready = Ready::Some(which);
            }
        } else if nowait {
            // Nothing ready and no timer can be due sooner than we look again,
            // unless one already is.
            // (A fresh reading: a driver that is due "now" read its deadline
            // after the caller's clock; a spinning caller's may be a yield old.)
            let due = until.is_some_and(|u| u <= Instant::now());
            if !due {
                ready = Ready::Some(Set::none(drivers.len()));
            }
        }
        drop(fds);
        if let Some(w) = waiters {
            w.fetch_sub(1, Ordering::SeqCst);
        }
        if counted {
            POLLERS.fetch_sub(1, Ordering::SeqCst);
        }
        if woke {
            if let Some(e) = efd {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(e, &mut b);
                // Another waiter asleep on the same descriptor must not miss
                // the events this one will not take: ring it again.
                if !writes_only && self.queued.load(Ordering::SeqCst) > 0 {
                    self.wake_pollers();
                }
            }
        }
        ready
    }

    pub(super) fn cv_block_until(
        &self,
        deadline: Option<Instant>,
        spin: Duration,
        done: &dyn Fn() -> bool,
    ) -> bool {
        let start = Instant::now();
        // Never past the deadline: a poll (a zero timeout) does not spin.
        let spin = deadline.map_or(spin, |d| spin.min(d.saturating_duration_since(start)));
        while start.elapsed() < spin {
            if done() {
                return true;
            }
            // Yield rather than burn: the thread that will push may be queued on this CPU.
            std::thread::yield_now();
        }
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let res = loop {
            // `done` reads atomics only; checking it under the queue lock closes
            // the gap between the check and the wait (pushers notify under it).
            if done() {
                break true;
            }
            match deadline {
                None => q = self.cv.wait(q).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break false;
                    }
                    q = self.cv.wait_timeout(q, d - now).unwrap_or_else(|p| p.into_inner()).0;
                }
            }
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        res
    }

    /// Waits until at least one event is queued, or a poke after generation
    /// `seen` (see [`SoftEvd::poke_gen`]), or `timeout`, without dequeuing:
    /// for a consumer that must dequeue under a lock of its own to keep events
    /// in order. Spins for `spin` first. Returns whether events are queued.
    pub fn wait_ready(&self, seen: u64, spin: Duration, timeout: Duration) -> bool {
        let done =
            || self.queued.load(Ordering::SeqCst) > 0 || self.pokes.load(Ordering::SeqCst) != seen;
        self.block_until(Some(Instant::now() + timeout), spin, &done);
        self.queued.load(Ordering::Acquire) > 0
    }

    /// For a helper thread that feeds the endpoints reporting here (a
    /// multirail rail thread): returns once poked after `seen` (see
    /// [`SoftEvd::poke_gen`]) or after `timeout`, meanwhile pushing out the
    /// endpoints' queued frames as their sockets drain. It never blocks on
    /// reads and does not count as a waiter, so the endpoints' own progress
    /// keeps serving the receive side.
    pub fn wait_poke_flushing(&self, seen: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let done = || self.pokes.load(Ordering::SeqCst) != seen;
        loop {
            if done() {
                return;
            }
            let drivers = self.drivers();
            let mut moved = false;
            for d in &drivers {
                if d.wait_on().fd.is_some_and(|(_, i)| i.write) {
                    moved |= d.drive();
                }
            }
            if moved {
                continue;
            }
            if Instant::now() >= deadline {
                return;
            }
            self.poll_once(&drivers, Some(deadline), &done, true, false, 0, None);
        }
    }

    /// Wakes this EVD's waiters in [`SoftEvd::wait_or_poke`] without an event.
    pub fn poke(&self) {
        self.pokes.fetch_add(1, Ordering::SeqCst);
        self.wake_all();
        self.wake_armed();
        if self.poke_waiters.load(Ordering::SeqCst) > 0 {
            if let Some(fd) = Self::fd_of(&self.poke_efd) {
                let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
            }
        }
    }

    pub(super) fn wake_all(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.q.lock().unwrap_or_else(|p| p.into_inner());
            self.cv.notify_all();
        }
        self.wake_pollers();
    }

    /// The poke generation: read it *before* checking other sources, then
    /// pass it to [`SoftEvd::wait_or_poke`] so that no poke is missed.
    pub fn poke_gen(&self) -> u64 {
        self.pokes.load(Ordering::SeqCst)
    }

    /// Like [`Evd::wait`](crate::Evd::wait), but also returns `Ok(None)` once poked after
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
        self.wait_or_poke_spin(timeout, threshold, seen, Duration::ZERO)
    }

    /// [`SoftEvd::wait_or_poke`] that first spins (driving) for `spin`.
    ///
    /// # Errors
    /// [`Error::Timeout`].
    pub fn wait_or_poke_spin(
        &self,
        timeout: Option<Duration>,
        threshold: usize,
        seen: u64,
        spin: Duration,
    ) -> Result<Option<Event>> {
        self.wait_or_poke_spin_from(Instant::now(), timeout, threshold, seen, spin).0
    }

    /// [`SoftEvd::wait_or_poke_spin`] for a caller that read the clock
    /// (`now`) just before: `timeout` and `spin` count from `now`, and
    /// about how long the wait took from `now` comes back with the result
    /// (up to the wait's last clock reading when it ended one moving pass
    /// after it, else a fresh one), so that a waiter timing its waits reads
    /// the clock once per wait.
    ///
    /// # Errors
    /// [`Error::Timeout`] (in the result).
    pub fn wait_or_poke_spin_from(
        &self,
        now: Instant,
        timeout: Option<Duration>,
        threshold: usize,
        seen: u64,
        spin: Duration,
    ) -> (Result<Option<Event>>, Duration) {
        let threshold = threshold.max(1);
        let deadline = timeout.map(|t| now + t);
        let mut again = false;
        loop {
            let done = || {
                self.queued.load(Ordering::SeqCst) >= threshold
                    || self.pokes.load(Ordering::SeqCst) != seen
            };
            // Again after a lost race for the event (rare): timed by a fresh
            // reading (a pass's own figure starts at `now` only on the
            // first); with drivers it spins for what is left of the spin
            // from `now`.
            let (ok, took) = self.block_until_timed(deadline, spin, &done, Some(now));
            let took = if again { now.elapsed() } else { took };
            again = true;
            if let Some(e) = self.pop(threshold) {
                return (Ok(Some(e)), took);
            }
            if self.pokes.load(Ordering::SeqCst) != seen {
                return (Ok(None), took);
            }
            if !ok {
                return (Err(Error::Timeout), took);
            }
        }
    }
}

/// Which drivers a waiter drives next.
pub(super) enum Ready {
    All,
    Some(Set),
}

impl Ready {
    pub(super) fn has(&self, i: usize) -> bool {
        match self {
            Ready::All => true,
            Ready::Some(v) => v.has(i),
        }
    }
}

/// A set of a waiter's drivers, by index: bits while they are 64 or
/// fewer (no vector to fill and drop on every pass of a wait). Asked only
/// about indices of the drivers it was made for (beyond them a list says
/// yes, bits say no below 64).
pub(super) enum Set {
    Mask(u64),
    List(SmallVec<[bool; 8]>),
}

impl Set {
    /// None of `n` drivers.
    pub(super) fn none(n: usize) -> Set {
        if n <= 64 { Set::Mask(0) } else { Set::List(SmallVec::from_elem(false, n)) }
    }

    /// Those of `n` drivers for which `f` holds.
    pub(super) fn of(n: usize, f: impl Fn(usize) -> bool) -> Set {
        let mut s = Set::none(n);
        for i in (0..n).filter(|&i| f(i)) {
            s.insert(i);
        }
        s
    }

    pub(super) fn insert(&mut self, i: usize) {
        match self {
            Set::Mask(m) => *m |= 1 << i,
            Set::List(v) => v[i] = true,
        }
    }

    pub(super) fn has(&self, i: usize) -> bool {
        match self {
            Set::Mask(m) => i >= 64 || m & 1 << i != 0,
            Set::List(v) => v.get(i).copied().unwrap_or(true),
        }
    }
}
