//! Rails that heal: a rail a connected endpoint lost is connected again in
//! the background and carries traffic again.
//!
//! - **Who tries.** The side that connected (it knows the peer's rail
//!   addresses and service), on its IA's rejoin thread: one thread per
//!   multirail IA, shared by all its endpoints, started when a rail is lost
//!   and ended once no endpoint waits for one. Attempts back off from
//!   [`BACKOFF_MIN`] doubling to [`BACKOFF_MAX`] (with jitter), for as long
//!   as the endpoint is connected.
//! - **Who may take the slot.** The request goes to the same service point
//!   as the first connection and carries `MRR1` (session, rail, rail count,
//!   attempt) with a MAC under a key the accepting side drew for this
//!   endpoint and handed out once, in its accept answer on rails 1.. (`MRK1`).
//!   A process that did not see that answer cannot make a request the
//!   accepting side takes (on TCP the answer crosses the wire in the clear,
//!   like everything else), and a replayed request (an attempt number
//!   already seen) is refused.
//! - **The accepting side** (its PSP thread) ends its own copy of the rail
//!   first if it still thinks it alive (the other end lost it alone), then
//!   accepts on a new rail endpoint in the same rail PZ (so every key the
//!   peer holds stays valid) and the same rail EVD.
//! - **The swap** (both sides, [`Core::finish_rejoin`]), under the harvest
//!   and state locks: every stripe the old rail endpoint still owed has
//!   completed or gone again on the survivors; the new endpoint replaces
//!   the old one; its counters start where the old one's ended, so fences
//!   need no rewrite; the planner gives the rail traffic again (the
//!   adaptive policy learns its rate again); the control rail stays where
//!   it is, so both ends keep sending and receiving on the same rail.
//!   Events of the old endpoint that come later are dropped (see
//!   [`Core::on_event`]).
//! - **One control rail for both ends.** Sends and receives travel on the
//!   control rail, which moves only when it fails. The two ends notice a
//!   failure at different moments (an idle end can take seconds), and a
//!   rail may come back in between, so each end's "lowest live rail" could
//!   differ. The connecting side therefore tells the other its new control
//!   rail (`MRC1`, signed like a rejoin, through the PSP of that rail; the
//!   answer is a rejection that carries the verdict), and the accepting
//!   side takes it: it ends its own old control rail (which the connecting
//!   side has lost; its receives come back flushed and are posted again on
//!   the new one).
//! - The user sees [`Event::RailDown`] and [`Event::RailUp`];
//!   [`crate::MrEp::stats`] counts them.

