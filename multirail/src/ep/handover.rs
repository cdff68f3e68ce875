//! Exactly-once messages across a control-rail failover.
//!
//! Sends and writes with immediate data (the DTOs that take one of the
//! peer's receives) travel on the control rail. When it is lost, the ones
//! whose completions died with it may or may not have reached the peer:
//! sending them all again would hand the peer some twice (each taking a
//! receive of its own), sending none would lose some. So the two ends
//! compare counts before anything ordered goes on the new control rail:
//!
//! 1. Every live rail but the control rail holds one receive of the
//!    endpoint's own (posted when the endpoint connects and when a rail
//!    is connected again), so it is there before any of the user's
//!    receives that move to it. When this end's control rail moves, it
//!    holds back the stripes the old control rail loses (and every ordered
//!    DTO posted meanwhile).
//! 2. Once the old control rail has ended here (every receive it completed
//!    has been counted) and its rail thread owes it nothing more, this end
//!    sends, first on the new control rail, the number of messages its
//!    receives have taken so far. (A message that took no receive at the
//!    peer, refused there or never sent, gives its number up, so the two
//!    ends number the same messages.)
//! 3. When the peer's count arrives in that receive, every held message
//!    the peer counted is complete (it was delivered); the rest, and the
//!    other held stripes, go again on the new control rail, in order; then
//!    ordered DTOs flow again.
//!
//! A peer whose control rail has not moved (it has not noticed the loss:
//! a link cut shows first at the end that sends) gets the count in the
//! receive its new control rail already holds: it learns the move from it,
//! handles what its old control rail's EVD still holds, ends that rail,
//! moves the user's receives and answers with its own. If the new control
//! rail is lost as well, the exchange starts over on the next one; with
//! no rail left the held DTOs fail with the endpoint.
//!
//! Not covered: atomics lost with the control rail are performed again,
//! as before (the peer keeps no count of them).

use crate::ep::state::*;
use crate::planner::Stripe;
use rmr_api::{DtoCompletion, EpId, EpState, Status};
use smallvec::SmallVec;

/// Cookie bit of the handover's own send and receive.
pub(super) const NOTICE_BIT: u64 = 1 << 61;
/// The notice region of an endpoint of `rails` rails: the peer's count
/// lands at `8 * rail`, this end's goes from `8 * rails`.
pub(super) fn notice_len(rails: usize) -> u64 {
    8 * (rails as u64 + 1)
}

/// A control-rail handover in progress (see the module docs).
pub(super) struct Handover {
    /// The rails that were the control rail since it began, with the
    /// endpoint each had then (a rail connected again since has ended it).
    pub(super) olds: SmallVec<[(usize, EpId); 2]>,
    /// The control rail now: where the counts are exchanged.
    pub(super) new: usize,
    /// This end's count has been sent on `new`.
    pub(super) sent: bool,
    /// The peer's count, from its notice on `new`.
    pub(super) peer: Option<u64>,
    /// Stripes lost with an old control rail (sent again in posting order).
    pub(super) held: Vec<(u64, usize)>,
}

impl Core {
    /// Marks `rail` failed in the plan; a control rail that moves (while
    /// connected) starts a handover, or moves the one in progress along.
    pub(super) fn fail_rail(&self, st: &mut State, rail: usize) {
        let before = st.planner.control_rail();
        st.planner.rail_failed(rail);
        self.control_moved(st, before);
    }

    /// The control rail was `before` and may have moved: see
    /// [`Core::fail_rail`]. (The new one already holds the endpoint's own
    /// receive for the peer's count: it was not the control rail.)
    pub(super) fn control_moved(&self, st: &mut State, before: Option<usize>) {
        let (Some(old), Some(new)) = (before, st.planner.control_rail()) else { return };
        if old == new || st.conn != EpState::Connected {
            return;
        }
        self.handing_over.store(true, std::sync::atomic::Ordering::SeqCst);
        let h = st.handover.get_or_insert_with(|| Handover {
            olds: SmallVec::new(),
            new,
            sent: false,
            peer: None,
            held: Vec::new(),
        });
        let was = (old, st.cur[old]);
        if !h.olds.contains(&was) {
            h.olds.push(was);
        }
        h.new = new;
        h.sent = false;
        h.peer = None;
        for &(id, idx) in &h.held {
            if let Some(s) =
                st.reqs.get_mut((id - st.front_id) as usize).and_then(|r| r.stripes.get_mut(idx))
            {
                s.rail = new;
            }
        }
        st.notices += 1;
    }

