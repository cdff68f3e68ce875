//! The multirail endpoint: plans each DTO into stripes, issues them through
//! the chosen engine, filters stripe completions into one completion per
//! user DTO (released in posting order), keeps uDAPL's ordering rules across
//! rails, and re-issues the stripes of a rail that breaks on the survivors.
//!
//! Ordering: two-sided traffic (sends, receives, writes with immediate,
//! atomics) travels on the *control rail*, the lowest live one, so rule 1
//! holds by that rail's own order. Rule 2 holds because such an operation
//! is deferred until every stripe posted before it on the other rails has
//! completed (stripes on the control rail are ahead of it on the same
//! stream). Small writes go whole to the control rail while it carries less
//! than a threshold in flight (else to the least-loaded rail), so a
//! write+notify ping-pong never waits for another rail.

mod complete;
mod engine;
mod failover;
mod handover;
mod issue;
mod post;
mod progress;
pub(crate) mod rejoin;
mod silent;
mod state;

use crate::ep::state::*;
use crate::evd::MrEvd;
use crate::header::{KEY_LEN, header, key_pd, parse_key};
use crate::objects::{MrIa, MrLmr, MrPz};
use crate::planner::Planner;
use crate::planner::RailRate;
use rmr_api::provider::SoftEvd;
use rmr_api::{Access, Status};
use rmr_api::{CompareSwap, Cookie, RemoteAddr};
use rmr_api::{DtoFlags, Ep, EpAttr, EpEvds, EpId, EpState, Error, Event, Result, Sge};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One logical endpoint over several rails.
pub struct MrEp {
    core: Arc<Core>,
}

impl MrEp {
    pub(crate) fn create(ia: &MrIa, pz: &MrPz, evds: &EpEvds) -> Result<Arc<dyn Ep>> {
        let n = ia.rails.len();
        let mut rails = Vec::with_capacity(n);
        for (i, r) in ia.rails.iter().enumerate() {
            let evd = r.create_evd()?;
            let ep = r.create_ep(&pz.rails[i], &EpEvds::single(&evd))?;
            rails.push(Rail {
                ep: std::sync::RwLock::new(ep),
                evd,
                drivers: Default::default(),
                pending: Default::default(),
                line: Mutex::new(None),
            });
        }
        let soft_rails = rails.iter().all(|r| r.evd.as_any().downcast_ref::<SoftEvd>().is_some());
        let cfg = ia.cfg.clone();
        let planner = Planner::new(n, cfg.policy.clone(), cfg.threshold, cfg.align);
        let attr = rmr_api::Ia::attr(ia);
        let cur = rails.iter().map(|r| r.ep().id()).collect();
        let len = handover::notice_len(n);
        let notice_mem = rmr_api::MemRegion::new(len as usize);
        let notice = pz.register_inner(&notice_mem, 0, len, Access::LOCAL_WRITE)?;
        let rejoin = rejoin::RejoinState::new(
            cfg.rejoin,
            ia.rails.clone(),
            pz.rails.clone(),
            rejoin::Rejoins::of(ia),
        );
        let make = |me: &std::sync::Weak<Core>| Core {
            me: me.clone(),
            id: EpId::fresh(),
            pz_id: pz.id,
            max_dtos: attr.max_dtos / 2,
            max_sges: attr.max_sges,
            rails,
            user: evds.clone(),
            user_q: [&evds.request, &evds.recv, &evds.conn]
                .map(|e| e.as_any().downcast_ref::<MrEvd>().map(|m| m.q.clone())),
            st: Mutex::new(State {
                conn: EpState::Unconnected,
                planner,
                front_id: 0,
                reqs: VecDeque::new(),
                recv_front: 0,
                recvs: VecDeque::new(),
                held: 0,
                posted: smallvec::smallvec![0; n],
                completed: smallvec::smallvec![0; n],
                deferred: VecDeque::new(),
                silent: (0..n).map(|_| VecDeque::new()).collect(),
                probe: smallvec::smallvec![None; n],
                signalled: smallvec::smallvec![0; n],
                probe_at: smallvec::smallvec![None; n],
                silent_posted: 0,
                probes_posted: 0,
                recv_direct: 0,
                ended: smallvec::smallvec![false; n],
                cur,
                broken: false,
                rate: smallvec::smallvec![RailRate::new(); n],
                sent_msgs: 0,
                recv_msgs: 0,
                handover: None,
                notices: 0,
                redundant: 0,
                peer_took: 0,
            }),
            stop: AtomicBool::new(false),
            harvest: Mutex::new(()),
            failed: Mutex::default(),
            has_failed: AtomicBool::new(false),
            handed: AtomicU64::new(0),
            direct_max: direct_max(&cfg, n),
            adaptive: matches!(cfg.policy, crate::planner::Policy::Adaptive { .. }),
            soft_rails,
            watchers: Mutex::default(),
            rejoin,
            notice,
            notice_mem,
            handing_over: AtomicBool::new(false),
            cfg,
        };
        let core = Arc::new_cyclic(make);
        if core.cfg.engine == crate::config::Engine::Pinned {
            for (r, rail) in core.rails.iter().enumerate() {
                let line = engine::RailLine::of(ia, r)?;
                line.join(&core);
                *rail.line.lock().unwrap_or_else(|e| e.into_inner()) = Some(line);
            }
        }
        Ok(Arc::new(MrEp { core }))
    }

