//! Holding a small suppressed RDMA write for the next send (see
//! [`crate::eager`]), and posting it alone when none comes in time.
//!
//! A held write is the endpoint's last transmit record, its entry and
//! data already in its header buffer, not yet given to libfabric. Every
//! post of the endpoint first either takes it into its message or posts it
//! alone ([`crate::dto`]); a thread that begins to wait on or drives an
//! ofi CQ, and the CQ's progress thread, post it alone too (the triggers
//! of [`crate::cork`], which also decides whether holding pays).

use crate::cork::By;
use crate::dto::{TxMeta, TxState, token};
use crate::eager;
use crate::ep::EpShared;
use crate::ffi::{EAGAIN, EpH};
use crate::msg::{self, Iov, Remote};
use rmr_api::{DtoCompletion, Event, Result, Sge, Status};
use std::sync::atomic::Ordering;

impl EpShared {
    /// Holds the write `meta` of `local`'s bytes to `r` if that pays:
    /// `None` when held, else the record back to post as usual.
    pub(crate) fn hold(
        &self,
        local: &[Sge<'_>],
        r: Remote,
        mut meta: TxMeta,
    ) -> Result<Option<TxMeta>> {
        let g = self.fid.read().unwrap_or_else(|e| e.into_inner());
        if g.is_none() || self.state() != rmr_api::EpState::Connected {
            return Ok(Some(meta));
        }
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if tx.holding || tx.q.len() + 1 >= self.ia.feat.tx_size || !crate::order::may_hold(&tx, &r)
        {
            return Ok(Some(meta));
        }
        let Some(c) = tx.cork.as_mut() else { return Ok(Some(meta)) };
        if !c.hold(&self.me) {
            return Ok(Some(meta));
        }
        let mut b = tx.take_hdr();
        let w = eager::Write { key: r.key, addr: r.addr, seq: tx.next_seq, cookie: meta.cookie };
        let dst = eager::put_write(&mut b, 0, w, r.len as usize);
        if let Err(e) = crate::dto::copy_from(local, dst) {
            tx.give_hdr(b);
            if let Some(c) = tx.cork.as_mut() {
                c.cancel_hold();
            }
            return Err(e);
        }
        meta.seq = tx.next_seq;
        meta.hlen = eager::write_room(r.len as usize);
        meta.hdr = Some(b);
        meta.held = Some(r);
        meta.prov_signal = false;
        tx.next_seq += 1;
        tx.q.push_back(meta);
        tx.holding = true;
        Ok(None)
    }

    /// Posts the held write alone (`by` whom, for the note). Returns
    /// libfabric's answer: on `EAGAIN` the write stays held.
    pub(crate) fn post_held(&self, ep: &EpH, tx: &mut TxState, by: By) -> isize {
        let f = &self.ia.feat;
        let idx = self.tx_idx.load(Ordering::Relaxed);
        let (signal, flags) = tx.signal(false, false, f);
        let Some(m) = tx.q.back_mut().filter(|m| m.held.is_some()) else {
            // Flushed meanwhile: nothing is held any more.
            tx.holding = false;
            if let Some(c) = tx.cork.as_mut() {
                c.unhold(Some(by));
            }
            return 0;
        };
        let (Some(r), Some(h)) = (m.held, m.hdr.as_ref()) else { return 0 };
        let iov =
            [Iov { addr: h.as_ptr() as usize + eager::WRITE_DATA, len: r.len as usize, desc: 0 }];
        // SAFETY: the header buffer stays in the record (which is only
        // dropped after the write's completion or the endpoint's flush).
        let ret = unsafe { msg::rma(ep, false, &iov, r, token(idx, false, m.seq), 0, flags) };
        if ret == 0 {
            m.held = None;
            m.prov_signal = signal;
            tx.blind = if signal { 0 } else { tx.blind + 1 };
            tx.holding = false;
            if let Some(c) = tx.cork.as_mut() {
                c.unhold(Some(by));
            }
        } else if ret != EAGAIN {
            // The endpoint is failing: the write is reported, not lost.
            if let Some(m) = tx.q.pop_back() {
                tx.holding = false;
                if let Some(c) = tx.cork.as_mut() {
                    c.unhold(Some(by));
                }
                let d =
                    DtoCompletion::new(self.id, rmr_api::Cookie(m.cookie), m.op, Status::Broken, 0);
                self.req.push(Event::Dto(d));
                tx.recycle(m);
            }
        }
        ret
    }

    /// Posts a held write alone and sends what a corked socket holds (see
    /// [`crate::cork::uncork_all`]).
    pub(crate) fn uncork(&self, by: By) {
        let g = self.fid.read().unwrap_or_else(|e| e.into_inner());
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if tx.holding {
            if let Some(ep) = g.as_ref() {
                if self.post_held(ep, &mut tx, by) == EAGAIN {
                    // Still held: the next waiter or progress pass tries again.
                    if let Some(c) = tx.cork.as_mut() {
                        c.release(by);
                        c.relist(&self.me);
                    }
                    return;
                }
            }
        }
        if let Some(c) = tx.cork.as_mut() {
            c.unlist(by);
        }
    }
}
