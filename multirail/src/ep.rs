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

use crate::evd::MrEvd;
use crate::objects::{MrIa, MrLmr, MrLmrInner, MrPz};
use crate::planner::{Planner, Stripe, Stripes};
use crate::psp::header;
use crate::{Engine, MrConfig};
use rmr_api::provider::{SoftEvd, check_local_sges};
use rmr_api::{
    Access, DtoCompletion, DtoFlags, DtoOp, Ep, EpAttr, EpEvds, EpId, EpState, Error, Evd, Event,
    Result, RmrContext, Sge, Status,
};
use rmr_api::{CompareSwap, Cookie, RemoteAddr};
use smallvec::SmallVec;
use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const RECV_BIT: u64 = 1 << 63;
/// Cookie bit of a probe: a zero-length signalled write whose completion
/// tells that the silent stripes posted before it on its rail completed.
const PROBE_BIT: u64 = 1 << 62;
/// Silent stripes a rail may carry before the next one is signalled.
const MAX_SILENT: usize = 32;
/// Silent stripes a rail may carry while a signalled DTO posted after the
/// oldest of them is in flight (its completion will imply them): a stream
/// of small DTOs signals one in MAX_SILENT, not every one posted until
/// that completion comes back.
const MAX_SILENT_HARD: usize = 4 * MAX_SILENT;
/// Suppressed RDMA writes up to this size go silent too (larger ones stay
/// signalled: their completions are what spreads a stream of small writes
/// over the rails, through the planner's outstanding bytes).
const SILENT_WRITE_MAX: u64 = 1024;
/// With rail threads that have cores of their own, work of at most this
/// many bytes in a batch is posted by the caller when its rail's thread is
/// idle (see [`Core::issue`], [`MrConfig::direct`]): the caller copies
/// 64 KiB into a socket in less time than a sleeping rail thread takes to
/// wake (15-80 us in the lab's VM).
const DIRECT_MAX: u64 = 64 << 10;

/// The largest work item a pinned caller posts itself (see
/// [`MrConfig::direct`]): the configured value, else DIRECT_MAX when the
/// node has more cores than `rails` (a core per rail thread beside the
/// caller's), else everything.
fn direct_max(cfg: &MrConfig, rails: usize) -> u64 {
    cfg.direct.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores > rails { DIRECT_MAX } else { u64::MAX }
    })
}
/// A receive goes straight to the user past at most this many request
/// completions queued on its rail.
const SINK_SCAN: usize = 16;
/// Software-event value that wakes a pinned rail thread for new work.
const WAKE: u64 = 0x5741_4b45;

/// Local segments of a DTO: (multirail LMR, offset in it, length).
type Segs = SmallVec<[(Arc<MrLmrInner>, u64, u64); 2]>;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Send { solicited: bool },
    Write,
    Read,
    WriteImm(u32),
    FetchAdd(u64),
    CmpSwap(u64, u64),
}

impl Kind {
    fn op(self) -> DtoOp {
        match self {
            Kind::Send { .. } => DtoOp::Send,
            Kind::Write | Kind::WriteImm(_) => DtoOp::RdmaWrite,
            Kind::Read => DtoOp::RdmaRead,
            Kind::FetchAdd(_) => DtoOp::FetchAdd,
            Kind::CmpSwap(..) => DtoOp::CmpSwap,
        }
    }
    /// Travels whole on the control rail, behind every earlier stripe.
    fn ordered(self) -> bool {
        !matches!(self, Kind::Write | Kind::Read)
    }
}

/// One unit of work for one rail.
pub(crate) struct Work {
    rail: usize,
    kind: Kind,
    local: Segs,
    remote: Option<(RmrContext, u64)>,
    cookie: u64,
    /// Posted with SUPPRESS on the rail: a send (or small write) the user
    /// suppressed completes when a later DTO (or a probe) of the same rail
    /// completes, with no completion (and no acknowledgement) of its own.
    silent: bool,
}

impl Work {
    /// The bytes this work moves (a probe: none).
    fn bytes(&self) -> u64 {
        self.local.iter().map(|(_, _, n)| n).sum()
    }
}

struct StripeRec {
    rail: usize,
    off: u64,
    len: u64,
    done: bool,
    /// Its place among the DTOs posted on its rail (`State::posted`).
    seq: u64,
    /// Its time for the adaptive weights, once measured (striped DTOs only).
    time: Option<f64>,
}

/// A silent stripe waiting for a later completion of its rail.
#[derive(Clone, Copy)]
struct Silent {
    id: u64,
    idx: usize,
    seq: u64,
}

struct Req {
    cookie: u64,
    kind: Kind,
    signalled: bool,
    bytes: u64,
    remaining: usize,
    status: Status,
    /// The rail whose stripe failed, when one did.
    failed_on: Option<u8>,
    imm: Option<u64>,
    local: Segs,
    remote: Option<(RmrContext, u64)>,
    /// One inline (a whole DTO); a striped DTO's go to the heap. Kept
    /// small: requests move in and out of the queue on every post.
    stripes: SmallVec<[StripeRec; 1]>,
}

impl Req {
    /// A user DTO (`cookie`, `kind`, `signalled`) of `bytes` from `local`
    /// to `remote`, with its `stripes` if planned (none: not yet, and
    /// `remaining` unknown). Inlined, so that a request is built where it
    /// is queued (a request is a few hundred bytes; every move is a copy).
    #[inline(always)]
    fn new(
        (cookie, kind, signalled): (u64, Kind, bool),
        bytes: u64,
        local: Segs,
        remote: Option<(RmrContext, u64)>,
        stripes: SmallVec<[StripeRec; 1]>,
    ) -> Self {
        let remaining = if stripes.is_empty() { usize::MAX } else { stripes.len() };
        Req {
            cookie,
            kind,
            signalled,
            bytes,
            remaining,
            status: Status::Success,
            failed_on: None,
            imm: None,
            local,
            remote,
            stripes,
        }
    }
}

