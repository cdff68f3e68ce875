//! The endpoint's state: the work items, requests and stripes it tracks,
//! the rails, and [`Core`], the state shared by the user's handle, the
//! rail threads and the EVDs that poll it; and the constants of the
//! ordering and silent-write rules.

use crate::config::MrConfig;
use crate::objects::MrLmrInner;
use crate::planner::{Planner, RailRate};
use rmr_api::provider::SoftEvd;
use rmr_api::{DtoOp, Ep, EpEvds, EpId, EpState, Error, Evd, Event, RmrContext, Status};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

pub(super) const RECV_BIT: u64 = 1 << 63;
/// Cookie bit of a probe: a zero-length signalled write whose completion
/// tells that the silent stripes posted before it on its rail completed.
pub(super) const PROBE_BIT: u64 = 1 << 62;
/// Silent stripes a rail may carry before the next one is signalled.
pub(super) const MAX_SILENT: usize = 32;
/// Silent stripes a rail may carry while a signalled DTO posted after the
/// oldest of them is in flight (its completion will imply them): a stream
/// of small DTOs signals one in MAX_SILENT, not every one posted until
/// that completion comes back.
pub(super) const MAX_SILENT_HARD: usize = 4 * MAX_SILENT;
/// Suppressed RDMA writes up to this size go silent too (larger ones stay
/// signalled: their completions are what spreads a stream of small writes
/// over the rails, through the planner's outstanding bytes).
pub(super) const SILENT_WRITE_MAX: u64 = 1024;
/// With rail threads that have cores of their own, work of at most this
/// many bytes in a batch is posted by the caller when its rail's thread is
/// idle (see [`Core::issue`], [`MrConfig::direct`]): the caller copies
/// 64 KiB into a socket in less time than a sleeping rail thread takes to
/// wake (15-80 us in the lab's VM).
pub(super) const DIRECT_MAX: u64 = 64 << 10;

/// The largest work item a pinned caller posts itself (see
/// [`MrConfig::direct`]): the configured value, else DIRECT_MAX when the
/// node has more cores than `rails` (a core per rail thread beside the
/// caller's), else everything.
pub(super) fn direct_max(cfg: &MrConfig, rails: usize) -> u64 {
    cfg.direct.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores > rails { DIRECT_MAX } else { u64::MAX }
    })
}
/// A receive goes straight to the user past at most this many request
/// completions queued on its rail.
pub(super) const SINK_SCAN: usize = 16;

/// Local segments of a DTO: (multirail LMR, offset in it, length).
pub(super) type Segs = SmallVec<[(Arc<MrLmrInner>, u64, u64); 2]>;

#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Send { solicited: bool },
    Write,
    Read,
    WriteImm(u32),
    FetchAdd(u64),
    CmpSwap(u64, u64),
}

impl Kind {
    pub(super) fn op(self) -> DtoOp {
        match self {
            Kind::Send { .. } => DtoOp::Send,
            Kind::Write | Kind::WriteImm(_) => DtoOp::RdmaWrite,
            Kind::Read => DtoOp::RdmaRead,
            Kind::FetchAdd(_) => DtoOp::FetchAdd,
            Kind::CmpSwap(..) => DtoOp::CmpSwap,
        }
    }
    /// Travels whole on the control rail, behind every earlier stripe.
    pub(super) fn ordered(self) -> bool {
        !matches!(self, Kind::Write | Kind::Read)
    }
    /// Takes one of the peer's receives (a message: see the `handover`
    /// module).
    pub(super) fn message(self) -> bool {
        matches!(self, Kind::Send { .. } | Kind::WriteImm(_))
    }
}