    /// Posts the endpoint's own receive on rail `rail` (a live rail that
    /// is not the control rail). A rail that takes no receive is ending:
    /// its loss is handled as any other.
    pub(super) fn post_notice_recv(&self, rail: usize) {
        let segs: Segs = smallvec::smallvec![(self.notice.clone(), 8 * rail as u64, 8)];
        let _ = self.post_recv_on(rail, NOTICE_BIT | rail as u64, &segs);
    }

    /// Whether stripes that `rail` loses are held for the handover.
    pub(super) fn holds(&self, st: &State, rail: usize) -> bool {
        st.handover.as_ref().is_some_and(|h| h.olds.iter().any(|&(r, _)| r == rail))
    }

    /// Holds stripe `idx` of request `id`, lost with an old control rail.
    pub(super) fn hold(&self, st: &mut State, id: u64, idx: usize) {
        let Some(h) = st.handover.as_mut() else { return };
        let new = h.new;
        if !h.held.contains(&(id, idx)) {
            h.held.push((id, idx));
        }
        st.reqs[(id - st.front_id) as usize].stripes[idx].rail = new;
    }

    /// The peer's notice: a completion of the endpoint's own receive on
    /// `rail`. The peer's control rail is `rail` now; if this end's is
    /// not, this end follows: its old control rail ends here (the peer has
    /// given it up) and a handover begins that already has the peer's count.
    pub(super) fn on_notice(
        &self,
        st: &mut State,
        rail: usize,
        c: &DtoCompletion,
        evs: &mut UserEvents,
    ) -> Works {
        // (A count on a rail this end has given up, or ended, is stale: the
        // peer has moved on from it.)
        if !c.status.is_ok() || c.bytes != 8 || c.ep != st.cur[rail] || st.ended[rail] {
            return Works::new();
        }
        if st.handover.as_ref().is_some_and(|h| h.new != rail) && self.holds(st, rail) {
            return Works::new();
        }
        let Ok(n) = self.notice_mem.load_u64(8 * rail as u64) else { return Works::new() };
        if let Some(h) = st.handover.as_mut().filter(|h| h.new == rail) {
            h.peer = Some(n);
            return Works::new();
        }
        let before = st.planner.control_rail();
        if st.conn != EpState::Connected || before == Some(rail) || !st.planner.set_control(rail) {
            return Works::new();
        }
        self.control_moved(st, before);
        if let Some(h) = st.handover.as_mut() {
            h.peer = Some(n);
        }
        tracing::warn!(target: "rmr::multirail", ep = self.id.0, control = rail, "the peer's control rail moved; following it");
        match before {
            Some(old) => self.give_up_control(
                st,
                old,
                "the peer gave up this rail (its control rail moved)",
                evs,
            ),
            None => Works::new(),
        }
    }

    /// This end follows the peer's control rail away from `old`, which
    /// the peer has given up (the state and harvest locks held): what
    /// `old`'s EVD holds is handled first (every receive it completed is
    /// counted before this end's count goes), then the rail ends here,
    /// what it still carries is held for the handover, and the user's
    /// receives move to the control rail, in order, behind the endpoint's
    /// own receive there. The rail's endpoint lives on until the rejoin
    /// replaces it: what it reports of them later is stale.
    pub(super) fn give_up_control(
        &self,
        st: &mut State,
        old: usize,
        reason: &str,
        evs: &mut UserEvents,
    ) -> Works {
        let mut works = Works::new();
        let mut batch = Batch::new();
        self.drain_rail(old, &mut batch);
        for (r, ev) in batch {
            works.extend(self.on_event(st, r, ev, evs));
        }
        if st.ended[old] || st.conn != EpState::Connected {
            return works;
        }
        works.extend(self.rail_broken(st, old, reason, evs));
        self.reissue_owed(st, old, &mut works);
        let Some(ctl) = st.planner.control_rail() else { return works };
        let (old_ep, new_ep, front) = (st.cur[old], st.cur[ctl], st.recv_front);
        for i in 0..st.recvs.len() {
            let Some(r) = st.recvs[i].as_ref().filter(|r| r.on == old_ep && r.held.is_none())
            else {
                continue;
            };
            if self.post_recv_on(ctl, front + i as u64, &r.local).is_ok() {
                if let Some(r) = st.recvs[i].as_mut() {
                    r.on = new_ep;
                }
            }
        }
        works
    }

    /// Message number `m` was given up (its message took no receive at
    /// the peer): every later message moves down by one.
    pub(super) fn unnumber(&self, st: &mut State, m: u64) {
        for r in st.reqs.iter_mut().filter(|r| r.msg > m) {
            r.msg -= 1;
        }
        st.sent_msgs -= 1;
    }

