//! Progress: driving the socket from whichever thread waits (the
//! [`Driver`] the EP registers with its EVDs), and the EP as the IA's
//! progress engine sees it ([`Tended`]) for when nobody waits.

use crate::engine::{Next, Tended, Watched};
use crate::ep::rx::End;
use crate::ep::shared::*;
use rmr_api::Status;
use rmr_api::provider::{Driver, Interest, QuickLook, WaitOn};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

impl EpShared {
    /// The helper's look at this EP while it stands back
    /// (`seen`/`same`: the EP's wait count at the last look, and looks since
    /// it changed).
    pub(super) fn watch_look(&self, seen: &mut u64, same: &mut u32) -> Look {
        if self.ended.load(Ordering::Acquire) {
            return Look::Wake;
        }
        if self.active.load(Ordering::SeqCst) == 0 {
            return if self.driven_recently() { Look::Keep } else { Look::Wake };
        }
        let w = self.waits.load(Ordering::SeqCst);
        if w != *seen {
            (*seen, *same) = (w, 0);
            return Look::Keep;
        }
        *same += 1;
        // The same wait at `same` looks after the first, each at least a
        // watch after the last: long once that spans the handover's long
        // wait (2 ms by default, longer after quick returns), whatever
        // the watch's period. A thread that polls in waits of a
        // millisecond is never found so.
        let watch = self.ia.cfg.watch.as_nanos().max(1) as u64;
        if u64::from(*same) * watch < self.handover.long_wait_ns() {
            Look::Keep
        } else {
            Look::Deep(w)
        }
    }

    /// Whether an application thread drives this EP now or did within [`LINGER`].
    /// A thread that left a long wait and kicked the helper (`handing`)
    /// hands the EP over at once: it likely computes now.
    pub(super) fn driven_recently(&self) -> bool {
        self.active.load(Ordering::SeqCst) > 0
            || !self.handing.load(Ordering::SeqCst)
                && now_ns().saturating_sub(self.left_at.load(Ordering::SeqCst))
                    < LINGER.as_nanos() as u64
    }

    /// Runs the receive side if no other thread does. Returns whether it
    /// moved. A receive posted while it ran, for a message that waited for
    /// one, is taken here after the lock is released (its poster found the
    /// lock held and left it to this thread).
    pub(super) fn drive_rx(&self) -> bool {
        let moved = self.drive_rx_once();
        if self.stalled.load(Ordering::SeqCst)
            && !self.recvs.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
        {
            return self.drive_rx_once() || moved;
        }
        moved
    }

    fn drive_rx_once(&self) -> bool {
        let Some(tx) = self.tx.get() else { return false };
        let Ok(mut g) = self.rx.try_lock() else { return false };
        let Some(rx) = g.as_mut() else { return false };
        match self.read_ready(rx, tx.stream()) {
            Ok(m) => {
                // Ended meanwhile by another thread, which could not take
                // the receive state from us: what we were placing ends too.
                if self.ended.load(Ordering::Acquire) {
                    if let Some(c) = rx.take_owed() {
                        drop(g);
                        self.complete_ended(c, Status::Flushed);
                    }
                }
                m
            }
            Err(end) => {
                let owed = rx.take_owed();
                drop(g);
                self.finish_owing(end, owed);
                true
            }
        }
    }

    /// The peer-stall clock (see [`crate::TcpConfig::stall_timeout`]):
    /// runs while frames wait to be sent and no byte leaves or arrives;
    /// ends the EP once it passes the timeout. Returns whether it did.
    fn stall_check(&self) -> bool {
        let limit = self.ia.cfg.stall_timeout;
        let Some(tx) = self.tx.get() else { return false };
        if limit.is_zero() || !tx.pending().0 {
            // Nothing waits (the common case): no clock read.
            if self.stuck_since.load(Ordering::Relaxed) != 0 {
                self.stuck_since.store(0, Ordering::Relaxed);
            }
            return false;
        }
        let seen = [tx.tx_bytes.load(Ordering::Relaxed), self.frames[1].load(Ordering::Relaxed)];
        let now = now_ns();
        let moved =
            seen.iter().zip(&self.stuck_seen).any(|(v, s)| s.swap(*v, Ordering::Relaxed) != *v);
        let since = self.stuck_since.load(Ordering::Relaxed);
        if moved || since == 0 {
            self.stuck_since.store(now.max(1), Ordering::Relaxed);
            return false;
        }
        let waited = Duration::from_nanos(now.saturating_sub(since));
        if waited < limit || self.ended.load(Ordering::Acquire) {
            return false;
        }
        let _ = self.stalled_for.set(waited);
        let queued = tx.queued();
        self.finish(End::Broken(format!(
            "peer stalled: it consumed nothing for {waited:?} while {queued} frames waited to be sent"
        )));
        true
    }