/// One unit of work for one rail.
pub(crate) struct Work {
    pub(super) rail: usize,
    pub(super) kind: Kind,
    pub(super) local: Segs,
    pub(super) remote: Option<(RmrContext, u64)>,
    pub(super) cookie: u64,
    /// Posted with SUPPRESS on the rail: a send (or small write) the user
    /// suppressed completes when a later DTO (or a probe) of the same rail
    /// completes, with no completion (and no acknowledgement) of its own.
    pub(super) silent: bool,
    /// Posted with URGENT on the rail: the user's hint (its initiator is
    /// about to wait for it), or a probe.
    pub(super) urgent: bool,
}

impl Work {
    /// The bytes this work moves (a probe: none).
    pub(super) fn bytes(&self) -> u64 {
        self.local.iter().map(|(_, _, n)| n).sum()
    }
}

pub(super) struct StripeRec {
    pub(super) rail: usize,
    pub(super) off: u64,
    pub(super) len: u64,
    pub(super) done: bool,
    /// Its place among the DTOs posted on its rail (`State::posted`).
    pub(super) seq: u64,
    /// Its time for the adaptive weights, once measured (striped DTOs only).
    pub(super) time: Option<f64>,
}

/// A silent stripe waiting for a later completion of its rail.
#[derive(Clone, Copy)]
pub(super) struct Silent {
    pub(super) id: u64,
    pub(super) idx: usize,
    pub(super) seq: u64,
}

pub(super) struct Req {
    pub(super) cookie: u64,
    pub(super) kind: Kind,
    pub(super) signalled: bool,
    /// The user posted it URGENT: its stripes go URGENT on their rails.
    pub(super) urgent: bool,
    pub(super) bytes: u64,
    pub(super) remaining: usize,
    pub(super) status: Status,
    /// The rail whose stripe failed, when one did.
    pub(super) failed_on: Option<u8>,
    pub(super) imm: Option<u64>,
    /// A message's place among this end's messages, from 1 (0: not one).
    pub(super) msg: u64,
    pub(super) local: Segs,
    pub(super) remote: Option<(RmrContext, u64)>,
    /// One inline (a whole DTO); a striped DTO's go to the heap. Kept
    /// small: requests move in and out of the queue on every post.
    pub(super) stripes: SmallVec<[StripeRec; 1]>,
}

impl Req {
    /// A user DTO (`cookie`, `kind`, `signalled`) of `bytes` from `local`
    /// to `remote`, with its `stripes` if planned (none: not yet, and
    /// `remaining` unknown). Inlined, so that a request is built where it
    /// is queued (a request is a few hundred bytes; every move is a copy).
    #[inline(always)]
    pub(super) fn new(
        (cookie, kind, signalled, urgent): (u64, Kind, bool, bool),
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
            urgent,
            bytes,
            remaining,
            status: Status::Success,
            failed_on: None,
            imm: None,
            msg: 0,
            local,
            remote,
            stripes,
        }
    }
}

pub(super) struct RecvReq {
    pub(super) cookie: u64,
    pub(super) local: Segs,
    /// The rail endpoint it is posted on: a completion from another (where
    /// it was posted before it moved) is stale.
    pub(super) on: EpId,
    /// Its final completion, held back until every receive posted before it
    /// has completed (a failover re-post that failed: see `on_recv`).
    pub(super) held: Option<rmr_api::DtoCompletion>,
}

pub(super) struct Deferred {
    pub(super) id: u64,
    pub(super) need: SmallVec<[u64; 8]>,
    /// An ordered operation (or a BARRIER_FENCE): its fence must cover the
    /// stripes of the requests deferred ahead of it, launched only later.
    pub(super) fence: Option<bool>,
}