    /// The handover's next steps, as far as they can go now: this end's
    /// count once every old control rail has ended; the held stripes once
    /// the peer's count is in. Posts that work itself, in order.
    pub(super) fn handover_step(&self, st: &mut State) {
        let mut works = Works::new();
        let Some(h) = st.handover.as_ref() else { return };
        let new = h.new;
        // Every old control rail has ended here (or been replaced), and no
        // work handed to its thread can still fail over behind the count.
        let drained = h.olds.iter().all(|&(r, ep)| {
            (st.ended[r] || st.cur[r] != ep)
                && self.rails[r].pending.load(std::sync::atomic::Ordering::SeqCst) == 0
        }) && !self.has_failed();
        if !h.sent && drained {
            let at = 8 * self.rails.len() as u64;
            let _ = self.notice_mem.store_u64(at, st.recv_msgs);
            st.posted[new] += 1;
            works.push(Work {
                rail: new,
                kind: Kind::Send { solicited: false },
                local: smallvec::smallvec![(self.notice.clone(), at, 8)],
                remote: None,
                cookie: NOTICE_BIT | st.notices,
                silent: false,
                urgent: false,
            });
            if let Some(h) = st.handover.as_mut() {
                h.sent = true;
            }
        }
        let Some(peer) = st.handover.as_ref().filter(|h| h.sent).and_then(|h| h.peer) else {
            self.issue_in_order(works);
            return;
        };
        let mut h = st.handover.take().expect("handover");
        self.handing_over.store(false, std::sync::atomic::Ordering::SeqCst);
        st.peer_took = st.peer_took.max(peer);
        // In posting order (two old rails' stripes may have failed
        // interleaved).
        h.held.sort_unstable();
        tracing::debug!(target: "rmr::multirail", ep = self.id.0, control = new, sent = st.recv_msgs, peer, held = h.held.len(), "control rail handed over");
        for (id, idx) in h.held {
            let Some(req) = st.reqs.get_mut((id - st.front_id) as usize) else { continue };
            if req.stripes[idx].done {
                continue;
            }
            if req.msg != 0 && req.msg <= peer {
                Self::delivered(st, id, idx);
            } else {
                self.send_again(st, id, idx, new, &mut works);
            }
        }
        // One at a time: the count first, then the messages in their order,
        // whatever the engine (fork-join posts a batch's works at once).
        self.issue_in_order(works);
    }

    /// Posts `works` one after another, each as a batch of its own.
    fn issue_in_order(&self, works: Works) {
        for w in works {
            self.issue(smallvec::smallvec![w]);
        }
    }

    /// [`Core::handover_step`] outside a harvest (a rail thread posted the
    /// last work a lost control rail owed), with what follows from it.
    pub(super) fn step_handover(&self) {
        // As a harvest does (the harvest lock first): failed posts, the
        // step, the deferred DTOs it frees and the user's events, in order.
        let _h = self.harvest.lock().unwrap_or_else(|e| e.into_inner());
        self.handle(&mut Batch::new());
    }

    /// Stripe `idx` of request `id`, a message the peer's count showed it
    /// received: complete, not sent again.
    pub(super) fn delivered(st: &mut State, id: u64, idx: usize) {
        let req = &mut st.reqs[(id - st.front_id) as usize];
        req.stripes[idx].done = true;
        req.remaining -= 1;
        st.redundant += 1;
    }

    /// Stripe `idx` of request `id` goes again, whole, on rail `nr`.
    pub(super) fn send_again(
        &self,
        st: &mut State,
        id: u64,
        idx: usize,
        nr: usize,
        works: &mut Works,
    ) {
        let i = (id - st.front_id) as usize;
        let (soff, slen) = {
            let s = &st.reqs[i].stripes[idx];
            (s.off, s.len)
        };
        let req = &mut st.reqs[i];
        req.stripes[idx].rail = nr;
        let stripe = Stripe { rail: nr, offset: soff, len: slen };
        works.push(Self::stripe_work(req, id, idx, &stripe));
        st.planner.posted(nr, slen);
        st.posted[nr] += 1;
        let seq = st.posted[nr];
        st.reqs[i].stripes[idx].seq = seq;
        // Fenced requests must also wait for the stripe sent again.
        for d in st.deferred.iter_mut() {
            d.need[nr] = d.need[nr].max(seq);
        }
    }

    /// The endpoint ended with a handover in progress: its held stripes
    /// fail with `status`.
    pub(super) fn end_handover(&self, st: &mut State, status: Status) {
        let Some(h) = st.handover.take() else { return };
        self.handing_over.store(false, std::sync::atomic::Ordering::SeqCst);
        for (id, idx) in h.held {
            let Some(req) = st.reqs.get_mut((id - st.front_id) as usize) else { continue };
            if req.stripes[idx].done {
                continue;
            }
            req.stripes[idx].done = true;
            if req.status.is_ok() {
                req.status = status;
            }
            req.remaining -= 1;
        }
    }
}