struct RecvReq {
    cookie: u64,
    local: Segs,
}

struct Deferred {
    id: u64,
    need: SmallVec<[u64; 8]>,
    /// An ordered operation (or a BARRIER_FENCE): its fence must cover the
    /// stripes of the requests deferred ahead of it, launched only later.
    fence: Option<bool>,
}

struct State {
    conn: EpState,
    planner: Planner,
    front_id: u64,
    reqs: VecDeque<Req>,
    recv_front: u64,
    recvs: VecDeque<Option<RecvReq>>,
    posted: SmallVec<[u64; 8]>,
    completed: SmallVec<[u64; 8]>,
    deferred: VecDeque<Deferred>,
    /// Per rail, its silent stripes in posting order.
    silent: SmallVec<[VecDeque<Silent>; 8]>,
    /// Per rail, the sequence number of a probe in flight.
    probe: SmallVec<[Option<u64>; 8]>,
    /// Per rail, the sequence number of the last stripe posted on it that
    /// is not silent (its completion implies the silent ones before it).
    signalled: SmallVec<[u64; 8]>,
    /// Per rail, where the last RDMA write posted on it went: the target
    /// of its probes (a zero-length write touches no byte).
    probe_at: SmallVec<[Option<(RmrContext, u64)>; 8]>,
    /// Silent stripes and probes posted (diagnostics: `attr().notes`).
    silent_posted: u64,
    probes_posted: u64,
    /// Receives delivered by [`Core::sink`] (diagnostics: `attr().notes`).
    recv_direct: u64,
    ended: SmallVec<[bool; 8]>,
    broken: bool,
    /// Per-rail service-rate estimate for adaptive striping.
    rate: SmallVec<[RailRate; 8]>,
}

/// A rail's measured throughput: bytes completed over *busy* time (time
/// during which the rail had stripes outstanding), averaged over a long
/// byte window. Acknowledgements arrive in bursts, so a per-completion rate
/// would measure the burst, not the link; idle time must not count either.
#[derive(Clone, Copy)]
struct RailRate {
    bytes: f64,
    secs: f64,
    last: Instant,
}

/// Bytes after which the averaging window is halved.
const RATE_WINDOW: f64 = 64.0 * 1024.0 * 1024.0;

impl RailRate {
    fn new() -> Self {
        RailRate { bytes: 0.0, secs: 0.0, last: Instant::now() }
    }
    /// A stripe is posted on a rail with `outstanding` bytes in flight.
    fn posted(&mut self, outstanding: u64, now: Instant) {
        if outstanding > 0 {
            self.secs += now.saturating_duration_since(self.last).as_secs_f64();
        }
        self.last = now;
    }
    /// A stripe of `bytes` completed (the rail was busy until now).
    fn completed(&mut self, bytes: u64, now: Instant) {
        self.secs += now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.bytes += bytes as f64;
        if self.bytes > RATE_WINDOW {
            self.bytes /= 2.0;
            self.secs /= 2.0;
        }
    }
    /// Seconds this rail needs for `bytes`, once it has a measurement.
    fn time_for(&self, bytes: u64) -> Option<f64> {
        (self.secs > 0.0 && self.bytes > 0.0).then(|| bytes as f64 * self.secs / self.bytes)
    }
}

pub(crate) struct Rail {
    ep: Arc<dyn Ep>,
    evd: Arc<dyn Evd>,
    /// The drivers of the rail EVD (its endpoint's socket), taken once the
    /// rail is connected: what [`Core::flush_rails`] pushes out.
    drivers: std::sync::OnceLock<Vec<Arc<dyn rmr_api::provider::Driver>>>,
    /// Work handed to the rail thread and not yet posted by it.
    pending: std::sync::atomic::AtomicUsize,
    tx: Mutex<Option<crossbeam_channel::Sender<Work>>>,
    cpu: Mutex<String>,
}

/// State shared by the user's handle, the rail threads and polling EVDs.
pub(crate) struct Core {
    id: EpId,
    cfg: MrConfig,
    pz_id: u64,
    max_dtos: usize,
    max_sges: usize,
    rails: Vec<Rail>,
    user: EpEvds,
    /// The queues of `user`'s request, receive and connection EVDs where
    /// they are multirail EVDs (looked up once, not on every delivery).
    user_q: [Option<Arc<SoftEvd>>; 3],
    st: Mutex<State>,
    stop: AtomicBool,
    /// Held while dequeuing rail events and handling them, so each rail's
    /// events are handled in the order they were queued, by whoever harvests.
    harvest: Mutex<()>,
    /// Stripes whose rail post failed, to be handled like error completions.
    failed: Mutex<Vec<(usize, u64, Status)>>,
    /// `failed` may be non-empty (saves its lock on every harvest).
    has_failed: AtomicBool,
    /// Work items handed to rail threads (the rest their callers posted).
    handed: AtomicU64,
    /// The largest work item a pinned caller posts itself ([`direct_max`]).
    direct_max: u64,
    /// The policy is adaptive: stripes feed the rails' rate estimates.
    adaptive: bool,
    /// Every rail EVD is a [`SoftEvd`] (its `len` tells whether to harvest).
    soft_rails: bool,
}

type UserEvents = SmallVec<[(u8, Event); 4]>;
/// Rail events harvested together (a waiter usually finds one).
type Batch = SmallVec<[(usize, Event); 4]>;
/// Work for the rails: inline room for a whole DTO and one probe (a striped
/// DTO's stripes spill to the heap, nothing beside its bytes); a `Work` is
/// a few hundred bytes and these move on every post.
type Works = SmallVec<[Work; 2]>;
const TO_REQ: u8 = 0;
const TO_RECV: u8 = 1;
const TO_CONN: u8 = 2;

/// A rail post rejected the caller's input (segments, target): the error
/// goes back to the caller, as our own checks would have sent it.
fn is_input_error(e: &Error) -> bool {
    matches!(
        e,
        Error::Protection(_)
            | Error::OutOfBounds { .. }
            | Error::InvalidArgument(_)
            | Error::Unsupported(_)
    )
}

