//! Getting work onto the rails, and events to the user: posting one work
//! item on its rail (or handing it to the rail's thread), failing it when
//! the rail refuses, and delivering user events to the user's EVDs.

use crate::config::Engine;
use crate::ep::state::*;
use crate::objects::MrLmrInner;
use crate::planner::Stripe;
use rmr_api::provider::SoftEvd;
use rmr_api::{CompareSwap, Cookie};
use rmr_api::{DtoCompletion, DtoFlags, DtoOp, Error, Evd, Event, Result, RmrContext, Sge, Status};
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

impl Core {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn deliver(&self, evs: UserEvents) {
        let _ = self.deliver_taking(evs, None);
    }

    /// Delivers user events; the first one bound for `take` (the queue of
    /// the EVD the calling waiter waits on) while that queue is empty is
    /// handed back instead of queued: the waiter returns it at once (it is
    /// the oldest event of that EVD — harvests are serialised).
    pub(super) fn deliver_taking(&self, evs: UserEvents, take: Option<&SoftEvd>) -> Option<Event> {
        let mut taken = None;
        for (to, ev) in evs {
            let t = if taken.is_none() { take } else { None };
            taken = taken.or(self.deliver_one(to, ev, t));
        }
        taken
    }

    /// Delivers one user event to its EVD, or hands it back for `take`
    /// (see [`Core::deliver_taking`]).
    pub(super) fn deliver_one(&self, to: u8, ev: Event, take: Option<&SoftEvd>) -> Option<Event> {
        let q = self.user_q[usize::from(to.min(TO_CONN))].as_deref()?;
        if take.is_some_and(|t| std::ptr::eq(t, q) && t.is_empty()) {
            return Some(ev);
        }
        // Straight to the application thread that waits for it, if this is
        // that thread (it drives the rails: the sink runs in it), else queued.
        if let Some(ev) = crate::evd::hand_over(q, ev) {
            q.push(ev);
        }
        None
    }

    pub(super) fn dto(&self, cookie: u64, op: DtoOp, status: Status, bytes: u64) -> DtoCompletion {
        DtoCompletion::new(self.id, Cookie(cookie), op, status, bytes)
    }

    pub(super) fn fail(&self, w: &Work, e: &Error) {
        self.fail_on(w.rail, w.cookie, e);
    }

