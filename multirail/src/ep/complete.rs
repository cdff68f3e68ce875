//! Completions: rail events become stripe completions, stripes become one
//! completion per user DTO, released in posting order; receives are
//! matched in order; deferred (fenced) requests go out once their fence
//! clears. A lost rail's stripes go to [`failover`](super::failover).

use crate::ep::handover::NOTICE_BIT;
use crate::ep::state::*;
use rmr_api::Cookie;
use rmr_api::provider::SoftEvd;
use rmr_api::{DtoCompletion, DtoOp, EpState, Event, Status};
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Core {
    /// Pops finished requests off the front, in posting order.
    pub(super) fn release(&self, st: &mut State, evs: &mut UserEvents) {
        // The finished requests are dropped where they lie (no copy out).
        let mut n = 0;
        for r in st.reqs.iter().take_while(|r| r.remaining == 0) {
            n += 1;
            if r.signalled || !r.status.is_ok() {
                let mut c = self.dto(r.cookie, r.kind.op(), r.status, r.bytes);
                c.imm = r.imm;
                c.rail = r.failed_on;
                evs.push((TO_REQ, Event::Dto(c)));
            }
        }
        if n > 0 {
            st.reqs.drain(..n);
            st.front_id += n as u64;
        }
    }

    /// Releases deferred (fenced) requests whose fences are satisfied.
    pub(super) fn release_deferred(&self, st: &mut State) -> Works {
        let mut works = SmallVec::new();
        while let Some(d) = st.deferred.front() {
            // Ordered DTOs wait for the control rail's handover.
            if st.handover.is_some()
                && st.reqs.get((d.id - st.front_id) as usize).is_some_and(|r| r.kind.ordered())
            {
                break;
            }
            if d.need.iter().zip(&st.completed).any(|(n, c)| c < n) {
                let need = d.need.clone();
                works.extend(self.probe_waiting(st, &need));
                break;
            }
            // Requests deferred ahead of an ordered one were launched after
            // its fence was taken: their stripes count too. Take the fence
            // again now (everything launched so far is ahead of it).
            if let Some(full) = d.fence {
                let ctl = st.planner.control_rail().unwrap_or(0);
                let need: SmallVec<[u64; 8]> = (0..self.rails.len())
                    .map(|r| if r == ctl && !full { 0 } else { st.posted[r] })
                    .collect();
                if need.iter().zip(&st.completed).any(|(n, c)| c < n) {
                    works.extend(self.probe_waiting(st, &need));
                    st.deferred.front_mut().expect("front").need = need;
                    break;
                }
            }
            let d = st.deferred.pop_front().expect("front");
            works.extend(self.launch(st, d.id, None));
        }
        works
    }

    /// A stripe completed (or failed) on `rail`.
    pub(super) fn on_stripe(
        &self,
        st: &mut State,
        rail: usize,
        c: &DtoCompletion,
        evs: &mut UserEvents,
    ) -> Works {
        let mut works = SmallVec::new();
        // A completion that is not the rail's end (success, or an error the
        // peer reported in order) tells that every silent stripe posted
        // before it on this rail completed: their errors would have come first.
        let lost = matches!(c.status, Status::Broken | Status::Flushed);
        if c.cookie.0 & NOTICE_BIT != 0 {
            // The handover's own count (sent, or to be sent again).
            st.completed[rail] += 1;
            if let Some(h) = st.handover.as_mut().filter(|h| h.new == rail && !c.status.is_ok()) {
                h.sent = false;
            }
            return works;
        }
        if c.cookie.0 & PROBE_BIT != 0 {
            let seq = c.cookie.0 & !PROBE_BIT;
            st.completed[rail] += 1;
            if st.probe[rail] == Some(seq) {
                st.probe[rail] = None;
            }
            if !lost {
                self.imply(st, rail, seq);
            }
            self.release(st, evs);
            if st.reqs.iter().skip(1).any(|r| r.remaining == 0) {
                works.extend(self.probe_all(st, false));
            }
            return works;
        }
        let (id, idx) = (c.cookie.0 >> 8, (c.cookie.0 & 0xff) as usize);
        st.completed[rail] += 1;
        if id < st.front_id {
            return works;
        }
        if !lost {
            let seq = st
                .reqs
                .get((id - st.front_id) as usize)
                .and_then(|r| r.stripes.get(idx))
                .filter(|s| s.rail == rail && !s.done)
                .map(|s| s.seq);
            if let Some(seq) = seq {
                self.imply(st, rail, seq);
            }
        }
        let Some(req) = st.reqs.get_mut((id - st.front_id) as usize) else { return works };
        let Some(s) = req.stripes.get_mut(idx) else { return works };
        if s.done || s.rail != rail {
            return works;
        }
        let slen = s.len;
        st.planner.completed(rail, slen);
        let rail_lost = matches!(c.status, Status::Broken | Status::Flushed);
        let req = &mut st.reqs[(id - st.front_id) as usize];
        if c.status.is_ok() {
            let s = &mut req.stripes[idx];
            s.done = true;
            if self.adaptive {
                st.rate[rail].completed(slen, Instant::now());
                // BSS assumes stripes proportional to weights: t = w / rate keeps
                // its fixed point at the rate ratio whatever rounding did to the stripe.
                let w = st.planner.weights()[rail];
                if let Some(t) = st.rate[rail].time_for(1).map(|per_byte| w * per_byte) {
                    let req = &mut st.reqs[(id - st.front_id) as usize];
                    if req.stripes.len() > 1 {
                        req.stripes[idx].time = Some(t);
                    }
                }
            }
            let req = &mut st.reqs[(id - st.front_id) as usize];
            if c.imm.is_some() {
                req.imm = c.imm;
            }
            req.remaining -= 1;
        } else if rail_lost && st.conn == EpState::Connected {
            self.reissue(st, rail, id, idx, &mut works);
        } else {
            let s = &mut req.stripes[idx];
            s.done = true;
            let srail = s.rail as u8;
            if req.status.is_ok() && !c.status.is_ok() {
                req.status = c.status;
                req.failed_on = Some(srail);
            }
            req.remaining -= 1;
            // A message that took no receive at the peer (refused there, or
            // never sent) gives its number up: the peer's count never
            // includes it.
            if req.msg != 0 && !matches!(c.status, Status::Success | Status::RecvTooSmall) {
                let m = std::mem::take(&mut req.msg);
                self.unnumber(st, m);
            }
        }
        let req = &mut st.reqs[(id - st.front_id) as usize];
        if req.remaining == 0 && req.stripes.len() > 1 && req.status.is_ok() {
            let t: SmallVec<[(usize, f64); 8]> =
                req.stripes.iter().filter_map(|s| Some((s.rail, s.time?))).collect();
            if t.len() == req.stripes.len() {
                st.planner.feedback(&t);
            }
        }
        self.release(st, evs);
        // A finished DTO held behind an earlier one that waits only for
        // silent stripes: ask their rails to report.
        let held = id >= st.front_id
            && st.reqs.get((id - st.front_id) as usize).is_some_and(|r| r.remaining == 0);
        // (Every rail with silent stripes: those behind the oldest DTO may
        // sit on other rails, and one round of probes clears them all.)
        if held {
            works.extend(self.probe_all(st, false));
        }
        works
    }

    pub(super) fn on_recv(
        &self,
        st: &mut State,
        rail: usize,
        c: &DtoCompletion,
        evs: &mut UserEvents,
    ) -> Works {
        if c.cookie.0 & NOTICE_BIT != 0 {
            return self.on_notice(st, rail, c, evs);
        }
        let id = c.cookie.0 & !RECV_BIT;
        if id < st.recv_front {
            return SmallVec::new();
        }
        let i = (id - st.recv_front) as usize;
        // A completion of where it was posted before it moved: stale.
        if st.recvs.get(i).is_some_and(|r| r.as_ref().is_some_and(|r| r.on != c.ep)) {
            return SmallVec::new();
        }
        let lost =
            matches!(c.status, Status::Flushed | Status::Broken) && st.conn == EpState::Connected;
        if lost {
            // The control rail died under posted receives: post them again on
            // the new one. The rail's own end may not have been handled yet
            // (its flushed receives can come before its Broken event): it is
            // out of the plan from now on, so the new control rail is a
            // survivor. (Unless the receive is an old endpoint's, flushed
            // after the rail was connected again: the rail lives.)
            if c.ep == st.cur[rail] {
                self.fail_rail(st, rail);
            }
            if let (Some(nr), Some(Some(r))) = (st.planner.control_rail(), st.recvs.get(i)) {
                if self.post_recv_on(nr, id, &r.local).is_ok() {
                    let on = st.cur[nr];
                    if let Some(Some(r)) = st.recvs.get_mut(i) {
                        r.on = on;
                    }
                    return SmallVec::new();
                }
            }
            // No rail took it: it ends here, but receives complete in posting
            // order, and earlier ones re-posted on a rail that has ended
            // since are still to be flushed there. Hold it until they are.
            let earlier = st.recvs.iter().take(i).flatten().any(|r| r.held.is_none());
            if let Some(Some(r)) = st.recvs.get_mut(i).filter(|_| earlier) {
                if r.held.is_none() {
                    r.held = Some(*c);
                    st.held += 1;
                }
                return SmallVec::new();
            }
        }
        if let Some(ev) = self.recv_done(st, c) {
            evs.push((TO_RECV, ev));
        }
        // Receives held back behind this one can go now.
        while let Some(Some(RecvReq { held: Some(h), .. })) = st.recvs.front() {
            let h = *h;
            st.held -= 1;
            if let Some(ev) = self.recv_done(st, &h) {
                evs.push((TO_RECV, ev));
            }
        }
        SmallVec::new()
    }

    /// Receive `c` completed (for good): its user completion.
    pub(super) fn recv_done(&self, st: &mut State, c: &DtoCompletion) -> Option<Event> {
        let i = (c.cookie.0 & !RECV_BIT).checked_sub(st.recv_front)? as usize;
        let taken = !matches!(c.status, Status::Flushed | Status::Broken);
        // (A completion from where it was posted before it moved is stale.)
        let slot = st.recvs.get_mut(i).filter(|r| r.as_ref().is_some_and(|r| r.on == c.ep));
        let ev = slot.and_then(Option::take).map(|r| {
            st.recv_msgs += u64::from(taken);
            let mut u = *c;
            u.ep = self.id;
            u.cookie = Cookie(r.cookie);
            Event::Dto(u)
        });
        while st.recvs.front().is_some_and(Option::is_none) {
            st.recvs.pop_front();
            st.recv_front += 1;
        }
        ev
    }

    /// Handles one event from rail `rail`'s EVD.
    pub(super) fn on_event(
        &self,
        st: &mut State,
        rail: usize,
        ev: Event,
        evs: &mut UserEvents,
    ) -> Works {
        // Only the rail's current endpoint counts (and this EP's own
        // completions of failed posts): what an endpoint the rail had before
        // it was connected again still reports is stale — its stripes were
        // settled when the new one was swapped in, and its end is old news.
        // Receives are the exception: a late one is still the user's.
        match ev {
            Event::Dto(c) if c.cookie.0 & RECV_BIT != 0 => self.on_recv(st, rail, &c, evs),
            Event::Dto(c) if c.ep != st.cur[rail] && c.ep != self.id => SmallVec::new(),
            Event::Dto(c) => self.on_stripe(st, rail, &c, evs),
            Event::Broken { ep, reason } if ep == st.cur[rail] && !st.ended[rail] => {
                self.rail_broken(st, rail, &reason, evs)
            }
            Event::Disconnected { ep } if ep == st.cur[rail] && !st.ended[rail] => {
                self.rail_disconnected(st, rail, evs)
            }
            _ => SmallVec::new(),
        }
    }

    /// A rail EVD's sink (see [`SoftEvd::set_sink`]): a successful receive
    /// pushed while that EVD holds nothing, nobody harvests and the state is
    /// free is translated and delivered to the user's EVD right away —
    /// nothing queued or being handled can precede it (receives complete
    /// only on the control rail, in order). Anything else, or a busy lock,
    /// goes the usual way. Called under the rail EVD's queue lock; takes
    /// its own locks only by trying.
    pub(super) fn sink(&self, ev: Event) -> Option<Event> {
        let c = match ev {
            Event::Dto(c)
                if c.cookie.0 & (RECV_BIT | NOTICE_BIT) == RECV_BIT && c.status.is_ok() =>
            {
                c
            }
            ev => return Some(ev),
        };
        if self.has_failed() {
            return Some(ev);
        }
        let Ok(_h) = self.harvest.try_lock() else { return Some(ev) };
        let Ok(mut st) = self.st.try_lock() else { return Some(ev) };
        if st.held > 0 {
            return Some(ev);
        }
        // A receive already settled (none): dropped, as a harvest would.
        let u = self.recv_done(&mut st, &c)?;
        st.recv_direct += 1;
        drop(st);
        self.deliver_one(TO_RECV, u, None);
        None
    }

    /// Processes a batch of rail events and post failures under one lock.
    pub(super) fn handle(&self, batch: &mut Batch) {
        let _ = self.handle_taking(batch, None);
    }

    /// [`Core::handle`], handing back an event for `take` (see
    /// [`Core::deliver_taking`]).
    pub(super) fn handle_taking(&self, batch: &mut Batch, take: Option<&SoftEvd>) -> Option<Event> {
        // A ping-pong's usual harvest, one receive that completed: it changes
        // no request and releases no fence.
        if let [(_, Event::Dto(c))] = batch[..] {
            if c.cookie.0 & (RECV_BIT | NOTICE_BIT) == RECV_BIT
                && c.status.is_ok()
                && !self.has_failed()
            {
                let mut st = self.lock();
                if st.held == 0 {
                    batch.clear();
                    let ev = self.recv_done(&mut st, &c)?;
                    drop(st);
                    return self.deliver_one(TO_RECV, ev, take);
                }
                drop(st);
            }
        }
        self.handle_all(batch, take)
    }

    /// The general case of [`Core::handle_taking`]. Kept out of line: its
    /// frame (request, stripe and work bookkeeping) is large, and the lone
    /// receive above should not pay for it.
    #[inline(never)]
    pub(super) fn handle_all(&self, batch: &mut Batch, take: Option<&SoftEvd>) -> Option<Event> {
        let mut evs = UserEvents::new();
        let mut st = self.lock();
        let failed: Vec<(usize, u64, Status)> =
            if self.has_failed() && self.has_failed.swap(false, Ordering::AcqRel) {
                std::mem::take(&mut *self.failed.lock().unwrap_or_else(|e| e.into_inner()))
            } else {
                Vec::new()
            };
        for (rail, cookie, status) in failed {
            batch.push((rail, Event::Dto(self.dto(cookie, DtoOp::RdmaWrite, status, 0))));
        }
        let mut works: Works = SmallVec::new();
        // The peer's counts last: a count may end a rail whose events are
        // in this batch too, and those must be handled (counted) first.
        let is_notice = |ev: &Event| matches!(ev, Event::Dto(c) if c.cookie.0 & NOTICE_BIT != 0 && c.cookie.0 & RECV_BIT != 0);
        let mut notices = Batch::new();
        for (rail, ev) in batch.drain(..) {
            if is_notice(&ev) {
                notices.push((rail, ev));
            } else {
                works.extend(self.on_event(&mut st, rail, ev, &mut evs));
            }
        }
        for (rail, ev) in notices {
            works.extend(self.on_event(&mut st, rail, ev, &mut evs));
        }
        self.handover_step(&mut st);
        works.extend(self.release_deferred(&mut st));
        self.release(&mut st, &mut evs);
        if !works.is_empty() {
            self.issue(works);
        }
        drop(st);
        self.deliver_taking(evs, take)
    }
}