/// The completion status a failed rail post turns into.
fn post_status(e: &Error) -> Status {
    match e {
        Error::Broken(_) | Error::NotConnected | Error::Flushed => Status::Broken,
        Error::Protection(_) => Status::Protection,
        Error::Unsupported(_) => Status::Unsupported,
        Error::OutOfBounds { .. } | Error::InvalidArgument(_) => Status::OutOfBounds,
        _ => Status::RemoteAccess,
    }
}

fn slice(local: &Segs, mut off: u64, mut len: u64) -> Segs {
    let mut out = Segs::new();
    for (l, o, n) in local {
        if len == 0 {
            break;
        }
        if off >= *n {
            off -= n;
            continue;
        }
        let take = (*n - off).min(len);
        out.push((l.clone(), o + off, take));
        len -= take;
        off = 0;
    }
    out
}

impl Core {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn deliver(&self, evs: UserEvents) {
        let _ = self.deliver_taking(evs, None);
    }

    /// Delivers user events; the first one bound for `take` (the queue of
    /// the EVD the calling waiter waits on) while that queue is empty is
    /// handed back instead of queued: the waiter returns it at once (it is
    /// the oldest event of that EVD — harvests are serialised).
    fn deliver_taking(&self, evs: UserEvents, take: Option<&SoftEvd>) -> Option<Event> {
        let mut taken = None;
        for (to, ev) in evs {
            let t = if taken.is_none() { take } else { None };
            taken = taken.or(self.deliver_one(to, ev, t));
        }
        taken
    }

