//! The acknowledgement and credit window: delayed acknowledgements (armed,
//! due, sent), and the receive side's stall while it waits for a posted
//! receive (the credit the peer's sends need).

use crate::ep::shared::*;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl EpShared {
    /// Schedules an acknowledgement `delay` from now (unless one is due sooner).
    ///
    /// A deadline whose acknowledgements all went out since (a reply
    /// carried them) is stale: it is replaced, not kept. Kept, it would send
    /// this new acknowledgement alone as soon as it passed, however soon
    /// the reply to this frame follows (in a ping-pong of signalled writes:
    /// an extra frame and a wake-up of the peer in many round trips).
    pub(crate) fn arm_ack(&self, delay: Duration) {
        let at = Instant::now() + delay;
        let rx_done = self.rx_done.load(Ordering::Acquire);
        let d = self.ack_due.raw();
        // (Only the receive side arms; a driver taking the deadline meanwhile
        // makes the replacement fail, and the set below arms anew.)
        let stale = self.acked_sent.load(Ordering::Acquire) >= self.ack_for.load(Ordering::Acquire);
        if stale && self.ack_due.replace(d, at) {
            // (Later than the one replaced: a thread polling with that one
            // wakes on it and takes this one; no need to wake it now.)
            self.ack_for.store(rx_done, Ordering::Release);
            return;
        }
        if self.ack_due.set_if_none(at) {
            self.ack_for.store(rx_done, Ordering::Release);
            self.timer_armed();
        }
    }

    /// A new deadline exists: threads blocked in `poll` with an older one
    /// (the progress helper, waiters on the EVDs) must look again.
    pub(super) fn timer_armed(&self) {
        if self.bg_polling.load(Ordering::SeqCst) {
            self.kick();
        }
        // (No waiter blocked anywhere: nobody to wake, no EVD to find.)
        if rmr_api::provider::SoftEvd::any_poller() {
            for evd in self.distinct_evds() {
                evd.wake();
            }
        }
    }

    /// Sends the delayed acknowledgement once due, if no frame carried it.
    pub(crate) fn ack_timer(&self) -> bool {
        if !self.ack_due.take_passed() {
            return false;
        }
        let mut w = true;
        if self.send_ack_if_wanted(&mut w).is_err() {
            self.shutdown_stream();
        }
        true
    }

    pub(crate) fn stall(&self, until: Instant) {
        self.stall_until.set(until);
        // News only when the stall begins: a driver that finds the same
        // message still waiting for a receive wakes nobody (the progress
        // helper, woken by its own drive, would spin until the receive
        // came, on the CPU the application computes on).
        if !self.stalled.swap(true, Ordering::SeqCst) {
            self.timer_armed();
        }
    }

    pub(crate) fn unstall(&self) {
        if self.stalled.swap(false, Ordering::SeqCst) {
            self.stall_until.clear();
        }
    }

    /// A receive was posted while the receive side waited for one: go on
    /// here if nobody else is reading (a thread that is reads it after it
    /// releases the receive side, see `drive_rx`), and once the wait is
    /// over wake whoever waits.
    pub(super) fn resume(&self) {
        if !self.stalled.load(Ordering::SeqCst) {
            return;
        }
        self.drive_rx();
        if self.stalled.load(Ordering::SeqCst) {
            return;
        }
        self.kick();
        for evd in self.distinct_evds() {
            evd.wake();
        }
    }
}