    /// The planner's current rail weights (for reports and tests).
    pub fn weights(&self) -> Vec<f64> {
        self.core.lock().planner.weights().to_vec()
    }

    /// Rail `i`'s current endpoint (for tests and diagnostics; a rail
    /// connected again has a new one).
    pub fn rail_ep(&self, i: usize) -> Option<Arc<dyn Ep>> {
        self.core.rails.get(i).map(Rail::ep)
    }

    /// Every rail's current endpoint, in rail order (for tests and
    /// diagnostics).
    pub fn rail_eps(&self) -> Vec<Arc<dyn Ep>> {
        self.core.rails.iter().map(Rail::ep).collect()
    }

    /// What happened to the rails: how many are live, and how often a rail
    /// was lost and connected again.
    pub fn stats(&self) -> MrStats {
        let c = &self.core;
        let st = c.lock();
        let j = &c.rejoin;
        MrStats {
            rails: c.rails.len(),
            rails_live: st.ended.iter().filter(|e| !**e).count(),
            rails_down: j.rails_down.load(Ordering::Relaxed),
            rails_up: j.rails_up.load(Ordering::Relaxed),
            rejoin_attempts: j.attempts.load(Ordering::Relaxed),
            rejoin_failures: j.failures.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn accept_rails(
        &self,
        reqs: &[rmr_api::ConnRequest],
        peer_pd: &[u8],
        pd: &[u8],
        session: u64,
    ) -> Result<()> {
        let c = &self.core;
        if reqs.len() != c.rails.len() {
            return Err(Error::invalid("rail count mismatch"));
        }
        {
            let mut st = c.lock();
            if st.conn != EpState::Unconnected {
                return Err(Error::invalid("EP is not unconnected"));
            }
            st.conn = EpState::Pending;
        }
        // Rails 1.. answer with the key a rejoin of this endpoint must prove
        // (drawn here, handed to the peer only), once the endpoint is known
        // under the connector's session; with rejoin off, or no key to be
        // had, nothing (the peer then never tries).
        let key = rand_key().filter(|_| c.rejoin.on && c.rejoin.hub.register(session, c));
        if let Some(key) = key {
            let _ = c.rejoin.role.set(rejoin::Role::Passive { session, key });
        }
        let answer = key.map(|k| key_pd(&k)).unwrap_or_default();
        for (i, r) in reqs.iter().enumerate() {
            if let Err(e) = r.accept(&c.rails[i].ep(), if i == 0 { pd } else { &answer }) {
                for rl in &c.rails[..i] {
                    let _ = rl.ep().disconnect();
                }
                c.lock().conn = EpState::Unconnected;
                return Err(e);
            }
        }
        c.start(peer_pd.to_vec())
    }
}

/// What happened to a multirail endpoint's rails ([`MrEp::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MrStats {
    /// Rails the endpoint has.
    pub rails: usize,
    /// Rails that carry traffic now.
    pub rails_live: usize,
    /// Rails lost while others lived ([`rmr_api::Event::RailDown`]).
    pub rails_down: u64,
    /// Lost rails connected again ([`rmr_api::Event::RailUp`]).
    pub rails_up: u64,
    /// Attempts to connect a lost rail again (the connecting side's).
    pub rejoin_attempts: u64,
    /// Attempts that failed (the peer unreachable, or refusing).
    pub rejoin_failures: u64,
}

/// A fresh random rejoin key (none without an entropy source: a guessable
/// key would let anyone take a rail).
fn rand_key() -> Option<[u8; KEY_LEN]> {
    let mut k = [0u8; KEY_LEN];
    getrandom::fill(&mut k).ok().map(|()| k)
}

impl Drop for MrEp {
    fn drop(&mut self) {
        let _ = self.disconnect();
        self.core.stop.store(true, Ordering::Release);
        self.core.rejoin.forget();
        // The rail threads forget the core at their next look; the IA's
        // thread for a rail ends with its last endpoint.
        for r in &self.core.rails {
            *r.line.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

impl Ep for MrEp {
    fn id(&self) -> EpId {
        self.core.id
    }

    fn attr(&self) -> EpAttr {
        let c = &self.core;
        let s = self.stats();
        let rejoin = match c.rejoin.role.get() {
            _ if !c.rejoin.on => "off",
            Some(rejoin::Role::Active { .. }) => "connects lost rails again",
            Some(rejoin::Role::Passive { .. }) => "takes the peer's rejoins",
            None => "not connected, or the peer does not rejoin",
        };
        let mut notes = vec![
            ("engine".to_string(), c.cfg.engine.to_string()),
            ("rejoin".to_string(), rejoin.to_string()),
            (
                "session".to_string(),
                match c.rejoin.role.get() {
                    Some(
                        rejoin::Role::Active { session, .. }
                        | rejoin::Role::Passive { session, .. },
                    ) => format!("{session:016x}"),
                    None => "-".into(),
                },
            ),
            (
                "rails".to_string(),
                format!(
                    "{} live of {}; down {} up {}; attempts {} failed {}",
                    s.rails_live,
                    s.rails,
                    s.rails_down,
                    s.rails_up,
                    s.rejoin_attempts,
                    s.rejoin_failures
                ),
            ),
            ("policy".to_string(), c.cfg.policy.to_string()),
            ("threshold".to_string(), c.cfg.threshold.to_string()),
            (
                "direct_max".to_string(),
                if c.direct_max == u64::MAX { "all".into() } else { c.direct_max.to_string() },
            ),
        ];
        for (i, r) in c.rails.iter().enumerate() {
            let cpu = match &*r.line.lock().unwrap_or_else(|e| e.into_inner()) {
                Some(l) => l.cpu(),
                None => "no rail thread".into(),
            };
            notes.push((format!("rail{i}.cpu"), cpu));
        }
        let w: Vec<String> = c.lock().planner.weights().iter().map(|w| format!("{w:.3}")).collect();
        notes.push(("weights".into(), w.join(",")));
        let r: Vec<String> = c.lock().rate.iter().map(|r| format!("{:.0}", r.mbps())).collect();
        notes.push(("rail_mbps_est".into(), r.join(",")));
        {
            let st = c.lock();
            notes.push(("silent".into(), st.silent_posted.to_string()));
            notes.push(("probes".into(), st.probes_posted.to_string()));
            notes.push(("recv_direct".into(), st.recv_direct.to_string()));
            notes.push((
                "handover".into(),
                format!(
                    "messages sent {} taken {}; handovers {} (in progress: {}); not sent again {}",
                    st.sent_msgs,
                    st.recv_msgs,
                    st.notices,
                    st.handover.is_some(),
                    st.redundant
                ),
            ));
            notes.push(("handed_off".into(), c.handed.load(Ordering::Relaxed).to_string()));
            notes.push((
                "state".into(),
                format!(
                    "reqs={} deferred={} recvs={} posted={:?} completed={:?} outstanding={:?}",
                    st.reqs.len(),
                    st.deferred.len(),
                    st.recvs.len(),
                    st.posted,
                    st.completed,
                    st.planner.outstanding()
                ),
            ));
        }
        for (i, r) in c.rails.iter().enumerate() {
            for (k, v) in r.ep().attr().notes {
                notes.push((format!("rail{i}.{k}"), v));
            }
            notes.push((format!("rail{i}.evd_len"), r.evd.len().to_string()));
        }
        let r0 = c.rails[0].ep().attr();
        EpAttr {
            max_msg_size: r0.max_msg_size,
            max_dtos: c.max_dtos,
            max_recvs: r0.max_recvs,
            max_sges: c.max_sges,
            notes,
        }
    }

    fn state(&self) -> EpState {
        self.core.lock().conn
    }

    fn connect(&self, remote: &str, service: u16, pd: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        let c = &self.core;
        let addrs: Vec<&str> = remote.split(',').map(str::trim).collect();
        if addrs.len() != c.rails.len() {
            return Err(Error::BadSpec {
                spec: remote.into(),
                why: format!("{} rail addresses for {} rails", addrs.len(), c.rails.len()),
            });
        }
        {
            let mut st = c.lock();
            if st.conn != EpState::Unconnected {
                return Err(Error::invalid("EP is not unconnected"));
            }
            st.conn = EpState::Pending;
        }
        let session = getrandom::u64()
            .unwrap_or_else(|_| rmr_api::provider::fresh_id() ^ 0x9e37_79b9_7f4a_7c15);
        let n = c.rails.len();
        let results: Vec<Result<Vec<u8>>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|i| {
                    let mut rpd = header(session, i, n).to_vec();
                    if i == 0 {
                        rpd.extend_from_slice(pd);
                    }
                    let (ep, addr) = (c.rails[i].ep(), addrs[i]);
                    s.spawn(move || ep.connect(addr, service, &rpd, timeout))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(Error::Broken("connect panicked".into()))))
                .collect()
        });
        if let Some(pos) = results.iter().position(Result::is_err) {
            for (i, r) in results.iter().enumerate() {
                if r.is_ok() {
                    let _ = c.rails[i].ep().disconnect();
                }
            }
            c.lock().conn = EpState::Unconnected;
            // Prefer the control rail's verdict (it carries the peer's private data).
            let mut results = results;
            let e =
                if results[0].is_err() { results.swap_remove(0) } else { results.swap_remove(pos) };
            let err = e.expect_err("an error");
            if let Error::Rejected { private_data } = &err {
                c.deliver(smallvec::smallvec![(
                    TO_CONN,
                    Event::Rejected { ep: c.id, private_data: private_data.clone() }
                )]);
            }
            return Err(err);
        }
        // The key a rejoin must prove, in the peer's answer on rails 1..
        // (none from a peer that does not take rejoins).
        let key = results.iter().skip(1).find_map(|r| r.as_ref().ok().and_then(|pd| parse_key(pd)));
        if let (Some(key), true) = (key, c.rejoin.on) {
            let addrs = addrs.iter().map(|a| a.to_string()).collect();
            let _ = c.rejoin.role.set(rejoin::Role::Active { addrs, service, session, key });
        }
        let peer_pd = results.into_iter().next().expect("rail 0")?;
        c.start(peer_pd.clone())?;
        Ok(peer_pd)
    }