use crate::ep::state::*;
use crate::header::{KEY_LEN, Rejoin, rejoin_header, rejoin_verify};
use crate::planner::RailRate;
use rmr_api::provider::SoftEvd;
use rmr_api::{ConnRequest, Ep, EpEvds, EpState, Error, Event, Ia, Pz, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// The first wait before connecting a lost rail again.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// The accepting side's answer to a control-rail notice it took.
const TAKEN: &[u8] = b"control rail taken";
/// How long one attempt's connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the swap waits for the old rail endpoint's stripes to come
/// back (completed, or flushed and gone again on the survivors).
const SETTLE: Duration = Duration::from_secs(2);

/// Per multirail IA: the accepted endpoints a rejoin may name, and the
/// connecting endpoints that wait for a rail (served by one thread).
#[derive(Default)]
pub(crate) struct Rejoins {
    /// Accepted endpoints by session (held weakly; removed when dropped).
    sessions: Mutex<HashMap<u64, Weak<Core>>>,
    /// Connecting endpoints with a lost rail, and the thread's state.
    waiting: Mutex<Waiting>,
    bell: Condvar,
}

#[derive(Default)]
struct Waiting {
    cores: Vec<Weak<Core>>,
    /// The thread runs.
    running: bool,
    /// Something was scheduled since the thread last looked.
    kick: bool,
}

/// Which end of the connection this endpoint is, with what a rejoin needs.
pub(super) enum Role {
    /// It connected: it connects lost rails again.
    Active { addrs: Vec<String>, service: u16, session: u64, key: [u8; KEY_LEN] },
    /// It accepted: it takes its peer's rejoins.
    Passive { session: u64, key: [u8; KEY_LEN] },
}

/// A rail's attempts.
#[derive(Clone, Copy)]
struct Tries {
    next: Instant,
    delay: Duration,
    /// Passive side: the last attempt number accepted (replays refused).
    last_seen: u32,
}

/// A core's part in rejoins (see the module docs).
pub(crate) struct RejoinState {
    /// `rejoin=on` (and more than one rail).
    pub(super) on: bool,
    /// The rail IAs and rail PZs a new rail endpoint is made in.
    pub(super) ias: Vec<Arc<dyn Ia>>,
    pub(super) pzs: Vec<Arc<dyn Pz>>,
    pub(super) hub: Arc<Rejoins>,
    pub(super) role: OnceLock<Role>,
    tries: Mutex<Vec<Tries>>,
    /// The connecting side: the control rail to tell the peer about, and
    /// when to try (none: the peer knows the current one).
    notice: Mutex<Option<(usize, Instant, Duration)>>,
    /// The accepting side: the last notice's number taken (replays refused).
    notice_seen: AtomicU32,
    attempt: AtomicU32,
    /// The connecting side: the control rail the peer was last told of.
    told: std::sync::atomic::AtomicUsize,
    pub(super) rails_down: AtomicU64,
    pub(super) rails_up: AtomicU64,
    pub(super) attempts: AtomicU64,
    pub(super) failures: AtomicU64,
}

impl RejoinState {
    pub(super) fn new(
        on: bool,
        ias: Vec<Arc<dyn Ia>>,
        pzs: Vec<Arc<dyn Pz>>,
        hub: Arc<Rejoins>,
    ) -> Self {
        let now = Instant::now();
        let t = Tries { next: now, delay: BACKOFF_MIN, last_seen: 0 };
        RejoinState {
            on: on && ias.len() > 1,
            tries: Mutex::new(vec![t; ias.len()]),
            ias,
            pzs,
            hub,
            role: OnceLock::new(),
            notice: Mutex::new(None),
            notice_seen: AtomicU32::new(0),
            attempt: AtomicU32::new(0),
            told: std::sync::atomic::AtomicUsize::new(0),
            rails_down: AtomicU64::new(0),
            rails_up: AtomicU64::new(0),
            attempts: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    fn tries(&self) -> std::sync::MutexGuard<'_, Vec<Tries>> {
        self.tries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn notice(&self) -> std::sync::MutexGuard<'_, Option<(usize, Instant, Duration)>> {
        self.notice.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next attempt on `rail` waits longer (doubling, with jitter).
    fn back_off(&self, rail: usize) {
        let mut t = self.tries();
        let d = t[rail].delay;
        // ±20 % so that many endpoints do not try in step.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let jitter = 0.8 + f64::from(nanos % 400) / 1000.0;
        t[rail].next = Instant::now() + d.mul_f64(jitter);
        t[rail].delay = (d * 2).min(BACKOFF_MAX);
    }

    /// The rail was lost just now: the first attempt after the shortest wait.
    pub(super) fn lost(&self, rail: usize) {
        self.rails_down.fetch_add(1, Ordering::Relaxed);
        let mut t = self.tries();
        t[rail].next = Instant::now() + BACKOFF_MIN;
        t[rail].delay = BACKOFF_MIN * 2;
    }

    /// Forgets the endpoint's session (its handle is gone).
    pub(super) fn forget(&self) {
        if let Some(Role::Passive { session, .. }) = self.role.get() {
            let mut s = self.hub.sessions.lock().unwrap_or_else(|e| e.into_inner());
            s.retain(|k, w| *k != *session && w.strong_count() > 0);
        }
    }
}

impl Rejoins {
    /// The IA's (made on first use).
    pub(crate) fn of(ia: &crate::objects::MrIa) -> Arc<Rejoins> {
        let any = ia.rejoins.get_or_init(|| {
            let hub: Arc<dyn std::any::Any + Send + Sync> = Arc::new(Rejoins::default());
            hub
        });
        any.clone().downcast::<Rejoins>().expect("the IA's rejoins")
    }

    /// Registers an accepted endpoint under its session (a session already
    /// taken by a live endpoint is not: that endpoint then never rejoins).
    pub(super) fn register(&self, session: u64, core: &Arc<Core>) -> bool {
        let mut s = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if s.get(&session).is_some_and(|w| w.strong_count() > 0) {
            return false;
        }
        s.insert(session, Arc::downgrade(core));
        true
    }

    /// The accepted endpoint of `session`, if it lives.
    fn find(&self, session: u64) -> Option<Arc<Core>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner()).get(&session)?.upgrade()
    }

    /// `core` lost a rail: the thread will connect it again.
    fn schedule(self: &Arc<Self>, core: &Arc<Core>) {
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if !w.cores.iter().any(|c| std::ptr::eq(c.as_ptr(), Arc::as_ptr(core))) {
            w.cores.push(Arc::downgrade(core));
        }
        w.kick = true;
        if !w.running {
            let hub = self.clone();
            let spawned =
                std::thread::Builder::new().name("rmr-mr-rejoin".into()).spawn(move || hub.run());
            match spawned {
                Ok(_) => w.running = true,
                Err(e) => {
                    tracing::warn!(target: "rmr::multirail", error = %e, "no rejoin thread: lost rails stay lost");
                }
            }
        }
        self.bell.notify_all();
    }

    /// The rejoin thread: tries every waiting endpoint's lost rails when
    /// they are due; ends once none waits. (No endpoint's state lock is
    /// taken under `waiting`: a harvester that holds one schedules.)
    fn run(&self) {
        loop {
            let cores: Vec<Arc<Core>> = {
                let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
                w.kick = false;
                w.cores.iter().filter_map(Weak::upgrade).collect()
            };
            let mut next = Instant::now() + BACKOFF_MAX;
            let mut done: Vec<*const Core> = Vec::new();
            for c in &cores {
                match c.rejoin_tick() {
                    Some(due) => next = next.min(due),
                    None => done.push(Arc::as_ptr(c)),
                }
            }
            drop(cores);
            let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            if w.kick {
                // Scheduled meanwhile: look again before anyone leaves.
                continue;
            }
            w.cores.retain(|c| c.strong_count() > 0 && !done.contains(&c.as_ptr()));
            if w.cores.is_empty() {
                w.running = false;
                return;
            }
            let left = next.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            let _ = self.bell.wait_timeout(w, left);
        }
    }
}

impl Core {
    /// The connecting side, connected, with a lost rail to bring back.
    fn wants_rail(&self) -> bool {
        if self.stop.load(Ordering::Acquire)
            || !matches!(self.rejoin.role.get(), Some(Role::Active { .. }))
        {
            return false;
        }
        let st = self.lock();
        st.conn == EpState::Connected
            && (st.ended.iter().any(|e| *e) || self.rejoin.notice().is_some())
    }

    /// Rail `rail` was lost (the state lock is held), `control` is the
    /// control rail now: count it and, on the connecting side, have the
    /// rail connected again and the peer told of a new control rail.
    pub(super) fn rail_lost(&self, rail: usize, control: Option<usize>) {
        self.rejoin.lost(rail);
        if self.rejoin.on && matches!(self.rejoin.role.get(), Some(Role::Active { .. })) {
            let mut n = self.rejoin.notice();
            match control {
                Some(c) if c != self.rejoin.told.load(Ordering::Relaxed) => {
                    *n = Some((c, Instant::now(), BACKOFF_MIN));
                }
                // Back where the peer was told last (or none left).
                _ => *n = None,
            }
            drop(n);
            if let Some(me) = self.me.upgrade() {
                self.rejoin.hub.schedule(&me);
            }
        }
    }

    /// One look at the lost rails: tries those that are due. Returns when
    /// to look again.
    fn rejoin_tick(self: &Arc<Self>) -> Option<Instant> {
        if !self.wants_rail() {
            return None;
        }
        let mut next = None::<Instant>;
        // The peer learns the control rail first (its receives move there).
        let notice = *self.rejoin.notice();
        if let Some((c, due, _)) = notice {
            if Instant::now() >= due {
                self.tell_control(c);
            }
            if let Some((_, due, _)) = *self.rejoin.notice() {
                next = Some(due);
            }
        }
        let lost: Vec<usize> = {
            let st = self.lock();
            (0..self.rails.len()).filter(|&r| st.ended[r]).collect()
        };
        for r in lost {
            let due = self.rejoin.tries()[r].next;
            // Work handed to the rail thread before the loss fails first
            // (on the old endpoint), so the swap never waits for it.
            let idle = self.rails[r].pending.load(Ordering::Acquire) == 0;
            if Instant::now() >= due && idle {
                self.try_rail(r);
            } else if !idle {
                next = Some(Instant::now() + Duration::from_millis(10));
            }
            let due = self.rejoin.tries()[r].next;
            next = Some(next.map_or(due, |n| n.min(due)));
        }
        next
    }

    /// One attempt to connect rail `rail` again (blocks up to the connect
    /// timeout: this is the rejoin thread).
    fn try_rail(self: &Arc<Self>, rail: usize) {
        let Some(Role::Active { addrs, service, session, key }) = self.rejoin.role.get() else {
            return;
        };
        let attempt = self.rejoin.attempt.fetch_add(1, Ordering::Relaxed) + 1;
        self.rejoin.attempts.fetch_add(1, Ordering::Relaxed);
        let r =
            Rejoin { control: false, session: *session, rail, rails: self.rails.len(), attempt };
        let pd = rejoin_header(key, &r);
        let res = (|| -> Result<()> {
            let ep = self.new_rail_ep(rail)?;
            ep.connect(&addrs[rail], *service, &pd, CONNECT_TIMEOUT)?;
            if self.finish_rejoin(rail, &ep) {
                Ok(())
            } else {
                let _ = ep.disconnect();
                Err(Error::Broken("the endpoint no longer takes the rail".into()))
            }
        })();
        match res {
            Ok(()) => {
                tracing::info!(target: "rmr::multirail", ep = self.id.0, rail, attempt, "rail connected again")
            }
            Err(e) => {
                self.rejoin.failures.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(target: "rmr::multirail", ep = self.id.0, rail, attempt, error = %e, "rail rejoin failed; backing off");
                self.rejoin.back_off(rail);
            }
        }
    }

    /// Tells the peer that rail `c` is the control rail now (through rail
    /// `c`'s PSP; the answer is a rejection naming the verdict).
    fn tell_control(self: &Arc<Self>, c: usize) {
        let Some(Role::Active { addrs, service, session, key }) = self.rejoin.role.get() else {
            return;
        };
        // The control rail may have moved again since the notice was due.
        let now = self.lock().planner.control_rail();
        if now != Some(c) {
            let mut n = self.rejoin.notice();
            *n = now
                .filter(|&x| x != self.rejoin.told.load(Ordering::Relaxed))
                .map(|x| (x, Instant::now(), BACKOFF_MIN));
            return;
        }
        let attempt = self.rejoin.attempt.fetch_add(1, Ordering::Relaxed) + 1;
        let r =
            Rejoin { control: true, session: *session, rail: c, rails: self.rails.len(), attempt };
        let pd = rejoin_header(key, &r);
        let res = self.new_rail_ep(c).and_then(|ep| {
            let r = ep.connect(&addrs[c], *service, &pd, CONNECT_TIMEOUT);
            if r.is_ok() {
                let _ = ep.disconnect();
            }
            r
        });
        let mut n = self.rejoin.notice();
        let Some((_, due, delay)) = n.as_mut().filter(|(x, ..)| *x == c) else { return };
        match res {
            // Not answered: again later.
            Err(e) if !matches!(e, Error::Rejected { .. }) => {
                tracing::debug!(target: "rmr::multirail", ep = self.id.0, control = c, error = %e, "control notice failed; backing off");
                *due = Instant::now() + *delay;
                *delay = (*delay * 2).min(BACKOFF_MAX);
            }
            // The peer's verdict: taken; or refused (not live there: that
            // end will lose the rail too and a later notice follows; or the
            // endpoint is going): not retried either way.
            r => {
                let taken =
                    matches!(&r, Err(Error::Rejected { private_data }) if private_data == TAKEN);
                tracing::debug!(target: "rmr::multirail", ep = self.id.0, control = c, taken, "peer told of the control rail");
                if taken {
                    self.rejoin.told.store(c, Ordering::Relaxed);
                }
                *n = None;
            }
        }
    }

    /// The accepting side: the peer's control rail is `r.rail` now. Takes
    /// it; its own old control rail (lost at the peer) ends here too, and
    /// the receives it held are posted again on the new one.
    fn control_notice(&self, r: &Rejoin, mac: &[u8; 16]) -> std::result::Result<(), &'static str> {
        self.check_request(r, mac)?;
        if self.rejoin.notice_seen.fetch_max(r.attempt, Ordering::AcqRel) >= r.attempt {
            return Err("rejoin refused: replayed");
        }
        let old = {
            let _h = self.harvest.lock().unwrap_or_else(|e| e.into_inner());
            let mut st = self.lock();
            if st.conn != EpState::Connected {
                return Err("endpoint not connected");
            }
            if !st.planner.is_alive(r.rail) {
                return Err("control rail not live here");
            }
            let cur = st.planner.control_rail();
            match cur.filter(|&k| k != r.rail) {
                None => None,
                Some(k) => {
                    // The new control rail first: what rail k's end sends
                    // again (its silent stripes) goes there, after the
                    // handover's counts.
                    st.planner.set_control(r.rail);
                    self.control_moved(&mut st, Some(k));
                    let mut evs = UserEvents::new();
                    let works =
                        self.give_up_control(&mut st, k, "the peer's control rail moved", &mut evs);
                    self.handover_step(&mut st);
                    if !works.is_empty() {
                        self.issue(works);
                    }
                    drop(st);
                    self.deliver(evs);
                    Some(self.rails[k].ep())
                }
            }
        };
        if let Some(old) = old {
            let _ = old.disconnect();
        }
        Ok(())
    }

    /// The accepting side: whether `r` is a request of this endpoint's peer
    /// (it proves the key). One answer for everything checked here: a
    /// process without the key learns nothing about the session.
    fn check_request(&self, r: &Rejoin, mac: &[u8; 16]) -> std::result::Result<(), &'static str> {
        match self.rejoin.role.get() {
            Some(Role::Passive { key, .. })
                if self.rejoin.on
                    && r.rails == self.rails.len()
                    && r.rail < self.rails.len()
                    && rejoin_verify(key, r, mac) =>
            {
                Ok(())
            }
            _ => Err("rejoin refused"),
        }
    }

    /// A new endpoint for rail `rail`, in the rail's PZ and EVD.
    fn new_rail_ep(&self, rail: usize) -> Result<Arc<dyn Ep>> {
        let evds = EpEvds::single(&self.rails[rail].evd);
        self.rejoin.ias[rail].create_ep(&self.rejoin.pzs[rail], &evds)
    }

    /// The accepting side: the peer asks to connect rail `r.rail` again.
    /// Checks it, ends the old rail if it still lives, accepts on a new rail
    /// endpoint and swaps it in. The error names why it was refused.
    pub(crate) fn rejoin_request(
        self: &Arc<Self>,
        cr: &ConnRequest,
        r: &Rejoin,
        mac: &[u8; 16],
    ) -> std::result::Result<(), &'static str> {
        self.check_request(r, mac)?;
        {
            let mut t = self.rejoin.tries();
            if r.attempt <= t[r.rail].last_seen {
                return Err("rejoin refused: replayed");
            }
            t[r.rail].last_seen = r.attempt;
        }
        let old = {
            let _h = self.harvest.lock().unwrap_or_else(|e| e.into_inner());
            let mut st = self.lock();
            if st.conn != EpState::Connected {
                return Err("endpoint not connected");
            }
            if st.ended[r.rail] {
                None
            } else {
                // The peer lost the rail and this end did not notice: end it
                // here first, so its bytes cannot land after the new rail's.
                let mut evs = UserEvents::new();
                self.drop_rail(&mut st, r.rail, "the peer connects it again", &mut evs);
                drop(st);
                self.deliver(evs);
                Some(self.rails[r.rail].ep())
            }
        };
        if let Some(old) = old {
            let _ = old.disconnect();
        }
        // Once accepted, the swap must not fail.
        if !self.rail_idle(r.rail) {
            return Err("busy; try again");
        }
        let ep = self.new_rail_ep(r.rail).map_err(|_| "no rail endpoint")?;
        cr.accept(&ep, &[]).map_err(|_| "accept failed")?;
        if !self.finish_rejoin(r.rail, &ep) {
            let _ = ep.disconnect();
            return Err("endpoint no longer takes the rail");
        }
        Ok(())
    }

    /// Both sides: `ep`, connected, becomes rail `rail`'s endpoint (see the
    /// module docs). False if the endpoint no longer takes it (closed, or
    /// the rail is not lost).
    fn finish_rejoin(self: &Arc<Self>, rail: usize, ep: &Arc<dyn Ep>) -> bool {
        // The old endpoint's pending work fails first; then its stripes
        // come back.
        if !self.rail_idle(rail) {
            return false;
        }
        let t = Instant::now();
        let h = loop {
            let h = self.harvest.lock().unwrap_or_else(|e| e.into_inner());
            let mut batch = Batch::new();
            for i in 0..self.rails.len() {
                self.drain_rail(i, &mut batch);
            }
            if !batch.is_empty() || self.has_failed() {
                self.handle(&mut batch);
            }
            let owed = {
                let st = self.lock();
                st.reqs.iter().any(|q| q.stripes.iter().any(|s| s.rail == rail && !s.done))
            };
            if !owed || t.elapsed() > SETTLE {
                break h;
            }
            drop(h);
            std::thread::sleep(Duration::from_millis(1));
        };
        let mut evs = UserEvents::new();
        let mut st = self.lock();
        if st.conn != EpState::Connected || !st.ended[rail] || self.stop.load(Ordering::Acquire) {
            return false;
        }
        // Whatever the old endpoint still owes goes again on the survivors
        // (its late completions are stale from now on).
        let mut works = Works::new();
        self.reissue_owed(&mut st, rail, &mut works);
        st.signalled[rail] = st.posted[rail];
        st.probe[rail] = None;
        let old = std::mem::replace(
            &mut *self.rails[rail].ep.write().unwrap_or_else(|e| e.into_inner()),
            ep.clone(),
        );
        st.cur[rail] = ep.id();
        self.refresh_drivers(rail);
        st.ended[rail] = false;
        st.rate[rail] = RailRate::new();
        st.planner.rail_restored(rail);
        if st.planner.control_rail() != Some(rail) {
            self.post_notice_recv(rail);
        }
        evs.push((TO_CONN, Event::RailUp { ep: self.id, rail: rail as u8 }));
        if !works.is_empty() {
            self.issue(works);
        }
        // Broke again before it was swapped in (its end was stale then).
        if ep.state() != EpState::Connected {
            self.drop_rail(&mut st, rail, "lost again while connecting", &mut evs);
        }
        drop(st);
        drop(h);
        self.rejoin.rails_up.fetch_add(1, Ordering::Relaxed);
        {
            let mut t = self.rejoin.tries();
            t[rail].delay = BACKOFF_MIN;
        }
        self.deliver(evs);
        let _ = old.disconnect();
        drop(old);
        // The old endpoint's driver has left the EVD by now (or will: a
        // stale one only costs a look).
        self.refresh_drivers(rail);
        true
    }

    /// Waits (at most [`SETTLE`]) until no work handed to rail `rail`'s
    /// thread before the loss is still to be posted (it fails on the old
    /// endpoint). False if some still is.
    fn rail_idle(&self, rail: usize) -> bool {
        let t = Instant::now();
        while self.rails[rail].pending.load(Ordering::Acquire) != 0 {
            if t.elapsed() > SETTLE {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Ends rail `rail` here (the state lock held): its loss, with the
    /// work that fails over posted at once; the user's events into `evs`.
    fn drop_rail(&self, st: &mut State, rail: usize, reason: &str, evs: &mut UserEvents) {
        // The control rail: what it holds and carries, and the receives on
        // it, go the handover's way.
        let works = if st.planner.control_rail() == Some(rail) {
            self.give_up_control(st, rail, reason, evs)
        } else {
            self.rail_broken(st, rail, reason, evs)
        };
        self.handover_step(st);
        if !works.is_empty() {
            self.issue(works);
        }
    }

    /// Takes the rail EVD's drivers again (its endpoint changed).
    fn refresh_drivers(&self, rail: usize) {
        if let Some(s) = self.rails[rail].evd.as_any().downcast_ref::<SoftEvd>() {
            *self.rails[rail].drivers.write().unwrap_or_else(|e| e.into_inner()) =
                s.own_driver_handles();
        }
    }
}

impl Rejoins {
    /// A rejoin request arrived on rail `rail`'s PSP: hands it to its
    /// endpoint, or refuses it.
    pub(crate) fn request(&self, cr: ConnRequest, rail: usize, r: &Rejoin, mac: &[u8; 16]) {
        let res = if r.rail != rail {
            Err("rail index does not match the rail")
        } else {
            match self.find(r.session) {
                Some(core) if r.control => core.control_notice(r, mac).map(|()| {
                    let _ = cr.reject(TAKEN);
                }),
                Some(core) => core.rejoin_request(&cr, r, mac),
                None => Err("rejoin refused"),
            }
        };
        if let Err(why) = res {
            tracing::debug!(target: "rmr::multirail", rail, why, "rail rejoin refused");
            let _ = cr.reject(why.as_bytes());
        }
    }
}