    /// The IA's helper looks at this EP ([`Tended::tend`]).
    fn tend_now(&self) -> Next {
        if self.ended.load(Ordering::Acquire) {
            self.detach();
            return Next::Gone;
        }
        // Stand back while an application thread drives, and for LINGER
        // after the last one left: watched (one look every `watch` for
        // all such EPs, not a timer per EP: a waiter on an EVD with many
        // drivers enters each only while it drives it, many times a
        // millisecond), or after a recent takeover looked at again soon
        // (`stand_back`).
        if self.driven_recently() {
            self.bg_polling.store(false, Ordering::SeqCst);
            if self.active.load(Ordering::SeqCst) > 0 {
                // A thread came back before the helper took over.
                self.handing.store(false, Ordering::SeqCst);
            }
            return self.stand_back();
        }
        // Announce the helper's watch, so that a waiter arriving meanwhile
        // kicks it back out (the waiter's timers would not be in its
        // deadline).
        self.bg_polling.store(true, Ordering::SeqCst);
        if self.active.load(Ordering::SeqCst) > 0 {
            // A thread came in just now, perhaps before it could see the
            // flag (then nobody kicks the helper): look again as a quick
            // look would, not only at the watch.
            self.bg_polling.store(false, Ordering::SeqCst);
            return self.stand_back();
        }
        // Taken over from threads that compute between waits: look again
        // soon once they are back (see `Handover`). Before the drive: a
        // thread that comes back during it is a return to count.
        self.handover.took_over(self.waits.load(Ordering::SeqCst));
        if self.drive() && self.active.load(Ordering::SeqCst) > 0 {
            // A waiter came in while the helper drove, found the receive
            // side busy and went to poll the socket that the helper had
            // just emptied. What landed may raise no event (an RDMA write
            // into memory the waiter polls, see SoftEvd::drive_until):
            // wake it to look again.
            for evd in self.distinct_evds() {
                evd.wake();
            }
        }
        if self.ended.load(Ordering::Acquire) {
            self.detach();
            return Next::Gone;
        }
        self.handing.store(false, Ordering::SeqCst);
        let w = self.wait_on();
        let (read, write) = w.fd.map_or((false, false), |(_, i)| (i.read, i.write));
        Next::Arm { read, write, errors: w.fd.is_some(), deadline: w.deadline }
    }

    /// The helper stands back from an EP an application thread drives or
    /// just left: watched, or after a recent takeover looked at again
    /// soon (every [`LINGER`], or [`LINGER`] after the last driver left;
    /// the quick looks of
    /// [`Handover`]). A wait that lasts from one such look to the next is
    /// left to kick the helper as it ends, rather than looked at every
    /// [`LINGER`].
    fn stand_back(&self) -> Next {
        let drivers = || {
            let driving = self.active.load(Ordering::SeqCst) > 0;
            (self.waits.load(Ordering::SeqCst), driving)
        };
        match self.handover.look(drivers) {
            QuickLook::Off => Next::Watch,
            QuickLook::Soon => {
                let at = Instant::now() + LINGER;
                Next::Arm { read: false, write: false, errors: false, deadline: Some(at) }
            }
            QuickLook::Hold => {
                Next::Arm { read: false, write: false, errors: false, deadline: None }
            }
            QuickLook::Left => {
                let left = instant_of(self.left_at.load(Ordering::SeqCst));
                Next::Arm {
                    read: false,
                    write: false,
                    errors: false,
                    deadline: Some(left + LINGER),
                }
            }
        }
    }

    /// [`Driver::leave`] at `at` (on the [`now_ns`] scale).
    pub(super) fn stamp_left(&self, at: u64) {
        self.left_at.store(at, Ordering::SeqCst);
        // A long wait ends: the helper takes the EP over at once.
        if self.active.fetch_sub(1, Ordering::SeqCst) == 1 && self.handover.leave() {
            self.handing.store(true, Ordering::SeqCst);
            self.kick();
            rmr_api::provider::yield_to_helper();
        }
    }
}

impl Tended for EpShared {
    fn fd(&self) -> BorrowedFd<'_> {
        self.tx.get().expect("registered once connected").stream().as_fd()
    }

    fn slot(&self) -> &AtomicUsize {
        &self.slot
    }

    fn kick_pending(&self) -> &AtomicBool {
        &self.kick_pending
    }

    fn tend(&self) -> Next {
        self.tend_now()
    }

    fn look(&self, seen: &mut u64, same: &mut u32) -> Watched {
        match self.watch_look(seen, same) {
            Look::Keep => Watched::Stay,
            Look::Wake => Watched::Tend,
            Look::Deep(w) => {
                let drivers =
                    || (self.waits.load(Ordering::SeqCst), self.active.load(Ordering::SeqCst) > 0);
                if self.handover.mark_deep(w, drivers) {
                    Watched::Leave
                } else if self.active.load(Ordering::SeqCst) == 0 {
                    // The waiter left meanwhile and may not have seen `deep`.
                    Watched::Tend
                } else {
                    // A new wait began: not the long one.
                    Watched::Stay
                }
            }
        }
    }
}