    /// Delivers one user event to its EVD, or hands it back for `take`
    /// (see [`Core::deliver_taking`]).
    fn deliver_one(&self, to: u8, ev: Event, take: Option<&SoftEvd>) -> Option<Event> {
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

    fn dto(&self, cookie: u64, op: DtoOp, status: Status, bytes: u64) -> DtoCompletion {
        DtoCompletion::new(self.id, Cookie(cookie), op, status, bytes)
    }

    /// Wakes rail `r`'s thread: a poke for a software EVD (seen by no one
    /// else), a software event otherwise (such a rail is its thread's alone).
    fn ring(&self, r: usize) {
        let evd = &self.rails[r].evd;
        match evd.as_any().downcast_ref::<SoftEvd>() {
            Some(s) => s.poke(),
            None => {
                let _ = evd.post_software(WAKE);
            }
        }
    }

    fn fail(&self, w: &Work, e: &Error) {
        self.fail_on(w.rail, w.cookie, e);
    }

    /// A post of `cookie` on `rail` failed: it completes with the error
    /// at the next harvest (a broken rail's stripes fail over from there).
    fn fail_on(&self, rail: usize, cookie: u64, e: &Error) {
        self.failed.lock().unwrap_or_else(|e| e.into_inner()).push((rail, cookie, post_status(e)));
        self.has_failed.store(true, Ordering::Release);
    }

    /// Posts one unit of work on its rail (in the calling thread).
    fn post_work(&self, w: &Work) -> Result<()> {
        self.post_on(w.rail, w.kind, &w.local, w.remote.as_ref(), w.cookie, w.silent)
    }

    /// Posts a DTO's `local` segments on `rail` (remote target already
    /// offset to the stripe), retrying a full rail queue for a while.
    fn post_on(
        &self,
        rail: usize,
        kind: Kind,
        local: &[(Arc<MrLmrInner>, u64, u64)],
        remote: Option<&(RmrContext, u64)>,
        cookie: u64,
        silent: bool,
    ) -> Result<()> {
        let ep = &self.rails[rail].ep;
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
            .map(|(c, o)| (c.keys().get(rail).map(|&k| RmrContext::new(k, c.addr, c.len)), *o));
        let mut start = None;
        loop {
            let r = match (kind, &remote) {
                (Kind::Send { solicited }, _) => {
                    let mut f = if solicited { DtoFlags::SOLICITED } else { DtoFlags::empty() };
                    if silent {
                        f |= DtoFlags::SUPPRESS;
                    }
                    ep.post_send(sges, Cookie(cookie), f)
                }
                (Kind::Write, Some((Some(c), o))) => {
                    let f = if silent {
                        DtoFlags::SUPPRESS
                    } else if cookie & PROBE_BIT != 0 {
                        DtoFlags::URGENT
                    } else {
                        DtoFlags::empty()
                    };
                    ep.post_rdma_write(sges, c.at(*o), Cookie(cookie), f)
                }
                (Kind::Read, Some((Some(c), o))) => {
                    ep.post_rdma_read(sges, c.at(*o), Cookie(cookie), DtoFlags::empty())
                }
                (Kind::WriteImm(imm), Some((Some(c), o))) => {
                    ep.post_rdma_write_imm(sges, c.at(*o), imm, Cookie(cookie), DtoFlags::empty())
                }
                (Kind::FetchAdd(add), Some((Some(c), o))) => {
                    ep.post_fetch_add(sges[0], c.at(*o), add, Cookie(cookie), DtoFlags::empty())
                }
                (Kind::CmpSwap(cmp, swp), Some((Some(c), o))) => ep.post_cmp_swap(
                    sges[0],
                    c.at(*o),
                    CompareSwap { compare: cmp, swap: swp },
                    Cookie(cookie),
                    DtoFlags::empty(),
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
                    std::thread::yield_now();
                }
                other => return other,
            }
        }
    }

    fn post_recv_on(&self, rail: usize, id: u64, local: &Segs) -> Result<()> {
        let ep = &self.rails[rail].ep;
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
    fn issue(&self, works: Works) {
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
                    let sent = match &*self.rails[r].tx.lock().unwrap_or_else(|e| e.into_inner()) {
                        Some(tx) => tx.send(w).is_ok(),
                        None => false,
                    };
                    if sent {
                        self.ring(r);
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
    fn stripe_work(req: &Req, id: u64, idx: usize, s: &Stripe) -> Work {
        Work {
            rail: s.rail,
            kind: req.kind,
            local: slice(&req.local, s.offset, s.len),
            remote: req.remote.map(|(c, o)| (c, o + s.offset)),
            cookie: id << 8 | idx as u64,
            silent: false,
        }
    }

    /// A probe on `rail` if it carries silent stripes (with `any`, any DTO
    /// not yet completed) and has none in flight: a zero-length signalled
    /// write to where its last write went, posted URGENT so the peer
    /// acknowledges it at once. Whoever waits for the rail's completions (a
    /// fence, a full window, a completed DTO held behind a silent one) asks
    /// for one; the completion of a DTO that is not silent comes anyway, but
    /// only after the peer's acknowledgement delay unless a probe hurries it.
    fn probe(&self, st: &mut State, rail: usize, any: bool) -> Option<Work> {
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
        })
    }

    /// Probes the rails a fence still waits on (`need[r]` DTOs of rail `r`
    /// to have completed).
    fn probe_waiting(&self, st: &mut State, need: &[u64]) -> Works {
        let waiting: SmallVec<[usize; 8]> =
            (0..self.rails.len()).filter(|&r| need[r] > st.completed[r]).collect();
        waiting.into_iter().filter_map(|r| self.probe(st, r, true)).collect()
    }

    /// Probes every rail that carries silent stripes (with `any`, every
    /// rail with a DTO not yet completed: a poster waits for a free slot).
    fn probe_all(&self, st: &mut State, any: bool) -> Works {
        (0..self.rails.len()).filter_map(|r| self.probe(st, r, any)).collect()
    }

    /// A DTO posted on `rail` as number `seq` completed successfully: every
    /// silent stripe posted before it on that rail has completed too.
    fn imply(&self, st: &mut State, rail: usize, seq: u64) {
        while st.silent[rail].front().is_some_and(|s| s.seq < seq) {
            let sl = st.silent[rail].pop_front().expect("front");
            // A stripe that failed (its error completion was counted then)
            // or moved to another rail is no longer this rail's.
            let Some(i) = sl.id.checked_sub(st.front_id) else { continue };
            let Some(req) = st.reqs.get_mut(i as usize) else { continue };
            let Some(s) = req.stripes.get_mut(sl.idx) else { continue };
            if s.done || s.rail != rail || s.seq != sl.seq {
                continue;
            }
            s.done = true;
            req.remaining -= 1;
            st.completed[rail] += 1;
        }
    }

    /// Rail `rail` ended: its silent stripes will never be implied; they
    /// fail over like stripes the rail flushed.
    fn orphan_silent(
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

    /// Plans (whole on `chosen` if the planner already placed it) and
    /// records request `id`'s stripes, returning their work.
    fn launch(&self, st: &mut State, id: u64, chosen: Option<usize>) -> Works {
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
    fn record(&self, st: &mut State, id: u64, chosen: Option<usize>) -> (Stripes, bool) {
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

    /// Whether a whole DTO on `rail` goes silent: a send, or a write of at
    /// most SILENT_WRITE_MAX bytes, that the user suppressed goes silent on
    /// its rail (no completion, no acknowledgement of its own), as on one
    /// rail, once the rail knows where a probe may go (a write tells it).
    fn goes_silent(
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
    fn silent_room(st: &State, rail: usize) -> bool {
        let q = &st.silent[rail];
        q.len() < MAX_SILENT
            || (q.len() < MAX_SILENT_HARD
                && st.signalled[rail] > st.completed[rail]
                && q.front().is_some_and(|s| s.seq < st.signalled[rail]))
    }

    /// Records the stripes of request `id` (the last one queued or a
    /// deferred one) as posted. A silent stripe's bytes do not count as in
    /// flight for the planner (few, and their end is learnt late).
    fn note_stripes(&self, st: &mut State, id: u64, plan: &[Stripe], silent: bool) {
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
    fn book_stripe(
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
    fn record_whole(
        &self,
        st: &mut State,
        id: u64,
        what: (u64, Kind, bool),
        local: Segs,
        remote: Option<(RmrContext, u64)>,
        bytes: u64,
        rail: usize,
        silent: bool,
    ) {
        debug_assert_eq!(id, st.front_id + st.reqs.len() as u64);
        if let Some(at) = remote.filter(|_| matches!(what.1, Kind::Write)) {
            st.probe_at[rail] = Some(at);
        }
        let now = self.adaptive.then(Instant::now);
        let seq = Self::book_stripe(st, id, 0, rail, bytes, silent, now);
        let stripe = StripeRec { rail, off: 0, len: bytes, done: false, seq, time: None };
        st.reqs.push_back(Req::new(what, bytes, local, remote, smallvec::smallvec![stripe]));
    }

    /// The rail a DTO goes to whole, now and from the caller, if it can:
    /// no fence, no deferred request ahead, an ordered DTO's fence already
    /// clear, a DTO the planner does not stripe, a rail whose thread has
    /// nothing queued.
    /// Returns (that rail if it can go now, the rail the planner placed an
    /// unordered DTO on — the general path must not place it twice).
    fn direct_rail(
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
    fn direct(&self, rail: usize) -> bool {
        self.cfg.engine != Engine::Pinned || self.rails[rail].pending.load(Ordering::Acquire) == 0
    }

    #[allow(clippy::too_many_arguments)]
    fn post(
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
        let remote = match remote {
            Some((ctx, off)) => {
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
                Some((*ctx, off))
            }
            None => None,
        };
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
        let (direct, placed) = self.direct_rail(&mut st, kind, bytes, full);
        if let Some(rail) = direct.filter(|_| rail_checks) {
            // A lone whole stripe (every small or ordered DTO) goes out from the
            // caller at once, no work item, no hand-off; recorded once the rail
            // took it (a rejected post leaves no trace).
            let silent = self.goes_silent(&st, rail, kind, bytes, signalled, remote.is_some());
            let rc = id << 8;
            let posted = match self.post_on(rail, kind, &segs, remote.as_ref(), rc, silent) {
                Err(e) if is_input_error(&e) => return Err(e),
                r => r,
            };
            let what = (cookie, kind, signalled);
            self.record_whole(&mut st, id, what, segs, remote, bytes, rail, silent);
            if let Err(e) = posted {
                self.fail_on(rail, rc, &e);
            }
            return Ok(());
        }
        check_local_sges(local, self.pz_id, need, self.max_sges)?;
        self.post_queued(
            st,
            Req::new((cookie, kind, signalled), bytes, segs, remote, SmallVec::new()),
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
    fn post_queued(
        &self,
        mut st: MutexGuard<'_, State>,
        req: Req,
        id: u64,
        full: bool,
        placed: Option<usize>,
    ) {
        let kind = req.kind;
        st.reqs.push_back(req);
        // Fence: ordered operations wait for earlier stripes on other rails;
        // BARRIER_FENCE waits for every earlier stripe.
        let ctl = st.planner.control_rail().unwrap_or(0);
        if kind.ordered() || full || !st.deferred.is_empty() {
            let need: SmallVec<[u64; 8]> = (0..self.rails.len())
                .map(|r| if r == ctl && !full { 0 } else { st.posted[r] })
                .collect();
            let blocked =
                !st.deferred.is_empty() || need.iter().zip(&st.completed).any(|(n, c)| c < n);
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

    /// Without rail threads nobody makes progress but the caller: a fenced
    /// post polls the rails until its fence clears, a post into a full
    /// window polls until a slot frees (the paper's non-threaded engine).
    /// Out of line: the common post finds room at once.
    #[inline(never)]
    fn wait_room(&self, kind: Kind, full: bool) {
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
    fn fenced(&self, st: &State, full: bool) -> bool {
        let ctl = st.planner.control_rail().unwrap_or(0);
        !st.deferred.is_empty()
            || (0..self.rails.len()).any(|r| (r != ctl || full) && st.completed[r] < st.posted[r])
    }

    /// Pops finished requests off the front, in posting order.
    fn release(&self, st: &mut State, evs: &mut UserEvents) {
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
    fn release_deferred(&self, st: &mut State) -> Works {
        let mut works = SmallVec::new();
        while let Some(d) = st.deferred.front() {
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
    fn on_stripe(
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
        let (slen, soff) = (s.len, s.off);
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
            // Failover: the stripe goes again, whole, on the least-loaded survivor.
            st.planner.rail_failed(rail);
            let target = if req.kind.ordered() {
                st.planner.control_rail()
            } else {
                st.planner.plan(0).first().map(|s| s.rail)
            };
            match target {
                Some(nr) => {
                    let req = &mut st.reqs[(id - st.front_id) as usize];
                    let s = &mut req.stripes[idx];
                    s.rail = nr;
                    let stripe = Stripe { rail: nr, offset: soff, len: slen };
                    works.push(Self::stripe_work(req, id, idx, &stripe));
                    st.planner.posted(nr, slen);
                    st.posted[nr] += 1;
                    let seq = st.posted[nr];
                    st.reqs[(id - st.front_id) as usize].stripes[idx].seq = seq;
                    // Fenced requests must also wait for the re-issued stripe.
                    let p = st.posted[nr];
                    for d in st.deferred.iter_mut() {
                        d.need[nr] = d.need[nr].max(p);
                    }
                }
                None => {
                    let req = &mut st.reqs[(id - st.front_id) as usize];
                    req.stripes[idx].done = true;
                    req.status = Status::Broken;
                    req.remaining -= 1;
                }
            }
        } else {
            let s = &mut req.stripes[idx];
            s.done = true;
            if req.status.is_ok() && !c.status.is_ok() {
                req.status = c.status;
                req.failed_on = Some(s.rail as u8);
            }
            req.remaining -= 1;
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

    fn on_recv(&self, st: &mut State, c: &DtoCompletion, evs: &mut UserEvents) -> Works {
        let id = c.cookie.0 & !RECV_BIT;
        if id < st.recv_front {
            return SmallVec::new();
        }
        let i = (id - st.recv_front) as usize;
        let lost =
            matches!(c.status, Status::Flushed | Status::Broken) && st.conn == EpState::Connected;
        if lost {
            // The control rail died under posted receives: post them again on the new one.
            if let (Some(nr), Some(Some(r))) = (st.planner.control_rail(), st.recvs.get(i)) {
                if self.post_recv_on(nr, id, &r.local).is_ok() {
                    return SmallVec::new();
                }
            }
        }
        if let Some(ev) = self.recv_done(st, c) {
            evs.push((TO_RECV, ev));
        }
        SmallVec::new()
    }

    /// Receive `c` completed (for good): its user completion.
    fn recv_done(&self, st: &mut State, c: &DtoCompletion) -> Option<Event> {
        let i = (c.cookie.0 & !RECV_BIT).checked_sub(st.recv_front)? as usize;
        let ev = st.recvs.get_mut(i).and_then(Option::take).map(|r| {
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
    fn on_event(&self, st: &mut State, rail: usize, ev: Event, evs: &mut UserEvents) -> Works {
        match ev {
            Event::Dto(c) if c.cookie.0 & RECV_BIT != 0 => self.on_recv(st, &c, evs),
            Event::Dto(c) => self.on_stripe(st, rail, &c, evs),
            Event::Broken { reason, .. } => {
                st.ended[rail] = true;
                if st.conn == EpState::Connected {
                    st.planner.rail_failed(rail);
                    if st.planner.live() == 0 {
                        st.conn = EpState::Broken;
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
                            Event::AsyncError {
                                ep: Some(self.id),
                                what: format!("rail {rail} lost: {reason}"),
                            },
                        ));
                    }
                }
                let works = self.orphan_silent(st, rail, Status::Broken, evs);
                self.maybe_ended(st, evs);
                works
            }
            Event::Disconnected { .. } => {
                st.ended[rail] = true;
                if st.conn == EpState::Connected {
                    // The peer closed the logical EP: close every rail.
                    st.conn = EpState::Disconnected;
                    for (r, rl) in self.rails.iter().enumerate() {
                        if r != rail {
                            let _ = rl.ep.disconnect();
                        }
                    }
                }
                let works = self.orphan_silent(st, rail, Status::Flushed, evs);
                self.maybe_ended(st, evs);
                works
            }
            _ => SmallVec::new(),
        }
    }

    fn maybe_ended(&self, st: &mut State, evs: &mut UserEvents) {
        if st.ended.iter().all(|e| *e) && !st.broken {
            st.broken = true; // final event posted
            if st.conn == EpState::Disconnected {
                evs.push((TO_CONN, Event::Disconnected { ep: self.id }));
            } else {
                st.conn = EpState::Broken;
                evs.push((
                    TO_CONN,
                    Event::Broken { ep: self.id, reason: "every rail ended".into() },
                ));
            }
        }
    }

    /// A rail EVD's sink (see [`SoftEvd::set_sink`]): a successful receive
    /// pushed while that EVD holds nothing, nobody harvests and the state is
    /// free is translated and delivered to the user's EVD right away —
    /// nothing queued or being handled can precede it (receives complete
    /// only on the control rail, in order). Anything else, or a busy lock,
    /// goes the usual way. Called under the rail EVD's queue lock; takes
    /// its own locks only by trying.
    fn sink(&self, ev: Event) -> Option<Event> {
        let c = match ev {
            Event::Dto(c) if c.cookie.0 & RECV_BIT != 0 && c.status.is_ok() => c,
            ev => return Some(ev),
        };
        if self.has_failed() {
            return Some(ev);
        }
        let Ok(_h) = self.harvest.try_lock() else { return Some(ev) };
        let Ok(mut st) = self.st.try_lock() else { return Some(ev) };
        // A receive already settled (none): dropped, as a harvest would.
        let u = self.recv_done(&mut st, &c)?;
        st.recv_direct += 1;
        drop(st);
        self.deliver_one(TO_RECV, u, None);
        None
    }

    /// Processes a batch of rail events and post failures under one lock.
    fn handle(&self, batch: &mut Batch) {
        let _ = self.handle_taking(batch, None);
    }

    /// [`Core::handle`], handing back an event for `take` (see
    /// [`Core::deliver_taking`]).
    fn handle_taking(&self, batch: &mut Batch, take: Option<&SoftEvd>) -> Option<Event> {
        // A ping-pong's usual harvest, one receive that completed: it changes
        // no request and releases no fence.
        if let [(_, Event::Dto(c))] = batch[..] {
            if c.cookie.0 & RECV_BIT != 0 && c.status.is_ok() && !self.has_failed() {
                batch.clear();
                let ev = self.recv_done(&mut self.lock(), &c)?;
                return self.deliver_one(TO_RECV, ev, take);
            }
        }
        self.handle_all(batch, take)
    }

    /// The general case of [`Core::handle_taking`]. Kept out of line: its
    /// frame (request, stripe and work bookkeeping) is large, and the lone
    /// receive above should not pay for it.
    #[inline(never)]
    fn handle_all(&self, batch: &mut Batch, take: Option<&SoftEvd>) -> Option<Event> {
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
        for (rail, ev) in batch.drain(..) {
            works.extend(self.on_event(&mut st, rail, ev, &mut evs));
        }
        works.extend(self.release_deferred(&mut st));
        self.release(&mut st, &mut evs);
        if !works.is_empty() {
            self.issue(works);
        }
        drop(st);
        self.deliver_taking(evs, take)
    }

    /// Sends the frames the rails hold for batching (or queue behind a full
    /// socket) now, without reading or blocking: [`SoftEvd::flush_writes`]
    /// over this EP's rails, with no driver lookup. Returns whether any went.
    pub(crate) fn flush_rails(&self) -> bool {
        let mut moved = false;
        for d in self.rails.iter().filter_map(|r| r.drivers.get()).flatten() {
            moved |= d.flush();
        }
        moved
    }

    pub(crate) fn rail_evds(&self) -> impl Iterator<Item = &Arc<dyn Evd>> {
        self.rails.iter().map(|r| &r.evd)
    }

    /// Whether rail threads make progress on their own.
    pub(crate) fn threaded(&self) -> bool {
        self.cfg.engine == Engine::Pinned
    }

    /// Drains the rail EVDs once (the inline/fork-join progress; a shortcut
    /// past the rail threads for a waiter). Rails whose EVD only its rail
    /// thread may consume (not a [`SoftEvd`]) are left to it.
    pub(crate) fn poll_rails(&self) -> bool {
        self.poll_rails_taking(None).0
    }

    /// [`Core::poll_rails`] for a waiter on the EVD whose queue is `take`:
    /// also returns the event handed back to it (see [`Core::deliver_taking`]).
    pub(crate) fn poll_rails_taking(&self, take: Option<&SoftEvd>) -> (bool, Option<Event>) {
        // Every rail EVD a software one: nothing to do unless one holds events
        // (a look at counters, no lock).
        if self.soft_rails && !self.has_failed() && self.rails.iter().all(|r| r.evd.is_empty()) {
            return (false, None);
        }
        // Wait for a harvesting rail thread rather than skip: it handles only its
        // own rail, and events of the others must not be left behind.
        let _g = self.harvest.lock().unwrap_or_else(|e| e.into_inner());
        let mut batch = Batch::new();
        for (i, r) in self.rails.iter().enumerate() {
            if self.threaded() && r.evd.as_any().downcast_ref::<SoftEvd>().is_none() {
                continue;
            }
            self.drain_rail(i, &mut batch);
        }
        if batch.is_empty() && !self.has_failed() {
            return (false, None);
        }
        (true, self.handle_taking(&mut batch, take))
    }

    /// Waits (at most `max`) until a rail has an event to harvest, driving
    /// the rails' sockets meanwhile: how a post blocked by a fence or a full
    /// window waits without rail threads. Spinning first, as a waiter on the
    /// EVD would, then blocking in `poll` on every rail at once; without the
    /// EVD's help (not a multirail EVD), a yield.
    fn await_rails(&self, max: Duration) {
        let ready = || self.rails.iter().any(|r| !r.evd.is_empty()) || self.has_failed();
        match self.user.request.as_any().downcast_ref::<MrEvd>() {
            Some(m) => {
                m.q.drive_until_spin(Some(max), m.q.spin_time(), &ready);
            }
            None => std::thread::yield_now(),
        }
    }

    fn drain_rail(&self, i: usize, batch: &mut Batch) {
        let r = &self.rails[i];
        // A software rail EVD is driven by the waiter's poll (drive_through);
        // here its events are only collected. Others make progress in dequeue.
        let soft = r.evd.as_any().downcast_ref::<SoftEvd>();
        let next = || match soft {
            Some(s) => s.try_pop(),
            None => r.evd.dequeue(),
        };
        while let Some(ev) = next() {
            if matches!(ev, Event::Software(WAKE)) {
                if self.threaded() {
                    // The rail thread's doorbell: hand it back and leave this rail to it.
                    let _ = r.evd.post_software(WAKE);
                    break;
                }
                continue;
            }
            batch.push((i, ev));
        }
    }

    /// Whether an application thread is waiting on one of this EP's EVDs
    /// (it harvests the rails itself).
    fn waited(&self) -> bool {
        [&self.user.request, &self.user.recv, &self.user.conn]
            .iter()
            .any(|e| e.as_any().downcast_ref::<MrEvd>().is_some_and(MrEvd::waiting))
    }

    fn has_failed(&self) -> bool {
        self.has_failed.load(Ordering::Acquire)
    }

    /// A pinned rail thread: posts its rail's work and pushes it out as the
    /// rail drains; harvests the rail's completions when no application
    /// thread is waiting to do it (it is never woken by completions, so a
    /// waiter and the rail threads do not race for every event).
    fn rail_thread(self: Arc<Self>, rail: usize, rx: crossbeam_channel::Receiver<Work>) {
        let cpu = crate::bind::bind_thread_to_core(rail, self.cfg.bind);
        *self.rails[rail].cpu.lock().unwrap_or_else(|e| e.into_inner()) = cpu;
        let mut batch = Batch::new();
        let evd = self.rails[rail].evd.clone();
        let soft = evd.as_any().downcast_ref::<SoftEvd>();
        const NAP_MIN: Duration = Duration::from_millis(1);
        let mut nap = NAP_MIN;
        loop {
            let seen = soft.map_or(0, |s| s.poke_gen());
            while let Ok(w) = rx.try_recv() {
                if let Err(e) = self.post_work(&w) {
                    self.fail(&w, &e);
                }
                self.rails[rail].pending.fetch_sub(1, Ordering::AcqRel);
                nap = NAP_MIN;
            }
            match soft {
                Some(s) => {
                    if !rx.is_empty() {
                        continue;
                    }
                    if (!s.is_empty() || self.has_failed()) && !self.waited() {
                        if let Ok(_g) = self.harvest.try_lock() {
                            while !s.is_empty() {
                                match evd.dequeue() {
                                    Some(Event::Software(WAKE)) => {}
                                    Some(ev) => batch.push((rail, ev)),
                                    None => break,
                                }
                            }
                            self.handle(&mut batch);
                            nap = NAP_MIN;
                            continue;
                        }
                    }
                }
                // Only this thread consumes such a rail's EVD.
                None => {
                    match evd.wait(Some(Duration::from_millis(200)), 1) {
                        Ok(Event::Software(WAKE)) | Err(_) => {}
                        Ok(ev) => batch.push((rail, ev)),
                    }
                    while let Some(ev) = evd.dequeue() {
                        if !matches!(ev, Event::Software(WAKE)) {
                            batch.push((rail, ev));
                        }
                    }
                    if !batch.is_empty() || self.has_failed() {
                        let _g = self.harvest.lock().unwrap_or_else(|e| e.into_inner());
                        self.handle(&mut batch);
                    }
                }
            }
            if self.stop.load(Ordering::Acquire) && rx.is_empty() {
                let st = self.lock();
                if st.ended.iter().all(|e| *e) || st.conn != EpState::Connected {
                    break;
                }
            }
            if let Some(s) = soft {
                s.wait_poke_flushing(seen, nap);
                nap = (nap * 2).min(Duration::from_millis(10));
            }
        }
    }

    /// Makes the logical connection live.
    fn start(self: &Arc<Self>, peer_pd: Vec<u8>) -> Result<()> {
        // A receive that completes on a rail becomes the user's event at once,
        // in the thread that drove it, unless the rail holds events its order
        // against matters for (a receive, an error, a connection event): the
        // successful request completions queued there (a signalled write's,
        // as in a write+notify ping-pong) are harvested later.
        for r in &self.rails {
            if let Some(s) = r.evd.as_any().downcast_ref::<SoftEvd>() {
                let _ = r.drivers.set(s.own_driver_handles());
                let me = Arc::downgrade(self);
                s.set_sink(Box::new(move |ev, ahead| {
                    if !matches!(&ev, Event::Dto(c) if c.cookie.0 & RECV_BIT != 0) {
                        return Some(ev);
                    }
                    let overtakes = |e: &Event| {
                        matches!(e, Event::Dto(c) if c.cookie.0 & RECV_BIT == 0 && c.status.is_ok())
                    };
                    // (A long queue means a harvest is due anyway: not scanned.)
                    if ahead.len() > SINK_SCAN || !ahead.iter().all(overtakes) {
                        return Some(ev);
                    }
                    match me.upgrade() {
                        Some(c) => c.sink(ev),
                        None => Some(ev),
                    }
                }));
            }
        }
        match self.cfg.engine {
            Engine::Pinned => {
                for r in 0..self.rails.len() {
                    let (tx, rx) = crossbeam_channel::unbounded();
                    *self.rails[r].tx.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
                    let me = self.clone();
                    std::thread::Builder::new()
                        .name(format!("rmr-mr-rail{r}"))
                        .spawn(move || me.rail_thread(r, rx))
                        .map_err(|e| Error::io("spawn rail thread", e))?;
                }
            }
            Engine::Inline | Engine::ForkJoin => {}
        }
        // Waiters harvest rail EVDs themselves (with rail threads as well: a
        // waiter that finds its completion needs no hand-off).
        for e in [&self.user.request, &self.user.recv, &self.user.conn] {
            if let Some(m) = e.as_any().downcast_ref::<MrEvd>() {
                m.attach_polled(self);
            }
        }
        self.lock().conn = EpState::Connected;
        self.deliver(smallvec::smallvec![(
            TO_CONN,
            Event::Established { ep: self.id, private_data: peer_pd }
        )]);
        Ok(())
    }
}

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
                ep,
                evd,
                drivers: std::sync::OnceLock::new(),
                pending: Default::default(),
                tx: Mutex::new(None),
                cpu: Mutex::new("not started".into()),
            });
        }
        let soft_rails = rails.iter().all(|r| r.evd.as_any().downcast_ref::<SoftEvd>().is_some());
        let cfg = ia.cfg.clone();
        let planner = Planner::new(n, cfg.policy.clone(), cfg.threshold, cfg.align);
        let attr = rmr_api::Ia::attr(ia);
        let core = Core {
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
                broken: false,
                rate: smallvec::smallvec![RailRate::new(); n],
            }),
            stop: AtomicBool::new(false),
            harvest: Mutex::new(()),
            failed: Mutex::default(),
            has_failed: AtomicBool::new(false),
            handed: AtomicU64::new(0),
            direct_max: direct_max(&cfg, n),
            adaptive: matches!(cfg.policy, crate::Policy::Adaptive { .. }),
            soft_rails,
            cfg,
        };
        Ok(Arc::new(MrEp { core: Arc::new(core) }))
    }

    /// The planner's current rail weights (for reports and tests).
    pub fn weights(&self) -> Vec<f64> {
        self.core.lock().planner.weights().to_vec()
    }

    /// Rail `i`'s endpoint (for tests and diagnostics).
    pub fn rail_ep(&self, i: usize) -> Option<Arc<dyn Ep>> {
        self.core.rails.get(i).map(|r| r.ep.clone())
    }

    pub(crate) fn accept_rails(
        &self,
        reqs: &[rmr_api::ConnRequest],
        peer_pd: &[u8],
        pd: &[u8],
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
        for (i, r) in reqs.iter().enumerate() {
            if let Err(e) = r.accept(&c.rails[i].ep, if i == 0 { pd } else { &[] }) {
                for rl in &c.rails[..i] {
                    let _ = rl.ep.disconnect();
                }
                c.lock().conn = EpState::Unconnected;
                return Err(e);
            }
        }
        c.start(peer_pd.to_vec())
    }
}

impl Drop for MrEp {
    fn drop(&mut self) {
        let _ = self.disconnect();
        self.core.stop.store(true, Ordering::Release);
        for (i, r) in self.core.rails.iter().enumerate() {
            *r.tx.lock().unwrap_or_else(|e| e.into_inner()) = None;
            self.core.ring(i);
        }
    }
}

impl Ep for MrEp {
    fn id(&self) -> EpId {
        self.core.id
    }

    fn attr(&self) -> EpAttr {
        let c = &self.core;
        let mut notes = vec![
            ("engine".to_string(), c.cfg.engine.to_string()),
            ("policy".to_string(), c.cfg.policy.to_string()),
            ("threshold".to_string(), c.cfg.threshold.to_string()),
            (
                "direct_max".to_string(),
                if c.direct_max == u64::MAX { "all".into() } else { c.direct_max.to_string() },
            ),
        ];
        for (i, r) in c.rails.iter().enumerate() {
            notes.push((
                format!("rail{i}.cpu"),
                r.cpu.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            ));
        }
        let w: Vec<String> = c.lock().planner.weights().iter().map(|w| format!("{w:.3}")).collect();
        notes.push(("weights".into(), w.join(",")));
        let r: Vec<String> = c
            .lock()
            .rate
            .iter()
            .map(|r| format!("{:.0}", if r.secs > 0.0 { r.bytes / r.secs * 8e-6 } else { 0.0 }))
            .collect();
        notes.push(("rail_mbps_est".into(), r.join(",")));
        {
            let st = c.lock();
            notes.push(("silent".into(), st.silent_posted.to_string()));
            notes.push(("probes".into(), st.probes_posted.to_string()));
            notes.push(("recv_direct".into(), st.recv_direct.to_string()));
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
            for (k, v) in r.ep.attr().notes {
                notes.push((format!("rail{i}.{k}"), v));
            }
            notes.push((format!("rail{i}.evd_len"), r.evd.len().to_string()));
        }
        let r0 = c.rails[0].ep.attr();
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
                    let (ep, addr) = (c.rails[i].ep.clone(), addrs[i]);
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
                    let _ = c.rails[i].ep.disconnect();
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
        }
        for r in &c.rails {
            let _ = r.ep.disconnect();
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
                st.deferred.is_empty()
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
            }
        }
        // Then each rail ends in order behind what it carries.
        for rail in &c.rails {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(e) = rail.ep.close(left) {
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
        st.recvs.push_back(Some(RecvReq { cookie, local: segs }));
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
        let a: Vec<String> = self.core.rails.iter().filter_map(|r| r.ep.peer_address()).collect();
        if a.is_empty() { None } else { Some(a.join(",")) }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