    fn disconnect(&self) -> Result<()> {
        let c = &self.core;
        {
            let mut st = c.lock();
            if st.conn != EpState::Connected {
                return Err(Error::NotConnected);
            }
            st.conn = EpState::Disconnected;
            c.end_handover(&mut st, Status::Flushed);
        }
        // The control rail first: the peer takes its `Disconnected` as the
        // end of the endpoint, another rail's alone as that rail's loss.
        let ctl = c.lock().planner.control_rail().unwrap_or(0);
        let _ = c.rails[ctl].ep().disconnect();
        for (i, r) in c.rails.iter().enumerate() {
            if i != ctl {
                let _ = r.ep().disconnect();
            }
        }
        Ok(())
    }

    fn close(&self, timeout: Duration) -> Result<()> {
        let c = &self.core;
        let deadline = Instant::now() + timeout;
        // First every DTO goes to its rail: a send deferred behind writes on
        // other rails (the ordering rule) leaves once they completed, and a
        // rail thread may still hold work handed to it.
        let mut r = loop {
            let handed = {
                let st = c.lock();
                if st.conn != EpState::Connected {
                    break Ok(());
                }
                st.deferred.is_empty() && st.handover.is_none()
            } && c.rails.iter().all(|r| r.pending.load(Ordering::Acquire) == 0);
            if handed {
                break Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break Err(Error::Timeout);
            }
            if !c.poll_rails() {
                c.await_rails(left.min(Duration::from_millis(1)));
            }
        };
        {
            let mut st = c.lock();
            if st.conn == EpState::Connected {
                st.conn = EpState::Disconnected;
                c.end_handover(&mut st, Status::Flushed);
            }
        }
        // Then each rail ends in order behind what it carries, the control
        // rail first (see `disconnect`).
        let ctl = c.lock().planner.control_rail().unwrap_or(0);
        let order = std::iter::once(ctl).chain((0..c.rails.len()).filter(|&i| i != ctl));
        for i in order {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(e) = c.rails[i].ep().close(left) {
                r = r.and(Err(e));
            }
        }
        r
    }