impl Driver for EpShared {
    fn drive(&self) -> bool {
        if self.ended.load(Ordering::Acquire) {
            return false;
        }
        let Some(tx) = self.tx.get() else { return false };
        let mut moved = match tx.flush() {
            Ok(m) => m,
            Err(e) => {
                // End here, with the cause: the receive side would only see
                // the stream closed once the error was consumed by the send.
                self.finish(End::Broken(format!("send: {e}")));
                return true;
            }
        };
        moved |= self.drive_rx();
        let zc = tx.zc.is_some();
        if zc {
            moved |= self.reap_zerocopy();
        }
        moved |= self.ack_timer();
        if zc {
            self.early_zerocopy();
        }
        moved |= self.stall_check();
        let overdue = self.disconnect_until.passed();
        if overdue && !self.ended.load(Ordering::Acquire) {
            self.finish(End::Orderly);
            moved = true;
        }
        moved
    }

    fn flush(&self) -> bool {
        if self.ended.load(Ordering::Acquire) {
            return false;
        }
        let Some(tx) = self.tx.get() else { return false };
        match tx.flush_all() {
            Ok(m) => {
                self.early_zerocopy();
                m
            }
            Err(_) => {
                // The receive side sees the error and ends the connection.
                self.shutdown_stream();
                true
            }
        }
    }

    fn wait_on(&self) -> WaitOn<'_> {
        let Some(tx) = self.tx.get().filter(|_| !self.ended.load(Ordering::Acquire)) else {
            return WaitOn { fd: None, deadline: None };
        };
        let stalled = self.stalled.load(Ordering::SeqCst);
        let (queued, held) = tx.pending();
        let interest = Interest { read: !stalled && !self.tx_backlogged(), write: queued || held };
        let stall = if stalled { self.stall_until.at() } else { None };
        let (disc, ack) = (self.disconnect_until.at(), self.ack_due.at());
        let stuck = match self.stuck_since.load(Ordering::Relaxed) {
            0 => None,
            t if !self.ia.cfg.stall_timeout.is_zero() => {
                Some(instant_of(t) + self.ia.cfg.stall_timeout)
            }
            _ => None,
        };
        let deadline = [stall, disc, ack, tx.deferred_due(), stuck].into_iter().flatten().min();
        // Sends waiting for the kernel's zero-copy notices: the socket's
        // error queue, which a poll reports whatever it asked for.
        let zc = tx.zc.as_ref().is_some_and(|z| z.busy());
        let fd = (interest.read || interest.write || zc).then(|| (tx.stream().as_fd(), interest));
        WaitOn { fd, deadline }
    }

    fn enter(&self) {
        self.active.fetch_add(1, Ordering::SeqCst);
        if self.handing.load(Ordering::Relaxed) {
            self.handing.store(false, Ordering::SeqCst);
        }
        self.waits.fetch_add(1, Ordering::SeqCst);
        if self.bg_polling.load(Ordering::SeqCst) && self.bg_polling.swap(false, Ordering::SeqCst) {
            // Back to an EP the helper had taken over: did this thread come
            // straight back (it polls), rather than compute meanwhile?
            // (Cleared here: the flag is the helper's again at its next
            // takeover, and a later release must not think it has it.)
            let away = now_ns().saturating_sub(self.left_at.load(Ordering::SeqCst));
            self.handover.returned(away < LINGER.as_nanos() as u64);
            self.kick();
        }
    }

    fn leave(&self) {
        self.stamp_left(now_ns());
    }

    fn release(&self) {
        // As if the last driver left long ago: the IA's helper, told now
        // (unless it has the endpoint already), takes it over at once; a
        // look it has pending finds it left long ago too.
        if self.active.load(Ordering::SeqCst) == 0 {
            self.left_at.store(0, Ordering::SeqCst);
            if !self.bg_polling.load(Ordering::SeqCst) {
                self.kick();
            }
        }
    }

    fn stable_fd(&self) -> Option<BorrowedFd<'_>> {
        self.tx.get().map(|t| t.stream().as_fd())
    }

    fn leave_at(&self, now: Instant) {
        self.stamp_left(ns_of(now));
    }
}

/// What the helper's look at a watched EP found.
pub(super) enum Look {
    /// Look again next time.
    Keep,
    /// Take it over: its drivers left (or the EP ended).
    Wake,
    /// One wait (the EP's `waits`-th) has lasted: the waiter kicks the
    /// helper on leaving.
    Deep(u64),
}