pub(super) struct State {
    pub(super) conn: EpState,
    pub(super) planner: Planner,
    pub(super) front_id: u64,
    pub(super) reqs: VecDeque<Req>,
    pub(super) recv_front: u64,
    pub(super) recvs: VecDeque<Option<RecvReq>>,
    /// How many of `recvs` hold a completion back (the fast paths that
    /// deliver one receive at once stand back while any does).
    pub(super) held: usize,
    pub(super) posted: SmallVec<[u64; 8]>,
    pub(super) completed: SmallVec<[u64; 8]>,
    pub(super) deferred: VecDeque<Deferred>,
    /// Per rail, its silent stripes in posting order.
    pub(super) silent: SmallVec<[VecDeque<Silent>; 8]>,
    /// Per rail, the sequence number of a probe in flight.
    pub(super) probe: SmallVec<[Option<u64>; 8]>,
    /// Per rail, the sequence number of the last stripe posted on it that
    /// is not silent (its completion implies the silent ones before it).
    pub(super) signalled: SmallVec<[u64; 8]>,
    /// Per rail, where the last RDMA write posted on it went: the target
    /// of its probes (a zero-length write touches no byte).
    pub(super) probe_at: SmallVec<[Option<(RmrContext, u64)>; 8]>,
    /// Silent stripes and probes posted (diagnostics: `attr().notes`).
    pub(super) silent_posted: u64,
    pub(super) probes_posted: u64,
    /// Receives delivered by [`Core::sink`] (diagnostics: `attr().notes`).
    pub(super) recv_direct: u64,
    pub(super) ended: SmallVec<[bool; 8]>,
    /// Per rail, the id of its current endpoint: events of an endpoint the
    /// rail had before it was connected again are stale (see
    /// [`Core::on_event`]).
    pub(super) cur: SmallVec<[EpId; 8]>,
    pub(super) broken: bool,
    /// Per-rail service-rate estimate for adaptive striping.
    pub(super) rate: SmallVec<[RailRate; 8]>,
    /// Messages (sends, writes with immediate data) posted, and messages
    /// this end's receives took (see the `handover` module).
    pub(super) sent_msgs: u64,
    pub(super) recv_msgs: u64,
    /// The control-rail handover in progress.
    pub(super) handover: Option<crate::ep::handover::Handover>,
    /// Handovers begun, and messages not sent again because the peer's
    /// count showed them delivered (diagnostics).
    pub(super) notices: u64,
    pub(super) redundant: u64,
    /// The peer's highest count: messages up to it were delivered.
    pub(super) peer_took: u64,
}

pub(crate) struct Rail {
    /// The rail's endpoint: replaced when a lost rail is connected again
    /// (see [`Rail::ep`]).
    pub(super) ep: RwLock<Arc<dyn Ep>>,
    pub(super) evd: Arc<dyn Evd>,
    /// The drivers of the rail EVD (its endpoint's socket), taken once the
    /// rail is connected (and again when it is connected anew): what
    /// [`Core::flush_rails`] pushes out.
    pub(super) drivers: RwLock<Vec<Arc<dyn rmr_api::provider::Driver>>>,
    /// Work handed to the rail thread and not yet posted by it.
    pub(super) pending: std::sync::atomic::AtomicUsize,
    /// Under `pinned`, the IA's thread for this rail (dropped with the
    /// endpoint's handle).
    pub(super) line: Mutex<Option<Arc<crate::ep::engine::RailLine>>>,
}

impl Rail {
    /// The rail's current endpoint.
    pub(super) fn ep(&self) -> Arc<dyn Ep> {
        self.posting().clone()
    }

