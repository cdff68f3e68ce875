//! The post path: a user DTO is checked once, planned into stripes (or
//! sent whole to one rail), recorded as a request, deferred behind a fence
//! when the ordering rules say so, and handed to [`issue`](super::issue).

use crate::config::Engine;
use crate::ep::state::*;
use crate::objects::MrLmr;
use crate::planner::{Stripe, Stripes};
use rmr_api::provider::check_local_sges;
use rmr_api::{Access, DtoFlags, EpState, Error, Result, RmrContext, Sge, Status};
use smallvec::SmallVec;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Core {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn post(
        &self,
        kind: Kind,
        local: &[Sge<'_>],
        remote: Option<(&RmrContext, u64)>,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        let need = match kind {
            Kind::Read | Kind::FetchAdd(_) | Kind::CmpSwap(..) => Access::LOCAL_WRITE,
            _ => Access::empty(),
        };
        // The segments are checked (check_local_sges) before anything is
        // recorded — by the rail's own post when the DTO goes whole to a rail
        // at once (the rail's LMRs mirror ours: same bounds and access, in
        // the rail PZ of our PZ), here otherwise.
        if local.len() > self.max_sges {
            return Err(Error::invalid(format!(
                "{} segments, at most {}",
                local.len(),
                self.max_sges
            )));
        }
        let mut bytes = 0u64;
        let mut segs = Segs::new();
        for s in local {
            let l = s.lmr.as_any().downcast_ref::<MrLmr>().ok_or_else(|| {
                Error::Protection("a multirail EP needs LMRs of its multirail PZ".into())
            })?;
            // Against the LMR itself (what the rails are given), not the
            // account of whatever answered the downcast: refused here, not
            // failed later on a rail.
            if s.offset.checked_add(s.len).is_none_or(|e| e > l.inner.len) {
                return Err(Error::OutOfBounds {
                    offset: s.offset,
                    len: s.len,
                    limit: l.inner.len,
                });
            }
            bytes = bytes
                .checked_add(s.len)
                .ok_or_else(|| Error::invalid("segment lengths overflow"))?;
            if s.len > 0 {
                segs.push((l.inner.clone(), s.offset, s.len));
            }
        }
        // A zero-length segment reaches no rail: such a DTO is checked here.
        let rail_checks = segs.len() == local.len();
        if matches!(kind, Kind::FetchAdd(_) | Kind::CmpSwap(..)) {
            if bytes != 8 {
                return Err(Error::invalid("an atomic's result segment must be 8 bytes"));
            }
            if remote.is_some_and(|(c, o)| (c.addr + o) % 8 != 0) {
                return Err(Error::invalid("atomic target must be 8-byte aligned"));
            }
        }
        // Checked here, copied once (into the request's record): a context
        // carries a key per rail.
        if let Some((ctx, off)) = remote {
            if ctx.keys().len() != self.rails.len() {
                return Err(Error::invalid(format!(
                    "RMR context has {} keys, the EP has {} rails",
                    ctx.keys().len(),
                    self.rails.len()
                )));
            }
            if off.checked_add(bytes).is_none_or(|e| e > ctx.len) {
                return Err(Error::OutOfBounds { offset: off, len: bytes, limit: ctx.len });
            }
        }
        let full = flags.contains(DtoFlags::BARRIER_FENCE);
        // Without rail threads nobody makes progress but the caller.
        if self.cfg.engine != Engine::Pinned {
            self.wait_room(kind, full);
        }
        let mut st = self.lock();
        match st.conn {
            EpState::Connected => {}
            EpState::Broken => return Err(Error::Broken("all rails lost".into())),
            _ => return Err(Error::NotConnected),
        }
        if st.reqs.len() >= self.max_dtos {
            let probes = self.probe_all(&mut st, true);
            if !probes.is_empty() {
                self.issue(probes);
            }
            return Err(Error::QueueFull);
        }
        let id = st.front_id + st.reqs.len() as u64;
        let signalled = !flags.contains(DtoFlags::SUPPRESS);
        let urgent = flags.contains(DtoFlags::URGENT);
        let (direct, placed) = self.direct_rail(&mut st, kind, bytes, full);
        if let Some(rail) = direct.filter(|_| rail_checks) {
            // A lone whole stripe (every small or ordered DTO) goes out from the
            // caller at once, no work item, no hand-off; recorded once the rail
            // took it (a rejected post leaves no trace).
            let silent = self.goes_silent(&st, rail, kind, bytes, signalled, remote.is_some());
            let rc = id << 8;
            let posted = match self.post_on(rail, kind, &segs, remote, rc, silent, urgent) {
                Err(e) if is_input_error(&e) => return Err(e),
                r => r,
            };
            let what = (cookie, kind, signalled, urgent);
            self.record_whole(&mut st, id, what, segs, remote, bytes, rail, silent);
            if let Err(e) = posted {
                self.fail_on(rail, rc, &e);
            }
            return Ok(());
        }
        check_local_sges(local, self.pz_id, need, self.max_sges)?;
        self.post_queued(
            st,
            Req::new(
                (cookie, kind, signalled, urgent),
                bytes,
                segs,
                remote.map(|(c, o)| (*c, o)),
                SmallVec::new(),
            ),
            id,
            full,
            placed,
        );
        Ok(())
    }

    /// The general post (out of line: the lone whole DTO above, every small
    /// message, stays compact): records request `id`, defers it behind a
    /// fence or plans, records and hands out its stripes.
    #[inline(never)]
    pub(super) fn post_queued(
        &self,
        mut st: MutexGuard<'_, State>,
        req: Req,
        id: u64,
        full: bool,
        placed: Option<usize>,
    ) {
        let kind = req.kind;
        st.reqs.push_back(req);
        Self::number_message(&mut st);
        // Fence: ordered operations wait for earlier stripes on other rails;
        // BARRIER_FENCE waits for every earlier stripe.
        let ctl = st.planner.control_rail().unwrap_or(0);
        if kind.ordered() || full || !st.deferred.is_empty() {
            let need: SmallVec<[u64; 8]> = (0..self.rails.len())
                .map(|r| if r == ctl && !full { 0 } else { st.posted[r] })
                .collect();
            let blocked = !st.deferred.is_empty()
                || (kind.ordered() && st.handover.is_some())
                || need.iter().zip(&st.completed).any(|(n, c)| c < n);
            if blocked {
                let probes = self.probe_waiting(&mut st, &need);
                let fence = (kind.ordered() || full).then_some(full);
                st.deferred.push_back(Deferred { id, need, fence });
                if !probes.is_empty() {
                    self.issue(probes);
                }
                return;
            }
        }
        let works = self.launch(&mut st, id, placed);
        let mut evs = UserEvents::new();
        if works.is_empty() {
            self.release(&mut st, &mut evs);
        }
        self.issue(works);
        drop(st);
        self.deliver(evs);
    }

    /// The request just queued, if a message, gets the next message number
    /// (see the `handover` module).
    #[inline]
    pub(super) fn number_message(st: &mut State) {
        if let Some(r) = st.reqs.back_mut().filter(|r| r.kind.message()) {
            st.sent_msgs += 1;
            r.msg = st.sent_msgs;
        }
    }

    /// Without rail threads nobody makes progress but the caller: a fenced
    /// post polls the rails until its fence clears, a post into a full
    /// window polls until a slot frees (the paper's non-threaded engine).
    /// Out of line: the common post finds room at once.
    #[inline(never)]
    pub(super) fn wait_room(&self, kind: Kind, full: bool) {
        let mut start = None;
        loop {
            let st = self.lock();
            let blocked = st.reqs.len() >= self.max_dtos
                || ((kind.ordered() || full) && self.fenced(&st, full));
            drop(st);
            if !blocked
                || start.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(30)
            {
                break;
            }
            // Have the rails it waits on report now (silent stripes
            // complete no other way; the others not before the peer's
            // acknowledgement delay).
            let mut st = self.lock();
            let probes = self.probe_all(&mut st, true);
            if !probes.is_empty() {
                self.issue(probes);
            }
            drop(st);
            if !self.poll_rails() {
                self.await_rails(Duration::from_millis(10));
            }
        }
    }

    /// Whether an ordered (or fully fenced) post would have to wait now.
    pub(super) fn fenced(&self, st: &State, full: bool) -> bool {
        let ctl = st.planner.control_rail().unwrap_or(0);
        !st.deferred.is_empty()
            || st.handover.is_some()
            || (0..self.rails.len()).any(|r| (r != ctl || full) && st.completed[r] < st.posted[r])
    }

    /// Plans (whole on `chosen` if the planner already placed it) and
    /// records request `id`'s stripes, returning their work.
    pub(super) fn launch(&self, st: &mut State, id: u64, chosen: Option<usize>) -> Works {
        let (plan, silent) = self.record(st, id, chosen);
        let req = &st.reqs[(id - st.front_id) as usize];
        plan.iter()
            .enumerate()
            .map(|(i, s)| {
                let mut w = Self::stripe_work(req, id, i, s);
                w.silent = silent;
                w
            })
            .collect()
    }

    /// Plans request `id` (whole on `chosen` if the planner already placed
    /// it) and records its stripes as posted. Returns the plan (empty: no
    /// rail left, the request failed) and whether its one stripe goes silent.
    pub(super) fn record(&self, st: &mut State, id: u64, chosen: Option<usize>) -> (Stripes, bool) {
        let idx = (id - st.front_id) as usize;
        let (kind, bytes) = (st.reqs[idx].kind, st.reqs[idx].bytes);
        let plan: Stripes = if let Some(r) = chosen {
            smallvec::smallvec![Stripe { rail: r, offset: 0, len: bytes }]
        } else if kind.ordered() {
            st.planner
                .control_rail()
                .map(|r| Stripe { rail: r, offset: 0, len: bytes })
                .into_iter()
                .collect()
        } else {
            st.planner.plan(bytes)
        };
        if plan.is_empty() {
            let req = &mut st.reqs[idx];
            req.status = Status::Broken;
            req.remaining = 0;
            return (plan, false);
        }
        let req = &st.reqs[idx];
        let silent = plan.len() == 1
            && self.goes_silent(st, plan[0].rail, kind, bytes, req.signalled, req.remote.is_some());
        self.note_stripes(st, id, &plan, silent);
        (plan, silent)
    }

    /// Records the stripes of request `id` (the last one queued or a
    /// deferred one) as posted. A silent stripe's bytes do not count as in
    /// flight for the planner (few, and their end is learnt late).
    pub(super) fn note_stripes(&self, st: &mut State, id: u64, plan: &[Stripe], silent: bool) {
        let idx = (id - st.front_id) as usize;
        if matches!(st.reqs[idx].kind, Kind::Write) {
            if let Some((c, o)) = st.reqs[idx].remote {
                for s in plan {
                    st.probe_at[s.rail] = Some((c, o + s.offset));
                }
            }
        }
        // Rail rates feed only the adaptive weights: no clock otherwise.
        let now = self.adaptive.then(Instant::now);
        for (i, s) in plan.iter().enumerate() {
            let seq = Self::book_stripe(st, id, i, s.rail, s.len, silent, now);
            st.reqs[idx].stripes.push(StripeRec {
                rail: s.rail,
                off: s.offset,
                len: s.len,
                done: false,
                seq,
                time: None,
            });
        }
        st.reqs[idx].remaining = plan.len();
    }

    /// Books stripe `idx` of request `id` (`len` bytes) as posted on `rail`:
    /// the rail's rate estimate (with `now`, adaptive only), its bytes in
    /// flight (not for a silent stripe), its DTO count and silent list.
    /// Returns the stripe's place among the DTOs posted on its rail.
    pub(super) fn book_stripe(
        st: &mut State,
        id: u64,
        idx: usize,
        rail: usize,
        len: u64,
        silent: bool,
        now: Option<Instant>,
    ) -> u64 {
        if let Some(now) = now {
            let out = st.planner.outstanding()[rail];
            st.rate[rail].posted(out, now);
        }
        if !silent {
            st.planner.posted(rail, len);
        }
        st.posted[rail] += 1;
        let seq = st.posted[rail];
        if silent {
            st.silent[rail].push_back(Silent { id, idx, seq });
            st.silent_posted += 1;
        } else {
            st.signalled[rail] = seq;
        }
        seq
    }

    /// Records request `id` (the next one), already posted whole on `rail`:
    /// [`Core::note_stripes`] for one stripe, the request built complete
    /// in its queue slot (the post of every small message comes here; a
    /// request is a few hundred bytes, and every move is a copy).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_whole(
        &self,
        st: &mut State,
        id: u64,
        what: (u64, Kind, bool, bool),
        local: Segs,
        remote: Option<(&RmrContext, u64)>,
        bytes: u64,
        rail: usize,
        silent: bool,
    ) {
        debug_assert_eq!(id, st.front_id + st.reqs.len() as u64);
        if let Some((c, o)) = remote.filter(|_| matches!(what.1, Kind::Write)) {
            st.probe_at[rail] = Some((*c, o));
        }
        let now = self.adaptive.then(Instant::now);
        let seq = Self::book_stripe(st, id, 0, rail, bytes, silent, now);
        let stripe = StripeRec { rail, off: 0, len: bytes, done: false, seq, time: None };
        let remote = remote.map(|(c, o)| (*c, o));
        st.reqs.push_back(Req::new(what, bytes, local, remote, smallvec::smallvec![stripe]));
        Self::number_message(st);
    }

    /// The rail a DTO goes to whole, now and from the caller, if it can:
    /// no fence, no deferred request ahead, an ordered DTO's fence already
    /// clear, a DTO the planner does not stripe, a rail whose thread has
    /// nothing queued.
    /// Returns (that rail if it can go now, the rail the planner placed an
    /// unordered DTO on — the general path must not place it twice).
    pub(super) fn direct_rail(
        &self,
        st: &mut State,
        kind: Kind,
        bytes: u64,
        full: bool,
    ) -> (Option<usize>, Option<usize>) {
        if full || !st.deferred.is_empty() {
            return (None, None);
        }
        if kind.ordered() {
            let Some(ctl) = st.planner.control_rail() else { return (None, None) };
            return ((!self.fenced(st, false) && self.direct(ctl)).then_some(ctl), None);
        }
        let placed = st.planner.whole(bytes);
        (placed.filter(|&r| self.direct(r)), placed)
    }

    /// Whether the caller may post a lone stripe on `rail` itself: always
    /// without rail threads; with them, when the rail's thread has nothing
    /// queued (else the stripe would overtake its queue).
    pub(super) fn direct(&self, rail: usize) -> bool {
        self.cfg.engine != Engine::Pinned || self.rails[rail].pending.load(Ordering::Acquire) == 0
    }
}
