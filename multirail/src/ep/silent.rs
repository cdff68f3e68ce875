//! The silent-write rules: small suppressed DTOs go without a completion
//! of their own; a later completion on the same rail implies them, and a
//! probe (a zero-length signalled write) asks a rail to report when
//! someone waits for them.

use crate::ep::state::*;
use smallvec::SmallVec;

impl Core {
    /// A probe on `rail` if it carries silent stripes (with `any`, any DTO
    /// not yet completed) and has none in flight: a zero-length signalled
    /// write to where its last write went, posted URGENT so the peer
    /// acknowledges it at once. Whoever waits for the rail's completions (a
    /// fence, a full window, a completed DTO held behind a silent one) asks
    /// for one; the completion of a DTO that is not silent comes anyway, but
    /// only after the peer's acknowledgement delay unless a probe hurries it.
    pub(super) fn probe(&self, st: &mut State, rail: usize, any: bool) -> Option<Work> {
        if st.probe[rail].is_some() || st.ended[rail] {
            return None;
        }
        let open = !st.silent[rail].is_empty() || (any && st.completed[rail] < st.posted[rail]);
        if !open {
            return None;
        }
        let (ctx, off) = st.probe_at[rail]?;
        st.posted[rail] += 1;
        let seq = st.posted[rail];
        st.probe[rail] = Some(seq);
        st.signalled[rail] = seq;
        st.probes_posted += 1;
        Some(Work {
            rail,
            kind: Kind::Write,
            local: Segs::new(),
            remote: Some((ctx, off)),
            cookie: PROBE_BIT | seq,
            silent: false,
            // The peer must answer it at once (it may delay acknowledgements).
            urgent: true,
        })
    }

    /// Probes the rails a fence still waits on (`need[r]` DTOs of rail `r`
    /// to have completed).
    pub(super) fn probe_waiting(&self, st: &mut State, need: &[u64]) -> Works {
        let waiting: SmallVec<[usize; 8]> =
            (0..self.rails.len()).filter(|&r| need[r] > st.completed[r]).collect();
        waiting.into_iter().filter_map(|r| self.probe(st, r, true)).collect()
    }

    /// Probes every rail that carries silent stripes (with `any`, every
    /// rail with a DTO not yet completed: a poster waits for a free slot).
    pub(super) fn probe_all(&self, st: &mut State, any: bool) -> Works {
        (0..self.rails.len()).filter_map(|r| self.probe(st, r, any)).collect()
    }

    /// A DTO posted on `rail` as number `seq` completed successfully: every
    /// silent stripe posted before it on that rail has completed too.
    pub(super) fn imply(&self, st: &mut State, rail: usize, seq: u64) {
        // The rail's queue and count looked up once (a silent stream implies
        // dozens at a time).
        let State { silent, reqs, completed, front_id, .. } = st;
        let (q, done) = (&mut silent[rail], &mut completed[rail]);
        while let Some(sl) = q.front().copied().filter(|s| s.seq < seq) {
            q.pop_front();
            // A stripe that failed (its error completion was counted then)
            // or moved to another rail is no longer this rail's.
            let Some(i) = sl.id.checked_sub(*front_id) else { continue };
            let Some(req) = reqs.get_mut(i as usize) else { continue };
            let Some(s) = req.stripes.get_mut(sl.idx) else { continue };
            if s.done || s.rail != rail || s.seq != sl.seq {
                continue;
            }
            s.done = true;
            req.remaining -= 1;
            *done += 1;
        }
    }

    /// Whether a whole DTO on `rail` goes silent: a send, or a write of at
    /// most SILENT_WRITE_MAX bytes, that the user suppressed goes silent on
    /// its rail (no completion, no acknowledgement of its own), as on one
    /// rail, once the rail knows where a probe may go (a write tells it).
    pub(super) fn goes_silent(
        &self,
        st: &State,
        rail: usize,
        kind: Kind,
        bytes: u64,
        signalled: bool,
        has_remote: bool,
    ) -> bool {
        let small = match kind {
            Kind::Send { .. } => true,
            Kind::Write => bytes <= SILENT_WRITE_MAX,
            _ => false,
        };
        small
            && !signalled
            && (st.probe_at[rail].is_some() || matches!(kind, Kind::Write) && has_remote)
            && Self::silent_room(st, rail)
    }

    /// Whether `rail` may carry one more silent stripe: below MAX_SILENT,
    /// or below MAX_SILENT_HARD while a signalled stripe posted after the
    /// oldest silent one has not completed yet.
    pub(super) fn silent_room(st: &State, rail: usize) -> bool {
        let q = &st.silent[rail];
        q.len() < MAX_SILENT
            || (q.len() < MAX_SILENT_HARD
                && st.signalled[rail] > st.completed[rail]
                && q.front().is_some_and(|s| s.seq < st.signalled[rail]))
    }
}