    fn post_send(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        self.core.post(
            Kind::Send { solicited: flags.contains(DtoFlags::SOLICITED) },
            local,
            None,
            cookie,
            flags,
        )
    }

    fn post_recv(&self, local: &[Sge<'_>], cookie: Cookie, _flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        let c = &self.core;
        // The rail checks the segments (its LMRs mirror ours: same bounds and
        // access, in the rail PZ of our PZ) before anything is recorded.
        let mut segs = Segs::new();
        for s in local {
            let l = s
                .lmr
                .as_any()
                .downcast_ref::<MrLmr>()
                .ok_or_else(|| Error::Protection("not a multirail LMR".into()))?;
            segs.push((l.inner.clone(), s.offset, s.len));
        }
        let mut st = c.lock();
        if matches!(st.conn, EpState::Disconnected | EpState::Broken) {
            return Err(Error::NotConnected);
        }
        let rail =
            st.planner.control_rail().ok_or_else(|| Error::Broken("all rails lost".into()))?;
        let id = st.recv_front + st.recvs.len() as u64;
        c.post_recv_on(rail, id, &segs)?;
        let on = st.cur[rail];
        st.recvs.push_back(Some(RecvReq { cookie, local: segs, on, held: None }));
        Ok(())
    }

    fn post_rdma_write(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        self.core.post(Kind::Write, local, Some((remote, remote_offset)), cookie, flags)
    }

    fn post_rdma_read(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        self.core.post(Kind::Read, local, Some((remote, remote_offset)), cookie, flags)
    }

    fn post_rdma_write_imm(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        imm: u32,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        self.core.post(Kind::WriteImm(imm), local, Some((remote, remote_offset)), cookie, flags)
    }

    fn post_fetch_add(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        add: u64,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        self.core.post(Kind::FetchAdd(add), &[result], Some((remote, remote_offset)), cookie, flags)
    }

    fn post_cmp_swap(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        op: CompareSwap,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        let CompareSwap { compare, swap } = op;
        self.core.post(
            Kind::CmpSwap(compare, swap),
            &[result],
            Some((remote, remote_offset)),
            cookie,
            flags,
        )
    }

    fn peer_address(&self) -> Option<String> {
        let a: Vec<String> = self.core.rails.iter().filter_map(|r| r.ep().peer_address()).collect();
        if a.is_empty() { None } else { Some(a.join(",")) }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
