//! The send path: a posted request becomes a frame (header plus the
//! registered memory itself, one `writev`), queued on the sender; the
//! responses the target sends back.

use crate::ep::shared::*;
use crate::tx::{Pushed, Segs};
use crate::wire::{F_ACK_NOW, F_ACK_REQ, Header};
use rmr_api::{DtoFlags, Error, Result};
use std::sync::atomic::Ordering;

impl EpShared {
    /// Sends a response-type frame (ack, nak, read response, atomic
    /// response). `handled`: the request it answers, which counts as
    /// handled from now on: marked so under the transmit lock, so that no
    /// frame acknowledges the request before its response goes (an
    /// acknowledgement would complete a NAKed write as successful).
    pub(crate) fn respond(
        &self,
        mut h: Header,
        segs: Segs,
        handled: Option<u64>,
    ) -> std::io::Result<()> {
        let tx = self.tx.get().expect("connected");
        let mut st = tx.lock();
        if let Some(seq) = handled {
            self.rx_done.store(seq, Ordering::Release);
        }
        h.ack = self.rx_done.load(Ordering::Acquire);
        self.acked_sent.fetch_max(h.ack, Ordering::AcqRel);
        self.frames[0].fetch_add(1, Ordering::Relaxed);
        let pushed = tx.push(&mut st, &h, segs, false, false, false)?;
        drop(st);
        self.pushed(pushed);
        Ok(())
    }

    /// After a frame was pushed: frames that wait (held for batching, or
    /// queued behind a full socket) need a driver that polls for
    /// writability — waiters blocked now must look again, and the progress
    /// thread, when it polls, too. A waiter that comes (as the poster
    /// usually does next) sends them at once.
    pub(super) fn pushed(&self, p: Pushed) {
        self.early_zerocopy();
        match p {
            Pushed::Queued(true) => {
                self.kick();
                if rmr_api::provider::SoftEvd::any_poller() {
                    for evd in self.distinct_evds() {
                        evd.wake();
                    }
                }
            }
            // A batch newly open to drivers (not one whose posters ring the
            // doorbell themselves, see `Tx::push`).
            Pushed::Held(true) => self.timer_armed(),
            _ => {}
        }
    }

    /// Posts a request frame: assigns its sequence number and records it in
    /// flight under the transmit lock, so wire order, sequence order and
    /// in-flight order agree.
    pub(super) fn post_request(
        &self,
        mut h: Header,
        payload: Segs,
        mut inflight: Inflight,
        flags: DtoFlags,
    ) -> Result<()> {
        self.check_connected()?;
        let tx = self.tx()?;
        let mut st = tx.lock();
        let seq = st.next_seq;
        {
            let mut inf = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            if inf.len() >= self.ia.cfg.max_dtos {
                return Err(Error::QueueFull);
            }
            // Ask for an ack when the user wants a completion, and now and then so the
            // window of suppressed DTOs keeps draining.
            if !flags.contains(DtoFlags::SUPPRESS)
                || seq % 64 == 0
                || inf.len() >= self.ia.cfg.max_dtos / 4
            {
                h.flags |= F_ACK_REQ;
            }
            if flags.contains(DtoFlags::URGENT) {
                h.flags |= F_ACK_REQ | F_ACK_NOW;
            }
            inflight.seq = seq;
            inf.push_back(inflight);
        }
        st.next_seq += 1;
        h.seq = seq;
        h.ack = self.rx_done.load(Ordering::Acquire);
        self.acked_sent.fetch_max(h.ack, Ordering::AcqRel);
        self.frames[0].fetch_add(1, Ordering::Relaxed);
        // Hold a small frame for the next one only while a thread drives this
        // EP (it is waiting, or waited a moment ago and will again, as in a
        // post-post-wait loop): then the batch goes out with the next frame or
        // drive. An EP nobody drives gets its frames written at once, so a
        // post on one EP followed by a wait on another EVD is not delayed.
        let hold = self.ia.cfg.batch && !flags.contains(DtoFlags::URGENT) && self.driven_recently();
        match tx.push(&mut st, &h, payload, false, hold, true) {
            Ok(pushed) => {
                drop(st);
                self.pushed(pushed);
                Ok(())
            }
            Err(e) => {
                // The post fails, so its DTO must not also complete: take it
                // back out of the in-flight queue (it is the newest entry).
                {
                    let mut inf = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
                    if inf.back().is_some_and(|f| f.seq == seq) {
                        inf.pop_back();
                    }
                }
                drop(st);
                let msg = format!("send failed: {e}");
                self.shutdown_stream();
                Err(Error::Broken(msg))
            }
        }
    }
}