    /// A post of `cookie` on `rail` failed: it completes with the error
    /// at the next harvest (a broken rail's stripes fail over from there).
    pub(super) fn fail_on(&self, rail: usize, cookie: u64, e: &Error) {
        self.failed.lock().unwrap_or_else(|e| e.into_inner()).push((rail, cookie, post_status(e)));
        self.has_failed.store(true, Ordering::Release);
        // A waiter that looks only at endpoints with something to harvest
        // looks at this one.
        for w in self.watchers.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            w();
        }
        for q in self.user_q.iter().flatten() {
            q.poke();
        }
    }

    /// Posts one unit of work on its rail (in the calling thread).
    pub(super) fn post_work(&self, w: &Work) -> Result<()> {
        self.post_on(
            w.rail,
            w.kind,
            &w.local,
            w.remote.as_ref().map(|(c, o)| (c, *o)),
            w.cookie,
            w.silent,
            w.urgent,
        )
    }

    /// Posts a DTO's `local` segments on `rail` (remote target already
    /// offset to the stripe), retrying a full rail queue for a while;
    /// `silent` posts it SUPPRESS, `urgent` URGENT.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn post_on(
        &self,
        rail: usize,
        kind: Kind,
        local: &[(Arc<MrLmrInner>, u64, u64)],
        remote: Option<(&RmrContext, u64)>,
        cookie: u64,
        silent: bool,
        urgent: bool,
    ) -> Result<()> {
        let ep = self.rails[rail].posting();
        // One segment (every small message): no collection.
        let one: [Sge<'_>; 1];
        let many: SmallVec<[Sge<'_>; 4]>;
        let sges: &[Sge<'_>] = if let [(l, o, n)] = local {
            one = [Sge::new(&*l.rails[rail], *o, *n)];
            &one
        } else {
            many = local.iter().map(|(l, o, n)| Sge::new(&*l.rails[rail], *o, *n)).collect();
            &many
        };
        // The rail's own context (the keys were counted against the rails
        // when the DTO was posted).
        let remote = remote
            .map(|(c, o)| (c.keys().get(rail).map(|&k| RmrContext::new(k, c.addr, c.len)), o));
        let hurry = if urgent { DtoFlags::URGENT } else { DtoFlags::empty() };
        let (mut start, mut retries) = (None, 0u64);
        loop {
            let r = match (kind, &remote) {
                (Kind::Send { solicited }, _) => {
                    let mut f = if solicited { DtoFlags::SOLICITED } else { DtoFlags::empty() };
                    f |= hurry;
                    if silent {
                        f |= DtoFlags::SUPPRESS;
                    }
                    ep.post_send(sges, Cookie(cookie), f)
                }
                (Kind::Write, Some((Some(c), o))) => {
                    let f = if silent { DtoFlags::SUPPRESS } else { DtoFlags::empty() };
                    ep.post_rdma_write(sges, c.at(*o), Cookie(cookie), f | hurry)
                }
                (Kind::Read, Some((Some(c), o))) => {
                    ep.post_rdma_read(sges, c.at(*o), Cookie(cookie), hurry)
                }
                (Kind::WriteImm(imm), Some((Some(c), o))) => {
                    ep.post_rdma_write_imm(sges, c.at(*o), imm, Cookie(cookie), hurry)
                }
                (Kind::FetchAdd(add), Some((Some(c), o))) => {
                    ep.post_fetch_add(sges[0], c.at(*o), add, Cookie(cookie), hurry)
                }
                (Kind::CmpSwap(cmp, swp), Some((Some(c), o))) => ep.post_cmp_swap(
                    sges[0],
                    c.at(*o),
                    CompareSwap { compare: cmp, swap: swp },
                    Cookie(cookie),
                    hurry,
                ),
                (_, Some((None, _))) => {
                    return Err(Error::invalid(format!("rmr context has no rail {rail}")));
                }
                (_, None) => return Err(Error::invalid("remote operation without a target")),
            };
            match r {
                // The clock is read only when the rail is full.
                Err(Error::QueueFull)
                    if start.get_or_insert_with(Instant::now).elapsed()
                        < Duration::from_secs(30) =>
                {
                    retries += 1;
                    if retries == 1 {
                        tracing::debug!(target: "rmr::multirail", rail, cookie, "rail queue full; retrying the post");
                    }
                    std::thread::yield_now();
                }
                other => {
                    if retries > 0 {
                        tracing::debug!(target: "rmr::multirail", rail, cookie, retries, ok = other.is_ok(), "post retried");
                    }
                    return other;
                }
            }
        }
    }

    pub(super) fn post_recv_on(&self, rail: usize, id: u64, local: &Segs) -> Result<()> {
        let ep = self.rails[rail].posting();
        if let [(l, o, n)] = &local[..] {
            return ep.post_recv(
                &[Sge::new(&*l.rails[rail], *o, *n)],
                Cookie(RECV_BIT | id),
                DtoFlags::empty(),
            );
        }
        let sges: SmallVec<[Sge<'_>; 4]> =
            local.iter().map(|(l, o, n)| Sge::new(&*l.rails[rail], *o, *n)).collect();
        ep.post_recv(&sges, Cookie(RECV_BIT | id), DtoFlags::empty())
    }

    /// Hands a batch of work to the engine. Called with the state lock held,
    /// so each rail sees its work in posting order.
    pub(super) fn issue(&self, works: Works) {
        match self.cfg.engine {
            Engine::Pinned => {
                // Work a rail thread would only delay is posted right here when
                // its rail's thread has nothing queued (so it cannot overtake
                // that queue): a lone stripe (a small or ordered DTO), and in a
                // batch a probe, a small whole DTO (such as a notify released
                // from behind its fence with a probe beside it) or a stripe of
                // at most `direct_max` bytes. Waking a rail thread costs tens
                // of microseconds when a waiter spins on its core, more than the
                // caller's copy of such a stripe. Larger stripes go to the rail
                // threads, which copy them into every rail at once — where they
                // have cores of their own (else every stripe stays here).
                let lone = works.len() == 1;
                for w in works {
                    let r = w.rail;
                    if (lone || w.bytes() <= self.direct_max) && self.direct(r) {
                        if let Err(e) = self.post_work(&w) {
                            self.fail(&w, &e);
                        }
                        continue;
                    }
                    self.rails[r].pending.fetch_add(1, Ordering::AcqRel);
                    self.handed.fetch_add(1, Ordering::Relaxed);
                    let line = self.rails[r].line.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    match (line, self.me.upgrade()) {
                        (Some(l), Some(me)) => l.send(me, w),
                        // The handle is gone: what is left to post fails.
                        _ => {
                            self.rails[r].pending.fetch_sub(1, Ordering::AcqRel);
                            self.fail(&w, &Error::NotConnected);
                        }
                    }
                }
            }
            Engine::ForkJoin if works.len() > 1 => {
                let fails: Mutex<Vec<(usize, u64, Status)>> = Mutex::default();
                rayon::scope(|s| {
                    for w in &works {
                        let fails = &fails;
                        s.spawn(move |_| {
                            if let Err(e) = self.post_work(w) {
                                fails.lock().unwrap_or_else(|e| e.into_inner()).push((
                                    w.rail,
                                    w.cookie,
                                    post_status(&e),
                                ));
                            }
                        });
                    }
                });
                let f = fails.into_inner().unwrap_or_else(|e| e.into_inner());
                if !f.is_empty() {
                    self.failed.lock().unwrap_or_else(|e| e.into_inner()).extend(f);
                    self.has_failed.store(true, Ordering::Release);
                }
            }
            _ => {
                for w in &works {
                    if let Err(e) = self.post_work(w) {
                        self.fail(w, &e);
                    }
                }
            }
        }
    }

    /// Builds the work of request `id` for its (re)planned stripes.
    pub(super) fn stripe_work(req: &Req, id: u64, idx: usize, s: &Stripe) -> Work {
        Work {
            rail: s.rail,
            kind: req.kind,
            local: slice(&req.local, s.offset, s.len),
            remote: req.remote.map(|(c, o)| (c, o + s.offset)),
            cookie: id << 8 | idx as u64,
            silent: false,
            urgent: req.urgent,
        }
    }
}
