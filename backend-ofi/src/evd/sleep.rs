//! Where the threads of a CQ sleep ([`Sleep`]: the CQ's wait fd, a mirror
//! of its poll set, or naps), how one decides to ([`CqDriver::slumber`]),
//! and the CQ's progress thread.

use super::{CqDriver, EvdShared, LINGER, NAP, after_trywait, poll_in};
use crate::ffi::{Cq, CqWait, Domain};
use crate::waitset::PollSet;
use rmr_api::Result;
use rmr_api::provider::clock::now_ns;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Longest single sleep of a progress thread (its stop flag is checked at
/// least this often).
const SLICE: Duration = Duration::from_millis(50);

/// Stand-back naps (of [`LINGER`]) after which the progress thread sleeps
/// until the last waiter kicks it on leaving (a long wait).
const DEEP_AFTER: u32 = 8;

/// The longest nap of a progress thread that finds, look after look, that
/// waiters came and went meanwhile (a ping-pong, whose threads are never
/// away for long): its naps double from [`LINGER`] up to this. Each
/// wake-up preempts a thread of the process on its CPU; with a look every
/// [`LINGER`], an 8-byte ping-pong's mean half round trip was 5% (loopback)
/// to 8% (a shaped 1 Gbit/s rail) longer, its median the same. What it
/// costs: when such waiters stop waiting for good, the CQ is taken over up
/// to this plus [`LINGER`] later (a passive target's RDMA waits that long
/// once), and so is a lone write left to this thread. Naps are short again
/// after a takeover, and after this thread sent a lone write (see
/// [`crate::cork::left_to_others`]).
const STAND_MAX: Duration = Duration::from_millis(16);

/// Live endpoints one poll-set CQ carries at most: a progress pass polls
/// every socket in the set (about 0.07 us each here: 256 endpoints on one
/// CQ made a round trip 2.4 times as long), where an epoll set costs the
/// same for any number.
pub(super) const POLL_SET_EPS: usize = 16;

/// What a thread waiting on a CQ sleeps on.
pub(super) enum Sleep {
    /// The CQ's wait fd (`FI_WAIT_FD`).
    Fd(RawFd),
    /// A mirror of the CQ's poll set (`FI_WAIT_POLLFD`, see [`crate::waitset`]).
    Set(PollSet),
    /// Nothing (no wait object, or `fi_trywait` unsupported): naps of [`NAP`].
    Nap,
}

/// Where a thread that found a CQ idle goes next.
pub(super) enum Slumber<'a> {
    /// Sleep on this descriptor (`fi_trywait` allowed it).
    On(BorrowedFd<'a>),
    /// Entries or progress are pending: read the CQ again at once.
    Busy,
    /// Nap for [`NAP`] (nothing to sleep on).
    Nap,
}

impl CqDriver {
    /// Starts the progress thread (once).
    pub(super) fn start_pump(self: &Arc<Self>) {
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
        // Its nap while waiters come and go (see `STAND_MAX`), the last
        // leave it saw, and the writes left to others it knew of.
        let mut nap = LINGER;
        let mut seen_left = self.left_at.load(Ordering::SeqCst);
        let mut seen_left_over = crate::cork::left_to_others();
        while !self.stop.load(Ordering::Acquire) {
            self.passes.fetch_add(1, Ordering::Relaxed);
            // Each wake-up sends what a lone write left corked.
            if crate::cork::any() {
                crate::cork::uncork_all(crate::cork::By::Progress);
            }
            let left_over = crate::cork::left_to_others();
            if left_over != seen_left_over {
                // Lone writes wait for wake-ups like this one: look often.
                (seen_left_over, nap) = (left_over, LINGER);
            }
            let active = self.active.load(Ordering::SeqCst) > 0;
            let left = self.left_at.load(Ordering::SeqCst);
            let since = Duration::from_nanos(now_ns().saturating_sub(left));
            if left != seen_left {
                // A waiter left since the last look: a wait going on now is
                // another one. After a long wait, one more look that finds
                // the next wait going on sleeps until its waiter leaves.
                seen_left = left;
                let long = self.deep.swap(false, Ordering::SeqCst);
                standing = if long { DEEP_AFTER } else { 0 };
                if active || (since < LINGER && !long) {
                    // Waiters came and went (a ping-pong) and are back or
                    // about to be: nobody needs this thread; look less
                    // often. (A long wait's waiter that left and is not
                    // back is taken over after `LINGER`, below.)
                    poll_in(&[self.kick.borrow()], nap);
                    nap = (nap * 2).min(STAND_MAX);
                    self.kick.reset();
                    continue;
                }
            }
            if active {
                // The same wait as at the last look: stand back. Short naps
                // first (the waiter may leave for good); after a while,
                // sleep until the last waiter kicks on leaving (announced
                // first, then re-checked).
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
            self.deep.store(false, Ordering::SeqCst);
            if since < LINGER {
                // The last waiter just left: it (or the next) is likely back
                // at once. (Its count of looks stays: after a long wait,
                // the next look that finds the same wait sleeps deep.)
                poll_in(&[self.kick.borrow()], LINGER - since);
                self.kick.reset();
                continue;
            }
            // The waiters left for good: take over, and look often again.
            (standing, nap) = (0, LINGER);
            let read = self.read_if_free();
            if read.is_some() && self.active.load(Ordering::SeqCst) > 0 {
                // A waiter came while this pass ran: an RDMA write the pass
                // placed queues nothing, and it may be what the waiter
                // waits for (`progress_until`); it looks again. (One that
                // this load misses sees the placed bytes itself: it reads
                // the CQ, or looks before a sleep, under the reader lock
                // this pass held, or libfabric's endpoint locks, which the
                // pass released after placing them.)
                if let Some(evd) = self.evd.upgrade() {
                    evd.q.wake();
                }
            }
            if read == Some(true) {
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
    pub(super) fn slumber(&self) -> Slumber<'_> {
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
    pub(super) fn set_changed(&self) -> bool {
        let set = matches!(self.sleep, Sleep::Set(_));
        if set {
            self.kick_if_sleeping();
        }
        set
    }

    /// What a waiter sleeps on at this CQ (the `ofi.cq_wait` note): `poll
    /// set` (with the looks at it that failed, if any), `fd` or `naps`.
    pub(crate) fn sleep_note(&self) -> String {
        match &self.sleep {
            Sleep::Set(s) if s.failures() > 0 => {
                format!("poll set ({} looks at it failed: naps)", s.failures())
            }
            Sleep::Set(_) => "poll set".into(),
            Sleep::Fd(_) => "fd".into(),
            Sleep::Nap => "naps".into(),
        }
    }

    /// Whether another endpoint may join this CQ: every progress pass on a
    /// poll set polls each socket in it, so one carries about
    /// [`POLL_SET_EPS`] endpoints at most (endpoints set up at once may
    /// each find the last place; one that closed but is not dropped keeps
    /// its place); the EVD opens a CQ with an fd for the next ones.
    pub(super) fn has_room(&self) -> bool {
        if !matches!(self.sleep, Sleep::Set(_)) {
            return true;
        }
        let r = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        // An endpoint whose completions all come here holds two slots.
        let mut live: Vec<_> =
            r.eps.iter().filter(|(_, w)| w.strong_count() > 0).map(|(_, w)| w.as_ptr()).collect();
        live.sort_unstable();
        live.dedup();
        live.len() < POLL_SET_EPS
    }
}

impl EvdShared {
    /// Opens a CQ in `domain` with what its waiters will sleep on: a poll
    /// set where `poll_set` asks for one and the provider has it, else the
    /// provider's wait fd, else nothing (naps).
    pub(super) fn open_cq(&self, domain: &Arc<Domain>, poll_set: bool) -> Result<(Arc<Cq>, Sleep)> {
        let usable = |cq: &Cq| self.fabric.trywait(cq) != -(ofi_sys::FI_ENOSYS as i32);
        if poll_set {
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
}