    /// The rail's current endpoint, borrowed for a post (no reference count
    /// taken on the hot path). A swap takes the write side only under the
    /// state lock with no work pending on the rail, so no post holds this
    /// then (direct posts run under the state lock, the rail thread's are
    /// counted in `pending`).
    pub(super) fn posting(&self) -> std::sync::RwLockReadGuard<'_, Arc<dyn Ep>> {
        self.ep.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The rail EVD's drivers (see [`Rail::drivers`]).
    pub(super) fn drivers(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, Vec<Arc<dyn rmr_api::provider::Driver>>> {
        self.drivers.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// State shared by the user's handle, the rail threads and polling EVDs.
pub(crate) struct Core {
    /// This core, for handing work to a rail thread.
    pub(super) me: std::sync::Weak<Core>,
    pub(super) id: EpId,
    pub(super) cfg: MrConfig,
    pub(super) pz_id: u64,
    pub(super) max_dtos: usize,
    pub(super) max_sges: usize,
    pub(super) rails: Vec<Rail>,
    pub(super) user: EpEvds,
    /// The queues of `user`'s request, receive and connection EVDs where
    /// they are multirail EVDs (looked up once, not on every delivery).
    pub(super) user_q: [Option<Arc<SoftEvd>>; 3],
    pub(super) st: Mutex<State>,
    pub(super) stop: AtomicBool,
    /// Held while dequeuing rail events and handling them, so each rail's
    /// events are handled in the order they were queued, by whoever harvests.
    pub(super) harvest: Mutex<()>,
    /// Stripes whose rail post failed, to be handled like error completions.
    pub(super) failed: Mutex<Vec<(usize, u64, Status)>>,
    /// `failed` may be non-empty (saves its lock on every harvest).
    pub(super) has_failed: AtomicBool,
    /// Work items handed to rail threads (the rest their callers posted).
    pub(super) handed: AtomicU64,
    /// The largest work item a pinned caller posts itself ([`direct_max`]).
    pub(super) direct_max: u64,
    /// The policy is adaptive: stripes feed the rails' rate estimates.
    pub(super) adaptive: bool,
    /// Every rail EVD is a [`SoftEvd`] (its `len` tells whether to harvest).
    pub(super) soft_rails: bool,
    /// Told when this core has something to harvest (see
    /// [`crate::evd::Polled::watch`]).
    pub(super) watchers: Mutex<Vec<Arc<dyn Fn() + Send + Sync>>>,
    /// What a lost rail needs to be connected again (see the `rejoin`
    /// module).
    pub(super) rejoin: crate::ep::rejoin::RejoinState,
    /// The handover's counts (see the `handover` module), registered on
    /// every rail, and its memory.
    pub(super) notice: Arc<MrLmrInner>,
    pub(super) notice_mem: Arc<rmr_api::MemRegion>,
    /// A handover is in progress (`State::handover`; read without the lock
    /// by the rail threads).
    pub(super) handing_over: AtomicBool,
}

pub(super) type UserEvents = SmallVec<[(u8, Event); 4]>;
/// Rail events harvested together (a waiter usually finds one).
pub(super) type Batch = SmallVec<[(usize, Event); 4]>;
/// Work for the rails: inline room for a whole DTO and one probe (a striped
/// DTO's stripes spill to the heap, nothing beside its bytes); a `Work` is
/// a few hundred bytes and these move on every post.
pub(super) type Works = SmallVec<[Work; 2]>;
pub(super) const TO_REQ: u8 = 0;
pub(super) const TO_RECV: u8 = 1;
pub(super) const TO_CONN: u8 = 2;

/// A rail post rejected the caller's input (segments, target): the error
/// goes back to the caller, as our own checks would have sent it.
pub(super) fn is_input_error(e: &Error) -> bool {
    matches!(
        e,
        Error::Protection(_)
            | Error::OutOfBounds { .. }
            | Error::InvalidArgument(_)
            | Error::Unsupported(_)
    )
}

/// The completion status a failed rail post turns into.
pub(super) fn post_status(e: &Error) -> Status {
    match e {
        Error::Broken(_) | Error::PeerStalled { .. } | Error::NotConnected | Error::Flushed => {
            Status::Broken
        }
        Error::Protection(_) => Status::Protection,
        Error::Unsupported(_) => Status::Unsupported,
        Error::OutOfBounds { .. } | Error::InvalidArgument(_) => Status::OutOfBounds,
        _ => Status::RemoteAccess,
    }
}

pub(super) fn slice(local: &Segs, mut off: u64, mut len: u64) -> Segs {
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
