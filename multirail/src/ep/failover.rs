//! Failover: a rail that breaks or ends. Its stripes in flight go again on
//! the survivors (ordered DTOs on the new control rail), its silent stripes
//! (never to be implied now) with them; the user sees `RailDown` while
//! rails survive (and the connecting side tries to bring the rail back, see
//! the `rejoin` module), and `Broken` (or `Disconnected`) when the last one
//! ends.

use crate::ep::state::*;
use rmr_api::{DtoOp, EpState, Event, Status};
use smallvec::SmallVec;

impl Core {
    /// Failover: stripe `idx` of request `id`, lost with rail `rail`, goes
    /// again, whole, on the new control rail; with no survivor it fails
    /// `Broken`. Every stripe of the lost rail goes to that one rail, in the
    /// order the rail flushes them (its posting order): an ordered DTO that
    /// followed a write's stripe on the lost rail had no fence on it (one
    /// rail keeps its own order), so the two must stay on one rail again. A
    /// stripe sent to another survivor could be overtaken by the notify
    /// behind it (the chaos soak saw a notify reach the server before all of
    /// its write's data).
    pub(super) fn reissue(
        &self,
        st: &mut State,
        rail: usize,
        id: u64,
        idx: usize,
        works: &mut Works,
    ) {
        self.fail_rail(st, rail);
        // Lost with the control rail: held until the counts are compared
        // (see the `handover` module).
        let ordered = st.reqs[(id - st.front_id) as usize].kind.ordered();
        if self.holds(st, rail) || (ordered && st.handover.is_some()) {
            self.hold(st, id, idx);
            return;
        }
        // A message an earlier handover's count already showed delivered
        // (it failed late, on a rail the peer had given up).
        let msg = st.reqs[(id - st.front_id) as usize].msg;
        if msg != 0 && msg <= st.peer_took {
            Self::delivered(st, id, idx);
            return;
        }
        match st.planner.control_rail() {
            Some(nr) => self.send_again(st, id, idx, nr, works),
            None => {
                let req = &mut st.reqs[(id - st.front_id) as usize];
                req.stripes[idx].done = true;
                req.status = Status::Broken;
                req.remaining -= 1;
            }
        }
    }

    /// Every stripe rail `rail` (lost, or its endpoint replaced) still owes
    /// goes again, in posting order, as if the rail had flushed it; its
    /// late completions are stale from now on, and its counters equal.
    pub(super) fn reissue_owed(&self, st: &mut State, rail: usize, works: &mut Works) {
        let front = st.front_id;
        let owed: Vec<(u64, usize)> = st
            .reqs
            .iter()
            .enumerate()
            .flat_map(|(i, q)| {
                q.stripes
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.rail == rail && !s.done)
                    .map(move |(k, _)| (front + i as u64, k))
            })
            .collect();
        for (id, idx) in owed {
            st.planner.completed(rail, st.reqs[(id - front) as usize].stripes[idx].len);
            self.reissue(st, rail, id, idx, works);
        }
        st.completed[rail] = st.posted[rail];
    }

    /// Rail `rail` broke: the EP goes on with the survivors (`RailDown`
    /// tells the user; the rail is connected again later), or breaks with
    /// the last rail; the rail's silent stripes fail over.
    pub(super) fn rail_broken(
        &self,
        st: &mut State,
        rail: usize,
        reason: &str,
        evs: &mut UserEvents,
    ) -> Works {
        st.ended[rail] = true;
        let _span = tracing::warn_span!(target: "rmr::multirail", "failover", ep = self.id.0, rail)
            .entered();
        tracing::warn!(target: "rmr::multirail", reason, "rail lost; its stripes go again on the survivors");
        if st.conn == EpState::Connected {
            self.fail_rail(st, rail);
            if st.planner.live() == 0 {
                st.conn = EpState::Broken;
                self.end_handover(st, Status::Broken);
                st.broken = true;
                evs.push((
                    TO_CONN,
                    Event::Broken {
                        ep: self.id,
                        reason: format!("all rails lost; last: {reason}"),
                    },
                ));
            } else {
                evs.push((
                    TO_CONN,
                    Event::RailDown { ep: self.id, rail: rail as u8, reason: reason.to_string() },
                ));
                self.rail_lost(rail, st.planner.control_rail());
            }
        }
        let works = self.orphan_silent(st, rail, Status::Broken, evs);
        self.maybe_ended(st, evs);
        works
    }

    /// Rail `rail` ended in an orderly disconnect. On the control rail: the
    /// peer closed the logical EP (it disconnects that rail first), so every
    /// rail closes. On another rail, while the control rail lives: the peer
    /// ended that rail alone (it replaced it, or gave up a rail this end
    /// thought alive), which is that rail's loss.
    pub(super) fn rail_disconnected(
        &self,
        st: &mut State,
        rail: usize,
        evs: &mut UserEvents,
    ) -> Works {
        let ctl = st.planner.control_rail();
        if st.conn == EpState::Connected && ctl.is_some_and(|c| c != rail) {
            return self.rail_broken(st, rail, "the peer ended this rail", evs);
        }
        st.ended[rail] = true;
        if st.conn == EpState::Connected {
            // The peer closed the logical EP: close every rail.
            st.conn = EpState::Disconnected;
            self.end_handover(st, Status::Flushed);
            for (r, rl) in self.rails.iter().enumerate() {
                if r != rail {
                    let _ = rl.ep().disconnect();
                }
            }
        }
        let works = self.orphan_silent(st, rail, Status::Flushed, evs);
        self.maybe_ended(st, evs);
        works
    }

    /// Rail `rail` ended: its silent stripes will never be implied; they
    /// fail over like stripes the rail flushed.
    pub(super) fn orphan_silent(
        &self,
        st: &mut State,
        rail: usize,
        status: Status,
        evs: &mut UserEvents,
    ) -> Works {
        let mut works = SmallVec::new();
        st.probe[rail] = None;
        while let Some(sl) = st.silent[rail].pop_front() {
            let c = self.dto(sl.id << 8 | sl.idx as u64, DtoOp::RdmaWrite, status, 0);
            works.extend(self.on_stripe(st, rail, &c, evs));
        }
        works
    }

    pub(super) fn maybe_ended(&self, st: &mut State, evs: &mut UserEvents) {
        if st.ended.iter().all(|e| *e) && !st.broken {
            st.broken = true; // final event posted
            if st.conn == EpState::Disconnected {
                evs.push((TO_CONN, Event::Disconnected { ep: self.id }));
            } else {
                st.conn = EpState::Broken;
                self.end_handover(st, Status::Broken);
                evs.push((
                    TO_CONN,
                    Event::Broken { ep: self.id, reason: "every rail ended".into() },
                ));
            }
        }
    }
}
